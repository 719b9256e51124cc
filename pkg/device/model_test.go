package device

import (
	"reflect"
	"testing"
)

func TestModelTokens(t *testing.T) {
	for in, want := range map[string][]string{
		"NVIDIA A100-SXM4-80GB": {"NVIDIA", "A100", "SXM4", "80GB"},
		"nvidia h200":           {"NVIDIA", "H200"},
		"  --  ":                nil,
		"":                      nil,
	} {
		if got := ModelTokens(in); len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
			t.Errorf("ModelTokens(%q) = %q, want %q", in, got, want)
		}
	}
}

// case C06: model matching by whole tokens, never substrings.
func TestModelMatches(t *testing.T) {
	const (
		a100 = "NVIDIA A100-SXM4-80GB"
		a10  = "NVIDIA A10"
		h20  = "NVIDIA H20"
		h200 = "NVIDIA H200"
	)
	for _, tc := range []struct {
		filter, model string
		want          bool
	}{
		{"A10", a10, true},
		{"A10", a100, false}, // not a substring match
		{"A100", a100, true},
		{"A100", a10, false},
		{"H20", h20, true},
		{"H20", h200, false},
		{"H200", h200, true},
		{"H200", h20, false},
		{"a100-sxm4", a100, true}, // case-insensitive, several tokens in a row
		{"A100 80GB", a100, false},
		{"SXM4-A100", a100, false}, // tokens must keep their order
		{"NVIDIA A100-SXM4-80GB", a100, true},
		{"NVIDIA A100-SXM4-80GB-X", a100, false},
		{"", a100, false}, // an empty filter matches nothing
		{"-", a100, false},
	} {
		if got := ModelMatches(tc.filter, tc.model); got != tc.want {
			t.Errorf("ModelMatches(%q, %q) = %v, want %v", tc.filter, tc.model, got, tc.want)
		}
	}
}

// case C06: allow and deny lists combine.
func TestModelAllowed(t *testing.T) {
	const (
		a100sxm  = "NVIDIA A100-SXM4-80GB"
		a100pcie = "NVIDIA A100-PCIE-40GB"
		a10      = "NVIDIA A10"
		h20      = "NVIDIA H20"
		h200     = "NVIDIA H200"
	)
	for _, tc := range []struct {
		name       string
		use, avoid []string
		model      string
		want       bool
	}{
		{"no filters", nil, nil, a10, true},
		{"use A10 picks node-2 (A10)", []string{"A10"}, nil, a10, true},
		{"use A10 skips node-1 (A100)", []string{"A10"}, nil, a100sxm, false},
		{"nouse A100 does not exclude A10", nil, []string{"A100"}, a10, true},
		{"nouse A100 excludes A100", nil, []string{"A100"}, a100sxm, false},
		{"use A100 and nouse 80GB: SXM 80GB denied", []string{"A100"}, []string{"80GB"}, a100sxm, false},
		{"use A100 and nouse 80GB: PCIE 40GB allowed", []string{"A100"}, []string{"80GB"}, a100pcie, true},
		{"use A100 and nouse 80GB: A10 not allowed", []string{"A100"}, []string{"80GB"}, a10, false},
		{"use H20 skips H200", []string{"H20"}, nil, h200, false},
		{"use H20 takes H20", []string{"H20"}, nil, h20, true},
		{"nouse H20 keeps H200", nil, []string{"H20"}, h200, true},
		{"nouse H200 keeps H20", nil, []string{"H200"}, h20, true},
		{"either of two allowed", []string{"H100", "H20"}, nil, h20, true},
		{"deny wins over allow", []string{"H20"}, []string{"H20"}, h20, false},
	} {
		if got := ModelAllowed(tc.use, tc.avoid, tc.model); got != tc.want {
			t.Errorf("%s: ModelAllowed(%q, %q, %q) = %v, want %v", tc.name, tc.use, tc.avoid, tc.model, got, tc.want)
		}
	}
}

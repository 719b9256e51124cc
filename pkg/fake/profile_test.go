package fake

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestParseProfileNamed(t *testing.T) {
	tests := []struct {
		spec  string
		model string
		mib   int64
	}{
		{"dgxa100", "Mock NVIDIA A100-SXM4-40GB", 40960},
		{"dgxh100", "NVIDIA H100 80GB HBM3", 81920},
		{" dgxh200 ", "NVIDIA H200 141GB HBM3e", 144384},
		{"dgxb200", "NVIDIA B200 180GB HBM3e", 184320},
	}
	for _, tt := range tests {
		p, err := ParseProfile(tt.spec)
		if err != nil {
			t.Fatalf("ParseProfile(%q): %v", tt.spec, err)
		}
		if p.Server != strings.TrimSpace(tt.spec) || !p.NVLink || len(p.GPUs) != 8 {
			t.Errorf("ParseProfile(%q) = server %q, NVLink %v, %d GPUs; want the server, NVLink, 8 GPUs",
				tt.spec, p.Server, p.NVLink, len(p.GPUs))
		}
		for i, g := range p.GPUs {
			if g.Model != tt.model || g.MemoryMiB != tt.mib {
				t.Errorf("%s gpu %d = %+v, want %s %d MiB", tt.spec, i, g, tt.model, tt.mib)
			}
		}
	}
}

func TestParseProfileCustom(t *testing.T) {
	p, err := ParseProfile("2x24576:NVIDIA A10+ 1x81920: NVIDIA A100-SXM4-80GB ")
	if err != nil {
		t.Fatal(err)
	}
	want := []GPUSpec{{"NVIDIA A10", 24576}, {"NVIDIA A10", 24576}, {"NVIDIA A100-SXM4-80GB", 81920}}
	if p.Server != "" || p.NVLink || len(p.GPUs) != len(want) {
		t.Fatalf("profile = %+v, want custom, no NVLink, %d GPUs", p, len(want))
	}
	for i := range want {
		if p.GPUs[i] != want[i] {
			t.Errorf("gpu %d = %+v, want %+v", i, p.GPUs[i], want[i])
		}
	}
	p, err = ParseProfile("8x81920:NVIDIA H100 80GB HBM3")
	if err != nil || len(p.GPUs) != 8 || p.GPUs[7] != (GPUSpec{"NVIDIA H100 80GB HBM3", 81920}) {
		t.Errorf("8xH100 = %+v, %v", p, err)
	}
}

// TestParseProfileLabelForm: node label values allow only [A-Za-z0-9._-], so the label form
// uses "." and "_" where the flag form uses ":" and "+".
func TestParseProfileLabelForm(t *testing.T) {
	spec := "2x24576.NVIDIA-A10_1x81920.NVIDIA-A100-SXM4-80GB"
	p, err := ParseProfile(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []GPUSpec{{"NVIDIA-A10", 24576}, {"NVIDIA-A10", 24576}, {"NVIDIA-A100-SXM4-80GB", 81920}}
	if p.Server != "" || p.NVLink || len(p.GPUs) != len(want) {
		t.Fatalf("profile = %+v, want %d custom GPUs", p, len(want))
	}
	for i := range want {
		if p.GPUs[i] != want[i] {
			t.Errorf("gpu %d = %+v, want %+v", i, p.GPUs[i], want[i])
		}
	}
	if !labelValueOK(spec) {
		t.Errorf("%q is not a valid label value", spec)
	}
	for _, bad := range []struct{ spec, want string }{
		{"2x100.A_3x0.B", `part 2 "3x0.B": memory "0"`},
		{"2x100.A_junk", `part 2 "junk"`},
	} {
		if _, err := ParseProfile(bad.spec); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseProfile(%q) = %v, want error containing %q", bad.spec, err, bad.want)
		}
	}
}

// labelValueOK is Kubernetes' label value rule (k8s.io/apimachinery validation.IsValidLabelValue).
func labelValueOK(v string) bool {
	return len(validation.IsValidLabelValue(v)) == 0
}

func TestParseProfileErrors(t *testing.T) {
	tests := []struct {
		spec string
		want []string // substrings of the error
	}{
		{"", []string{"empty", "dgxh100"}},
		{"dgxh300", []string{`"dgxh300"`, "not a known profile", "dgxa100, dgxb200, dgxh100, dgxh200", "label form"}},
		{"0x100:A", []string{`part 1 "0x100:A"`, `count "0"`}},
		{"65x100:A", []string{`count "65"`, "1..64"}},
		{"-1x100:A", []string{`count "-1"`}},
		{"ax100:A", []string{`count "a"`}},
		{"2x0:A", []string{`memory "0"`, "MiB"}},
		{"2x16Gi:A", []string{`memory "16Gi"`}},
		{"2x1.5:A", []string{`memory "1.5"`}},
		{"2x99999999999:A", []string{`memory "99999999999"`}},
		{"2x100:", []string{"model is empty"}},
		{"2x100:  ", []string{"model is empty"}},
		{"2100:A", []string{`"2100" is not <count>x<MiB>`}},
		{"1x100:A+", []string{`part 2 ""`, "want <count>x<MiB>:<model>"}},
		{"1x100:A+2x100", []string{`part 2 "2x100"`}},
		{"40x100:A+30x100:B", []string{`part 2 "30x100:B"`, "70 GPUs", "more than 64"}},
		{"1x100:bad\tmodel", []string{"unprintable"}},
		{"1x100:" + strings.Repeat("M", 96), []string{"longer than 95"}},
	}
	for _, tt := range tests {
		p, err := ParseProfile(tt.spec)
		if err == nil {
			t.Errorf("ParseProfile(%q) = %+v, want an error", tt.spec, p)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ParseProfile(%q) error %q does not contain %q", tt.spec, err, w)
			}
		}
	}
}

func TestFactsFor(t *testing.T) {
	tests := map[string]uint32{
		"NVIDIA H100 80GB HBM3":      132,
		"NVIDIA H200 141GB HBM3e":    132,
		"NVIDIA H20":                 78, // case C06: H20 is not H200
		"NVIDIA A100-SXM4-80GB":      108,
		"NVIDIA A10":                 72, // case C06: A10 is not A100
		"NVIDIA B200 180GB HBM3e":    148,
		"NVIDIA L40S":                142,
		"NVIDIA H100 PCIe":           114,
		"NVIDIA L4":                  58,
		"Mock NVIDIA A100-SXM4-40GB": 108,
		"Acme Z9":                    defaultSMs,
	}
	for model, want := range tests {
		if got := factsFor(model).sms; got != want {
			t.Errorf("factsFor(%q).sms = %d, want %d", model, got, want)
		}
	}
}

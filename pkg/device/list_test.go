package device

import (
	"reflect"
	"testing"
)

func TestSplitList(t *testing.T) {
	for in, want := range map[string][]string{
		"":                      nil,
		" , ,":                  nil,
		"A100":                  {"A100"},
		" A100 ,H100-SXM,, L4 ": {"A100", "H100-SXM", "L4"},
		"GPU-1,GPU-1":           {"GPU-1", "GPU-1"},
	} {
		if got := SplitList(in); !reflect.DeepEqual(got, want) {
			t.Errorf("SplitList(%q) = %#v, want %#v", in, got, want)
		}
	}
}

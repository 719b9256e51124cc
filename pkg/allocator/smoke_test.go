package allocator

import (
	"errors"
	"reflect"
	"testing"
)

// case C01
func TestC01TwoContainersDifferentCards(t *testing.T) {
	inv := node("n1", 10240, 10240)
	used := NodeUsage{}
	a := mustPick(t, inv, used, pod(ctr("c1", 1, 10240, 0), ctr("c2", 1, 1024, 0)))
	if got := uuids(a, "c1"); !reflect.DeepEqual(got, []string{"GPU-n1-0"}) {
		t.Errorf("c1 got %v, want [GPU-n1-0]", got)
	}
	if got := uuids(a, "c2"); !reflect.DeepEqual(got, []string{"GPU-n1-1"}) {
		t.Errorf("c2 got %v, want [GPU-n1-1]", got)
	}
	want := NodeUsage{"GPU-n1-0": {MemoryMiB: 10240, Sharers: 1}, "GPU-n1-1": {MemoryMiB: 1024, Sharers: 1}}
	if !reflect.DeepEqual(used, want) {
		t.Errorf("usage %v, want %v", used, want)
	}
	err := Fit(inv, used, pod(ctr("c3", 1, 9217, 0)))
	var u *Unfit
	if !errors.As(err, &u) {
		t.Fatalf("Fit = %v, want *Unfit", err)
	}
	if want := `container "c3" (1 GPU, 9217 MiB): GPU-0 0 of 10240 MiB free; GPU-1 9216 of 10240 MiB free`; u.Reason != want {
		t.Errorf("reason %q, want %q", u.Reason, want)
	}
}

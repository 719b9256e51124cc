package e2eresult

import "testing"

// Pairs keeps only run numbers ≥ 1 where both variants bound every pod.
func TestPairedSkipsIncompleteRuns(t *testing.T) {
	e := &Result{Pods: 10, Runs: []Run{
		{Variant: "extender", Run: 0, Bound: 10, PodsPerSecond: 1},
		{Variant: "extender", Run: 1, Bound: 10, PodsPerSecond: 80},
		{Variant: "baseline", Run: 1, Bound: 10, PodsPerSecond: 100},
		{Variant: "extender", Run: 2, Bound: 9, PodsPerSecond: 90},
		{Variant: "baseline", Run: 2, Bound: 10, PodsPerSecond: 100},
		{Variant: "baseline", Run: 3, Bound: 10, PodsPerSecond: 50},
		{Variant: "extender", Run: 3, Bound: 10, PodsPerSecond: 45},
	}}
	ext, base, ratio := e.Paired()
	if len(ratio) != 2 || ext[0] != 80 || base[1] != 50 || ratio[0] != 0.8 || ratio[1] != 0.9 {
		t.Errorf("paired %v %v %v, want runs 1 and 3: ratios 0.8, 0.9", ext, base, ratio)
	}
}

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

// Ratio pairs two variants run by run, each judged complete by its own pod count (DRAPods for
// the DRA variants), and an older result without DRA runs has no DRA pairs.
func TestRatioPairsDRAVariants(t *testing.T) {
	e := &Result{Pods: 10, DRAPods: 4, Runs: []Run{
		{Variant: VariantExtender, Run: 1, Bound: 10, PodsPerSecond: 80},
		{Variant: VariantBaseline, Run: 1, Bound: 10, PodsPerSecond: 100},
		{Variant: VariantDRAPlain, Run: 1, Bound: 4, PodsPerSecond: 40},
		{Variant: VariantDRASlices, Run: 1, Bound: 4, PodsPerSecond: 36},
		{Variant: VariantDRAPlain, Run: 2, Bound: 4, PodsPerSecond: 50},
		{Variant: VariantDRASlices, Run: 2, Bound: 3, PodsPerSecond: 50},
		{Variant: VariantBaseline, Run: 2, Bound: 10, PodsPerSecond: 90},
	}}
	runs, num, den, ratio := e.Ratio(VariantDRASlices, VariantDRAPlain)
	if len(runs) != 1 || runs[0] != 1 || num[0] != 36 || den[0] != 40 || ratio[0] != 0.9 {
		t.Errorf("slices/plain runs %v %v %v %v, want run 1 only: 36/40 = 0.9", runs, num, den, ratio)
	}
	if runs, _, _, ratio := e.Ratio(VariantDRASlices, VariantBaseline); len(runs) != 1 || ratio[0] != 0.36 {
		t.Errorf("slices/baseline %v %v, want run 1: 0.36", runs, ratio)
	}
	if _, _, _, r := e.Ratio(VariantExtender, VariantBaseline); len(r) != 1 || r[0] != 0.8 {
		t.Errorf("extender/baseline %v, want [0.8]", r)
	}
	old := &Result{Pods: 10, Runs: e.Runs[:2]}
	if runs, _, _, _ := old.Ratio(VariantDRASlices, VariantDRAPlain); len(runs) != 0 {
		t.Errorf("old result: DRA runs %v, want none", runs)
	}
}

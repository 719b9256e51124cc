// Package e2eresult is the one definition of hack/bench/e2esched's JSON result, written by
// e2esched and read by hack/bench/report.
package e2eresult

import (
	"sort"
	"time"
)

// Result is the JSON hack/bench/e2esched writes (--out) and hack/bench/report reads.
type Result struct {
	Nodes     int   `json:"nodes"`
	Pods      int   `json:"pods"`
	QPS       int   `json:"qps"`
	GPUMemMiB int64 `json:"gpumemMiB"`
	// DRAPods is the number of pods per run of the DRA variants (0: an older e2esched, or
	// --dra=false: no DRA runs); DRACores is the cores capacity each dra-slices claim asks.
	DRAPods  int       `json:"draPods,omitempty"`
	DRACores int64     `json:"draCores,omitempty"`
	Started  time.Time `json:"started"`
	// Runs in the order they ran (variants interleaved).
	Runs []Run `json:"runs"`
}

// Run is one run of one variant.
type Run struct {
	// Variant is VariantExtender, VariantBaseline, VariantPlugins, VariantDRAPlain or
	// VariantDRASlices.
	Variant string `json:"variant"`
	Run     int    `json:"run"`
	// Bound is how many of the pods were bound before the run's timeout.
	Bound int `json:"bound"`
	// CreateSeconds is how long creating the pods took (before the scheduler was started).
	CreateSeconds float64 `json:"createSeconds"`
	// ClaimsSeconds (DRA variants) is how long after the pods were created kube-controller-manager
	// took until every pod's ResourceClaim existed (still before the scheduler was started).
	ClaimsSeconds float64 `json:"claimsSeconds,omitempty"`
	// Seconds from the first binding to the last.
	Seconds float64 `json:"seconds"`
	// PodsPerSecond is (Bound-1) / Seconds; SteadyPodsPerSecond is the rate between the 10th and
	// the 90th percentile binding (without the ramp-up and the tail).
	PodsPerSecond       float64 `json:"podsPerSecond"`
	SteadyPodsPerSecond float64 `json:"steadyPodsPerSecond"`
	// SchedulerCPUSeconds is the CPU time (user + system) of the run's kube-scheduler process,
	// from its start (informer sync included) to its exit after the last binding.
	SchedulerCPUSeconds float64 `json:"schedulerCPUSeconds"`
	// SelfCPUSeconds is e2esched's CPU time over the same span: the extender (in the
	// extender variant), the binding informer and the simulated nodes' Lease renewals.
	SelfCPUSeconds float64 `json:"selfCPUSeconds"`
}

// The variants of a run.
const (
	// VariantExtender is kube-scheduler calling hami-go's extender (HAMi resources).
	VariantExtender = "extender"
	// VariantBaseline is kube-scheduler alone with whole GPUs (nvidia.com/gpu: 1).
	VariantBaseline = "baseline"
	// VariantDRAPlain is kube-scheduler alone placing one ResourceClaim per pod for one whole
	// device of a plain DRA driver (no allowMultipleAllocations, no capacities).
	VariantDRAPlain = "dra-plain"
	// VariantDRASlices is kube-scheduler alone placing one ResourceClaim per pod for a share
	// (memory and cores capacity) of one device of hami-go's kind (pkg/dra's ResourceSlices).
	VariantDRASlices = "dra-slices"
	// VariantPlugins is kube-scheduler built with hami-go's framework plugin HamiGo
	// (cmd/kube-scheduler-hami-go; no extender) for the extender variant's pods (HAMi resources).
	VariantPlugins = "plugins"
)

// IsDRA reports whether variant is one of the DRA variants.
func IsDRA(variant string) bool { return variant == VariantDRAPlain || variant == VariantDRASlices }

// PodsOf is the number of pods per run of variant: DRAPods for the DRA variants, else Pods.
func (r *Result) PodsOf(variant string) int {
	if IsDRA(variant) {
		return r.DRAPods
	}
	return r.Pods
}

// Ratio returns, for run numbers ≥ 1 where variants num and den both bound every one of
// their pods and den's rate is positive, num's and den's pods/s and their ratio (num / den),
// by run number; runs is those run numbers.
func (r *Result) Ratio(num, den string) (runs []int, nums, dens, ratios []float64) {
	byRun := map[int]map[string]Run{}
	for _, x := range r.Runs {
		if x.Run < 1 || x.Bound < r.PodsOf(x.Variant) || r.PodsOf(x.Variant) < 1 {
			continue
		}
		if byRun[x.Run] == nil {
			byRun[x.Run] = map[string]Run{}
		}
		byRun[x.Run][x.Variant] = x
	}
	for k := range byRun {
		runs = append(runs, k)
	}
	sort.Ints(runs)
	kept := runs[:0]
	for _, k := range runs {
		x, okx := byRun[k][num]
		y, oky := byRun[k][den]
		if okx && oky && y.PodsPerSecond > 0 {
			kept = append(kept, k)
			nums, dens = append(nums, x.PodsPerSecond), append(dens, y.PodsPerSecond)
			ratios = append(ratios, x.PodsPerSecond/y.PodsPerSecond)
		}
	}
	return kept, nums, dens, ratios
}

// RunPair is one run number's extender and baseline runs.
type RunPair struct{ Ext, Base Run }

// Paired returns, for runs 1..n that have both variants, the extender's and the baseline's
// pods/s and their ratio (extender / baseline) run by run.
func (r *Result) Paired() (ext, base, ratio []float64) {
	for _, p := range r.Pairs() {
		ext, base = append(ext, p.Ext.PodsPerSecond), append(base, p.Base.PodsPerSecond)
		ratio = append(ratio, p.Ext.PodsPerSecond/p.Base.PodsPerSecond)
	}
	return ext, base, ratio
}

// Pairs are the runs (Run ≥ 1) where both variants bound every pod and the baseline's rate is
// positive, by run number.
func (r *Result) Pairs() []RunPair {
	byRun := map[int]map[string]Run{}
	for _, x := range r.Runs {
		if x.Run < 1 || x.Bound < r.PodsOf(x.Variant) {
			continue
		}
		if byRun[x.Run] == nil {
			byRun[x.Run] = map[string]Run{}
		}
		byRun[x.Run][x.Variant] = x
	}
	runs := make([]int, 0, len(byRun))
	for k := range byRun {
		runs = append(runs, k)
	}
	sort.Ints(runs)
	var out []RunPair
	for _, k := range runs {
		x, okx := byRun[k][VariantExtender]
		y, oky := byRun[k][VariantBaseline]
		if okx && oky && y.PodsPerSecond > 0 {
			out = append(out, RunPair{Ext: x, Base: y})
		}
	}
	return out
}

package main

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/hami-go/hami-go/hack/bench/e2eresult"
)

// e2eDRARatio is one of issue 14's ratios of dra-slices' pods/s, paired run by run.
type e2eDRARatio struct {
	label, den, goal string
	min              float64 // goal: ratio ≥ min (0: none)
}

// e2eDRARatios are issue 14's ratios (a), (b), (c): dra-slices against whole-device DRA claims,
// kube-scheduler alone with device-plugin whole GPUs, and the extender.
var e2eDRARatios = []e2eDRARatio{
	{label: "(a) kube-scheduler placing whole-device DRA claims (dra-plain)", den: e2eresult.VariantDRAPlain, goal: "goal ≥ 0.9", min: 0.9},
	{label: "(b) kube-scheduler alone with device-plugin whole GPUs (baseline)", den: e2eresult.VariantBaseline},
	{label: "(c) the extender mode (extender)", den: e2eresult.VariantExtender},
}

// draUpstreamCause is what the report says where ratio (a) misses its goal: the cause is in
// kube-scheduler's device allocator, and where the proposal and its benchmark are.
const draUpstreamCause = "Where (a) misses its goal the cause is upstream, in kube-scheduler's device allocator " +
	"(k8s.io/dynamic-resource-allocation v0.37.2): for every candidate device no claim uses yet, `deviceCapacityInUse` ranges over every " +
	"share allocated in the cluster, on every node a pod is filtered against, and each allow-multiple candidate pays the consumable-capacity " +
	"arithmetic. The driver publishes the same devices and attributes as the plain ones, so nothing on hami-go's side closes the gap. " +
	"The proposal, its patch and a benchmark that compares them: docs/dra.md, \"Scheduling throughput: where consumable capacity costs\", " +
	"and hack/dra-repro/capacity-scan."

// e2eDRASection writes section 2's DRA rows: each run's pods/s of the four variants, issue 14's
// three ratios run by run and their medians, and the DRA runs' CPU per bound pod. A result
// without DRA runs (an older e2esched, or --dra=false) adds nothing.
func e2eDRASection(w *bytes.Buffer, e *E2E) {
	if e.DRAPods == 0 {
		return
	}
	fmt.Fprintf(w, "**DRA variants (issue 14).** In the same run, interleaved with the two above (extender, baseline, dra-plain, dra-slices, "+
		"extender, …), the baseline's kube-scheduler configuration (profile hami-go-bench-dra, no extender) places %d pods per run, each with "+
		"one ResourceClaim that kube-controller-manager makes from a ResourceClaimTemplate, on one of two kinds of ResourceSlices:\n\n"+
		"- **dra-plain**: the claim asks one whole device of plain devices (driver bench-plain.hami-go.io, 8 per node: no allowMultipleAllocations, no capacities);\n"+
		"- **dra-slices**: the claim asks one device of hami-go's kind with capacity memory %d MiB and cores %d — the devices hami-go's DRA driver "+
		"publishes (driver gpu.hami-go.io, pkg/dra's builder: 8 per node with allowMultipleAllocations and consumable capacities memory, cores, sharers).\n\n"+
		"Each DRA variant runs with only its own driver's ResourceSlice on every simulated node (before its run, outside the measurement, "+
		"the other driver's slices are deleted and its own created): kube-scheduler's allocator checks a node's devices in order against the "+
		"claim's DeviceClass and stops at the first that fits, so with both kinds published the claims of the driver that sorts first would "+
		"skip the other's devices for free while the other driver's claims paid for checking them (at 300 nodes dra-slices placed 16 pods/s beside plain slices, 27 alone). "+
		"A DRA run's kube-scheduler starts once every pod's claim exists (kube-controller-manager took %s s after the pods were created; "+
		"median, min–max), and the next run starts once those claims are gone; the rate is measured as above.\n\n",
		e.DRAPods, e.GPUMemMiB, e.DRACores, fmtStat(Summarize(claimsSeconds(e)), 1, 1))
	pps := map[int]map[string]float64{}
	ratios := make([]map[int]float64, len(e2eDRARatios))
	for i, r := range e2eDRARatios {
		ratios[i] = map[int]float64{}
		runs, num, den, ratio := e.Ratio(e2eresult.VariantDRASlices, r.den)
		for j, k := range runs {
			if pps[k] == nil {
				pps[k] = map[string]float64{}
			}
			pps[k][e2eresult.VariantDRASlices], pps[k][r.den], ratios[i][k] = num[j], den[j], ratio[j]
		}
	}
	if len(pps) == 0 {
		fmt.Fprintf(w, "No DRA run bound all its pods beside a complete run of the variant it is compared with (see e2esched.json).\n\n")
		return
	}
	runs := make([]int, 0, len(pps))
	for k := range pps {
		runs = append(runs, k)
	}
	sort.Ints(runs)
	cols := []string{e2eresult.VariantBaseline, e2eresult.VariantExtender, e2eresult.VariantDRAPlain, e2eresult.VariantDRASlices}
	fmt.Fprintf(w, "| run | baseline (pods/s) | extender (pods/s) | dra-plain (pods/s) | dra-slices (pods/s) | dra-slices / dra-plain | dra-slices / baseline | dra-slices / extender |\n"+
		"|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	colVals := make([][]float64, len(cols))
	for _, k := range runs {
		cells := []string{fmt.Sprint(k)}
		for i, c := range cols {
			v, ok := pps[k][c]
			cells = append(cells, cell(v, ok, 1))
			if ok {
				colVals[i] = append(colVals[i], v)
			}
		}
		for i := range e2eDRARatios {
			v, ok := ratios[i][k]
			cells = append(cells, cell(v, ok, 2))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	med := []string{"**median (min–max)**"}
	for i := range cols {
		med = append(med, "**"+fmtStat(Summarize(colVals[i]), 1, 1)+"**")
	}
	stats := make([]Stat, len(e2eDRARatios))
	for i := range e2eDRARatios {
		vals := make([]float64, 0, len(ratios[i]))
		for _, k := range runs {
			if v, ok := ratios[i][k]; ok {
				vals = append(vals, v)
			}
		}
		stats[i] = Summarize(vals)
		med = append(med, "**"+fmtStat(stats[i], 1, 2)+"**")
	}
	fmt.Fprintf(w, "| %s |\n\n", strings.Join(med, " | "))
	fmt.Fprintf(w, "Pods/s of dra-slices (DRA consumable-capacity claims on hami-go's devices) as a ratio of, run by run (median of the paired runs):\n\n")
	for i, r := range e2eDRARatios {
		if stats[i].N == 0 {
			fmt.Fprintf(w, "- %s: not measured (no complete pair)\n", r.label)
			continue
		}
		goal := ""
		if r.min > 0 {
			goal = fmt.Sprintf("; %s: %s", r.goal, verdict(stats[i].Median >= r.min))
		}
		fmt.Fprintf(w, "- %s: **%.2f** (%d paired runs%s)\n", r.label, stats[i].Median, stats[i].N, goal)
	}
	fmt.Fprintf(w, "\n")
	if stats[0].N > 0 && stats[0].Median < e2eDRARatios[0].min {
		fmt.Fprintf(w, "%s\n\n", draUpstreamCause)
	}
	draCPU(w, e)
}

// cell is v with prec decimals, or "–" when absent.
func cell(v float64, ok bool, prec int) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

// claimsSeconds are the DRA runs' waits for kube-controller-manager's claims (runs ≥ 1).
func claimsSeconds(e *E2E) []float64 {
	var out []float64
	for _, r := range e.Runs {
		if r.Run > 0 && e2eresult.IsDRA(r.Variant) && r.ClaimsSeconds > 0 {
			out = append(out, r.ClaimsSeconds)
		}
	}
	return out
}

// draCPU writes the CPU time per bound pod of the complete DRA runs (kube-scheduler's and
// e2esched's), medians over the runs.
func draCPU(w *bytes.Buffer, e *E2E) {
	vals := map[string][]float64{}
	for _, r := range e.Runs {
		if r.Run < 1 || !e2eresult.IsDRA(r.Variant) || r.Bound < e.DRAPods || r.SchedulerCPUSeconds == 0 {
			continue
		}
		vals["sched "+r.Variant] = append(vals["sched "+r.Variant], r.SchedulerCPUSeconds*1e3/float64(e.DRAPods))
		vals["self "+r.Variant] = append(vals["self "+r.Variant], r.SelfCPUSeconds*1e3/float64(e.DRAPods))
	}
	if len(vals) == 0 {
		return
	}
	p, s := e2eresult.VariantDRAPlain, e2eresult.VariantDRASlices
	fmt.Fprintf(w, "CPU time per bound pod of the DRA runs (ms, median and min–max over the runs; measured as above):\n\n"+
		"| | dra-plain | dra-slices |\n|---|---:|---:|\n"+
		"| kube-scheduler | %s | %s |\n| e2esched (informer + Leases) | %s | %s |\n\n",
		fmtStat(Summarize(vals["sched "+p]), 1, 1), fmtStat(Summarize(vals["sched "+s]), 1, 1),
		fmtStat(Summarize(vals["self "+p]), 1, 1), fmtStat(Summarize(vals["self "+s]), 1, 1))
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// SchedPerf is what hack/schedperf/run.sh leaves in <in>/schedperf: scheduler_perf's data items
// (BenchmarkPerfScheduling_benchmark_hami-go_<time>.json), the extender's figures per workload
// (hami-go-extender_<test case>_<workload>.json) and times.json.
type SchedPerf struct {
	Times SchedPerfTimes
	// Items maps "<test case>/<workload>" to its data items by metric label: "SchedulingThroughput",
	// "scheduler_scheduling_attempt_duration_seconds/scheduled",
	// "scheduler_framework_extension_point_duration_seconds/Filter", ... (metric, then the values
	// of its other labels sorted by label name, joined by "/").
	Items map[string]map[string]SchedPerfItem
	// Runs are the data items of each run (one data-items file each, oldest first; run.sh runs
	// the workloads HAMI_GO_SCHEDPERF_RUNS times), keyed as Items; Items holds, per bucket, the
	// median over the runs that have the item.
	Runs []map[string]map[string]SchedPerfItem
	// Extender maps "<test case>/<workload>" to the extender's own figures.
	Extender map[string]ExtenderFigures
}

// SchedPerfTimes is hack/schedperf/run.sh's times.json.
type SchedPerfTimes struct {
	Started      string `json:"started"`
	Scale        string `json:"scale"`
	BuildSeconds int    `json:"buildSeconds"`
	RunSeconds   int    `json:"runSeconds"`
	Exit         int    `json:"exit"`
	Commit       string `json:"commit"`
	CPUs         int    `json:"cpus"`
}

// SchedPerfItem is one scheduler_perf data item: buckets Average, Perc50, Perc90, Perc95,
// Perc99 in Unit (pods/s or ms).
type SchedPerfItem struct {
	Data   map[string]float64 `json:"data"`
	Unit   string             `json:"unit"`
	Labels map[string]string  `json:"labels"`
}

// VerbFigures and ExtenderFigures are hack/schedperf's extender_test.go JSON: per verb, calls
// and the extender's own request durations (ms).
type (
	VerbFigures struct {
		Calls   uint64  `json:"calls"`
		MeanMs  float64 `json:"meanMs"`
		P50Ms   float64 `json:"p50Ms"`
		P99Ms   float64 `json:"p99Ms"`
		TotalMs float64 `json:"totalMs"`
	}
	ExtenderFigures struct {
		Name     string                 `json:"name"`
		Verbs    map[string]VerbFigures `json:"verbs"`
		Outcomes map[string]float64     `json:"outcomes"`
	}
)

// ReadSchedPerf reads dir (the newest data-items file when there are several); a dir without
// times.json is (nil, nil): not measured.
func ReadSchedPerf(dir string) (*SchedPerf, error) {
	b, err := os.ReadFile(filepath.Join(dir, "times.json"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sp := &SchedPerf{Items: map[string]map[string]SchedPerfItem{}, Extender: map[string]ExtenderFigures{}}
	if err := json.Unmarshal(b, &sp.Times); err != nil {
		return nil, fmt.Errorf("%s/times.json: %w", dir, err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "BenchmarkPerfScheduling_*.json"))
	sort.Strings(files)
	for _, f := range files {
		run, err := readDataItems(f)
		if err != nil {
			return nil, err
		}
		sp.Runs = append(sp.Runs, run)
	}
	sp.Items = medianItems(sp.Runs)
	ext, _ := filepath.Glob(filepath.Join(dir, "hami-go-extender_*.json"))
	for _, f := range ext {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var e ExtenderFigures
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		sp.Extender[e.Name] = e
	}
	return sp, nil
}

// readDataItems reads one scheduler_perf data-items file, keyed as SchedPerf.Items.
func readDataItems(file string) (map[string]map[string]SchedPerfItem, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var doc struct {
		DataItems []SchedPerfItem `json:"dataItems"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	out := map[string]map[string]SchedPerfItem{}
	for _, it := range doc.DataItems {
		w, key := itemKeys(it.Labels)
		if w == "" || key == "" {
			continue
		}
		if out[w] == nil {
			out[w] = map[string]SchedPerfItem{}
		}
		out[w][key] = it
	}
	return out, nil
}

// medianItems is, per workload, key and bucket, the median over the runs that have it (the
// first run's unit and labels).
func medianItems(runs []map[string]map[string]SchedPerfItem) map[string]map[string]SchedPerfItem {
	out := map[string]map[string]SchedPerfItem{}
	for _, run := range runs {
		for w, items := range run {
			for key, it := range items {
				if out[w] == nil {
					out[w] = map[string]SchedPerfItem{}
				}
				if _, done := out[w][key]; done {
					continue
				}
				m := SchedPerfItem{Data: map[string]float64{}, Unit: it.Unit, Labels: it.Labels}
				for bucket := range it.Data {
					var vs []float64
					for _, r := range runs {
						if v, ok := r[w][key].Data[bucket]; ok {
							vs = append(vs, v)
						}
					}
					m.Data[bucket] = median(vs)
				}
				out[w][key] = m
			}
		}
	}
	return out
}

// median of vs (not empty); the mean of the middle two for an even count.
func median(vs []float64) float64 {
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// runRatios are, for each run that measured both, w's bucket of key over base's: the paired
// ratios of one run's workloads, which share the machine's state of that moment.
func (sp *SchedPerf) runRatios(w, base, key, bucket string) []float64 {
	var out []float64
	for _, r := range sp.Runs {
		v, okV := r[w][key].Data[bucket]
		b, okB := r[base][key].Data[bucket]
		if okV && okB && b > 0 {
			out = append(out, v/b)
		}
	}
	return out
}

// itemKeys returns the workload ("<test case>/<workload>" from the Name label, which
// scheduler_perf writes as "BenchmarkPerfScheduling/<test case>/<workload>/<namespace>") and the
// metric key of a data item's labels.
func itemKeys(l map[string]string) (workload, key string) {
	parts := strings.Split(l["Name"], "/")
	if len(parts) > 0 && strings.HasPrefix(parts[0], "Benchmark") {
		parts = parts[1:]
	}
	if len(parts) < 2 || l["Metric"] == "" {
		return "", ""
	}
	var names []string
	for k, v := range l {
		if k != "Name" && k != "Metric" && v != "not applicable" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	key = l["Metric"]
	for _, k := range names {
		key += "/" + l[k]
	}
	return parts[0] + "/" + parts[1], key
}

// schedPerfCase is one test case of hack/schedperf/config/performance-config.yaml as the report
// names it.
type schedPerfCase struct{ name, number, what string }

var schedPerfCases = []schedPerfCase{
	{"DevicePluginWholeGPU", "1", "kube-scheduler alone, device-plugin whole GPUs (nvidia.com/gpu: 1)"},
	{"HamiExtenderSlice", "2", "hami-go extender, one slice of 4000 MiB / 10% cores"},
	{"HamiPluginSlice", "2p", "hami-go plugin build (HamiGo, HamiGoNodeResourcesFit in kube-scheduler), the same slice pods"},
	{"HamiExtenderMixedChurn", "2m", "hami-go extender, mixed 1-2 GPUs of 1000-40000 MiB, measured while 2-GPU pods churn (Allocate's claims by a stand-in)"},
	{"DRAWholeGPU", "3a", "DRA native baseline: whole-GPU claims on plain devices"},
	{"HamiDRAWholeGPU", "3b", "DRA, hami-go's slices (consumable capacity), whole-GPU claims"},
	{"HamiDRASlice", "3c", "DRA, hami-go's slices, claims of 4000 MiB / 10 cores"},
}

// workloadOf returns the "<case>/<workload>" measured for a test case ("" when none).
func (sp *SchedPerf) workloadOf(tc string) string {
	var ws []string
	for w := range sp.Items {
		if strings.HasPrefix(w, tc+"/") {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		return ""
	}
	sort.Strings(ws)
	return ws[0]
}

func (sp *SchedPerf) value(w, key, bucket string) (float64, bool) {
	it, ok := sp.Items[w][key]
	if !ok {
		return 0, false
	}
	v, ok := it.Data[bucket]
	return v, ok
}

// ratioCell is "v (ratio)": v the median over the runs, the ratio the median of the runs' paired
// ratios (ratios), with their range after it when there are several ("v (r, lo–hi)").
func ratioCell(v float64, okV bool, ratios []float64) string {
	switch {
	case !okV:
		return "—"
	case len(ratios) == 0:
		return fmt.Sprintf("%.1f", v)
	case len(ratios) == 1:
		return fmt.Sprintf("%.1f (%.2f)", v, ratios[0])
	}
	return fmt.Sprintf("%.1f (%.2f, %.2f–%.2f)", v, median(ratios), slices.Min(ratios), slices.Max(ratios))
}

func msCell(sp *SchedPerf, w, key, bucket string) string {
	if v, ok := sp.value(w, key, bucket); ok {
		return fmt.Sprintf("%.2f", v)
	}
	return "—"
}

// schedPerfSection writes the scheduler_perf section: throughput per workload as ratios to
// workload 1, where the time goes, the DRA ratios of issue 14 and the cross-check with e2esched.
func schedPerfSection(w *bytes.Buffer, sp *SchedPerf, e2e *E2E) {
	fmt.Fprintf(w, "## 3. kube-scheduler's own yardstick: scheduler_perf\n\n")
	if sp == nil {
		fmt.Fprintf(w, "Not measured in this run (no schedperf/times.json: HAMI_GO_BENCH_SCHEDPERF=0, or `make bench-schedperf` not run).\n\n")
		return
	}
	t := sp.Times
	fmt.Fprintf(w, "hack/schedperf (a module of its own; `make bench-schedperf`) runs kube-scheduler v1.37.2's benchmark harness "+
		"(test/integration/scheduler_perf: in-process kube-apiserver over etcd, in-process kube-scheduler, Node objects without kubelets) "+
		"on hami-go's workloads (hack/schedperf/config/performance-config.yaml), at %s: 8 GPUs of 81920 MiB per node, all measured pods created at once on an "+
		"empty cluster, every node scored (percentageOfNodesToScore 100, as the chart sets). Extender mode: each node's inventory annotation and Lease written "+
		"by the device plugin's own writers (renewed every 10 s), hami-go's extender in-process on the port the scheduler config names, pods in the webhook's "+
		"form. Plugin build (2p): the same inventories, Leases and pods, kube-scheduler built with hami-go's plugins HamiGo and "+
		"HamiGoNodeResourcesFit (scheduler_perf's out-of-tree registry, the profile of config/scheduler-plugin.yaml as the chart renders it). "+
		"DRA: each node's ResourceSlice built by pkg/dra's builder, claims from ResourceClaimTemplates, kube-scheduler's default allocator choice. "+
		"Run %s (commit `%s`, %d CPUs): test binary built in %d s, workloads ran in %d s (exit %d).\n\n",
		t.Scale, t.Started, t.Commit, t.CPUs, t.BuildSeconds, t.RunSeconds, t.Exit)
	fmt.Fprintf(w, "Without kubelets no device plugin calls Allocate, so a bound pod would stay \"not yet allocated\" and the extender would "+
		"serialize a pod of another shape behind it on its node (case C20). Workload 2m (mixed shapes, with churn) therefore runs a stand-in that "+
		"writes, for each bound pod, the claimed record the device plugin writes when Allocate serves the plan (hack/schedperf claimAsAllocated); "+
		"workload 2 is identical replicas without it, as in section 2.\n\n")

	base := sp.workloadOf("DevicePluginWholeGPU")
	fmt.Fprintf(w, "Each workload lasts seconds, beside whatever else the shared machine runs, so one run's figures are noisy (on 2026-12-01 two runs of "+
		"workload 1 at 500 nodes, 15 minutes apart, placed 61 and 133 pods/s; the extender's ratio was 0.96 and 0.80). This report's runs: %d "+
		"(HAMI_GO_SCHEDPERF_RUNS, every workload once per run, in the order below); each figure is the median over the runs, each ratio "+
		"the median of the runs' own ratios (a workload against workload 1 of the same run), with their range when there are several.\n\n", len(sp.Runs))
	fmt.Fprintf(w, "SchedulingThroughput (pods/s; scheduler_perf samples the scheduled count every second: average, and the 50th/99th percentile of those samples). "+
		"In brackets: the ratio to workload 1.\n\n")
	fmt.Fprintf(w, "| # | workload | measured | average | p50 | p99 |\n|---|---|---|---:|---:|---:|\n")
	for _, c := range schedPerfCases {
		wl := sp.workloadOf(c.name)
		if wl == "" {
			fmt.Fprintf(w, "| %s | %s | not run | — | — | — |\n", c.number, c.what)
			continue
		}
		cells := make([]string, 0, 3)
		for _, b := range []string{"Average", "Perc50", "Perc99"} {
			v, ok := sp.value(wl, "SchedulingThroughput", b)
			cells = append(cells, ratioCell(v, ok, sp.runRatios(wl, base, "SchedulingThroughput", b)))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", c.number, c.what, strings.TrimPrefix(wl, c.name+"/"), strings.Join(cells, " | "))
	}
	fmt.Fprintf(w, "\n")
	timeSection(w, sp)
	draRatios(w, sp)
	crossCheck(w, sp, e2e)
}

// timeSection writes where each workload's scheduling time goes.
func timeSection(w *bytes.Buffer, sp *SchedPerf) {
	fmt.Fprintf(w, "**Where the time goes** (ms, average / p99 over the measured pods; kube-scheduler's histograms, and the extender's own "+
		"hami_go_extender_request_duration_seconds). scheduler_perf's per-extension-point metrics do not include extender calls: "+
		"kube-scheduler calls the extender's filter and prioritize inside the scheduling algorithm but outside the Filter and Score extension points, "+
		"and its bind in the binding cycle before the Bind extension point. The attempt duration is kube-scheduler's scheduling_attempt_duration_seconds "+
		"(scheduling algorithm + binding: it includes the Binding call, or the extender's bind); the algorithm duration is the scheduling cycle's search "+
		"alone, which is what one scheduling loop does per pod. Extender quantiles are interpolated in its histogram's buckets (the first is 0–0.5 ms), so "+
		"below 0.5 ms read the mean.\n\n")
	fmt.Fprintf(w, "| # | attempt (scheduled: algorithm + binding) | algorithm | Filter ext. point | Score ext. point | PreBind ext. point (DRA: claim status write) | Bind ext. point | extender filter: calls, mean / p99 | extender prioritize | extender bind |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	const attempt, algo, ep = "scheduler_scheduling_attempt_duration_seconds/scheduled", "scheduler_scheduling_algorithm_duration_seconds", "scheduler_framework_extension_point_duration_seconds/"
	for _, c := range schedPerfCases {
		wl := sp.workloadOf(c.name)
		if wl == "" {
			continue
		}
		pair := func(key string) string {
			return msCell(sp, wl, key, "Average") + " / " + msCell(sp, wl, key, "Perc99")
		}
		verbs := make([]string, 0, 3)
		for _, v := range []string{"filter", "prioritize", "bind"} {
			f, ok := sp.Extender[wl].Verbs[v]
			if !ok || f.Calls == 0 {
				verbs = append(verbs, "—")
				continue
			}
			verbs = append(verbs, fmt.Sprintf("%d, %.2f / %.2f", f.Calls, f.MeanMs, f.P99Ms))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", c.number, pair(attempt), pair(algo), pair(ep+"Filter"), pair(ep+"Score"), pair(ep+"PreBind"), pair(ep+"Bind"), strings.Join(verbs, " | "))
	}
	fmt.Fprintf(w, "\n")
	b, e := sp.workloadOf("DevicePluginWholeGPU"), sp.workloadOf("HamiExtenderSlice")
	ba, bok := sp.value(b, "scheduler_scheduling_algorithm_duration_seconds", "Average")
	ea, eok := sp.value(e, "scheduler_scheduling_algorithm_duration_seconds", "Average")
	ext := sp.Extender[e]
	if bok && eok && len(ext.Verbs) > 0 {
		f, p, bd := ext.Verbs["filter"], ext.Verbs["prioritize"], ext.Verbs["bind"]
		fmt.Fprintf(w, "The scheduling algorithm takes %.2f ms per pod on average in extender mode against %.2f ms in workload 1 (difference %+.2f ms; "+
			"one run on a shared 2-core machine, so a difference of a few ms is noise). Inside it the extender itself answers filter in %.2f ms and "+
			"prioritize in %.2f ms on average (%.2f ms together); kube-scheduler's side of those two HTTP round trips (encoding the pod and the node "+
			"names, decoding the replies) adds to that, while the in-tree Filter and Score extension points do less (the extender does the GPU fit). "+
			"Bind goes through the extender too (%.2f ms on average inside the extender, the Binding call to the API server included, against "+
			"kube-scheduler's own Bind extension point in workload 1); kube-scheduler runs binding cycles in goroutines beside the scheduling loop, "+
			"so bind time shows in the attempt duration and takes CPU from the loop, but does not stop it.\n\n",
			ea, ba, ea-ba, f.MeanMs, p.MeanMs, f.MeanMs+p.MeanMs, bd.MeanMs)
	}
}

// draRatios writes issue 14's ratios: DRA with hami-go's slices against (a) whole-GPU DRA
// claims, (b) device-plugin whole GPUs, (c) the extender mode.
func draRatios(w *bytes.Buffer, sp *SchedPerf) {
	d := sp.workloadOf("HamiDRASlice")
	dv, ok := sp.value(d, "SchedulingThroughput", "Average")
	if !ok {
		return
	}
	const ep = "scheduler_framework_extension_point_duration_seconds/"
	f1, _ := sp.value(sp.workloadOf("DevicePluginWholeGPU"), ep+"Filter", "Average")
	fa, _ := sp.value(sp.workloadOf("DRAWholeGPU"), ep+"Filter", "Average")
	fc, _ := sp.value(d, ep+"Filter", "Average")
	pc, _ := sp.value(d, ep+"PreBind", "Average")
	fmt.Fprintf(w, "**DRA mode (issue 14).** DRA's time goes to the Filter extension point, where kube-scheduler's structured allocator "+
		"matches the claim against each node's devices (average Filter duration %.2f ms with hami-go's slices, %.2f ms with plain devices, %.2f ms for "+
		"device-plugin GPUs; as scheduler_perf reports kube-scheduler's extension-point histogram, which can exceed the algorithm's average: "+
		"not resolved here), and to PreBind, which writes the claim's allocation to the API server before the pod is bound (%.2f ms). "+
		"Pods/s of DRA consumable-capacity claims (workload 3c, %.1f pods/s average) as a ratio of\n\n", fc, fa, f1, pc, dv)
	for _, r := range []struct{ label, tc, goal string }{
		{"(a) kube-scheduler placing whole-GPU DRA claims (3a)", "DRAWholeGPU", " (goal ≥ 0.9)"},
		{"(b) kube-scheduler with device-plugin whole GPUs (1)", "DevicePluginWholeGPU", ""},
		{"(c) the extender mode (2)", "HamiExtenderSlice", ""},
	} {
		if v, ok := sp.value(sp.workloadOf(r.tc), "SchedulingThroughput", "Average"); ok && v > 0 {
			fmt.Fprintf(w, "- %s: **%.2f**%s\n", r.label, dv/v, r.goal)
		}
	}
	fmt.Fprintf(w, "\n")
	if v, ok := sp.value(sp.workloadOf("DRAWholeGPU"), "SchedulingThroughput", "Average"); ok && v > 0 && dv/v < 0.9 {
		fmt.Fprintf(w, "%s\n\n", draUpstreamCause)
	}
}

// crossCheck compares the extender / kube-scheduler ratio with e2esched's.
func crossCheck(w *bytes.Buffer, sp *SchedPerf, e2e *E2E) {
	b, _ := sp.value(sp.workloadOf("DevicePluginWholeGPU"), "SchedulingThroughput", "Average")
	x, ok := sp.value(sp.workloadOf("HamiExtenderSlice"), "SchedulingThroughput", "Average")
	if !ok || b == 0 {
		return
	}
	fmt.Fprintf(w, "**Cross-check with section 2.** Here the extender mode reaches %.2f of kube-scheduler alone", x/b)
	e2eBase := 0.0
	if e2e != nil {
		_, base, ratio := e2e.Paired()
		if m := Summarize(ratio); m.N > 0 {
			e2eBase = Summarize(base).Median
			fmt.Fprintf(w, "; e2esched measured %.2f (median of %d paired runs)", m.Median, m.N)
		}
	}
	bind, okBind := sp.value(sp.workloadOf("DevicePluginWholeGPU"), "scheduler_framework_extension_point_duration_seconds/Bind", "Average")
	switch {
	case e2eBase > 0 && b >= 0.8*e2eBase && b <= 1.25*e2eBase:
		fmt.Fprintf(w, ". kube-scheduler alone reaches a similar rate here (%.1f pods/s against %.1f in e2esched), so the difference lies in the "+
			"extender runs; the causes were not isolated in this run (candidates: the measurement windows below, and in e2esched the extender's "+
			"informers and the Lease renewals of 1,000 nodes competing for the same 2 cores in another process)", b, e2eBase)
	case e2eBase > 0 && b < 0.8*e2eBase && okBind:
		fmt.Fprintf(w, ". kube-scheduler alone places %.1f pods/s here against %.1f in e2esched, and its Bind extension point (the Binding call to the "+
			"in-process API server) averages %.2f ms: the API server, sharing the 2 cores with the scheduler while the pods are being created, bounds "+
			"both workloads, which hides most of the extender's extra cost per pod (its two HTTP round trips and its own CPU); e2esched's faster "+
			"baseline exposes it", b, e2eBase, bind)
	}
	fmt.Fprintf(w, ". The setups differ: e2esched runs the real kube-scheduler and kube-apiserver binaries of the local cluster as separate processes "+
		"(client qps 1000) with the extender in the benchmark's process, and measures from the first to the last binding of pods queued before the "+
		"scheduler starts; scheduler_perf runs API server, scheduler and extender in one process (client qps 5000) and averages one-second samples "+
		"while the pods are being created. Both share the machine's cores between the API server, the scheduler and the extender, so the extender's CPU "+
		"(its informers, JSON, and here the Lease renewals) is taken from the scheduler's.\n\n")
}

// readOtherScales reads every <in>/schedperf-<scale> folder (make bench-schedperf at a scale
// other than the default 500Nodes keeps its run there), sorted by name.
func readOtherScales(in string) ([]*SchedPerf, error) {
	dirs, err := filepath.Glob(filepath.Join(in, "schedperf-*"))
	if err != nil {
		return nil, err
	}
	sort.Strings(dirs)
	var out []*SchedPerf
	for _, d := range dirs {
		sp, err := ReadSchedPerf(d)
		if err != nil {
			return nil, err
		}
		if sp != nil {
			out = append(out, sp)
		}
	}
	return out, nil
}

// otherScalesSection writes the average throughput of each workload at the other scales, each
// as a ratio to workload 1 of the same run; nothing when there are none.
func otherScalesSection(w *bytes.Buffer, others []*SchedPerf) {
	if len(others) == 0 {
		return
	}
	fmt.Fprintf(w, "**Other scales** (`HAMI_GO_SCHEDPERF_SCALE=<scale> make bench-schedperf`, kept in docs/bench/schedperf-<scale>): "+
		"SchedulingThroughput average, pods/s, and in brackets the ratio to workload 1 of the same run.\n\n")
	head, rule := "| scale | run |", "|---|---|"
	for _, c := range schedPerfCases {
		head, rule = head+" "+c.number+" |", rule+"---:|"
	}
	fmt.Fprintf(w, "%s\n%s\n", head, rule)
	for _, sp := range others {
		base := sp.workloadOf("DevicePluginWholeGPU")
		cells := make([]string, 0, len(schedPerfCases))
		for _, c := range schedPerfCases {
			wl := sp.workloadOf(c.name)
			v, ok := sp.value(wl, "SchedulingThroughput", "Average")
			cells = append(cells, ratioCell(v, ok, sp.runRatios(wl, base, "SchedulingThroughput", "Average")))
		}
		t := sp.Times
		fmt.Fprintf(w, "| %s | %s, commit `%s`, built in %d s, ran in %d s | %s |\n", t.Scale, t.Started, t.Commit, t.BuildSeconds, t.RunSeconds, strings.Join(cells, " | "))
	}
	fmt.Fprintf(w, "\n")
}

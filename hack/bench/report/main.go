// Command report writes docs/bench/report.md and its PNG plots from the outputs of
// hack/bench/run.sh: go test -bench output (go-bench.txt: every package's benchmarks, repeated)
// and hack/bench/e2esched's JSON (e2esched.json; optional). Every figure is the median of the
// repetitions with the spread (min–max); comparisons are ratios of figures measured in one run.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Config is the report's input and output (flags).
type Config struct {
	// In holds go-bench.txt and e2esched.json.
	In string
	// Out receives report.md and the PNGs.
	Out string
	// Commit, Load, Started and Took describe the run (written by run.sh).
	Commit, Load, Started, Took string
	// Machine describes the machine that ran sections 1, 2 and 4 ("" = this one).
	Machine string
}

func main() {
	var c Config
	fs := pflag.NewFlagSet("report", pflag.ExitOnError)
	fs.StringVar(&c.In, "in", "_output/bench", "folder with go-bench.txt and e2esched.json")
	fs.StringVar(&c.Out, "out", "docs/bench", "folder for report.md and the PNG plots")
	fs.StringVar(&c.Commit, "commit", "", "commit measured")
	fs.StringVar(&c.Load, "load", "", "load average when the run started (/proc/loadavg)")
	fs.StringVar(&c.Started, "started", "", "when the run started")
	fs.StringVar(&c.Took, "took", "", "how long the whole run took")
	_ = fs.Parse(os.Args[1:])
	if err := Write(c); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// Write reads c.In and writes c.Out/report.md and its plots. Run details not given (Started
// empty: a report rewritten from docs/bench by make bench-schedperf) come from c.In/run.json,
// which hack/bench/run.sh writes.
func Write(c Config) error {
	if c.Started == "" {
		if err := readRun(filepath.Join(c.In, "run.json"), &c); err != nil {
			return err
		}
	}
	f, err := os.Open(filepath.Join(c.In, "go-bench.txt"))
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := ReadBenchmarks(f, "go-bench.txt")
	if err != nil {
		return err
	}
	e2e, err := ReadE2E(filepath.Join(c.In, "e2esched.json"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return err
	}
	var w bytes.Buffer
	header(&w, c, b)
	if err := scaleSection(&w, c.Out, b); err != nil {
		return err
	}
	if err := e2eSection(&w, c.Out, e2e); err != nil {
		return err
	}
	sp, err := ReadSchedPerf(filepath.Join(c.In, "schedperf"))
	if err != nil {
		return err
	}
	others, err := readOtherScales(c.In)
	if err != nil {
		return err
	}
	schedPerfSection(&w, sp, e2e)
	otherScalesSection(&w, others)
	latencySection(&w, b)
	footer(&w)
	for _, f := range []string{"placement.md", "drapack.md"} {
		if err := appendSection(&w, filepath.Join(c.In, f)); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(c.Out, "report.md"), w.Bytes(), 0o644)
}

// appendSection appends a tool's Markdown section (path: hack/bench/placement's placement.md,
// hack/bench/drapack's drapack.md; run.sh keeps a copy of each in docs/bench, so a report
// rewritten from there keeps them too); a missing file adds nothing.
func appendSection(w *bytes.Buffer, path string) error {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		return err
	}
	w.WriteString("\n")
	w.Write(b)
	return nil
}

// ms formats a Stat of nanoseconds (or µs with div) as "median (min–max)" in the given scale.
func fmtStat(s Stat, div float64, prec int) string {
	if s.N == 0 {
		return "–"
	}
	if s.N == 1 || s.Min == s.Max {
		return fmt.Sprintf("%.*f", prec, s.Median/div)
	}
	return fmt.Sprintf("%.*f (%.*f–%.*f)", prec, s.Median/div, prec, s.Min/div, prec, s.Max/div)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if i := strings.Index(l, ":"); i >= 0 {
				return strings.TrimSpace(l[i+1:])
			}
		}
	}
	return runtime.GOARCH
}

func header(w *bytes.Buffer, c Config, b Benchmarks) {
	reps := b.Get("extender.ExtenderScale/nodes=100/filter", "ns/op").N
	fmt.Fprintf(w, "# hami-go performance report\n\n")
	fmt.Fprintf(w, "Written by `make bench` (hack/bench/run.sh → hack/bench/report); do not edit by hand.\n\n")
	fmt.Fprintf(w, "| | |\n|---|---|\n")
	fmt.Fprintf(w, "| started | %s |\n| took | %s |\n| commit | `%s` |\n", c.Started, c.Took, c.Commit)
	fmt.Fprintf(w, "| machine | %s |\n", machine(c))
	fmt.Fprintf(w, "| load average at start | %s |\n", c.Load)
	fmt.Fprintf(w, "| repetitions | %d per benchmark (figures: median, and min–max in brackets) |\n\n", reps)
	fmt.Fprintf(w, "The machine is shared (other builds and tests run beside the benchmarks), so single figures are noisy: "+
		"read medians and spreads, and compare only figures measured side by side in this one run.\n\n")
}

// scaleNodes are the fleet sizes of BenchmarkExtenderScale and BenchmarkFilterScale.
var scaleNodes = []float64{100, 1000, 5000, 10000}

func scaleSection(w *bytes.Buffer, out string, b Benchmarks) error {
	fmt.Fprintf(w, "## 1. Allocator and extender as the cluster grows\n\n")
	fmt.Fprintf(w, "Fleet: N nodes × 8 GPUs of 81920 MiB (split count 10), 4 pods per GPU placed (32 claimed pods per node, "+
		"4000–16000 MiB, 10%% cores each), fed through the informer entry points (OnNode, OnLease, OnPod). "+
		"The pod being scheduled asks 1 GPU, 8000 MiB, 10%% cores; every node fits it. "+
		"Benchmarks: `pkg/extender` BenchmarkExtenderScale (filter, prioritize: in memory over all N nodes; bind: the in-memory part "+
		"— BookForBind, FinishBind, and Release of the pod so the fleet stays the same; filter/prioritize HTTP: the whole round trip on "+
		"loopback with N node names in the JSON, from a client in another process that encodes and decodes with encoding/json as kube-scheduler does), `pkg/allocator` BenchmarkFilterScale (Fit and Score over all N nodes, no cache).\n\n")
	fmt.Fprintf(w, "Preemption (case C43): a pod of priority 1000 that fits no node, and every node has a 2-victim set: 1 GPU of 60000 MiB "+
		"(at 20,000 pods, where 4 of each node's 8 GPUs are empty, 6 GPUs of 78000 MiB each); "+
		"preempt plan is the extender's own preemption (Cache.PlanPreemption, which stops after max(100, 10%%) nodes with a set, as kube-scheduler's dry run does), "+
		"preempt verb answers kube-scheduler's preempt call with max(100, 10%%) candidate nodes (allocator.ChooseVictims on each).\n\n")
	fmt.Fprintf(w, "| nodes | pods placed | filter (ms) | prioritize (ms) | bind, in memory (µs) | filter HTTP p50 (ms) | filter HTTP p99 (ms) | prioritize HTTP p99 (ms) | filter allocs/op | allocator Fit+Score (ms) | preempt plan (ms) | preempt verb (ms) | cache heap (MiB) | + informer objects (MiB) |\n")
	fmt.Fprintf(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	verbs := []struct{ label, key, unit string }{
		{"filter (in memory)", "filter", "ns/op"}, {"prioritize (in memory)", "prioritize", "ns/op"},
		{"filter HTTP round trip, p50", "filter-http", "p50-µs"}, {"prioritize HTTP round trip, p50", "prioritize-http", "p50-µs"},
	}
	lines := make([]Line, len(verbs))
	var memCache, memObj []Stat
	for _, n := range scaleNodes {
		k := fmt.Sprintf("extender.ExtenderScale/nodes=%d/", int(n))
		fmt.Fprintf(w, "| %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", int(n), int(n)*32,
			fmtStat(b.Get(k+"filter", "ns/op"), 1e6, 2), fmtStat(b.Get(k+"prioritize", "ns/op"), 1e6, 2),
			fmtStat(b.Get(k+"bind", "ns/op"), 1e3, 1),
			fmtStat(b.Get(k+"filter-http", "p50-µs"), 1e3, 2), fmtStat(b.Get(k+"filter-http", "p99-µs"), 1e3, 2),
			fmtStat(b.Get(k+"prioritize-http", "p99-µs"), 1e3, 2),
			fmtStat(b.Get(k+"filter", "allocs/op"), 1, 0),
			fmtStat(b.Get(fmt.Sprintf("allocator.FilterScale/nodes=%d", int(n)), "ns/op"), 1e6, 2),
			fmtStat(b.Get(k+"preempt-plan", "ns/op"), 1e6, 2), fmtStat(b.Get(k+"preempt-verb", "ns/op"), 1e6, 2),
			fmtStat(b.Get(k+"filter", "cache-MiB"), 1, 1), fmtStat(b.Get(k+"filter", "objects-MiB"), 1, 1))
		for i, v := range verbs {
			s := b.Get(k+v.key, v.unit)
			if v.unit == "ns/op" {
				s = Stat{Median: s.Median / 1e6, Min: s.Min / 1e6, Max: s.Max / 1e6, N: s.N}
			} else {
				s = Stat{Median: s.Median / 1e3, Min: s.Min / 1e3, Max: s.Max / 1e3, N: s.N}
			}
			lines[i].Label = v.label
			if s.N > 0 {
				lines[i].Xs = append(lines[i].Xs, n)
				lines[i].Stats = append(lines[i].Stats, s)
			}
		}
		memCache = append(memCache, b.Get(k+"filter", "cache-MiB"))
		memObj = append(memObj, b.Get(k+"filter", "objects-MiB"))
	}
	fmt.Fprintf(w, "\n**Growth.** Least-squares line through the medians (time = intercept + slope × nodes) and the exponent k of "+
		"a power law fitted on log–log axes (time ∝ nodes^k; k ≤ 1 is linear or better):\n\n")
	fmt.Fprintf(w, "| series | slope (µs per node) | intercept (ms) | R² | exponent k | linear or better |\n|---|---:|---:|---:|---:|---|\n")
	fitRow := func(label string, xs []float64, st []Stat) (Fit, bool) {
		ys := make([]float64, len(st))
		for i := range st {
			ys[i] = st[i].Median
		}
		f, err := FitLine(xs, ys)
		if err != nil {
			fmt.Fprintf(w, "| %s | – | – | – | – | %v |\n", label, err)
			return f, false
		}
		fmt.Fprintf(w, "| %s | %.3f | %.3f | %.4f | %.2f | %s |\n", label, f.Slope*1e3, f.Intercept, f.R2, f.Exponent, verdict(f.Exponent <= 1.1))
		return f, true
	}
	for i := range lines {
		if f, ok := fitRow(lines[i].Label, lines[i].Xs, lines[i].Stats); ok {
			lines[i].FitSlope, lines[i].FitIcpt = f.Slope, f.Intercept
		}
	}
	var axs []float64
	var ast []Stat
	for _, n := range scaleNodes {
		s := b.Get(fmt.Sprintf("allocator.FilterScale/nodes=%d", int(n)), "ns/op")
		if s.N > 0 {
			axs, ast = append(axs, n), append(ast, Stat{Median: s.Median / 1e6, Min: s.Min / 1e6, Max: s.Max / 1e6, N: s.N})
		}
	}
	fitRow("allocator Fit+Score over all nodes", axs, ast)
	fmt.Fprintf(w, "\nCost per node (median time / nodes, µs) and the local exponent between consecutive sizes "+
		"(k = Δlog time / Δlog nodes; 1 = linear):\n\n")
	fmt.Fprintf(w, "| series | µs per node at 100 / 1,000 / 5,000 / 10,000 | k 100→1,000 | k 1,000→5,000 | k 5,000→10,000 |\n|---|---|---:|---:|---:|\n")
	all := append(append([]Line(nil), lines...), Line{Label: "allocator Fit+Score over all nodes", Xs: axs, Stats: ast})
	for _, l := range all {
		per := make([]string, len(l.Xs))
		for i := range l.Xs {
			per[i] = fmt.Sprintf("%.2f", l.Stats[i].Median*1e3/l.Xs[i])
		}
		ks := make([]string, 3)
		for i := range ks {
			ks[i] = "–"
			if i+1 < len(l.Xs) {
				ks[i] = fmt.Sprintf("%.2f", LocalExponent(l.Xs[i], l.Stats[i].Median, l.Xs[i+1], l.Stats[i+1].Median))
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", l.Label, strings.Join(per, " / "), ks[0], ks[1], ks[2])
	}
	fmt.Fprintf(w, "\n(The speculative reservation is part of the filter figures, and the JSON of N node names part of the HTTP ones.)\n\n")
	if err := PlotLines(filepath.Join(out, "scale.png"), "hami-go extender: time per call vs nodes (8 GPUs each, 32 pods per node)",
		"nodes", "milliseconds (median, min–max; dashed: fitted line)", lines); err != nil {
		return err
	}
	fmt.Fprintf(w, "![time per call vs nodes](scale.png)\n\n")
	var mxs []float64
	var mc, mo []Stat
	for i, n := range scaleNodes {
		if memCache[i].N > 0 {
			mxs, mc, mo = append(mxs, n), append(mc, memCache[i]), append(mo, memObj[i])
		}
	}
	if len(mxs) > 0 {
		cf, _ := FitLine(mxs, medians(mc))
		if err := PlotLines(filepath.Join(out, "memory.png"), "hami-go extender: heap after setup vs nodes", "nodes", "MiB",
			[]Line{{Label: "extender cache", Xs: mxs, Stats: mc, FitSlope: cf.Slope, FitIcpt: cf.Intercept},
				{Label: "informer objects (Nodes, Leases, stripped Pods)", Xs: mxs, Stats: mo}}); err != nil {
			return err
		}
		fmt.Fprintf(w, "Memory: the cache grows by %.1f KiB per node (%.2f KiB per placed pod; fitted, R² %.4f). "+
			"The informers' stores add the second figure (an estimate: the objects as fed to the cache, after the extender's transform).\n\n",
			cf.Slope*1024, cf.Slope*1024/32, cf.R2)
		fmt.Fprintf(w, "![heap vs nodes](memory.png)\n\n")
	}
	targets(w, b)
	return nil
}

func medians(st []Stat) []float64 {
	out := make([]float64, len(st))
	for i := range st {
		out[i] = st[i].Median
	}
	return out
}

// targets compares the figures with the targets of issues 2 and 4.
func targets(w *bytes.Buffer, b Benchmarks) {
	k := "extender.ExtenderScale/nodes=5000,pods=20000/"
	fmt.Fprintf(w, "### Targets (issues 2 and 4: 5,000 nodes × 8 GPUs with 20,000 placed pods)\n\n")
	fmt.Fprintf(w, "| figure | measured | target | |\n|---|---:|---:|---|\n")
	row := func(what string, s Stat, div float64, unit string, target float64) {
		if s.N == 0 {
			fmt.Fprintf(w, "| %s | – | %g %s | not measured |\n", what, target, unit)
			return
		}
		fmt.Fprintf(w, "| %s | %s %s | ≤ %g %s | %s |\n", what, fmtStat(s, div, 3), unit, target, unit, verdict(s.Median/div <= target))
	}
	row("extender filter, HTTP round trip p99 (5,000 node names)", b.Get(k+"filter-http", "p99-µs"), 1e3, "ms", 10)
	row("extender prioritize, HTTP round trip p99", b.Get(k+"prioritize-http", "p99-µs"), 1e3, "ms", 5)
	row("extender prioritize, HTTP round trip p99, every node scored (5,000 nodes, 160,000 pods)", b.Get("extender.ExtenderScale/nodes=5000/prioritize-http", "p99-µs"), 1e3, "ms", 5)
	row("extender filter, the extender's share of the round trip, p99", b.Get(k+"filter-http", "server-p99-µs"), 1e3, "ms", 10)
	row("extender prioritize, the extender's share of the round trip, p99", b.Get(k+"prioritize-http", "server-p99-µs"), 1e3, "ms", 5)
	row("extender prioritize, in memory", b.Get(k+"prioritize", "ns/op"), 1e6, "ms", 5)
	row("extender bind, in-memory part (incl. Release)", b.Get(k+"bind", "ns/op"), 1e6, "ms", 1)
	cache, obj := b.Get(k+"filter", "cache-MiB"), b.Get(k+"filter", "objects-MiB")
	row("extender heap: cache", cache, 1, "MiB", 150)
	if cache.N > 0 && obj.N > 0 {
		tot := Stat{Median: cache.Median + obj.Median, Min: cache.Min + obj.Min, Max: cache.Max + obj.Max, N: cache.N}
		row("extender heap: cache + informer objects", tot, 1, "MiB", 150)
	}
	row("allocator BenchmarkFilter (Fit over 5,000 nodes, -cpu 1)", b.Get("allocator.Filter", "ns/op"), 1e6, "ms", 2)
	row("allocator BenchmarkPick (8-GPU node, 2 containers)", b.Get("allocator.Pick", "ns/op"), 1e3, "µs", 20)
	row("allocator BenchmarkFitSearch (a refused 4-container pod, placement search to its end, 16-GPU node)", b.Get("allocator.FitSearch/gpus=16", "ns/op"), 1e3, "µs", 100)
	fmt.Fprintf(w, "\nThe prioritize reply lists only the nodes scored above 0 (a node left out adds 0 to its total in kube-scheduler, as a listed 0 does): "+
		"with 20,000 pods on 5,000 nodes binpack scores nearly every node 0 and the reply lists %s host(s); with 160,000 pods every node scores and all 5,000 are listed.\n",
		fmtStat(b.Get(k+"prioritize-http", "hosts-listed"), 1, 0))
	fmt.Fprintf(w, "\nA round trip is the extender's share (request read, decoded, answered, reply written) plus the client's: "+
		"kube-scheduler encodes the pod and the node names and decodes the reply with encoding/json "+
		"(k8s.io/kubernetes pkg/scheduler/extender.go); for prioritize at 5,000 nodes that decode of 5,000 HostPriority entries "+
		"alone takes %s ms (BenchmarkExtenderScale/…/prioritize-client-decode; p50 round trip %s ms, of which the extender's %s ms).\n",
		fmtStat(b.Get(k+"prioritize-client-decode", "ns/op"), 1e6, 2),
		fmtStat(b.Get(k+"prioritize-http", "p50-µs"), 1e3, 2), fmtStat(b.Get(k+"prioritize-http", "server-p50-µs"), 1e3, 2))
	fmt.Fprintf(w, "\nallocs/op: allocator BenchmarkFilter %s, BenchmarkPick %s; extender filter at 5,000 nodes %s, bind %s.\n\n",
		fmtStat(b.Get("allocator.Filter", "allocs/op"), 1, 0), fmtStat(b.Get("allocator.Pick", "allocs/op"), 1, 0),
		fmtStat(b.Get(k+"filter", "allocs/op"), 1, 0), fmtStat(b.Get(k+"bind", "allocs/op"), 1, 0))
}

func e2eSection(w *bytes.Buffer, out string, e *E2E) error {
	fmt.Fprintf(w, "## 2. End-to-end scheduling on the local cluster\n\n")
	if e == nil {
		fmt.Fprintf(w, "Not measured in this run (no e2esched.json: the local cluster was not reachable, or HAMI_GO_BENCH_E2E=0).\n\n")
		return nil
	}
	fmt.Fprintf(w, "hack/bench/e2esched against the local cluster's API server (hack/cluster/up.sh) with %d simulated nodes: Node objects created "+
		"through the API with a hami-go inventory annotation (8 GPUs of 81920 MiB, split count 10), status Ready, capacity nvidia.com/gpu 80, "+
		"no not-ready taint, and fresh Leases (the kubelet's and the device plugin's, renewed every 15 s as kubelets would); no kubelet. "+
		"Two real kube-scheduler v1.37.2 processes with the chart's configuration (percentageOfNodesToScore 100, clientConnection qps/burst %d):\n\n"+
		"- **extender**: profile hami-go-bench-scheduler calling hami-go's extender (pkg/extender, on 127.0.0.1) — pods ask nvidia.com/gpu 1 + nvidia.com/gpumem %d;\n"+
		"- **baseline**: the same kube-scheduler configuration without the extender — the same pods asking only nvidia.com/gpu 1 (whole GPUs the nodes advertise).\n\n"+
		"Each run creates %d pods while no scheduler of theirs runs, then starts that variant's kube-scheduler on the full queue; the rate is "+
		"(pods − 1) / (last binding − first binding), bindings seen by an informer. No kubelet calls Allocate, so the extender's pods stay in "+
		"flight: all pods of a run are **identical replicas** (same request), which never wait for each other. "+
		"Variants alternate run by run (extender, baseline, extender, …); the ratio is taken run by run.\n\n",
		e.Nodes, e.QPS, e.GPUMemMiB, e.Pods)
	ext, base, ratio := e.Paired()
	fmt.Fprintf(w, "| run | extender (pods/s) | baseline (pods/s) | ratio |\n|---:|---:|---:|---:|\n")
	for i := range ratio {
		fmt.Fprintf(w, "| %d | %.1f | %.1f | %.2f |\n", i+1, ext[i], base[i], ratio[i])
	}
	se, sb, sr := Summarize(ext), Summarize(base), Summarize(ratio)
	fmt.Fprintf(w, "| **median (min–max)** | **%s** | **%s** | **%s** |\n\n", fmtStat(se, 1, 1), fmtStat(sb, 1, 1), fmtStat(sr, 1, 2))
	if sr.N > 0 {
		fmt.Fprintf(w, "Ratio extender / kube-scheduler alone: **%.2f** (median of %d paired runs; target ≥ 0.8: %s). "+
			"For reference, about 94 pods/s was measured earlier for kube-scheduler alone (2,000 pods, 1,000 nodes, qps 1000).\n\n",
			sr.Median, sr.N, verdict(sr.Median >= 0.8))
	}
	var steady []string
	for _, r := range e.Runs {
		if r.Run > 0 {
			steady = append(steady, fmt.Sprintf("%s %d: %.0f", r.Variant, r.Run, r.SteadyPodsPerSecond))
		}
	}
	fmt.Fprintf(w, "Rates between the 10th and 90th percentile binding (pods/s): %s.\n\n", strings.Join(steady, "; "))
	cpuSection(w, e)
	if len(ratio) > 0 {
		groups := make([]string, len(ratio))
		for i := range groups {
			groups[i] = fmt.Sprintf("run %d", i+1)
		}
		if err := PlotBars(filepath.Join(out, "e2e.png"), fmt.Sprintf("Scheduling throughput, %d pods on %d simulated nodes", e.Pods, e.Nodes),
			"pods per second", groups, map[string][]float64{"extender": ext, "kube-scheduler alone": base}, []string{"extender", "kube-scheduler alone"}); err != nil {
			return err
		}
		fmt.Fprintf(w, "![scheduling throughput](e2e.png)\n\n")
	}
	e2ePluginsSection(w, e)
	e2eDRASection(w, e)
	return nil
}

// cpuSection says where the CPU of each run went, per bound pod: the run's kube-scheduler
// process and e2esched's own (the extender in the extender variant, plus the informer and the
// Lease renewals both variants share). Runs of an older e2esched without CPU figures are skipped.
func cpuSection(w *bytes.Buffer, e *E2E) {
	var rows []string
	var schedExt, schedBase, selfExt, selfBase []float64
	perPod := func(sec float64) float64 { return sec * 1e3 / float64(e.Pods) }
	for i, p := range e.Pairs() {
		if p.Ext.SchedulerCPUSeconds == 0 || p.Base.SchedulerCPUSeconds == 0 {
			continue
		}
		se, sb := perPod(p.Ext.SchedulerCPUSeconds), perPod(p.Base.SchedulerCPUSeconds)
		xe, xb := perPod(p.Ext.SelfCPUSeconds), perPod(p.Base.SelfCPUSeconds)
		schedExt, schedBase, selfExt, selfBase = append(schedExt, se), append(schedBase, sb), append(selfExt, xe), append(selfBase, xb)
		rows = append(rows, fmt.Sprintf("| %d | %.1f | %.1f | %.1f | %.1f |", i+1, se, sb, xe, xb))
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "CPU time per bound pod (ms; the kube-scheduler's from its start, informer sync included, to its exit; e2esched's over the same span):\n\n"+
		"| run | kube-scheduler, extender | kube-scheduler, baseline | e2esched, extender (extender + informer + Leases) | e2esched, baseline (informer + Leases) |\n|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(w, "%s\n| **median** | **%s** | **%s** | **%s** | **%s** |\n\n", strings.Join(rows, "\n"),
		fmtStat(Summarize(schedExt), 1, 1), fmtStat(Summarize(schedBase), 1, 1), fmtStat(Summarize(selfExt), 1, 1), fmtStat(Summarize(selfBase), 1, 1))
}

func latencySection(w *bytes.Buffer, b Benchmarks) {
	fmt.Fprintf(w, "## 4. Latency distributions\n\n")
	fmt.Fprintf(w, "Per-op latencies recorded inside the benchmarks (p50 and p99 of every op of one benchmark run; the table gives the median over runs and the spread).\n\n")
	fmt.Fprintf(w, "| path | p50 (µs) | p99 (µs) | mean (µs) | allocs/op | target p99 | |\n|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range []struct {
		label, key string
		target     float64 // µs; 0: reported without a target
	}{
		{"device plugin, one GPU container: Allocate (the pending answer), then the NRI plugin's decision at container creation, 200 pods in flight (pkg/deviceplugin BenchmarkAllocate)", "deviceplugin.Allocate", 1000},
		{"NRI CreateContainer of a GPU container through containerd's NRI adaptation over its socket: the plan's env and CDI devices (pkg/nri BenchmarkCreateContainerThroughNRI; the runtime drops a plugin after 2 s)", "nri.CreateContainerThroughNRI", 5000},
		{"webhook admission, GPU pod (pkg/webhook BenchmarkAdmissionLatency/gpu-pod)", "webhook.AdmissionLatency/gpu-pod", 1000},
		{"webhook admission, KubeRay worker (…/ray-worker)", "webhook.AdmissionLatency/ray-worker", 1000},
		{"webhook admission with GPU-memory quota: init + sidecar + app, a preset hami-go.io/gpu-memory rewritten, 20 quotas in the namespace (…/gpu-memory-quota)", "webhook.AdmissionLatency/gpu-memory-quota", 1000},
		{"webhook admission, 50 % pod, quota lookup among 20 quotas (…/percent-lookup)", "webhook.AdmissionLatency/percent-lookup", 1000},
		{"webhook admission in DRA mode, KubeRay worker asking 50 % on two GPU sizes, template cached (pkg/webhook BenchmarkPodReviewDRA)", "webhook.PodReviewDRA", 1000},
		{"DRA driver PrepareResourceClaims, one-GPU claim already read, CDI spec written (pkg/dra BenchmarkPrepareResourceClaims)", "dra.PrepareResourceClaims", 1000},
		{"DRA driver NodePrepareResources over gRPC, the helper's claim read from a test API server included (pkg/dra BenchmarkNodePrepareResourcesGRPC)", "dra.NodePrepareResourcesGRPC", 0},
	} {
		p99 := b.Get(r.key, "p99-µs")
		v, target := "not measured", "—"
		if r.target > 0 {
			target = fmt.Sprintf("%.0f", r.target)
		}
		switch {
		case p99.N > 0 && r.target > 0:
			v = verdict(p99.Median <= r.target)
		case p99.N > 0:
			v = "reported apart"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", r.label, fmtStat(b.Get(r.key, "p50-µs"), 1, 1), fmtStat(p99, 1, 1),
			fmtStat(b.Get(r.key, "ns/op"), 1e3, 1), fmtStat(b.Get(r.key, "allocs/op"), 1, 0), target, v)
	}
	fmt.Fprintf(w, "\n")
}

func footer(w *bytes.Buffer) {
	fmt.Fprintf(w, "## Reproduce\n\n```\nmake bench                     # everything (about 20 minutes; the local cluster must be up or is brought up)\nHAMI_GO_BENCH_E2E=0 make bench # benchmarks only\nHAMI_GO_BENCH_COUNT=3 make bench\n"+
		"make bench-schedperf           # section 3 only (HAMI_GO_SCHEDPERF_SCALE=100Nodes|500Nodes|1000Nodes), the rest rewritten from docs/bench\n```\n\n"+
		"Raw outputs: docs/bench/go-bench.txt, docs/bench/e2esched.json and docs/bench/schedperf/ (copied from _output/bench). Written %s.\n", time.Now().UTC().Format(time.RFC3339))
}

// readRun fills c's run details from run.json ({"started","took","commit","load"}); a missing
// file leaves them empty.
func readRun(path string, c *Config) error {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var r struct{ Started, Took, Commit, Load, Machine string }
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	c.Started, c.Took, c.Commit, c.Load, c.Machine = r.Started, r.Took, r.Commit, r.Load, r.Machine
	return nil
}

// machine is c.Machine, else this machine: "<n> CPUs (<model>), <os>/<arch>, <go version>".
func machine(c Config) string {
	if c.Machine != "" {
		return c.Machine
	}
	return fmt.Sprintf("%d CPUs (%s), %s/%s, %s", runtime.NumCPU(), cpuModel(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}

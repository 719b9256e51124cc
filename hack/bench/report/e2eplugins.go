package main

import (
	"bytes"
	"fmt"

	"github.com/hami-go/hami-go/hack/bench/e2eresult"
)

// e2ePluginsSection reports e2esched's plugins variant (kube-scheduler built with hami-go's
// framework plugin HamiGo, cmd/kube-scheduler-hami-go) against kube-scheduler alone and the
// extender, run by run (issue 38 item 4: a plugin build should reach ≥ 0.95 of kube-scheduler
// alone). Nothing when the run has no plugins variant (e2esched without --plugins).
func e2ePluginsSection(w *bytes.Buffer, e *E2E) {
	runs, plug, base, ratio := e.Ratio(e2eresult.VariantPlugins, e2eresult.VariantBaseline)
	if len(runs) == 0 {
		return
	}
	_, _, _, vsExt := e.Ratio(e2eresult.VariantPlugins, e2eresult.VariantExtender)
	fmt.Fprintf(w, "**The framework-plugin build (issue 38 item 4).** In the same run, interleaved with the variants above, kube-scheduler "+
		"v1.37.2 built with hami-go's placement as the framework plugin HamiGo (cmd/kube-scheduler-hami-go: PreFilter, Filter, PreScore, "+
		"Score, Reserve and Bind over the same extender cache in kube-scheduler's process, no extender; NodeResourcesFit replaced by "+
		"HamiGoNodeResourcesFit, the same answers without a regular expression per resource name and node; profile hami-go-bench-plugins) "+
		"places the extender variant's pods (docs/bench/cpu.md compares the CPU per pod by cause).\n\n")
	fmt.Fprintf(w, "| run | plugins (pods/s) | baseline (pods/s) | plugins / baseline | plugins / extender |\n|---:|---:|---:|---:|---:|\n")
	for i, r := range runs {
		vs := "–"
		if i < len(vsExt) {
			vs = fmt.Sprintf("%.2f", vsExt[i])
		}
		fmt.Fprintf(w, "| %d | %.1f | %.1f | %.2f | %s |\n", r, plug[i], base[i], ratio[i], vs)
	}
	sp, sb, sr, se := Summarize(plug), Summarize(base), Summarize(ratio), Summarize(vsExt)
	fmt.Fprintf(w, "| **median (min–max)** | **%s** | **%s** | **%s** | **%s** |\n\n", fmtStat(sp, 1, 1), fmtStat(sb, 1, 1), fmtStat(sr, 1, 2), fmtStat(se, 1, 2))
	fmt.Fprintf(w, "Ratio plugin build / kube-scheduler alone: **%.2f** (median of %d paired runs; target ≥ 0.95 for a plugin build: %s).\n\n",
		sr.Median, sr.N, verdict(sr.Median >= 0.95))
}

package main

import (
	"fmt"
	"sort"
	"strings"
)

// Summary is a variant's bursts in figures.
type Summary struct {
	// Bursts is the number of bursts.
	Bursts int
	// Ideal is the fewest GPUs a burst fits on (the same for every burst of the variant).
	Ideal int
	// MeanGPUs, MinGPUs, MaxGPUs: GPUs touched per burst.
	MeanGPUs         float64
	MinGPUs, MaxGPUs int
	// AboveIdeal is the number of bursts that touched more GPUs than Ideal.
	AboveIdeal int
	// MeanNodes is the mean number of nodes a burst's pods were bound to.
	MeanNodes float64
	// Refused and OverCommitted are summed over the bursts (pods, devices).
	Refused, OverCommitted int
	// MedianSeconds is the median time from the first create to the last binding, seconds.
	MedianSeconds float64
}

// Summarize reduces a variant's bursts.
func Summarize(v Variant) Summary {
	s := Summary{Bursts: len(v.Bursts)}
	if s.Bursts == 0 {
		return s
	}
	secs := make([]float64, 0, len(v.Bursts))
	s.MinGPUs = v.Bursts[0].GPUs
	for _, b := range v.Bursts {
		s.Ideal = b.Ideal
		s.MeanGPUs += float64(b.GPUs)
		s.MeanNodes += float64(b.Nodes)
		s.MinGPUs = min(s.MinGPUs, b.GPUs)
		s.MaxGPUs = max(s.MaxGPUs, b.GPUs)
		if b.GPUs > b.Ideal {
			s.AboveIdeal++
		}
		s.Refused += b.Refused
		s.OverCommitted += b.OverCommitted
		secs = append(secs, b.Seconds)
	}
	s.MeanGPUs /= float64(s.Bursts)
	s.MeanNodes /= float64(s.Bursts)
	sort.Float64s(secs)
	if n := len(secs); n%2 == 1 {
		s.MedianSeconds = secs[n/2]
	} else {
		s.MedianSeconds = (secs[n/2-1] + secs[n/2]) / 2
	}
	return s
}

// Markdown is the report section of a run: one row per variant, in the run's order.
func Markdown(res *Result) string {
	var b strings.Builder
	c := res.Config
	b.WriteString("## DRA packing under concurrency (GPUs touched by a burst)\n\n")
	fmt.Fprintf(&b, "hack/bench/drapack, %s: bursts of identical pods created at once, each a claim of %d MiB on one GPU "+
		"(the webhook's shape for `nvidia.com/gpumem: %d`), against the real kube-scheduler and kube-controller-manager "+
		"(a private control plane, hack/dra-repro/controlplane.sh), on simulated nodes running hami-go's DRA driver "+
		"(fake `%s`, split count %d; claims prepared %s after binding, --republish-delay %s). %d bursts per row. "+
		"Ideal: the fewest GPUs the burst fits on. Above ideal: bursts that touched more.\n\n",
		res.Started.Format("2006-01-02"), c.GPUMemMiB, c.GPUMemMiB, c.Profile, c.SplitCount, c.PrepareLag, c.RepublishDelay, c.Bursts)
	b.WriteString("| nodes | pods | device order | scheduler profile | ideal GPUs | GPUs touched, mean (min–max) | bursts above ideal | nodes touched, mean | pods refused | devices over-committed | time to bind, median |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, v := range res.Variants {
		s := Summarize(v)
		fmt.Fprintf(&b, "| %d | %d | %s | %s | %d | %.2f (%d–%d) | %d of %d | %.2f | %d | %d | %.2f s |\n",
			v.Nodes, v.Pods, v.Order, v.Scheduler, s.Ideal, s.MeanGPUs, s.MinGPUs, s.MaxGPUs, s.AboveIdeal, s.Bursts,
			s.MeanNodes, s.Refused, s.OverCommitted, s.MedianSeconds)
	}
	return b.String()
}

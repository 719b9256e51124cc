package dra

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/metrics"
)

// Collector exports the driver's per-GPU and per-slice metrics under the device plugin's names
// (metrics.GPUMetrics); a slice is one prepared claim's share of one GPU, labelled by namespace
// and claim (metrics.ClaimSliceLabels). It reads the prepared claims at scrape time, so an
// unprepared claim's series disappear at once.
type Collector struct {
	d   *Driver
	m   *metrics.GPUMetrics
	enf *metrics.EnforcementMetrics
}

// NewCollector returns the driver's collector.
func NewCollector(d *Driver) *Collector {
	return &Collector{d: d, m: metrics.NewGPUMetrics(metrics.ClaimSliceLabels), enf: metrics.NewEnforcementMetrics()}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.m.Describe(ch)
	c.enf.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	gpus := make([]metrics.GPUSample, len(c.d.gpus))
	per := map[string]*metrics.GPUSample{}
	// The total is the memory the GPU offers, as the device plugin exports it and the
	// ResourceSlice publishes it (the reserve taken off, then the scaling): what claims book.
	offer := SliceConfig{MemoryScaling: c.d.cfg.MemoryScaling, ReservedMemory: c.d.cfg.ReservedMemory}
	for i, gi := range c.d.gpus {
		g := gi.GPU
		gpus[i] = metrics.GPUSample{UUID: g.UUID, Index: g.Index, Model: g.Model, TotalMiB: BookableMiB(g, offer), Healthy: c.d.health.Healthy(g.UUID)}
		per[g.UUID] = &gpus[i]
		procs, err := c.d.backend.Processes(g.UUID)
		if err != nil {
			klog.V(4).InfoS("No process list for metrics", "uuid", g.UUID, "err", err)
			continue
		}
		gpus[i].UsedKnown = true
		for _, p := range procs {
			gpus[i].UsedMiB += p.UsedMiB
		}
	}
	var slices []metrics.SliceSample
	for _, p := range c.d.Prepared() {
		for _, g := range p.Grants {
			a, ok := per[g.UUID]
			if !ok {
				continue
			}
			a.AllocatedMiB += g.MemoryMiB
			a.CoresPercent += g.CoresPercent
			a.Sharers++
			slices = append(slices, metrics.SliceSample{UUID: a.UUID, Index: a.Index, Model: a.Model,
				Owner: []string{p.Namespace, p.Name}, LimitMiB: g.MemoryMiB, CoresPercent: g.CoresPercent})
		}
	}
	c.m.Emit(ch, c.d.cfg.NodeName, gpus, slices)
	c.enf.Emit(ch, c.d.cfg.NodeName, c.d.Enforcement())
}

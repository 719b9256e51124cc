package dra

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hami-go/hami-go/pkg/metrics"
)

// Collector exports the driver's per-GPU and per-slice metrics under the device plugin's names
// (metrics.GPUMetrics); a slice is one prepared claim's share of one GPU, labelled by namespace
// and claim (metrics.ClaimSliceLabels). It reads the prepared claims at scrape time, so an
// unprepared claim's series disappear at once. A slice's memory use is the device plugin's
// (metrics.AttributeUse): the GPU's processes NVML lists, mapped by host PID to their container
// (Options.PIDResolver) and from the container to the claim its CDI devices named (claimOf);
// the claim's series sums the processes of every container sharing it. How much more the node's
// pods hold than it offers: hami_go_node_resource_overcommitted (PublishedResources).
type Collector struct {
	d    *Driver
	m    *metrics.GPUMetrics
	enf  *metrics.EnforcementMetrics
	over *metrics.OvercommitMetrics
}

// NewCollector returns the driver's collector.
func NewCollector(d *Driver) *Collector {
	return &Collector{d: d, m: metrics.NewGPUMetrics(metrics.ClaimSliceLabels), enf: metrics.NewEnforcementMetrics(), over: metrics.NewOvercommitMetrics()}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.m.Describe(ch)
	c.enf.Describe(ch)
	c.over.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	gpus := make([]metrics.GPUSample, len(c.d.gpus))
	used := map[claimOnGPU]int64{}
	per := map[string]*metrics.GPUSample{}
	// The total is the memory the GPU offers, as the device plugin exports it and the
	// ResourceSlice publishes it (the reserve taken off, then the scaling): what claims book.
	offer := SliceConfig{MemoryScaling: c.d.cfg.MemoryScaling, ReservedMemory: c.d.cfg.ReservedMemory}
	for i, gi := range c.d.gpus {
		g := gi.GPU
		gpus[i] = metrics.GPUSample{UUID: g.UUID, Index: g.Index, Model: g.Model, TotalMiB: BookableMiB(g, offer), Healthy: c.d.health.Healthy(g.UUID)}
		per[g.UUID] = &gpus[i]
		metrics.AttributeUse(c.d.backend, &gpus[i], c.d.opts.PIDResolver, func(id string) (claimOnGPU, bool) {
			return c.d.claimOf(id, g.UUID)
		}, used)
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
				Owner: []string{p.Namespace, p.Name}, LimitMiB: g.MemoryMiB, CoresPercent: g.CoresPercent,
				UsedMiB: used[claimOnGPU{p.UID, g.UUID}], UsedKnown: c.d.opts.PIDResolver != nil && a.UsedKnown})
		}
	}
	c.m.Emit(ch, c.d.cfg.NodeName, gpus, slices)
	c.enf.Emit(ch, c.d.cfg.NodeName, c.d.Enforcement())
	c.over.Emit(ch, c.d.cfg.NodeName, c.d.Overcommitted())
}

// claimOnGPU names one claim's slice of one GPU.
type claimOnGPU struct {
	claim types.UID
	uuid  string
}

// claimOf is the claim through which container id (a runtime ID) holds GPU uuid: of the claims
// the NRI plugin saw among its CDI devices (Granted), the one granting that GPU; where two
// claims of one container grant the same GPU, the process's memory cannot be split between
// them and goes to the claim of the smaller UID (counted once). ok is false for a container
// without such a claim.
func (d *Driver) claimOf(id, uuid string) (claimOnGPU, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var best types.UID
	for uid := range d.containers[id] {
		p, ok := d.prepared[uid]
		if !ok || best != "" && uid >= best {
			continue
		}
		for _, g := range p.Grants {
			if g.UUID == uuid {
				best = uid
				break
			}
		}
	}
	return claimOnGPU{best, uuid}, best != ""
}

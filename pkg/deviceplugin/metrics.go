package deviceplugin

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/metrics"
)

// PIDResolver maps a host process ID to the runtime container ID it runs in (metrics.PIDResolver,
// shared with the DRA driver).
type PIDResolver = metrics.PIDResolver

// Collector exports the plugin's per-GPU and per-slice metrics (prefix hami_go_, labels from
// pkg/metrics, series shared with the DRA driver through metrics.GPUMetrics) and the latency of
// the kubelet's calls (hami_go_device_plugin_request_duration_seconds), and how much more the
// node's pods hold than it offers (hami_go_node_resource_overcommitted). It reads state at
// scrape time, so series of ended or deleted pods disappear with the pods.
type Collector struct {
	p       *Plugin
	resolve PIDResolver
	m       *metrics.GPUMetrics
	enf     *metrics.EnforcementMetrics
	over    *metrics.OvercommitMetrics
}

// NewCollector returns the collector; resolve may be nil (no per-slice memory use).
func NewCollector(p *Plugin, resolve PIDResolver) *Collector {
	return &Collector{p: p, resolve: resolve, m: metrics.NewGPUMetrics(metrics.SliceLabels), enf: metrics.NewEnforcementMetrics(), over: metrics.NewOvercommitMetrics()}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.m.Describe(ch)
	c.enf.Describe(ch)
	c.over.Describe(ch)
	c.p.rpcDuration.Describe(ch)
}

// sliceKey names one container's slice of one GPU: by pod UID, not by namespace/name (a pod
// re-created under the same name is another pod, case C34).
type sliceKey struct {
	pod             types.UID
	container, uuid string
}

// Collect implements prometheus.Collector. Per-GPU allocated memory, cores and sharers are the
// sum over pods of allocator.ChargeOf of each pod's claimed containers: the charge the extender
// schedules by (init containers one after another, sidecars beside them; case C40), so an init
// and an app container on one GPU count once, as their larger figure, not twice.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.p.rpcDuration.Collect(ch)
	c.enf.Emit(ch, c.p.cfg.NodeName, c.p.Enforcement())
	c.over.Emit(ch, c.p.cfg.NodeName, c.p.Overcommitted())
	slices, owners := c.p.ledger.Snapshot()
	charged := c.p.ledger.Charged()
	per := map[string]*metrics.GPUSample{}
	used := map[sliceKey]int64{}
	samples := make([]metrics.GPUSample, 0, len(c.p.gpus))
	for _, g := range c.p.gpus {
		if _, dup := per[g.UUID]; dup {
			// A backend that lists one UUID twice would make two series of one label set (C35).
			klog.InfoS("GPU listed twice by the backend; exporting it once", "uuid", g.UUID, "index", g.Index)
			continue
		}
		a := charged[g.UUID]
		samples = append(samples, metrics.GPUSample{UUID: g.UUID, Index: g.Index, Model: g.Model, TotalMiB: g.MemoryMiB,
			AllocatedMiB: a.MemoryMiB, CoresPercent: a.CoresPercent, Sharers: a.Sharers, Healthy: c.p.health.Healthy(g.UUID)})
		smp := &samples[len(samples)-1] // stays valid: samples never outgrows its capacity
		per[g.UUID] = smp
		metrics.AttributeUse(c.p.backend, smp, c.resolve, func(id string) (sliceKey, bool) {
			o, ok := owners[id]
			return sliceKey{o.Pod.UID, o.Container, g.UUID}, ok
		}, used)
	}
	var ss []metrics.SliceSample
	for _, s := range slices {
		a, ok := per[s.Grant.UUID]
		if !ok {
			continue
		}
		ss = append(ss, metrics.SliceSample{UUID: a.UUID, Index: a.Index, Model: a.Model,
			Owner:    []string{s.Pod.Namespace, s.Pod.Name, s.Container, string(s.Pod.UID)},
			LimitMiB: s.Grant.MemoryMiB, CoresPercent: s.Grant.CoresPercent,
			UsedMiB: used[sliceKey{s.Pod.UID, s.Container, a.UUID}], UsedKnown: c.resolve != nil && a.UsedKnown})
	}
	c.m.Emit(ch, c.p.cfg.NodeName, samples, ss)
}

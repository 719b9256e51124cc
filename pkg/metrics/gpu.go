package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// LabelClaim names a DRA slice's ResourceClaim (DRA mode's per-slice series carry namespace
// and claim instead of pod and container).
const LabelClaim = "claim"

// ClaimSliceLabels are the labels of DRA mode's per-slice series, in this order.
var ClaimSliceLabels = []string{LabelNode, LabelUUID, LabelIndex, LabelModel, LabelNamespace, LabelClaim}

// GPUSample is one GPU's state at scrape time.
type GPUSample struct {
	UUID  string
	Index int
	Model string
	// TotalMiB, AllocatedMiB and UsedMiB are memory, MiB; UsedKnown is false when the backend
	// could not list the GPU's processes (no used series then).
	TotalMiB, AllocatedMiB, UsedMiB int64
	UsedKnown                       bool
	// CoresPercent is the compute handed out, percent; Sharers the slices holding the GPU.
	CoresPercent, Sharers int
	Healthy               bool
}

// SliceSample is one slice (a container's or a claim's share of one GPU) at scrape time.
type SliceSample struct {
	UUID  string
	Index int
	Model string
	// Owner are the owner label values: namespace, pod, container (SliceLabels) or namespace,
	// claim (ClaimSliceLabels), matching the GPUCollector's slice labels.
	Owner []string
	// LimitMiB and UsedMiB are memory, MiB; UsedKnown false leaves the used series out.
	LimitMiB, UsedMiB int64
	UsedKnown         bool
	CoresPercent      int
}

// GPUMetrics are the per-GPU and per-slice series both node components export (full names
// spelled out so the chart's dashboard test finds them).
type GPUMetrics struct {
	gpuMemTotal, gpuMemAlloc, gpuMemUsed, gpuCoresAlloc, gpuSharers, gpuHealthy *prometheus.Desc
	sliceMemLimit, sliceMemUsed, sliceCoresLimit                                *prometheus.Desc
}

// NewGPUMetrics returns the descriptions; sliceLabels is SliceLabels (device plugin) or
// ClaimSliceLabels (DRA driver).
func NewGPUMetrics(sliceLabels []string) *GPUMetrics {
	g := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, GPULabels, nil) }
	s := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, sliceLabels, nil) }
	return &GPUMetrics{
		gpuMemTotal:     g(Namespace+"_gpu_memory_total_bytes", "Total memory of the GPU, bytes."),
		gpuMemAlloc:     g(Namespace+"_gpu_memory_allocated_bytes", "GPU memory booked on the GPU by the pods placed there, bytes, charged as scheduling charges it (init containers one at a time, case C40)."),
		gpuMemUsed:      g(Namespace+"_gpu_memory_used_bytes", "GPU memory used by processes, bytes (from the backend)."),
		gpuCoresAlloc:   g(Namespace+"_gpu_cores_allocated_percent", "Compute booked on the GPU by the pods placed there, percent of the GPU, charged as scheduling charges it."),
		gpuSharers:      g(Namespace+"_gpu_sharers", "Slices of the GPU held by containers that can run at one time (scheduling's count)."),
		gpuHealthy:      g(Namespace+"_gpu_healthy", "1 when the GPU is healthy, 0 after a fatal XID until it recovers."),
		sliceMemLimit:   s(Namespace+"_slice_memory_limit_bytes", "Memory limit of the container on the GPU, bytes."),
		sliceMemUsed:    s(Namespace+"_slice_memory_used_bytes", "Memory the container's processes use on the GPU, bytes."),
		sliceCoresLimit: s(Namespace+"_slice_cores_limit_percent", "Compute limit of the container on the GPU, percent (0 = none)."),
	}
}

// Describe sends every description.
func (m *GPUMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.gpuMemTotal, m.gpuMemAlloc, m.gpuMemUsed, m.gpuCoresAlloc, m.gpuSharers, m.gpuHealthy, m.sliceMemLimit, m.sliceMemUsed, m.sliceCoresLimit} {
		ch <- d
	}
}

// Emit sends the series of the given samples on node. A slice whose owner values do not match
// the slice labels panics in prometheus.MustNewConstMetric: callers build them from one place.
func (m *GPUMetrics) Emit(ch chan<- prometheus.Metric, node string, gpus []GPUSample, slices []SliceSample) {
	for _, g := range gpus {
		lv := []string{node, g.UUID, strconv.Itoa(g.Index), g.Model}
		ch <- prometheus.MustNewConstMetric(m.gpuMemTotal, prometheus.GaugeValue, mib(g.TotalMiB), lv...)
		ch <- prometheus.MustNewConstMetric(m.gpuMemAlloc, prometheus.GaugeValue, mib(g.AllocatedMiB), lv...)
		if g.UsedKnown {
			ch <- prometheus.MustNewConstMetric(m.gpuMemUsed, prometheus.GaugeValue, mib(g.UsedMiB), lv...)
		}
		ch <- prometheus.MustNewConstMetric(m.gpuCoresAlloc, prometheus.GaugeValue, float64(g.CoresPercent), lv...)
		ch <- prometheus.MustNewConstMetric(m.gpuSharers, prometheus.GaugeValue, float64(g.Sharers), lv...)
		h := 0.0
		if g.Healthy {
			h = 1
		}
		ch <- prometheus.MustNewConstMetric(m.gpuHealthy, prometheus.GaugeValue, h, lv...)
	}
	for _, s := range slices {
		lv := append([]string{node, s.UUID, strconv.Itoa(s.Index), s.Model}, s.Owner...)
		ch <- prometheus.MustNewConstMetric(m.sliceMemLimit, prometheus.GaugeValue, mib(s.LimitMiB), lv...)
		ch <- prometheus.MustNewConstMetric(m.sliceCoresLimit, prometheus.GaugeValue, float64(s.CoresPercent), lv...)
		if s.UsedKnown {
			ch <- prometheus.MustNewConstMetric(m.sliceMemUsed, prometheus.GaugeValue, mib(s.UsedMiB), lv...)
		}
	}
}

// mib converts MiB to bytes (Prometheus base unit).
func mib(v int64) float64 { return float64(v) * (1 << 20) }

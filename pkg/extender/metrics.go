package extender

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	hmetrics "github.com/hami-go/hami-go/pkg/metrics"
)

// Metrics are the extender's Prometheus metrics (prefix hami_go_extender_; labels of pkg/metrics).
//
// Per GPU (labels node, uuid, index, model), computed from the cache at scrape time:
// hami_go_extender_gpu_allocated_memory_mib (MiB booked, reservations included),
// hami_go_extender_gpu_allocated_cores_percent, hami_go_extender_gpu_sharers.
// Per pod allocation (labels node, uuid, index, model, namespace, pod, container, pod_uid), bound
// pods only (keyed by UID, so an old and a new pod of one name never share a series, case C35):
// hami_go_extender_pod_allocated_memory_mib, hami_go_extender_pod_allocated_cores_percent.
// Per verb: hami_go_extender_request_duration_seconds{verb} (histogram) and
// hami_go_extender_requests_total{verb,outcome} (outcome: ok, refused, error, bad_request).
type Metrics struct {
	duration *prometheus.HistogramVec
	outcomes *prometheus.CounterVec
}

func newMetrics(c *Cache, reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: hmetrics.Namespace, Subsystem: "extender", Name: "request_duration_seconds",
			Help:    "Time to answer one kube-scheduler extender call, seconds, by verb.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"verb"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: hmetrics.Namespace, Subsystem: "extender", Name: "requests_total",
			Help: "kube-scheduler extender calls by verb and outcome (ok, refused, error, bad_request).",
		}, []string{"verb", "outcome"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, col := range []prometheus.Collector{m.duration, m.outcomes, &usageCollector{c: c}} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}

var (
	descGPUMem = prometheus.NewDesc(hmetrics.Namespace+"_extender_gpu_allocated_memory_mib",
		"GPU memory booked on the GPU (bound pods and reservations), MiB.", hmetrics.GPULabels, nil)
	descGPUCores = prometheus.NewDesc(hmetrics.Namespace+"_extender_gpu_allocated_cores_percent",
		"GPU compute booked on the GPU, percent.", hmetrics.GPULabels, nil)
	descGPUSharers = prometheus.NewDesc(hmetrics.Namespace+"_extender_gpu_sharers",
		"Slices (containers) booked on the GPU.", hmetrics.GPULabels, nil)
	descPodMem = prometheus.NewDesc(hmetrics.Namespace+"_extender_pod_allocated_memory_mib",
		"GPU memory allocated to the container on the GPU, MiB.", hmetrics.SliceLabels, nil)
	descPodCores = prometheus.NewDesc(hmetrics.Namespace+"_extender_pod_allocated_cores_percent",
		"GPU compute allocated to the container on the GPU, percent.", hmetrics.SliceLabels, nil)
)

// usageCollector reads the cache at scrape time, so events cost nothing and series of pods that
// are gone disappear.
type usageCollector struct{ c *Cache }

func (u *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGPUMem, descGPUCores, descGPUSharers, descPodMem, descPodCores} {
		ch <- d
	}
}

type gpuLabels struct{ index, model string }

func (u *usageCollector) Collect(ch chan<- prometheus.Metric) {
	labels := map[string]map[string]gpuLabels{}
	for _, n := range u.c.NodeNames() {
		per := map[string]gpuLabels{}
		for _, g := range u.c.NodeGPUUsage(n) {
			idx := strconv.Itoa(g.GPU.Index)
			per[g.GPU.UUID] = gpuLabels{idx, g.GPU.Model}
			lv := []string{n, g.GPU.UUID, idx, g.GPU.Model}
			ch <- prometheus.MustNewConstMetric(descGPUMem, prometheus.GaugeValue, float64(g.Usage.MemoryMiB), lv...)
			ch <- prometheus.MustNewConstMetric(descGPUCores, prometheus.GaugeValue, float64(g.Usage.CoresPercent), lv...)
			ch <- prometheus.MustNewConstMetric(descGPUSharers, prometheus.GaugeValue, float64(g.Usage.Sharers), lv...)
		}
		labels[n] = per
	}
	u.c.mu.Lock()
	defer u.c.mu.Unlock()
	for _, b := range u.c.pods {
		if b.stage == stageReserved || b.stage == stageNominated || b.alloc == nil {
			continue
		}
		for _, ct := range b.alloc.Containers {
			for _, d := range ct.Devices {
				gl := labels[b.node][d.UUID]
				lv := []string{b.node, d.UUID, gl.index, gl.model, b.key.Namespace, b.key.Name, ct.Name, string(b.key.UID)}
				ch <- prometheus.MustNewConstMetric(descPodMem, prometheus.GaugeValue, float64(d.MemoryMiB), lv...)
				ch <- prometheus.MustNewConstMetric(descPodCores, prometheus.GaugeValue, float64(d.CoresPercent), lv...)
			}
		}
	}
}

// observe records one call's duration and outcome.
func (m *Metrics) observe(verb, outcome string, seconds float64) {
	m.duration.WithLabelValues(verb).Observe(seconds)
	m.outcomes.WithLabelValues(verb, outcome).Inc()
}

package deviceplugin

import (
	"os"
	"regexp"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/metrics"
)

// PIDResolver maps a host process ID to the runtime container ID it runs in; ok is false when
// unknown. The default reads /proc/<pid>/cgroup.
type PIDResolver func(pid uint32) (containerID string, ok bool)

var containerIDPattern = regexp.MustCompile(`[0-9a-f]{64}`)

// ProcCgroupResolver reads the container ID (64 hex digits) from /proc/<pid>/cgroup under root
// ("/" on a node, "/host" when the host's /proc is mounted elsewhere).
func ProcCgroupResolver(procRoot string) PIDResolver {
	return func(pid uint32) (string, bool) {
		b, err := os.ReadFile(procRoot + "/" + strconv.FormatUint(uint64(pid), 10) + "/cgroup")
		if err != nil {
			return "", false
		}
		all := containerIDPattern.FindAllString(string(b), -1)
		if len(all) == 0 {
			return "", false
		}
		return all[len(all)-1], true
	}
}

// Collector exports the plugin's per-GPU and per-slice metrics (prefix hami_go_, labels from
// pkg/metrics) and the latency of the kubelet's calls (hami_go_device_plugin_request_duration_seconds). It reads state at scrape time, so series of ended or deleted pods disappear
// with the pods.
type Collector struct {
	p       *Plugin
	resolve PIDResolver

	gpuMemTotal, gpuMemAlloc, gpuMemUsed, gpuCoresAlloc, gpuSharers, gpuHealthy *prometheus.Desc
	sliceMemLimit, sliceMemUsed, sliceCoresLimit                                *prometheus.Desc
}

// NewCollector returns the collector; resolve may be nil (no per-slice memory use).
func NewCollector(p *Plugin, resolve PIDResolver) *Collector {
	// Full names spelled out (Namespace + "_…"), so the chart's dashboard test finds them.
	g := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, metrics.GPULabels, nil)
	}
	s := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, metrics.SliceLabels, nil)
	}
	return &Collector{
		p: p, resolve: resolve,
		gpuMemTotal:     g(metrics.Namespace+"_gpu_memory_total_bytes", "Total memory of the GPU, bytes."),
		gpuMemAlloc:     g(metrics.Namespace+"_gpu_memory_allocated_bytes", "GPU memory handed to containers by Allocate, bytes, charged as the extender charges it (init containers one at a time)."),
		gpuMemUsed:      g(metrics.Namespace+"_gpu_memory_used_bytes", "GPU memory used by processes, bytes (from the backend)."),
		gpuCoresAlloc:   g(metrics.Namespace+"_gpu_cores_allocated_percent", "Compute handed to containers by Allocate, percent of the GPU, charged as the extender charges it."),
		gpuSharers:      g(metrics.Namespace+"_gpu_sharers", "Slices of the GPU held by containers that can run at one time (the extender's count)."),
		gpuHealthy:      g(metrics.Namespace+"_gpu_healthy", "1 when the GPU is healthy, 0 after a fatal XID until it recovers."),
		sliceMemLimit:   s(metrics.Namespace+"_slice_memory_limit_bytes", "Memory limit of the container on the GPU, bytes."),
		sliceMemUsed:    s(metrics.Namespace+"_slice_memory_used_bytes", "Memory the container's processes use on the GPU, bytes."),
		sliceCoresLimit: s(metrics.Namespace+"_slice_cores_limit_percent", "Compute limit of the container on the GPU, percent (0 = none)."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.gpuMemTotal, c.gpuMemAlloc, c.gpuMemUsed, c.gpuCoresAlloc, c.gpuSharers, c.gpuHealthy, c.sliceMemLimit, c.sliceMemUsed, c.sliceCoresLimit} {
		ch <- d
	}
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
	node := c.p.cfg.NodeName
	slices, owners := c.p.ledger.Snapshot()
	charged := c.p.ledger.Charged()
	used := map[sliceKey]int64{}
	gpuUsed := map[string]int64{}
	gpuUsedOK := map[string]bool{}
	for _, g := range c.p.gpus {
		procs, err := c.p.backend.Processes(g.UUID)
		if err != nil {
			klog.V(4).InfoS("No process list for metrics", "uuid", g.UUID, "err", err)
			continue
		}
		gpuUsedOK[g.UUID] = true
		for _, pr := range procs {
			gpuUsed[g.UUID] += pr.UsedMiB
			if c.resolve == nil {
				continue
			}
			if id, ok := c.resolve(pr.PID); ok {
				if o, ok := owners[id]; ok {
					used[sliceKey{o.Pod.UID, o.Container, g.UUID}] += pr.UsedMiB
				}
			}
		}
	}
	emitted := make(map[string]bool, len(c.p.gpus))
	for _, g := range c.p.gpus {
		if emitted[g.UUID] {
			// A backend that lists one UUID twice would make two series of one label set (C35).
			klog.InfoS("GPU listed twice by the backend; exporting it once", "uuid", g.UUID, "index", g.Index)
			continue
		}
		emitted[g.UUID] = true
		lv := []string{node, g.UUID, strconv.Itoa(g.Index), g.Model}
		a := charged[g.UUID]
		ch <- prometheus.MustNewConstMetric(c.gpuMemTotal, prometheus.GaugeValue, mib(g.MemoryMiB), lv...)
		ch <- prometheus.MustNewConstMetric(c.gpuMemAlloc, prometheus.GaugeValue, mib(a.MemoryMiB), lv...)
		if gpuUsedOK[g.UUID] {
			ch <- prometheus.MustNewConstMetric(c.gpuMemUsed, prometheus.GaugeValue, mib(gpuUsed[g.UUID]), lv...)
		}
		ch <- prometheus.MustNewConstMetric(c.gpuCoresAlloc, prometheus.GaugeValue, float64(a.CoresPercent), lv...)
		ch <- prometheus.MustNewConstMetric(c.gpuSharers, prometheus.GaugeValue, float64(a.Sharers), lv...)
		h := 0.0
		if c.p.health.Healthy(g.UUID) {
			h = 1
		}
		ch <- prometheus.MustNewConstMetric(c.gpuHealthy, prometheus.GaugeValue, h, lv...)
	}
	for _, s := range slices {
		g, ok := c.p.byUUID[s.Grant.UUID]
		if !ok {
			continue
		}
		lv := []string{node, g.UUID, strconv.Itoa(g.Index), g.Model, s.Pod.Namespace, s.Pod.Name, s.Container, string(s.Pod.UID)}
		ch <- prometheus.MustNewConstMetric(c.sliceMemLimit, prometheus.GaugeValue, mib(s.Grant.MemoryMiB), lv...)
		ch <- prometheus.MustNewConstMetric(c.sliceCoresLimit, prometheus.GaugeValue, float64(s.Grant.CoresPercent), lv...)
		if c.resolve != nil && gpuUsedOK[g.UUID] {
			ch <- prometheus.MustNewConstMetric(c.sliceMemUsed, prometheus.GaugeValue, mib(used[sliceKey{s.Pod.UID, s.Container, g.UUID}]), lv...)
		}
	}
}

// mib converts MiB to bytes (Prometheus base unit).
func mib(v int64) float64 { return float64(v) * (1 << 20) }

var _ = device.SliceID

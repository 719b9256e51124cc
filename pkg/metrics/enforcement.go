package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hami-go/hami-go/pkg/device"
)

// EnforcementLabels are the labels of the node enforcement series.
var EnforcementLabels = []string{"node", "mode"}

// EnforcementMetrics describes hami_go_node_enforcement_ready{node, mode} (1 when the node's
// slice enforcement is present, device.Enforcement.Ready) and
// hami_go_node_enforcement_fail_open{node, mode} (1 when a container without its plan could
// still reach GPUs), exported by both node agents.
type EnforcementMetrics struct {
	ready, failOpen *prometheus.Desc
}

// NewEnforcementMetrics returns the descriptions.
func NewEnforcementMetrics() *EnforcementMetrics {
	return &EnforcementMetrics{
		ready: prometheus.NewDesc(Namespace+"_node_enforcement_ready",
			"1 when the node's GPU slice enforcement (mode: hami-core, mps, none) is present, 0 when missing: the node then takes no new GPU pods.", EnforcementLabels, nil),
		failOpen: prometheus.NewDesc(Namespace+"_node_enforcement_fail_open",
			"1 when a container that did not get its plan could still reach GPUs on the node (the NVIDIA runtime honours an image's NVIDIA_VISIBLE_DEVICES).", EnforcementLabels, nil),
	}
}

// Describe sends both descriptions.
func (m *EnforcementMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.ready
	ch <- m.failOpen
}

// Emit sends the two series of e on node.
func (m *EnforcementMetrics) Emit(ch chan<- prometheus.Metric, node string, e device.Enforcement) {
	ch <- prometheus.MustNewConstMetric(m.ready, prometheus.GaugeValue, boolValue(e.Ready), node, e.Mode)
	ch <- prometheus.MustNewConstMetric(m.failOpen, prometheus.GaugeValue, boolValue(e.FailOpen), node, e.Mode)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

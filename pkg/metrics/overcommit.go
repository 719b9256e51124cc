package metrics

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

// OvercommitLabels are the labels of hami_go_node_resource_overcommitted.
var OvercommitLabels = []string{"node", "resource"}

// OvercommitMetrics describes hami_go_node_resource_overcommitted{node, resource}: how much more
// of an extended resource the node's running pods hold than its GPUs offer now (held − offered
// where positive, 0 otherwise), in the resource's own unit (MiB for GPU memory, a count of
// slices for the count name, percent for the percentage and cores names). Above 0 the node
// agent publishes what the pods hold instead (nodeagent.AtLeastHeld), so that the kubelet
// admits them again at its restart.
type OvercommitMetrics struct {
	over *prometheus.Desc
}

// NewOvercommitMetrics returns the description.
func NewOvercommitMetrics() *OvercommitMetrics {
	return &OvercommitMetrics{over: prometheus.NewDesc(Namespace+"_node_resource_overcommitted",
		"How much more of the extended resource the node's running pods hold than its GPUs offer (MIG on, more memory reserved, a GPU gone or unhealthy), in the resource's unit (MiB, slices or percent); 0 when they offer enough.", OvercommitLabels, nil)}
}

// Describe sends the description.
func (m *OvercommitMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- m.over }

// Emit sends one series per resource of over (name → figure) on node, sorted by name.
func (m *OvercommitMetrics) Emit(ch chan<- prometheus.Metric, node string, over map[corev1.ResourceName]int64) {
	for _, name := range slices.Sorted(maps.Keys(over)) {
		ch <- prometheus.MustNewConstMetric(m.over, prometheus.GaugeValue, float64(over[name]), node, string(name))
	}
}

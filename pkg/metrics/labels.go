// Package metrics holds what the device plugin's and the extender's Prometheus metrics share:
// the metric name prefix and one label set, so a dashboard joins them without relabelling.
package metrics

// Namespace prefixes every hami-go metric name ("hami_go_…").
const Namespace = "hami_go"

// Label names used by every hami-go metric that has them.
const (
	// LabelNode is the Kubernetes node name.
	LabelNode = "node"
	// LabelUUID is the physical GPU's UUID.
	LabelUUID = "uuid"
	// LabelIndex is the GPU's NVML index on its node.
	LabelIndex = "index"
	// LabelModel is the GPU model (NVML device name).
	LabelModel = "model"
	// LabelNamespace, LabelPod and LabelContainer identify a slice's owner.
	LabelNamespace = "namespace"
	LabelPod       = "pod"
	LabelContainer = "container"
	// LabelPodUID is the pod's UID: a pod re-created under the same namespace/name is another
	// pod, and while both are known (the old one not yet released) their series must differ
	// (cases C34, C35).
	LabelPodUID = "pod_uid"
)

// GPULabels are the labels of every per-GPU series, in this order.
var GPULabels = []string{LabelNode, LabelUUID, LabelIndex, LabelModel}

// SliceLabels are the labels of every per-slice (per container, per GPU) series, in this order.
var SliceLabels = []string{LabelNode, LabelUUID, LabelIndex, LabelModel, LabelNamespace, LabelPod, LabelContainer, LabelPodUID}

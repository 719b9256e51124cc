package device

// GPU Feature Discovery label names (NVIDIA gpu-feature-discovery, k8s-device-plugin's gfd), which
// the device plugin writes on its node so that existing nodeSelectors, node affinities and
// autoscaler node-group templates work unchanged.
const (
	// LabelGPUProduct is the first GPU's model, spaces as '-' ("NVIDIA-H100-80GB-HBM3").
	LabelGPUProduct = "nvidia.com/gpu.product"
	// LabelGPUCount is the number of GPUs.
	LabelGPUCount = "nvidia.com/gpu.count"
	// LabelGPUMemory is the smallest GPU's memory, MiB (the card's own, before --reserved-memory
	// and --memory-scaling): every GPU of the node has at least this much, also on a node with
	// two GPU models, where GFD's first-GPU figure over-promises (pkg/deviceplugin
	// MinGPUMemoryMiB).
	LabelGPUMemory = "nvidia.com/gpu.memory"
	// LabelGPUReplicas is the split count.
	LabelGPUReplicas = "nvidia.com/gpu.replicas"
	// LabelGPUSharingStrategy is "mps", "time-slicing" or "none".
	LabelGPUSharingStrategy = "nvidia.com/gpu.sharing-strategy"
)

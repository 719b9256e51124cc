package device

// EnvPrefix starts the name of every variable hami-go itself sets in a GPU container; a
// container may not set such a name itself (ProtectedEnvPrefixes, case C37).
const EnvPrefix = "HAMI_GO_"

// The variables both node components (the device plugin's Allocate and the DRA driver's CDI
// spec, through pkg/gpuenv) set in every GPU container, besides the device lists and the
// enforcement mode's limits (docs/components.md). The webhook's rewritten `ray start` line
// expands the first two (pkg/ray), so Ray learns the slice's memory and the GPU model.
const (
	// EnvGPUMemoryMiB is the sum of the container's memory limits over its GPUs, MiB, integer.
	EnvGPUMemoryMiB = "HAMI_GO_GPU_MEMORY_MIB"
	// EnvGPUModel is the GPU model as Ray's accelerator type (RayAcceleratorType of the first
	// GPU's NVML name, e.g. "H100"); UnknownModel when the container has no GPU.
	EnvGPUModel = "HAMI_GO_GPU_MODEL"
	// EnvGPUUUIDs lists the container's GPU UUIDs, comma-separated, in PCI bus order: the order
	// of CUDA's ordinals (CUDA_DEVICE_ORDER=PCI_BUS_ID) and of the per-GPU limits
	// CUDA_DEVICE_MEMORY_LIMIT_<i>, CUDA_DEVICE_SM_LIMIT_<i> (cases C19, C22). hami-go sets no
	// CUDA_VISIBLE_DEVICES: the container sees only its own GPUs.
	EnvGPUUUIDs = "HAMI_GO_GPU_UUIDS"
)

// UnknownModel is the GPU model value when no GPU (or no usable name) is known.
const UnknownModel = "unknown"

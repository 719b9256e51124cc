package device

// GPUFacts are a GPU's descriptive facts that only the DRA driver publishes (ResourceSlice
// attributes a CEL selector can match); the device plugin's Inventory does not carry them.
// Empty strings mean unknown.
type GPUFacts struct {
	// ComputeCapability is CUDA's "<major>.<minor>", e.g. "9.0" (nvmlDeviceGetCudaComputeCapability).
	ComputeCapability string
	// Architecture is the NVML architecture name, e.g. "Hopper" (nvmlDeviceGetArchitecture).
	Architecture string
	// DriverVersion is the NVIDIA driver version as NVML reports it, e.g. "550.54.15".
	DriverVersion string
	// CUDADriverVersion is the CUDA version the driver supports, "<major>.<minor>", e.g. "12.4".
	CUDADriverVersion string
}

// FactsSource is implemented by backends that can tell GPUFacts (pkg/nvml's, real and fake).
type FactsSource interface {
	// Facts returns the facts of the GPU with the given UUID; unknown facts stay empty, an
	// unknown GPU is an error.
	Facts(uuid string) (GPUFacts, error)
}

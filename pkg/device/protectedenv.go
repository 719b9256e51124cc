package device

import "strings"

// IsProtectedEnv reports whether a container env name carries a GPU slice's limits, so that only
// hami-go (the device plugin's Allocate, the DRA driver's CDI edits) may set it (case C37):
// CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES (NVIDIA's container runtime exposes the GPUs it
// names), CUDA_DEVICE_MEMORY_LIMIT and CUDA_DEVICE_MEMORY_LIMIT_<i> (HAMi-core's per-GPU memory
// limit), CUDA_DEVICE_SM_LIMIT (HAMi-core's compute limit), every CUDA_MPS_* (NVIDIA MPS client
// env: pinned memory, active thread percentage, pipe directory), every HAMI_GO_* and LD_PRELOAD
// (which loads HAMi-core when /etc/ld.so.preload is not mounted). Names are case-sensitive, as
// Linux env names are.
func IsProtectedEnv(name string) bool {
	switch name {
	case "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_SM_LIMIT", "LD_PRELOAD":
		return true
	}
	for _, p := range []string{"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_MPS_", "HAMI_GO_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

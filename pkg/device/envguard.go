package device

import "strings"

// ProtectedEnvExact returns the environment variables a container must never set itself (case
// C37): the device plugin (or NVIDIA's runtime, or HAMi-core) derives a slice's devices and
// limits from them, and a container's own value can widen its slice. Why a container's own
// value wins: the kubelet sends the device plugin's env first and the container's own after it,
// containerd does not de-duplicate, and bash/dash take the last entry (glibc getenv, Go and
// Python the first), so whoever reads the variable through a shell sees the tenant's value.
//
//   - CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES: which GPUs CUDA and NVIDIA's container
//     runtime expose (NVIDIA_VISIBLE_DEVICES in a non-GPU container exposes the GPUs it names
//     under the envvar device-list strategy of NVIDIA's runtime);
//   - CUDA_DEVICE_ORDER: CUDA's ordinal order, pinned to PCI_BUS_ID in a GPU container so that
//     ordinal i is the GPU whose limits CUDA_DEVICE_MEMORY_LIMIT_<i> and CUDA_DEVICE_SM_LIMIT_<i>
//     carry (FASTEST_FIRST could pair a GPU with another's limits);
//   - CUDA_DEVICE_MEMORY_SHARED_CACHE, CUDA_OVERSUBSCRIBE, GPU_CORE_UTILIZATION_POLICY:
//     HAMi-core's accounting file, over-commit switch and core-limit policy ("disable" turns the
//     limit off);
//   - LD_PRELOAD: loads (or, set empty, displaces) HAMi-core's libvgpu.so.
//
// Which of them a container may still set to a value that only narrows (a device list naming no
// device, an LD_PRELOAD in a GPU container), and that a container without GPUs is left alone but
// for an NVIDIA_VISIBLE_DEVICES naming devices, is the webhook's and the NRI plugin's rule
// (pkg/webhook protectedEnvError, pkg/nri PlanEnv; case C54).
func ProtectedEnvExact() []string {
	return []string{
		"CUDA_VISIBLE_DEVICES",
		"NVIDIA_VISIBLE_DEVICES",
		"CUDA_DEVICE_ORDER",
		"CUDA_DEVICE_MEMORY_SHARED_CACHE",
		"CUDA_OVERSUBSCRIBE",
		"GPU_CORE_UTILIZATION_POLICY",
		"LD_PRELOAD",
	}
}

// ProtectedEnvPrefixes returns the name prefixes of protected variables (case C37):
// CUDA_DEVICE_MEMORY_LIMIT and CUDA_DEVICE_SM_LIMIT (HAMi-core's per-GPU limits
// CUDA_DEVICE_MEMORY_LIMIT_<i> and CUDA_DEVICE_SM_LIMIT_<i>, and the global ones, which apply to
// every GPU without a per-GPU value), CUDA_MPS_ (NVIDIA MPS client limits and pipe directory,
// NVIDIA MPS documentation "Environment Variables") and HAMI_GO_ (what hami-go tells the
// container).
func ProtectedEnvPrefixes() []string {
	return []string{"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT", "CUDA_MPS_", EnvPrefix}
}

// IsProtectedEnv reports whether a container may not set the environment variable name itself
// (ProtectedEnvExact, ProtectedEnvPrefixes). Names are compared exactly (environment variable
// names are case-sensitive on Linux). This is the one rule the webhook, the device plugin and
// the NRI plugin (pkg/nri) share; the chart's matchConditions (charts/hami-go,
// webhook-admission.yaml) render the same lists.
func IsProtectedEnv(name string) bool {
	for _, n := range ProtectedEnvExact() {
		if name == n {
			return true
		}
	}
	for _, p := range ProtectedEnvPrefixes() {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

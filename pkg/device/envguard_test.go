package device

import "testing"

// case C37: the protected-name rule.
func TestIsProtectedEnv(t *testing.T) {
	for name, want := range map[string]bool{
		"CUDA_VISIBLE_DEVICES": true, "NVIDIA_VISIBLE_DEVICES": true, "CUDA_DEVICE_MEMORY_LIMIT": true,
		"CUDA_DEVICE_MEMORY_LIMIT_0": true, "CUDA_DEVICE_MEMORY_LIMIT_17": true, "CUDA_DEVICE_SM_LIMIT": true,
		"CUDA_MPS_PIPE_DIRECTORY": true, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": true, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": true,
		"HAMI_GO_GPU_MEMORY_MIB": true, "HAMI_GO_": true, "LD_PRELOAD": true, "CUDA_DEVICE_MEMORY_SHARED_CACHE": true,
		"CUDA_OVERSUBSCRIBE": true, "GPU_CORE_UTILIZATION_POLICY": true,
		// issue 36: CUDA's ordinal order, and HAMi-core's per-GPU compute limits (case C54).
		"CUDA_DEVICE_ORDER": true, "CUDA_DEVICE_SM_LIMIT_0": true, "CUDA_DEVICE_SM_LIMIT_15": true,
		"CUDA_DEVICE_ORDERX": false, "LIBCUDA_LOG_LEVEL": false, "CUDA_DEVICE_MAX_CONNECTIONS": false,
		"PATH": false, "CUDA_HOME": false, "cuda_visible_devices": false, "LD_LIBRARY_PATH": false, "HAMI_GOX": false,
		"CUDA_MPS": false, "MY_CUDA_VISIBLE_DEVICES": false, "NVIDIA_DRIVER_CAPABILITIES": false, "": false,
	} {
		if got := IsProtectedEnv(name); got != want {
			t.Errorf("IsProtectedEnv(%q) = %v, want %v", name, got, want)
		}
	}
}

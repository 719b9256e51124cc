package device

import "testing"

// case C37: the names only hami-go may set.
func TestIsProtectedEnv(t *testing.T) {
	for name, want := range map[string]bool{
		"CUDA_VISIBLE_DEVICES":              true,
		"NVIDIA_VISIBLE_DEVICES":            true,
		"CUDA_DEVICE_MEMORY_LIMIT":          true,
		"CUDA_DEVICE_MEMORY_LIMIT_0":        true,
		"CUDA_DEVICE_MEMORY_LIMIT_7":        true,
		"CUDA_DEVICE_SM_LIMIT":              true,
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  true,
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": true,
		"CUDA_MPS_PIPE_DIRECTORY":           true,
		"HAMI_GO_GPU_MEMORY_MIB":            true,
		"LD_PRELOAD":                        true,
		"PATH":                              false,
		"CUDA_HOME":                         false,
		"NVIDIA_DRIVER_CAPABILITIES":        false,
		"cuda_visible_devices":              false,
		"LD_LIBRARY_PATH":                   false,
		"HAMI_GOX":                          false,
		"":                                  false,
	} {
		if got := IsProtectedEnv(name); got != want {
			t.Errorf("IsProtectedEnv(%q) = %v, want %v", name, got, want)
		}
	}
}

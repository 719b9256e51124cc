package device

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// case C37: the protected-name rule.
func TestIsProtectedEnv(t *testing.T) {
	for name, want := range map[string]bool{
		"CUDA_VISIBLE_DEVICES": true, "NVIDIA_VISIBLE_DEVICES": true, "CUDA_DEVICE_MEMORY_LIMIT": true,
		"CUDA_DEVICE_MEMORY_LIMIT_0": true, "CUDA_DEVICE_MEMORY_LIMIT_17": true, "CUDA_DEVICE_SM_LIMIT": true,
		"CUDA_MPS_PIPE_DIRECTORY": true, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": true, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": true,
		"HAMI_GO_GPU_MEMORY_MIB": true, "HAMI_GO_": true, "LD_PRELOAD": true, "CUDA_DEVICE_MEMORY_SHARED_CACHE": true,
		"CUDA_OVERSUBSCRIBE": true, "GPU_CORE_UTILIZATION_POLICY": true,
		"PATH": false, "CUDA_HOME": false, "cuda_visible_devices": false, "LD_LIBRARY_PATH": false, "HAMI_GOX": false,
		"CUDA_MPS": false, "MY_CUDA_VISIBLE_DEVICES": false, "NVIDIA_DRIVER_CAPABILITIES": false, "": false,
	} {
		if got := IsProtectedEnv(name); got != want {
			t.Errorf("IsProtectedEnv(%q) = %v, want %v", name, got, want)
		}
	}
}

// case C37: the first offending container of any kind is named with the variable.
func TestProtectedEnvError(t *testing.T) {
	env := func(names ...string) []corev1.EnvVar {
		var out []corev1.EnvVar
		for _, n := range names {
			out = append(out, corev1.EnvVar{Name: n, Value: "x"})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want string
	}{
		{"clean", corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Env: env("PATH", "CUDA_HOME")}}}, ""},
		{"app", corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}, {Name: "b", Env: env("PATH", "CUDA_DEVICE_MEMORY_LIMIT_0")}}},
			"spec.containers[b].env[CUDA_DEVICE_MEMORY_LIMIT_0]"},
		{"init", corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i", Env: env("LD_PRELOAD")}}, Containers: []corev1.Container{{Name: "a", Env: env("CUDA_MPS_PIPE_DIRECTORY")}}},
			"spec.initContainers[i].env[LD_PRELOAD]"},
		{"ephemeral", corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}, EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg", Env: env("NVIDIA_VISIBLE_DEVICES")}}}},
			"spec.ephemeralContainers[dbg].env[NVIDIA_VISIBLE_DEVICES]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ProtectedEnvError(&tc.spec)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.want+": ") {
				t.Fatalf("err = %v, want prefix %q", err, tc.want)
			}
		})
	}
}

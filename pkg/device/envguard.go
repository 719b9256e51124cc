package device

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

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
//   - CUDA_DEVICE_SM_LIMIT, CUDA_DEVICE_MEMORY_SHARED_CACHE, CUDA_OVERSUBSCRIBE,
//     GPU_CORE_UTILIZATION_POLICY: HAMi-core's compute limit, accounting file, over-commit switch
//     and core-limit policy ("disable" turns the limit off);
//   - LD_PRELOAD: loads (or, set empty, displaces) HAMi-core's libvgpu.so.
func ProtectedEnvExact() []string {
	return []string{
		"CUDA_VISIBLE_DEVICES",
		"NVIDIA_VISIBLE_DEVICES",
		"CUDA_DEVICE_SM_LIMIT",
		"CUDA_DEVICE_MEMORY_SHARED_CACHE",
		"CUDA_OVERSUBSCRIBE",
		"GPU_CORE_UTILIZATION_POLICY",
		"LD_PRELOAD",
	}
}

// ProtectedEnvPrefixes returns the name prefixes of protected variables (case C37):
// CUDA_DEVICE_MEMORY_LIMIT (HAMi-core's per-device limits CUDA_DEVICE_MEMORY_LIMIT_<i> and the
// global one), CUDA_MPS_ (NVIDIA MPS client limits and pipe directory, NVIDIA MPS documentation
// "Environment Variables") and HAMI_GO_ (what hami-go's device plugin tells the container).
func ProtectedEnvPrefixes() []string {
	return []string{"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_MPS_", EnvPrefix}
}

// IsProtectedEnv reports whether a container may not set the environment variable name itself
// (ProtectedEnvExact, ProtectedEnvPrefixes). Names are compared exactly (environment variable
// names are case-sensitive on Linux). This is the one rule the webhook, the device plugin and
// the NRI env guard (pkg/nri) share; the chart's matchConditions (charts/hami-go,
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

// ProtectedEnvError returns an error naming the first container (init, app or ephemeral, in
// that order) whose `env` sets a protected variable (IsProtectedEnv), or nil. The error reads
// `spec.containers[<name>].env[<VAR>]: ...`. It sees only `env`: values from `envFrom`
// (ConfigMaps, Secrets) and the image's ENV are not in the pod spec (docs/components.md says
// what stays open).
func ProtectedEnvError(spec *corev1.PodSpec) error {
	check := func(path, container string, env []corev1.EnvVar) error {
		for _, e := range env {
			if IsProtectedEnv(e.Name) {
				return fmt.Errorf("%s[%s].env[%s]: a container may not set %s itself; hami-go's device plugin sets it from the GPU slice the pod was given (remove it from the pod spec)", path, container, e.Name, e.Name)
			}
		}
		return nil
	}
	for _, c := range spec.InitContainers {
		if err := check("spec.initContainers", c.Name, c.Env); err != nil {
			return err
		}
	}
	for _, c := range spec.Containers {
		if err := check("spec.containers", c.Name, c.Env); err != nil {
			return err
		}
	}
	for _, c := range spec.EphemeralContainers {
		if err := check("spec.ephemeralContainers", c.Name, c.Env); err != nil {
			return err
		}
	}
	return nil
}

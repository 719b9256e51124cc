package webhook

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// protectedEnvError returns an error naming the first container (init, app or ephemeral, in
// that order) whose `env` sets a protected variable (device.IsProtectedEnv) it may not set, or
// nil (case C37; issue 36, case C54). A container without GPUs is left alone, except for an
// NVIDIA_VISIBLE_DEVICES that names devices, which the NVIDIA runtime would give it around the
// scheduler. A GPU container (a slice resource in its limits or requests, or a resource claim,
// which may be one of the GPU class: DRA mode) may set LD_PRELOAD (HAMi-core comes from the
// read-only /etc/ld.so.preload; the NRI plugin refuses a list that drops hami-go's own
// LD_PRELOAD where it sets one) and may narrow NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES to
// no device (gpuenv.NamesNoDevice); every other protected name is refused. It sees only `env`:
// `envFrom` and image ENV are the NRI plugin's (pkg/nri PlanEnv, the same rules).
func (h *PodHandler) protectedEnvError(spec *corev1.PodSpec) error {
	check := func(path string, c corev1.Container) error {
		gpu := h.isGPUContainer(c)
		for _, e := range c.Env {
			if !device.IsProtectedEnv(e.Name) || h.mayNarrow(gpu, e) {
				continue
			}
			if !gpu {
				return fmt.Errorf("%s[%s].env[%s]: %s=%s names GPUs for NVIDIA's container runtime in a container that asks for none "+
					"(remove it, set it to void, or ask for GPUs through %s)", path, c.Name, e.Name, e.Name, e.Value, h.cfg.Names.Count)
			}
			return fmt.Errorf("%s[%s].env[%s]: a container may not set %s itself; %s (remove it from the pod spec%s)",
				path, c.Name, e.Name, e.Name, h.mechanism(), narrowHint(e.Name))
		}
		return nil
	}
	for _, c := range spec.InitContainers {
		if err := check("spec.initContainers", c); err != nil {
			return err
		}
	}
	for _, c := range spec.Containers {
		if err := check("spec.containers", c); err != nil {
			return err
		}
	}
	for _, ec := range spec.EphemeralContainers {
		if err := check("spec.ephemeralContainers", corev1.Container(ec.EphemeralContainerCommon)); err != nil {
			return err
		}
	}
	return nil
}

// mayNarrow reports whether a container may set the protected variable e itself. A value from
// valueFrom is not known here: in a container without GPUs the NRI plugin empties it if it names
// GPUs; in a GPU container it is refused unless it is LD_PRELOAD.
func (h *PodHandler) mayNarrow(gpu bool, e corev1.EnvVar) bool {
	literalNoDevice := e.ValueFrom == nil && gpuenv.NamesNoDevice(e.Name, e.Value)
	if !gpu {
		return e.Name != gpuenv.EnvNVIDIAVisibleDevices || e.ValueFrom != nil || literalNoDevice
	}
	return e.Name == "LD_PRELOAD" || literalNoDevice
}

// isGPUContainer reports whether c asks for GPUs: a slice resource in its limits or requests,
// or any resource claim (its class is not known at admission; a claim of the GPU class makes it
// a GPU container in DRA mode, so every claim counts, which only makes the rule stricter).
func (h *PodHandler) isGPUContainer(c corev1.Container) bool {
	n := h.cfg.Names
	names := []corev1.ResourceName{corev1.ResourceName(n.Count), corev1.ResourceName(n.Memory), corev1.ResourceName(n.MemoryPercent), corev1.ResourceName(n.Cores)}
	return hasAny(c.Resources.Limits, names) || hasAny(c.Resources.Requests, names) || len(c.Resources.Claims) > 0
}

// mechanism says who sets the protected env in this mode.
func (h *PodHandler) mechanism() string {
	if h.cfg.Mode == ModeDRA {
		return "hami-go's DRA driver sets it through the GPU claim's CDI spec"
	}
	return "hami-go's device plugin sets it from the GPU slice the pod was given"
}

func narrowHint(name string) string {
	switch name {
	case gpuenv.EnvNVIDIAVisibleDevices:
		return ", or set it to void or none to use no GPU"
	case gpuenv.EnvCUDAVisibleDevices:
		return ", or set it to -1 to use no GPU; the container sees only its own GPUs"
	}
	return ""
}

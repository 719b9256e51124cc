package nri

// This file is the pure decision that gives a GPU container the NVIDIA driver capabilities its
// enforcement needs (issue 29): env in, one env change or a refusal out.

import (
	"fmt"
	"strings"

	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// DriverCapabilitiesChange returns the env change that makes the container's
// NVIDIA_DRIVER_CAPABILITIES include every capability of need (comma-separated, e.g.
// gpuenv.HAMiCoreDriverCapabilities), keeping the capabilities it already has
// (gpuenv.MergeDriverCapabilities: "video" becomes "video,compute,utility", "all" stays); nil
// when need is "" or the container's value already includes it. env is the container's OCI env
// at CreateContainer (see PlanEnv).
//
// The NVIDIA Container Toolkit reads the variable when the runtime creates the container, after
// NRI's adjustments: unset, it gives "utility,compute" (nvidia-container-toolkit
// internal/config/image: DefaultDriverCapabilities), the list added here too; an image's own
// narrower list (e.g. "utility" or "video") lacks one, and without "compute" and "utility"
// HAMi-core's libvgpu.so cannot resolve libcuda.so.1 and libnvidia-ml.so.1, so glibc skips it
// and the process runs without limits (fail open). An adjustment sets the first entry of a name
// and the later entries are written over it (PlanEnv), so a name repeated in env whose last value
// lacks a capability cannot be fixed: the container is refused with the value to set.
func DriverCapabilitiesChange(env []string, need string) (*EnvChange, error) {
	if need == "" {
		return nil, nil
	}
	count, last := 0, ""
	for _, e := range env {
		if name, value, ok := strings.Cut(e, "="); ok && name == gpuenv.EnvNVIDIADriverCapabilities {
			count++
			last = value
		}
	}
	merged := gpuenv.MergeDriverCapabilities(last, need)
	switch {
	case count > 0 && merged == gpuenv.MergeDriverCapabilities(last, ""):
		return nil, nil
	case count > 1:
		return nil, fmt.Errorf("hami-go: the container's env sets %s more than once (last %s=%s), and the GPU enforcement needs it to include %s, "+
			"which cannot be added to a repeated name (set it once, e.g. %s=%s)",
			gpuenv.EnvNVIDIADriverCapabilities, gpuenv.EnvNVIDIADriverCapabilities, last, need, gpuenv.EnvNVIDIADriverCapabilities, merged)
	}
	return &EnvChange{Name: gpuenv.EnvNVIDIADriverCapabilities, Value: merged}, nil
}

package gpuenv

import (
	"path/filepath"

	"github.com/hami-go/hami-go/pkg/device"
)

// MPSControlPipe is the file the MPS control daemon creates in its pipe directory
// (CUDA_MPS_PIPE_DIRECTORY) while it runs; clients connect through it (NVIDIA "Multi-Process
// Service", section "Architecture").
const MPSControlPipe = "control"

// CheckEnforcement returns the node's enforcement as a fact for cfg.Enforcement: hami-core is
// Ready when cfg.HAMiCoreLibrary exists on the host, mps when the control daemon's pipe exists
// in cfg.MPSPipeDir, none always. simulated (the fake backend: no GPU to enforce on) makes every
// mode Ready and Simulated. exists reports whether a host path exists. Reasons name the missing
// path and what installs it.
func CheckEnforcement(cfg Config, simulated bool, exists func(string) bool) device.Enforcement {
	e := device.Enforcement{Mode: cfg.Enforcement, Ready: true, Simulated: simulated}
	switch cfg.Enforcement {
	case EnforceHAMiCore:
		e.Library = cfg.HAMiCoreLibrary
		if simulated {
			return e
		}
		if cfg.HAMiCoreLibrary == "" || !exists(cfg.HAMiCoreLibrary) {
			e.Ready = false
			e.Reason = "HAMi-core library " + cfg.HAMiCoreLibrary + " not found on the host " +
				"(install it with the chart's hamiCore.install, put libvgpu.so there, or set enforcement: none to run unenforced)"
		}
	case EnforceMPS:
		if simulated {
			return e
		}
		if pipe := filepath.Join(cfg.MPSPipeDir, MPSControlPipe); cfg.MPSPipeDir == "" || !exists(pipe) {
			e.Ready = false
			e.Reason = "MPS control daemon not reachable: " + pipe + " not found " +
				"(the chart's MPS control daemon runs with enforcement: mps and backend: nvml)"
		}
	}
	return e
}

package main

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// The slice the isolation checks enforce, as one grant on GPU 0.
const (
	// sliceMemoryMiB is the slice's memory limit, MiB.
	sliceMemoryMiB = 4000
	// sliceCoresPercent is the slice's compute limit, percent of the GPU.
	sliceCoresPercent = 30
	// sliceCacheName is the HAMi-core cache name (the DRA driver uses the claim's UID).
	sliceCacheName = "hami-go-gpu-check"
	// sliceHostOrdinal is the CUDA ordinal on this machine of the slice's GPU: nvidia-smi's GPU 0
	// (gpu0), which is CUDA ordinal 0 under the slice env's CUDA_DEVICE_ORDER=PCI_BUS_ID
	// (nvidia-smi lists GPUs in PCI bus order).
	sliceHostOrdinal = "0"
)

// sliceSpec says which slice env to build.
type sliceSpec struct {
	// Enforcement is gpuenv.EnforceHAMiCore or gpuenv.EnforceMPS.
	Enforcement string
	// UUID and Model name the GPU (nvidia-smi's uuid and name).
	UUID, Model string
	// Library is the host path of the freshly built libvgpu.so (hami-core).
	Library string
	// MPSPipeDir is the MPS pipe directory (mps).
	MPSPipeDir string
	// Grants, when set, are the slice's grants instead of the one of sliceMemoryMiB and
	// sliceCoresPercent on UUID (isolation-2gpu).
	Grants []gpuenv.Grant
}

// sliceEnv is the env pkg/gpuenv.Build gives a container holding one grant of sliceMemoryMiB
// and sliceCoresPercent on s.UUID, configured as the DRA driver configures it (pkg/dra's
// envConfig: NVIDIA_VISIBLE_DEVICES set, no memory scaling; the device plugin's envvar strategy
// gives the same), with its mounts.
func sliceEnv(s sliceSpec, exists func(string) bool) gpuenv.Edits {
	cfg := gpuenv.Config{Enforcement: s.Enforcement, NVIDIAVisibleDevices: true, MemoryScaling: 1,
		HAMiCoreLibrary: s.Library, MPSPipeDir: s.MPSPipeDir}
	req := gpuenv.Request{
		Grants:    []gpuenv.Grant{{UUID: s.UUID, MemoryMiB: sliceMemoryMiB, CoresPercent: sliceCoresPercent}},
		Model:     s.Model,
		CacheName: sliceCacheName,
	}
	if len(s.Grants) > 0 {
		req.Grants = s.Grants
	}
	return gpuenv.Build(cfg, req, exists)
}

// hostEnv turns a container's env into the env of a process on this machine: a value naming a
// mount's container path names its host path (LD_PRELOAD: the built libvgpu.so), the HAMi-core
// cache file, inside the container's own root filesystem, becomes cacheFile (a private file, one
// per group of processes that share a limit), and CUDA_VISIBLE_DEVICES=sliceHostOrdinal shows
// the process only the slice's GPU, as the container runtime shows a container only its own
// (the container env sets no CUDA_VISIBLE_DEVICES; an ordinal, not a UUID, because HAMi-core
// parses the variable with atoi, HAMi-core#319). Nothing else changes.
func hostEnv(e gpuenv.Edits, cacheFile string) map[string]string {
	return hostEnvOn(e, cacheFile, sliceHostOrdinal)
}

// hostEnvOn is hostEnv with the host ordinals of the slice's GPUs ("0,1": nvidia-smi's GPUs 0
// and 1, CUDA ordinals 0 and 1 in PCI order), in the order of the slice's grants.
func hostEnvOn(e gpuenv.Edits, cacheFile, ordinals string) map[string]string {
	out := make(map[string]string, len(e.Env))
	for k, v := range e.Env {
		for _, m := range e.Mounts {
			if v == m.ContainerPath {
				v = m.HostPath
			}
		}
		out[k] = v
	}
	if _, ok := out[gpuenv.EnvHAMiSharedCache]; ok {
		out[gpuenv.EnvHAMiSharedCache] = cacheFile
	}
	out[gpuenv.EnvCUDAVisibleDevices] = ordinals
	return out
}

// envList is env as sorted "KEY=VALUE" entries (host.run's form).
func envList(env map[string]string) []string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "=" + env[k]
	}
	return out
}

// envLines renders env as sorted KEY=VALUE lines.
func envLines(env map[string]string) string {
	return strings.Join(append(envList(env), ""), "\n")
}

// writeSliceEnv writes the container env (gpuenv's, as KEY=VALUE lines) to raw/<name>.env and
// the host env the probes run with to raw/<name>-host.env.
func writeSliceEnv(out, name string, e gpuenv.Edits, host map[string]string) {
	_ = os.WriteFile(filepath.Join(rawDir(out), name+".env"), []byte(envLines(e.Env)), 0o644)
	_ = os.WriteFile(filepath.Join(rawDir(out), name+"-host.env"), []byte(envLines(host)), 0o644)
}

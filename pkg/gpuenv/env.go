// Package gpuenv builds what a GPU container gets (env and host mounts) from one ordered list
// of GPU grants: the one builder both node components use, the device plugin's Allocate and
// the DRA driver's CDI spec (docs/design.md, "DRA mode": the same env contract in both modes).
// It is pure: the only host access is the exists function the caller passes.
package gpuenv

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hami-go/hami-go/pkg/device"
)

// Device-list env names every GPU container gets (docs/components.md); hami-go's own
// variables are pkg/device's EnvGPUMemoryMiB, EnvGPUModel and EnvGPUUUIDs.
const (
	EnvNVIDIAVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	EnvCUDAVisibleDevices   = "CUDA_VISIBLE_DEVICES"
)

// HAMi-core (libvgpu.so) env and paths, as HAMi's own device plugin sets them
// (Project-HAMi/HAMi pkg/device-plugin/nvidiadevice: CUDA_DEVICE_MEMORY_LIMIT_<i>="<MiB>m",
// CUDA_DEVICE_SM_LIMIT="<percent>", CUDA_DEVICE_MEMORY_SHARED_CACHE, CUDA_OVERSUBSCRIBE, library
// at /usr/local/vgpu/libvgpu.so preloaded through /etc/ld.so.preload).
const (
	EnvHAMiMemoryLimitPrefix = "CUDA_DEVICE_MEMORY_LIMIT_"
	EnvHAMiSMLimit           = "CUDA_DEVICE_SM_LIMIT"
	EnvHAMiSharedCache       = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
	EnvHAMiOversubscribe     = "CUDA_OVERSUBSCRIBE"
	HAMiContainerDir         = "/usr/local/vgpu"
	HAMiContainerLibrary     = HAMiContainerDir + "/libvgpu.so"
	// HAMiPreloadFile beside the host library is mounted as /etc/ld.so.preload; without it the
	// container gets LD_PRELOAD.
	HAMiPreloadFile = "ld.so.preload"
	// ContainerPreloadPath is where HAMiPreloadFile is mounted in the container.
	ContainerPreloadPath = "/etc/ld.so.preload"
)

// NVIDIA MPS client env (NVIDIA "Multi-Process Service", Appendix: Environment Variables).
const (
	EnvMPSPinnedMemLimit  = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvMPSActiveThreadPct = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvMPSPipeDirectory   = "CUDA_MPS_PIPE_DIRECTORY"
)

// Enforcement modes (--enforcement).
const (
	// EnforceHAMiCore sets the env HAMi-core's libvgpu.so reads and mounts the library.
	EnforceHAMiCore = device.EnforcementHAMiCore
	// EnforceMPS sets per-client MPS limits and mounts the MPS pipe directory.
	EnforceMPS = device.EnforcementMPS
	// EnforceNone hands out devices only.
	EnforceNone = device.EnforcementNone
)

// Config is the part of a node component's configuration the env depends on.
type Config struct {
	// Enforcement is EnforceHAMiCore, EnforceMPS or EnforceNone.
	Enforcement string
	// NVIDIAVisibleDevices sets NVIDIA_VISIBLE_DEVICES to the UUID list (the device plugin's
	// envvar strategy and the DRA driver); false when the devices are named through CDI.
	NVIDIAVisibleDevices bool
	// MemoryScaling is the memory over-commit factor (>= 1); above 1 HAMi-core may
	// oversubscribe (CUDA_OVERSUBSCRIBE=true).
	MemoryScaling float64
	// HAMiCoreLibrary is the host path of libvgpu.so, mounted when it exists ("" = never).
	HAMiCoreLibrary string
	// MPSPipeDir is the MPS pipe directory (EnforceMPS), mounted at the same path.
	MPSPipeDir string
}

// Grant is one GPU of a container with its limits.
type Grant struct {
	// UUID is the GPU's NVML UUID.
	UUID string
	// MemoryMiB is the container's memory limit on the GPU, MiB.
	MemoryMiB int64
	// CoresPercent is the container's compute limit, percent of the GPU (0 = none).
	CoresPercent int
}

// Request is one container's GPUs, in the one order every positional value follows
// (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_MEMORY_LIMIT_<i>, the MPS ordinals; cases C19, C22).
type Request struct {
	Grants []Grant
	// Model is the NVML model name of the first GPU ("" = unknown).
	Model string
	// CacheName names the HAMi-core shared cache file of this container in HAMiContainerDir,
	// e.g. "<container>" (device plugin) or "<claim UID>" (DRA); ".cache" is added.
	CacheName string
}

// Mount is a host path bind-mounted into the container.
type Mount struct {
	ContainerPath string
	HostPath      string
	ReadOnly      bool
}

// Edits are what the container gets: env and mounts.
type Edits struct {
	Env    map[string]string
	Mounts []Mount
}

// UUIDs returns the request's GPU UUIDs in its order.
func (r Request) UUIDs() []string {
	out := make([]string, len(r.Grants))
	for i, g := range r.Grants {
		out[i] = g.UUID
	}
	return out
}

// Build returns the container's env and mounts for r under cfg. exists reports whether a host
// path exists (the HAMi-core library and its preload file).
func Build(cfg Config, r Request, exists func(string) bool) Edits {
	e := Edits{Env: map[string]string{}}
	devs := r.Grants
	var total int64
	cores := 0
	for _, d := range devs {
		total += d.MemoryMiB
		if d.CoresPercent > cores {
			cores = d.CoresPercent
		}
	}
	list := strings.Join(r.UUIDs(), ",")
	if cfg.NVIDIAVisibleDevices {
		e.Env[EnvNVIDIAVisibleDevices] = list
	}
	e.Env[EnvCUDAVisibleDevices] = list
	e.Env[device.EnvGPUUUIDs] = list
	e.Env[device.EnvGPUMemoryMiB] = strconv.FormatInt(total, 10)
	model := device.UnknownModel
	if len(devs) > 0 {
		model = device.RayAcceleratorType(r.Model)
	}
	e.Env[device.EnvGPUModel] = model
	switch cfg.Enforcement {
	case EnforceHAMiCore:
		for i, d := range devs {
			e.Env[EnvHAMiMemoryLimitPrefix+strconv.Itoa(i)] = strconv.FormatInt(d.MemoryMiB, 10) + "m"
		}
		if cores > 0 && cores < 100 {
			e.Env[EnvHAMiSMLimit] = strconv.Itoa(cores)
		}
		e.Env[EnvHAMiSharedCache] = HAMiContainerDir + "/" + r.CacheName + ".cache"
		if cfg.MemoryScaling > 1 {
			e.Env[EnvHAMiOversubscribe] = "true"
		}
		if cfg.HAMiCoreLibrary != "" && exists(cfg.HAMiCoreLibrary) {
			e.Mounts = append(e.Mounts, Mount{ContainerPath: HAMiContainerLibrary, HostPath: cfg.HAMiCoreLibrary, ReadOnly: true})
			preload := filepath.Join(filepath.Dir(cfg.HAMiCoreLibrary), HAMiPreloadFile)
			if exists(preload) {
				e.Mounts = append(e.Mounts, Mount{ContainerPath: ContainerPreloadPath, HostPath: preload, ReadOnly: true})
			} else {
				e.Env["LD_PRELOAD"] = HAMiContainerLibrary
			}
		}
	case EnforceMPS:
		// "<device ordinal>=<limit>" pairs, comma-separated ("0=1G,1=512MB" in NVIDIA's MPS
		// documentation, Appendix: Environment Variables): the ordinal is the client's, i.e. the
		// position in CUDA_VISIBLE_DEVICES, as for CUDA_DEVICE_MEMORY_LIMIT_<i>.
		lim := make([]string, len(devs))
		for i, d := range devs {
			lim[i] = strconv.Itoa(i) + "=" + strconv.FormatInt(d.MemoryMiB, 10) + "M"
		}
		e.Env[EnvMPSPinnedMemLimit] = strings.Join(lim, ",")
		if cores > 0 && cores < 100 {
			e.Env[EnvMPSActiveThreadPct] = strconv.Itoa(cores)
		}
		e.Env[EnvMPSPipeDirectory] = cfg.MPSPipeDir
		e.Mounts = append(e.Mounts, Mount{ContainerPath: cfg.MPSPipeDir, HostPath: cfg.MPSPipeDir})
	}
	return e
}

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
	// HAMiContainerCacheDir is where a container's own writable cache directory (a directory
	// of Config.HAMiCacheDir) is mounted; CUDA_DEVICE_MEMORY_SHARED_CACHE names a file in it.
	// HAMi-core exits (EXIT_FAILURE) in every CUDA process that cannot create that file, so it
	// is never in the container's root filesystem, which may be read-only.
	HAMiContainerCacheDir = HAMiContainerDir + "/cache"
	// HAMiCacheSuffix ends the name of the shared cache file: "<Request.CacheName>.cache".
	HAMiCacheSuffix = ".cache"
)

// NVIDIA driver capabilities (NVIDIA Container Toolkit, "Driver capabilities"): which driver
// libraries the NVIDIA runtime puts in a container.
const (
	EnvNVIDIADriverCapabilities = "NVIDIA_DRIVER_CAPABILITIES"
	// HAMiCoreDriverCapabilities is what HAMi-core needs: "compute" brings libcuda.so.1 and
	// "utility" libnvidia-ml.so.1, both linked by libvgpu.so; glibc skips a preloaded library
	// whose dependencies are missing without failing the process, i.e. without limits. Unset,
	// the toolkit gives "utility" only (NVIDIA Container Toolkit, "Driver capabilities").
	HAMiCoreDriverCapabilities = "compute,utility"
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
	// HAMiCoreLibrary is the host path of libvgpu.so, mounted read-only at HAMiContainerLibrary
	// when it exists ("" = never); the HAMiPreloadFile beside it is mounted at
	// ContainerPreloadPath when it exists (else LD_PRELOAD is set). When the node agent installs
	// the library (pkg/hamicore), this is the installed versioned file (hamicore.Installed.Path),
	// so a container keeps the version it was created with.
	HAMiCoreLibrary string
	// HAMiCacheDir is the host directory of the containers' HAMi-core cache directories
	// (EnforceHAMiCore): a request with a valid CacheName gets <HAMiCacheDir>/<CacheName> mounted
	// read-write at HAMiContainerCacheDir, CUDA_DEVICE_MEMORY_SHARED_CACHE names
	// HAMiContainerCacheDir/<CacheName>.cache, and Edits.Dirs names the host directory the caller
	// must create. "" = the cache file in the container's own root filesystem
	// (HAMiContainerDir/<CacheName>.cache, no mount), which fails under readOnlyRootFilesystem.
	HAMiCacheDir string
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
	// CacheName names the HAMi-core shared cache of this container: the file
	// "<CacheName>.cache" and, with Config.HAMiCacheDir, the host directory
	// <HAMiCacheDir>/<CacheName>. With HAMiCacheDir it must be one path element (not "", ".",
	// "..", no "/", at most 255 bytes) and unique among the node's live containers that must
	// not share HAMi-core's accounting (e.g. "<pod UID>_<container>"); a request without a
	// valid CacheName gets no cache mount and no CUDA_DEVICE_MEMORY_SHARED_CACHE.
	CacheName string
}

// Mount is a host path bind-mounted into the container.
type Mount struct {
	ContainerPath string
	HostPath      string
	ReadOnly      bool
}

// Edits are what the container gets: env and mounts, and the host directories its mounts need.
type Edits struct {
	Env    map[string]string
	Mounts []Mount
	// Dirs are host directories (absolute paths) the caller must create before the container
	// is created: MkdirAll, then chmod 0777 so that a container running as any user can create
	// its cache file (HAMi does the same). Build itself touches no host path.
	Dirs []string
	// DriverCapabilities are the NVIDIA driver capabilities (comma-separated) the container's
	// NVIDIA_DRIVER_CAPABILITIES must include for its enforcement to load
	// (HAMiCoreDriverCapabilities under EnforceHAMiCore; "" = none). It is not in Env: only a
	// caller that sees the container's own value can add what it lacks without narrowing it
	// (MergeDriverCapabilities, the NRI plugin at CreateContainer, both modes).
	DriverCapabilities string
}

// ValidCacheName reports whether name can name a container's cache directory in
// Config.HAMiCacheDir: one path element, not "." or "..", without NUL, at most 255 bytes.
func ValidCacheName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= 255 && !strings.ContainsAny(name, "/\x00")
}

// UUIDs returns the request's GPU UUIDs in its order.
func (r Request) UUIDs() []string {
	out := make([]string, len(r.Grants))
	for i, g := range r.Grants {
		out[i] = g.UUID
	}
	return out
}

// Build returns the container's env and mounts for r under cfg, and the host directories the
// caller must create for them (Edits.Dirs). exists reports whether a host path exists (the
// HAMi-core library and its preload file).
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
		e.DriverCapabilities = HAMiCoreDriverCapabilities
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
		switch {
		case cfg.HAMiCacheDir == "":
			e.Env[EnvHAMiSharedCache] = HAMiContainerDir + "/" + r.CacheName + HAMiCacheSuffix
		case ValidCacheName(r.CacheName):
			host := filepath.Join(cfg.HAMiCacheDir, r.CacheName)
			e.Env[EnvHAMiSharedCache] = HAMiContainerCacheDir + "/" + r.CacheName + HAMiCacheSuffix
			e.Mounts = append(e.Mounts, Mount{ContainerPath: HAMiContainerCacheDir, HostPath: host})
			e.Dirs = append(e.Dirs, host)
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

// MergeDriverCapabilities returns have, a container's own NVIDIA_DRIVER_CAPABILITIES
// (comma-separated), with each capability of need it lacks appended: "all" stays "all", and an
// empty have gives need. It is for a caller that sees the container's whole env (the NRI
// plugin at CreateContainer), to give HAMi-core what it needs without narrowing an image's own
// wider list (e.g. "compute,utility,video").
func MergeDriverCapabilities(have, need string) string {
	caps := []string{}
	seen := map[string]bool{}
	for _, c := range strings.Split(have, ",") {
		c = strings.TrimSpace(c)
		if c == "all" {
			return "all"
		}
		if c != "" && !seen[c] {
			seen[c] = true
			caps = append(caps, c)
		}
	}
	for _, c := range strings.Split(need, ",") {
		c = strings.TrimSpace(c)
		if c != "" && !seen[c] {
			seen[c] = true
			caps = append(caps, c)
		}
	}
	return strings.Join(caps, ",")
}

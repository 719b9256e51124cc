// Package gpuenv builds what a GPU container gets (env and host mounts) from one ordered list
// of GPU grants: the one builder both node components use, the device plugin's Allocate and
// the DRA driver's CDI spec (docs/design.md, "DRA mode": the same env contract in both modes).
// It is pure: the only host access is the exists function the caller passes.
package gpuenv

import (
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/hami-go/hami-go/pkg/device"
)

// Device-list env names (docs/components.md); hami-go's own variables are pkg/device's
// EnvGPUMemoryMiB, EnvGPUModel and EnvGPUUUIDs.
const (
	// EnvNVIDIAVisibleDevices names the GPUs NVIDIA's container runtime exposes (the envvar
	// device-list strategy): Build sets it to the UUID list when Config.NVIDIAVisibleDevices.
	EnvNVIDIAVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// EnvCUDAVisibleDevices is never set by Build: every container sees only its own GPUs
	// (CDI devices, or NVIDIA_VISIBLE_DEVICES=<its UUIDs>), and HAMi-core reads the variable
	// with atoi (HAMi-core src/utils.c parse_cuda_visible_env; HAMi-core#319), so a UUID list
	// maps every GPU to 0, and a list out of PCI order breaks its host-PID detection, which
	// turns the core limit off (HAMi-core#225). HAMi does not set it either.
	EnvCUDAVisibleDevices = "CUDA_VISIBLE_DEVICES"
	// EnvCUDADeviceOrder is pinned to CUDADeviceOrderPCI in every GPU container, so CUDA's
	// ordinals follow the PCI bus order that NVML's indices, HAMi-core's per-GPU limits and the
	// MPS ordinals all use (CUDA C Programming Guide, "CUDA Environment Variables": the default,
	// FASTEST_FIRST, may put a faster GPU first).
	EnvCUDADeviceOrder = "CUDA_DEVICE_ORDER"
	CUDADeviceOrderPCI = "PCI_BUS_ID"
)

// HAMi-core (libvgpu.so) env and paths, as HAMi's own device plugin sets them
// (Project-HAMi/HAMi pkg/device-plugin/nvidiadevice: CUDA_DEVICE_MEMORY_LIMIT_<i>="<MiB>m",
// CUDA_DEVICE_SM_LIMIT="<percent>", CUDA_DEVICE_MEMORY_SHARED_CACHE, CUDA_OVERSUBSCRIBE,
// LIBCUDA_LOG_LEVEL, library at /usr/local/vgpu/libvgpu.so preloaded through /etc/ld.so.preload).
const (
	// EnvHAMiMemoryLimitPrefix + "<i>" is GPU i's memory limit, "<MiB>m"; i is the CUDA ordinal,
	// i.e. the position in the PCI-ordered grant list (HAMi-core src/multiprocess/
	// multiprocess_memory_limit.c do_init_device_memory_limits).
	EnvHAMiMemoryLimitPrefix = "CUDA_DEVICE_MEMORY_LIMIT_"
	// EnvHAMiSMLimit is HAMi-core's compute limit for every GPU, percent; EnvHAMiSMLimit + "_<i>"
	// overrides it for GPU i (do_init_device_sm_limits, same file). Build sets the per-GPU names
	// only, so each GPU keeps its own grant's limit.
	EnvHAMiSMLimit     = "CUDA_DEVICE_SM_LIMIT"
	EnvHAMiSharedCache = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
	// EnvHAMiOversubscribe is set to "true" when Config.MemoryScaling > 1, as HAMi does. The
	// open-source HAMi-core reads it nowhere (HAMi-core src/: no getenv of it), so memory scaling
	// above 1 over-commits the GPU's physical memory with nothing behind it: the slices' limits
	// add up to more than the GPU has, and an allocation past what is physically free fails
	// with CUDA's out-of-memory error in whichever container asks last (shown over the
	// simulated driver: hack/simgpu TestHAMiCore/oversubscribe-is-not-backed). Older libvgpu
	// builds read it in postInit (allocmode); whether HAMi's libvgpu of v2.10 does could not be
	// verified here, so the variable is kept, harmless where unread.
	EnvHAMiOversubscribe = "CUDA_OVERSUBSCRIBE"
	// EnvHAMiLogLevel is HAMi-core's log level (HAMi-core src/include/log_utils.h; higher
	// prints more, and unset it prints on every CUDA process's stderr). Build sets HAMiLogLevel,
	// as HAMi's device plugin does; the container's own value wins (the name is not protected:
	// logging widens no limit; the NRI plugin adds it only where the container has none).
	EnvHAMiLogLevel      = "LIBCUDA_LOG_LEVEL"
	HAMiLogLevel         = "1"
	HAMiContainerDir     = "/usr/local/vgpu"
	HAMiContainerLibrary = HAMiContainerDir + "/libvgpu.so"
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
	// HAMiOverrideEnv is the file HAMi-core reads at its first NVML init and loads into the
	// process's env (HAMi-core src/nvml/hook.c nvml_preInit: load_env_from_file(
	// ENV_OVERRIDE_FILE), src/multiprocess/multiprocess_memory_limit.h): an image shipping it
	// could rewrite its own limits. Build masks it with HAMiOverrideEnvMask mounted
	// read-only over it, as runc masks paths (OCI runtime-spec maskedPaths).
	HAMiOverrideEnv = "/overrideEnv"
	// HAMiOverrideEnvMask is the host file mounted over HAMiOverrideEnv: /dev/null, which
	// exists on every host and reads empty, so no host file must be created for it.
	HAMiOverrideEnvMask = "/dev/null"
)

// NVIDIA driver capabilities (NVIDIA Container Toolkit, "Driver capabilities"): which driver
// libraries the NVIDIA runtime puts in a container.
const (
	EnvNVIDIADriverCapabilities = "NVIDIA_DRIVER_CAPABILITIES"
	// HAMiCoreDriverCapabilities is what HAMi-core needs: "compute" brings libcuda.so.1 and
	// "utility" libnvidia-ml.so.1, both linked by libvgpu.so; glibc skips a preloaded library
	// whose dependencies are missing without failing the process, i.e. without limits. Unset,
	// the toolkit gives "utility,compute" (nvidia-container-toolkit internal/config/image:
	// DefaultDriverCapabilities), which HAMi-core needs; an image that sets a narrower list
	// (e.g. "utility", or "video") is what loses it.
	HAMiCoreDriverCapabilities = "compute,utility"
)

// NVIDIA MPS client env (NVIDIA "Multi-Process Service", Appendix: Environment Variables).
const (
	EnvMPSPinnedMemLimit  = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvMPSActiveThreadPct = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvMPSPipeDirectory   = "CUDA_MPS_PIPE_DIRECTORY"
)

// Enforcement modes (--enforcement): pkg/device's, their one home, under the names the env
// builder's callers use.
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
	// MemoryScaling is the memory over-commit factor (>= 1); above 1 CUDA_OVERSUBSCRIBE=true is
	// set, which the open-source HAMi-core does not read (EnvHAMiOversubscribe): the slices
	// then share more memory than the GPU has, with nothing to back the excess.
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
	// PCIBusID is the GPU's NVML PCI bus id ("00000000:07:00.0"; device.GPU.PCIBusID), which
	// orders the container's GPUs (PCIOrder). "" = unknown: such grants keep their given order,
	// before the known ones.
	PCIBusID string
	// MemoryMiB is the container's memory limit on the GPU, MiB.
	MemoryMiB int64
	// CoresPercent is the container's compute limit, percent of the GPU (0 = none).
	CoresPercent int
}

// Request is one container's GPUs. Build orders them by PCI bus id (PCIOrder), the one order
// every positional value follows (CUDA_DEVICE_MEMORY_LIMIT_<i>, CUDA_DEVICE_SM_LIMIT_<i>,
// HAMI_GO_GPU_UUIDS, NVIDIA_VISIBLE_DEVICES, the MPS ordinals; cases C19, C22), because it is
// the order in which CUDA (CUDA_DEVICE_ORDER=PCI_BUS_ID) and NVML number the container's GPUs.
type Request struct {
	Grants []Grant
	// Model is the NVML model name of the first GPU in PCIOrder ("" = unknown).
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
	// CacheFile is the host path of the container's HAMi-core shared cache file (in Dirs'
	// directory; "" when it is not on the host). HAMi-core keeps a slot per process in it and
	// frees a slot only when it sees that process gone, so a container created again (it exited
	// and the kubelet restarts it) would find its killed processes' slots, with their memory,
	// still charged: the caller that creates the container removes the file first (case C56).
	CacheFile string
	// DriverCapabilities are the NVIDIA driver capabilities (comma-separated) the container's
	// NVIDIA_DRIVER_CAPABILITIES must include for its enforcement to load
	// (HAMiCoreDriverCapabilities under EnforceHAMiCore; "" = none). It is not in Env: only a
	// caller that sees the container's own value can add what it lacks without narrowing it
	// (MergeDriverCapabilities, the NRI plugin at CreateContainer, both modes).
	DriverCapabilities string
}

// NamesNoDevice reports whether value, the value of a device-list variable (name
// EnvNVIDIAVisibleDevices or EnvCUDAVisibleDevices), gives the container no GPU, so that a
// container may set it itself (it can only narrow): for NVIDIA_VISIBLE_DEVICES "", "void" and
// "none" (NVIDIA Container Toolkit, "GPU enumeration"); for CUDA_VISIBLE_DEVICES also "-1"
// (CUDA C Programming Guide, "CUDA Environment Variables": the list ends at its first invalid
// entry). A value that names devices, even a subset of the container's own, is not: a subset
// or reordering of CUDA's ordinals would pair HAMi-core's positional limits with other GPUs.
func NamesNoDevice(name, value string) bool {
	switch strings.TrimSpace(value) {
	case "", "void", "none":
		return name == EnvNVIDIAVisibleDevices || name == EnvCUDAVisibleDevices
	case "-1":
		return name == EnvCUDAVisibleDevices
	}
	return false
}

// IdentityCUDAVisibleDevices is "0,1,…,n-1": the CUDA_VISIBLE_DEVICES value that names a
// container's n GPUs in their own (PCI) order, the one list HAMi-core's atoi parse reads
// correctly. "" for n <= 0.
func IdentityCUDAVisibleDevices(n int) string {
	ids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		ids = append(ids, strconv.Itoa(i))
	}
	return strings.Join(ids, ",")
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

// PCIOrder returns a copy of grants sorted by PCI bus id (domain, bus, device, function, as
// hex numbers, so "0000:07:00.0" and "00000000:07:00.0" are the same GPU's), the order CUDA
// (CUDA_DEVICE_ORDER=PCI_BUS_ID) and NVML give the container's GPUs. The sort is stable:
// grants with an unknown bus id ("") come first, in their given order.
func PCIOrder(grants []Grant) []Grant {
	out := append([]Grant(nil), grants...)
	sort.SliceStable(out, func(i, j int) bool { return pciLess(out[i].PCIBusID, out[j].PCIBusID) })
	return out
}

// pciLess compares two NVML bus ids ("<domain>:<bus>:<device>.<function>", hex) numerically
// field by field; an id that does not parse compares as a string after the ones that do.
func pciLess(a, b string) bool {
	ka, oka := pciKey(a)
	kb, okb := pciKey(b)
	switch {
	case a == "" || b == "":
		return a == "" && b != ""
	case oka && okb:
		for i := range ka {
			if ka[i] != kb[i] {
				return ka[i] < kb[i]
			}
		}
		return false
	case oka != okb:
		return oka
	}
	return a < b
}

func pciKey(id string) ([4]uint64, bool) {
	var k [4]uint64
	dom, rest, ok1 := strings.Cut(id, ":")
	bus, rest, ok2 := strings.Cut(rest, ":")
	dev, fn, ok3 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || !ok3 {
		return k, false
	}
	for i, f := range []string{dom, bus, dev, fn} {
		v, err := strconv.ParseUint(f, 16, 64)
		if err != nil {
			return k, false
		}
		k[i] = v
	}
	return k, true
}

// Build returns the container's env and mounts for r under cfg, and the host directories the
// caller must create for them (Edits.Dirs). exists reports whether a host path exists (the
// HAMi-core library and its preload file). Every positional value comes from r's grants in
// PCIOrder.
func Build(cfg Config, r Request, exists func(string) bool) Edits {
	e := Edits{Env: map[string]string{}}
	devs := PCIOrder(r.Grants)
	r.Grants = devs
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
	e.Env[device.EnvGPUUUIDs] = list
	e.Env[device.EnvGPUMemoryMiB] = strconv.FormatInt(total, 10)
	model := device.UnknownModel
	if len(devs) > 0 {
		model = device.RayAcceleratorType(r.Model)
		e.Env[EnvCUDADeviceOrder] = CUDADeviceOrderPCI
	}
	e.Env[device.EnvGPUModel] = model
	switch cfg.Enforcement {
	case EnforceHAMiCore:
		for i, d := range devs {
			e.Env[EnvHAMiMemoryLimitPrefix+strconv.Itoa(i)] = strconv.FormatInt(d.MemoryMiB, 10) + "m"
			if d.CoresPercent > 0 && d.CoresPercent < 100 {
				e.Env[EnvHAMiSMLimit+"_"+strconv.Itoa(i)] = strconv.Itoa(d.CoresPercent)
			}
		}
		e.Env[EnvHAMiLogLevel] = HAMiLogLevel
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
		// HAMi-core brought by the image reads /overrideEnv too: masked whether or not the
		// node's library is mounted.
		e.Mounts = append(e.Mounts, Mount{ContainerPath: HAMiOverrideEnv, HostPath: HAMiOverrideEnvMask, ReadOnly: true})
		switch {
		case cfg.HAMiCacheDir == "":
			e.Env[EnvHAMiSharedCache] = HAMiContainerDir + "/" + r.CacheName + HAMiCacheSuffix
		case ValidCacheName(r.CacheName):
			host := filepath.Join(cfg.HAMiCacheDir, r.CacheName)
			e.Env[EnvHAMiSharedCache] = HAMiContainerCacheDir + "/" + r.CacheName + HAMiCacheSuffix
			e.Mounts = append(e.Mounts, Mount{ContainerPath: HAMiContainerCacheDir, HostPath: host})
			e.Dirs = append(e.Dirs, host)
			e.CacheFile = filepath.Join(host, r.CacheName+HAMiCacheSuffix)
		}
	case EnforceMPS:
		// "<device ordinal>=<limit>" pairs, comma-separated ("0=1G,1=512MB" in NVIDIA's MPS
		// documentation, Appendix: Environment Variables): the ordinal is the client's CUDA
		// ordinal, i.e. the position in the PCI-ordered list, as for CUDA_DEVICE_MEMORY_LIMIT_<i>.
		// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is one value per client: the largest grant's.
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

package deviceplugin

import (
	"path/filepath"
	"strconv"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hami-go/hami-go/pkg/device"
)

// Env names every GPU container gets (docs/components.md).
const (
	EnvNVIDIAVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	EnvCUDAVisibleDevices   = "CUDA_VISIBLE_DEVICES"
	// EnvGPUMemoryMiB is the sum of the container's memory limits over its GPUs, MiB.
	EnvGPUMemoryMiB = "HAMI_GO_GPU_MEMORY_MIB"
	// EnvGPUModel is the GPU model as a Ray label value, e.g. "H100".
	EnvGPUModel = "HAMI_GO_GPU_MODEL"
	// EnvGPUUUIDs lists the container's GPU UUIDs in the positional order.
	EnvGPUUUIDs = "HAMI_GO_GPU_UUIDS"
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
)

// NVIDIA MPS client env (NVIDIA "Multi-Process Service", Appendix: Environment Variables).
const (
	EnvMPSPinnedMemLimit    = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvMPSActiveThreadPct   = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvMPSPipeDirectory     = "CUDA_MPS_PIPE_DIRECTORY"
	CDIKind                 = "hami-go.io/gpu"
	cdiDeviceNameSeparator  = "="
	defaultModelLabelOnNone = "unknown"
)

// responder builds Allocate responses. gpus maps UUID -> GPU (model, index).
type responder struct {
	cfg    Config
	gpus   map[string]device.GPU
	exists func(path string) bool
}

// build answers one container from its claim: one ordered list of physical GPUs (the claimed
// container's devices, each once) gives every positional value (cases C19, C22).
func (r *responder) build(cl Claim) *pluginapi.ContainerAllocateResponse {
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
	devs := cl.Container.Devices
	uuids := make([]string, len(devs))
	var total int64
	for i, d := range devs {
		uuids[i] = d.UUID
		total += d.MemoryMiB
	}
	list := strings.Join(uuids, ",")
	switch r.cfg.DeviceListStrategy {
	case StrategyCDI:
		for _, u := range uuids {
			resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: CDIKind + cdiDeviceNameSeparator + u})
		}
	default:
		resp.Envs[EnvNVIDIAVisibleDevices] = list
	}
	resp.Envs[EnvCUDAVisibleDevices] = list
	resp.Envs[EnvGPUUUIDs] = list
	resp.Envs[EnvGPUMemoryMiB] = strconv.FormatInt(total, 10)
	model := defaultModelLabelOnNone
	if len(devs) > 0 {
		model = RayModel(r.gpus[devs[0].UUID].Model)
	}
	resp.Envs[EnvGPUModel] = model
	cores := 0
	for _, d := range devs {
		if d.CoresPercent > cores {
			cores = d.CoresPercent
		}
	}
	switch r.cfg.Enforcement {
	case EnforceHAMiCore:
		for i, d := range devs {
			resp.Envs[EnvHAMiMemoryLimitPrefix+strconv.Itoa(i)] = strconv.FormatInt(d.MemoryMiB, 10) + "m"
		}
		if cores > 0 && cores < 100 {
			resp.Envs[EnvHAMiSMLimit] = strconv.Itoa(cores)
		}
		resp.Envs[EnvHAMiSharedCache] = HAMiContainerDir + "/" + string(cl.Pod.UID) + "_" + cl.Container.Name + ".cache"
		if r.cfg.MemoryScaling > 1 {
			resp.Envs[EnvHAMiOversubscribe] = "true"
		}
		if r.cfg.HAMiCoreLibrary != "" && r.exists(r.cfg.HAMiCoreLibrary) {
			resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: HAMiContainerLibrary, HostPath: r.cfg.HAMiCoreLibrary, ReadOnly: true})
			preload := filepath.Join(filepath.Dir(r.cfg.HAMiCoreLibrary), HAMiPreloadFile)
			if r.exists(preload) {
				resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: "/etc/ld.so.preload", HostPath: preload, ReadOnly: true})
			} else {
				resp.Envs["LD_PRELOAD"] = HAMiContainerLibrary
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
		resp.Envs[EnvMPSPinnedMemLimit] = strings.Join(lim, ",")
		if cores > 0 && cores < 100 {
			resp.Envs[EnvMPSActiveThreadPct] = strconv.Itoa(cores)
		}
		resp.Envs[EnvMPSPipeDirectory] = r.cfg.MPSPipeDir
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: r.cfg.MPSPipeDir, HostPath: r.cfg.MPSPipeDir})
	}
	return resp
}

// RayModel turns an NVML model name into a short label value: the first token that is not a
// vendor or family word, e.g. "NVIDIA H100 80GB HBM3" -> "H100", "NVIDIA A100-SXM4-80GB" ->
// "A100", "Tesla T4" -> "T4". Empty input gives "unknown".
func RayModel(model string) string {
	for _, t := range device.ModelTokens(model) {
		switch t {
		case "NVIDIA", "TESLA", "GEFORCE", "QUADRO", "RTX":
			continue
		}
		return t
	}
	return defaultModelLabelOnNone
}

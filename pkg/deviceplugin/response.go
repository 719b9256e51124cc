package deviceplugin

import (
	"strings"

	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/ledger"
	"github.com/hami-go/hami-go/pkg/nri"
)

// The plugin's CDI kind. (The env names and enforcement modes are pkg/gpuenv's.)
const (
	CDIKind                = "hami-go.io/gpu"
	cdiDeviceNameSeparator = "="
)

// responder builds Allocate responses. gpus maps UUID -> GPU (model, index).
type responder struct {
	cfg    Config
	gpus   map[string]device.GPU
	exists func(path string) bool
}

// envConfig is the part of the plugin's config the shared env builder reads.
func (c *Config) envConfig() gpuenv.Config { return c.EnvConfig(c.DeviceListStrategy != StrategyCDI) }

// planEdits is what a container's plan gives it at creation: its env, the enforcement's mounts
// and, under the cdi strategy, the fully qualified CDI device names of its GPUs (CDIKind=<UUID>),
// all of which the NRI plugin adds.
type planEdits struct {
	Env        map[string]string
	CDIDevices []string
	// Mounts are the enforcement's mounts (gpuenv.Edits.Mounts: HAMi-core's library and preload
	// file when the host has them, the /overrideEnv mask, the container's cache directory with
	// --hami-core-cache-dir, MPS's pipe directory), and Dirs the host directories they need
	// created. They are decided at the container's creation, not at Allocate, whose answer the
	// kubelet keeps for the pod's life: a library installed after the pod was admitted (the
	// chart's install finishing, a bring-your-own library) reaches its containers, and a
	// container is never given the limits without the library (issue 36 item 4).
	Mounts []gpuenv.Mount
	Dirs   []string
	// CacheFile is the host path of the container's HAMi-core cache file (gpuenv.Edits.CacheFile;
	// "" = none on the host), which the NRI plugin's Plan removes before the container starts.
	CacheFile string
	// DriverCapabilities are what the container's NVIDIA_DRIVER_CAPABILITIES must include
	// (gpuenv.Edits.DriverCapabilities).
	DriverCapabilities string
}

// build gives one container's plan edits from its claim: one ordered list of physical GPUs (the
// claimed container's devices, each once) gives every positional value (cases C19, C22), through
// the builder the DRA driver shares (gpuenv.Build).
func (r *responder) build(cl ledger.Claim) planEdits {
	devs := cl.Container.Devices
	// The cache file is the container's own: "<pod UID>_<container>" names it both in its root
	// filesystem and under the host's --hami-core-cache-dir, and is rebuilt from the claim
	// alone by a restarted plugin.
	req := gpuenv.Request{Grants: make([]gpuenv.Grant, len(devs)), CacheName: containerCacheName(cl.Pod.UID, cl.Container.Name)}
	for i, d := range devs {
		req.Grants[i] = gpuenv.Grant{UUID: d.UUID, PCIBusID: r.gpus[d.UUID].PCIBusID, MemoryMiB: d.MemoryMiB, CoresPercent: d.CoresPercent}
	}
	if len(devs) > 0 {
		req.Model = r.gpus[gpuenv.PCIOrder(req.Grants)[0].UUID].Model
	}
	e := gpuenv.Build(r.cfg.envConfig(), req, r.exists)
	out := planEdits{Env: e.Env, Mounts: e.Mounts, Dirs: e.Dirs, CacheFile: e.CacheFile, DriverCapabilities: e.DriverCapabilities}
	if r.cfg.DeviceListStrategy == StrategyCDI {
		for _, u := range (gpuenv.Request{Grants: gpuenv.PCIOrder(req.Grants)}).UUIDs() {
			out.CDIDevices = append(out.CDIDevices, CDIKind+cdiDeviceNameSeparator+u)
			if r.cfg.ToolkitCDIKind != "" {
				// The toolkit's device brings the driver's libraries (libcuda.so.1,
				// libnvidia-ml.so.1) and its hooks; hami-go's own names only the device nodes
				// (case C53).
				out.CDIDevices = append(out.CDIDevices, r.cfg.ToolkitCDIKind+cdiDeviceNameSeparator+u)
			}
		}
		// The pending answer's value stays: the CDI devices, not the variable, give the GPUs
		// (pendingEnv; the toolkit's own CDI specs set the same value).
		for n, v := range pendingEnv(r.cfg) {
			out.Env[n] = v
		}
	}
	return out
}

// pendingEnv is the protected env the pending answer sets beside the empty marker: under the
// cdi strategy NVIDIA_VISIBLE_DEVICES=void, so that a container the NRI plugin never saw (its
// call timed out, or the plugin died between PreStartContainer and the creation) gets no GPU from
// the NVIDIA runtime, whatever its image's NVIDIA_VISIBLE_DEVICES (the kubelet's env comes after
// the image's, and the toolkit reads the last value: nvidia-container-toolkit v1.20.2
// internal/config/image WithEnv; case C52). The plan sets the same value (build), so the two
// never disagree. Under envvar the plan names the GPUs in that very variable: nothing is set.
func pendingEnv(cfg Config) map[string]string {
	if cfg.DeviceListStrategy != StrategyCDI {
		return nil
	}
	return map[string]string{gpuenv.EnvNVIDIAVisibleDevices: nri.VoidDevices}
}

// pending is the Allocate answer: MarkerEnv, empty, which tells the node agent's NRI plugin
// that the container's plan is still to be applied, and NVIDIA_VISIBLE_DEVICES=void under the
// cdi strategy (pendingEnv). No GPU is named, no limit set and nothing mounted: a container the
// NRI plugin never sees gets no GPU under the cdi strategy, whose devices the NRI plugin adds
// (and the kubelet does not create one while the agent is away: PreStartContainer); the plan
// brings the enforcement's mounts at creation (planEdits.Mounts).
func (r *responder) pending() *pluginapi.ContainerAllocateResponse {
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{device.EnvGPUUUIDs: ""}}
	for n, v := range pendingEnv(r.cfg) {
		resp.Envs[n] = v
	}
	return resp
}

// containerCacheName names a container's HAMi-core cache ("<pod UID>_<container>"): the file in
// its root filesystem, or its directory under --hami-core-cache-dir. A DRA claim's is its bare
// UID, without "_", so neither mode's agent takes the other's for its own.
func containerCacheName(pod types.UID, container string) string {
	return string(pod) + "_" + container
}

// podOfCacheName returns the pod UID of a name containerCacheName made; false for any other
// name (a DRA claim's).
func podOfCacheName(name string) (types.UID, bool) {
	uid, container, ok := strings.Cut(name, "_")
	return types.UID(uid), ok && uid != "" && container != ""
}

package deviceplugin

import (
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/ledger"
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
func (c *Config) envConfig() gpuenv.Config {
	return gpuenv.Config{
		Enforcement:          c.Enforcement,
		NVIDIAVisibleDevices: c.DeviceListStrategy != StrategyCDI,
		MemoryScaling:        c.MemoryScaling,
		HAMiCoreLibrary:      c.HAMiCoreLibrary,
		MPSPipeDir:           c.MPSPipeDir,
	}
}

// build answers one container from its claim: one ordered list of physical GPUs (the claimed
// container's devices, each once) gives every positional value (cases C19, C22), through the
// builder the DRA driver shares (gpuenv.Build).
func (r *responder) build(cl ledger.Claim) *pluginapi.ContainerAllocateResponse {
	devs := cl.Container.Devices
	// The cache file is the container's own (HAMiContainerDir is in its root filesystem, not a
	// host mount), so the container's name is unique enough; the answer names no pod, so that a
	// restarted plugin rebuilds, from the claim alone, the very env the container runs with.
	req := gpuenv.Request{Grants: make([]gpuenv.Grant, len(devs)), CacheName: cl.Container.Name}
	for i, d := range devs {
		req.Grants[i] = gpuenv.Grant{UUID: d.UUID, MemoryMiB: d.MemoryMiB, CoresPercent: d.CoresPercent}
	}
	if len(devs) > 0 {
		req.Model = r.gpus[devs[0].UUID].Model
	}
	e := gpuenv.Build(r.cfg.envConfig(), req, r.exists)
	resp := &pluginapi.ContainerAllocateResponse{Envs: e.Env}
	if r.cfg.DeviceListStrategy == StrategyCDI {
		for _, u := range req.UUIDs() {
			resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: CDIKind + cdiDeviceNameSeparator + u})
		}
	}
	for _, m := range e.Mounts {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	return resp
}

// pending is the Allocate answer: MarkerEnv, empty, which tells the
// NRI env guard that the container's plan is still to be applied (nri.Container.AnswerPending),
// and the mounts of the enforcement mode, which name no GPU. No GPU is named and no limit set:
// a container the guard never sees (it disconnected after Allocate) gets no GPU under the cdi
// strategy, whose devices the guard adds.
func (r *responder) pending() *pluginapi.ContainerAllocateResponse {
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{device.EnvGPUUUIDs: ""}}
	for _, m := range gpuenv.Build(r.cfg.envConfig(), gpuenv.Request{}, r.exists).Mounts {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	return resp
}

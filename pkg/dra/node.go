package dra

import (
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/gpuhealth"
	"github.com/hami-go/hami-go/pkg/nri"
	"github.com/hami-go/hami-go/pkg/preflight"
)

func (d *Driver) sliceConfig() SliceConfig {
	return SliceConfig{SplitCount: d.cfg.SplitCount, MemoryScaling: d.cfg.MemoryScaling, ReservedMemory: d.cfg.ReservedMemory, Enforcement: d.Enforcement()}
}

// Enforcement returns the node's slice enforcement as a fact, checked now on the host
// (nodeagent.Enforcement): published on the devices, exported as a metric, and required by
// every claim the driver prepares.
func (d *Driver) Enforcement() device.Enforcement { return d.enf.State() }

// SetPreflight takes the node's latest preflight report (nodeagent.Preflight); its fail-open
// window is exported with the enforcement.
func (d *Driver) SetPreflight(r preflight.Report) { d.enf.SetPreflight(r) }

// PreflightInput is what the node's preflight checks that only the driver knows; g is its NRI
// plugin (runtime and connection). The driver names devices through CDI only, each GPU also as
// <ToolkitCDIKind>=<UUID> (preflight.FindingToolkitCDISpec, case C56).
func (d *Driver) PreflightInput(g *nri.Plugin) preflight.Input {
	in := d.enf.PreflightInput(g, preflight.StrategyCDI, d.cfg.CDIDir)
	in.ToolkitCDIKind = d.cfg.ToolkitCDIKind
	for _, gpu := range d.gpus {
		in.GPUUUIDs = append(in.GPUUUIDs, gpu.GPU.UUID)
	}
	return in
}

// Health returns the driver's health state machine.
func (d *Driver) Health() *gpuhealth.Health { return d.health }

// GPUs returns the GPUs the driver publishes, in NVML index order.
func (d *Driver) GPUs() []GPUInfo { return append([]GPUInfo(nil), d.gpus...) }

// GPUMemoryMiB is the node's figure of device.ResourceGPUMemory, MiB: the sum of the memory
// capacities of the devices the driver publishes (Devices: BookableMiB of each GPU, after the
// reserve and the memory scaling), what DRA's allocator may place. Tainted (unhealthy) devices
// count (device.NodeGPUMemoryMiB says why).
func (d *Driver) GPUMemoryMiB() int64 {
	var per []int64
	for _, dev := range Devices(d.gpus, d.sliceConfig()) {
		if c, ok := dev.Capacity[draapi.CapacityMemory]; ok {
			per = append(per, c.Value.Value()/MiB)
		}
	}
	return device.NodeGPUMemoryMiB(per)
}

// Resources is what the driver publishes now: one pool named after the node with one slice
// of Devices (health applied as taints), in the configured DeviceOrder of the prepared claims'
// use (Order).
func (d *Driver) Resources() resourceslice.DriverResources {
	gpus := Order(d.gpus, UseOf(d.Prepared()), d.sliceConfig(), d.cfg.DeviceOrder)
	for i := range gpus {
		if st, ok := d.health.Status(gpus[i].GPU.UUID); ok && !st.Healthy {
			gpus[i].Unhealthy = &Unhealthy{XID: st.LastXID, Since: st.Since}
		}
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.cfg.NodeName: {Slices: []resourceslice.Slice{{Devices: Devices(gpus, d.sliceConfig())}}},
	}}
}

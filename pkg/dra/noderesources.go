package dra

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

// NodeResources are the extended resources the DRA driver publishes on its node
// (nodeagent.NodeResourcesPublisher), both synthetic: device.ResourceGPUMemory (GPUMemoryMiB,
// MiB) and device.ResourceGPUCores (100 percent per GPU the driver publishes a device of). The
// webhook writes each GPU container's figures of both on the pod, so NodeResourcesFit and the
// kubelet's admission count them against these totals, and a ResourceQuota caps them.
func (d *Driver) NodeResources() nodeagent.NodeResources {
	var gpus int64
	for _, dev := range Devices(d.gpus, d.sliceConfig()) {
		if _, ok := dev.Capacity[draapi.CapacityMemory]; ok {
			gpus++
		}
	}
	return nodeagent.NodeResources{
		device.ResourceGPUMemory: d.GPUMemoryMiB(),
		device.ResourceGPUCores:  gpus * 100,
	}
}

// NodeResourceNames are the names NodeResources publishes, sorted, which the driver withdraws
// when it leaves its node for good.
func (d *Driver) NodeResourceNames() []corev1.ResourceName {
	return slices.Sorted(maps.Keys(d.NodeResources()))
}

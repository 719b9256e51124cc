package device

import (
	"strconv"
	"strings"
)

// DeviceGrant is one physical GPU handed to a container, with the slice's limits on it.
type DeviceGrant struct {
	// UUID of the physical GPU.
	UUID string `json:"uuid"`
	// MemoryMiB is the container's memory limit on this GPU, MiB.
	MemoryMiB int64 `json:"memoryMiB"`
	// CoresPercent is the container's compute limit on this GPU, percent (0 = no limit).
	CoresPercent int `json:"coresPercent,omitempty"`
}

// ContainerAllocation is what one container got. Devices are in the order the extender chose
// them; every positional limit (CUDA_VISIBLE_DEVICES, per-device memory limits) is built from this
// one ordered list, each GPU once (cases C19, C22).
type ContainerAllocation struct {
	// Name of the container (allocations are looked up by name, case C02).
	Name string `json:"name"`
	// Kind is init, sidecar or app: with it the allocation alone says what the pod is charged
	// per GPU (the phase rule of PodRequest.Phases).
	Kind ContainerKind `json:"kind"`
	// Devices granted, each GPU once.
	Devices []DeviceGrant `json:"devices"`
	// SliceIDs are the kubelet device IDs of a claim that a device plugin matched at Allocate
	// before it applied each pod's own plan at container creation (claimed records only). No
	// longer written; decoded so that such records still restore during a rolling upgrade.
	// Removed in v0.3.0.
	SliceIDs []string `json:"sliceIDs,omitempty"`
}

// Allocation is a pod's GPUs on one node, per container. The extender writes it as the planned
// allocation (AnnoPlanned); the device plugin writes what it handed out as the claimed one
// (AnnoClaimed).
type Allocation struct {
	// Node the pod was placed on.
	Node string `json:"node"`
	// Containers that use GPUs, in the kubelet's order (init, then app).
	Containers []ContainerAllocation `json:"containers"`
}

// Container returns the allocation of the named container, or nil.
func (a *Allocation) Container(name string) *ContainerAllocation {
	for i := range a.Containers {
		if a.Containers[i].Name == name {
			return &a.Containers[i]
		}
	}
	return nil
}

// SlotKey renders an allocation positionally: the kind and the devices (UUID, MiB, percent) of
// each container, in order; container names and slice IDs are left out. Two allocations with
// the same SlotKey grant the same devices and limits, so one may stand for the other (the
// extender compares a pod's records with it).
func SlotKey(a *Allocation) string {
	var b strings.Builder
	for _, c := range a.Containers {
		b.WriteString(string(c.Kind))
		for _, d := range c.Devices {
			b.WriteByte(' ')
			b.WriteString(d.UUID)
			b.WriteByte(':')
			b.WriteString(strconv.FormatInt(d.MemoryMiB, 10))
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(d.CoresPercent))
		}
		b.WriteByte(';')
	}
	return b.String()
}

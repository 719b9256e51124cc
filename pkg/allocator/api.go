// Package allocator is the pure placement core: Fit (does a pod fit a node, and if not, why),
// Score (node binpack/spread, 0..10) and Pick (which GPUs for each container). It imports no
// Kubernetes client and does no I/O; callers pass the node's Inventory and current usage in.
//
// Capacity of one GPU: at most inv.SplitCount sharers (slices), at most inv.CapacityMiB(gpu) MiB
// (memory scaling factor), at most 100% cores; a container with 100% cores is exclusive: it needs
// a GPU nobody else uses, and nobody joins it. Unhealthy and MIG-enabled GPUs are never chosen.
// A pod is charged per GPU, per field, the largest sum over its phases (device.PodRequest.Phases,
// case C03), so init containers and app containers may reuse one slice's capacity.
package allocator

import "github.com/hami-go/hami-go/pkg/device"

// GPUUsage is what is booked on one GPU.
type GPUUsage struct {
	// MemoryMiB booked, MiB (may reach MemoryMiB × MemoryScaling of the inventory).
	MemoryMiB int64
	// CoresPercent booked, percent (at most 100).
	CoresPercent int
	// Sharers is the number of slices (containers) on the GPU (at most the split count).
	Sharers int
	// Exclusive is true while a container with 100% cores holds the GPU.
	Exclusive bool
}

// NodeUsage is a node's booked usage by GPU UUID. A missing UUID means nothing is booked.
type NodeUsage map[string]GPUUsage

// Charge is what one pod's allocation books, by GPU UUID: per GPU the largest figure of any of
// the pod's phases (device.PodRequest.Phases, case C03).
type Charge map[string]GPUUsage

// Fit reports whether req fits on the node described by inv with usage used. It returns nil or
// an *Unfit whose Reason a user can act on, for example
// `container "train" (1 GPU, 8000 MiB, 30% cores): GPU-0 2000 of 24576 MiB free; GPU-1 10/10 slices used; GPU-2 unhealthy`
// (no node name: the caller adds it). A nil inventory, a node without GPUs or a split count
// below 1 is an *Unfit too. A request without GPU containers fits. Fit allocates nothing on the
// success path for nodes of up to 16 GPUs and pods of up to 8 GPU containers.
func Fit(inv *device.Inventory, used NodeUsage, req *device.PodRequest) error {
	if req == nil || len(req.Containers) == 0 {
		return nil
	}
	if inv != nil && len(req.Containers) == 1 && fitsAlone(inv, used, req) {
		return nil
	}
	var sc scratch
	st, bad := newState(&sc, inv, used, req)
	if bad != "" {
		return &Unfit{Reason: bad}
	}
	if failed := st.place(); failed >= 0 {
		return &Unfit{Reason: st.reason(failed)}
	}
	return nil
}

// Unfit is Fit's and Pick's error: why a pod does not fit a node.
type Unfit struct{ Reason string }

func (u *Unfit) Error() string { return u.Reason }

// Score rates the node for req by req.NodePolicy, 0..10 (10 = best): binpack prefers the node
// whose GPUs are fullest after placing req, spread the emptiest. Fullness is the mean of the
// node's booked memory (MiB over the capacity of its healthy, non-MIG GPUs) and booked slices
// (over split count × those GPUs), rounded to tenths. A node req does not fit scores 0.
func Score(inv *device.Inventory, used NodeUsage, req *device.PodRequest) int {
	if req == nil {
		return 0
	}
	if inv != nil && len(req.Containers) == 1 {
		if s, ok := fitScoreAlone(inv, nil, used, req); ok {
			return s
		}
	}
	return scoreFull(inv, used, req)
}

// scoreFull is Score by the full placement.
func scoreFull(inv *device.Inventory, used NodeUsage, req *device.PodRequest) int {
	var sc scratch
	st, bad := newState(&sc, inv, used, req)
	if bad != "" || st.place() >= 0 {
		return 0
	}
	var t nodeTotals
	for i := range st.slots {
		s := &st.slots[i]
		if s.static == refUnhealthy || s.static == refMIG {
			continue
		}
		t.add(s.used.MemoryMiB+s.charge.MemoryMiB, s.capMiB, s.used.Sharers+s.charge.Sharers, st.split)
	}
	return t.score(req.NodePolicy)
}

// nodeTotals sums a node's booked memory and slices over its healthy, non-MIG GPUs.
type nodeTotals struct{ mem, capMiB, sharers, slices int64 }

func (t *nodeTotals) add(mem, capMiB int64, sharers, split int) {
	t.mem += mem
	t.capMiB += capMiB
	t.sharers += int64(sharers)
	t.slices += int64(split)
}

// score turns the totals into 0..10 by policy: fullness in thousandths is
// (mem/capMiB + sharers/slices) / 2, rounded to tenths; spread scores 10 - binpack.
func (t *nodeTotals) score(p device.Policy) int {
	if t.capMiB == 0 || t.slices == 0 {
		return 0
	}
	f := (t.mem*1000/t.capMiB + t.sharers*1000/t.slices) / 2
	f = min(max(f, 0), 1000)
	if p == device.Spread {
		f = 1000 - f
	}
	return int((f + 50) / 100)
}

// Pick chooses each GPU container's devices on the node by req.GPUPolicy and returns the
// allocation (Node = inv.Node; containers by name, in req order; each GPU at most once per
// container; memory in MiB resolved from percentages). Multi-GPU containers prefer
// NVLink-connected sets, and a single NUMA node (required when req.NUMABind). It fails with
// *Unfit exactly when Fit does. A request without GPU containers gets an empty allocation.
func Pick(inv *device.Inventory, used NodeUsage, req *device.PodRequest) (device.Allocation, error) {
	if req == nil || len(req.Containers) == 0 {
		a := device.Allocation{}
		if inv != nil {
			a.Node = inv.Node
		}
		return a, nil
	}
	var sc scratch
	st, bad := newState(&sc, inv, used, req)
	if bad != "" {
		return device.Allocation{}, &Unfit{Reason: bad}
	}
	if failed := st.place(); failed >= 0 {
		return device.Allocation{}, &Unfit{Reason: st.reason(failed)}
	}
	a := device.Allocation{Node: inv.Node, Containers: make([]device.ContainerAllocation, 0, len(req.Containers))}
	for ci := range req.Containers {
		c := &req.Containers[ci]
		if c.Count <= 0 {
			continue
		}
		ca := device.ContainerAllocation{Name: c.Name, Kind: c.Kind, Devices: make([]device.DeviceGrant, 0, c.Count)}
		if ca.Kind == "" {
			ca.Kind = device.KindApp
		}
		for _, si := range st.chosen[st.off[ci]:st.off[ci+1]] {
			g := st.slots[si].g
			ca.Devices = append(ca.Devices, device.DeviceGrant{UUID: g.UUID, MemoryMiB: memOn(c, g), CoresPercent: c.CoresPercent})
		}
		a.Containers = append(a.Containers, ca)
	}
	return a, nil
}

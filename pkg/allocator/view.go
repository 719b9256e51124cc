package allocator

import (
	"math"

	"github.com/hami-go/hami-go/pkg/device"
)

// ViewGPUs is the most GPUs a NodeView holds (the 8-GPU HGX/DGX board; larger nodes have no
// view and use FitScoreAt).
const ViewGPUs = 8

// NodeView is one node's inventory and booked usage packed into a single value without
// pointers (ViewGPUs entries of 32 bytes and a header), for FitScoreView. A Filter over
// thousands of nodes is bound by memory reads, not arithmetic: the inventory's GPU structs, the
// usage slice and the strings they point to sit in different places of the heap, one cache miss
// each per node; a view embedded in the caller's per-node state is read in a few consecutive
// cache lines. The zero value holds nothing (FitScoreView then declines). A view is a snapshot:
// rebuild it with Set whenever the inventory or the usage changes.
type NodeView struct {
	gpu   [ViewGPUs]viewGPU
	n     int32 // GPUs held, 0 = no view
	split int32 // split count
}

// viewGPU is what the one-container fast path reads of one GPU.
type viewGPU struct {
	capMiB   int64 // booking capacity, MiB (Inventory.CapacityMiB: memory × scaling factor)
	usedMiB  int64 // booked memory, MiB
	totalMiB int32 // physical memory, MiB: the base of a percentage request (ContainerRequest.MemoryOn)
	cores    int32 // booked cores, percent
	sharers  int32 // booked slices
	usable   bool  // healthy and not in MIG mode
	excl     bool  // held by a container with 100% cores
}

// Set packs inv and at (booked usage by GPU position, as UsageAt returns it) into v. It leaves
// v empty, and reports false, when inv is nil, has no GPU or more than ViewGPUs, at does not
// have one entry per GPU, or a figure does not fit the packed fields (memory ≥ 2^31 MiB).
func (v *NodeView) Set(inv *device.Inventory, at []GPUUsage) bool {
	*v = NodeView{}
	if inv == nil || len(inv.GPUs) == 0 || len(inv.GPUs) > ViewGPUs || len(at) != len(inv.GPUs) || inv.SplitCount < 1 {
		return false
	}
	for i := range inv.GPUs {
		g, u := &inv.GPUs[i], at[i]
		if g.MemoryMiB < 0 || g.MemoryMiB > math.MaxInt32 || u.CoresPercent > math.MaxInt32 || u.Sharers > math.MaxInt32 {
			*v = NodeView{}
			return false
		}
		v.gpu[i] = viewGPU{
			capMiB: inv.CapacityMiB(g), usedMiB: u.MemoryMiB, totalMiB: int32(g.MemoryMiB),
			cores: int32(u.CoresPercent), sharers: int32(u.Sharers),
			usable: g.Healthy && !g.MIGEnabled, excl: u.Exclusive,
		}
	}
	v.n, v.split = int32(len(inv.GPUs)), int32(inv.SplitCount)
	return true
}

// FitScoreView is FitScoreAt's answer for the common pod, read from a NodeView: one GPU
// container (any count, memory in MiB or percent, cores), no UUID or model lists, no NUMA
// binding of several GPUs. ok is true when the pod fits and the score (0..10 by
// req.NodePolicy) is exactly what FitScoreAt gives for the view's inventory and usage; ok is
// false when the pod does not fit, or is not of that shape, or the view is empty: the caller then
// asks FitScoreAt, which also says why a pod does not fit.
func FitScoreView(v *NodeView, req *device.PodRequest) (score int, ok bool) {
	if v.n == 0 || req == nil || len(req.Containers) != 1 || len(req.UseUUIDs) > 0 || len(req.AvoidUUIDs) > 0 ||
		len(req.UseModels) > 0 || len(req.AvoidModels) > 0 {
		return 0, false
	}
	c := &req.Containers[0]
	n := c.Count
	if n <= 0 || n > int(v.n) || (req.NUMABind && n > 1) {
		return 0, false
	}
	cores, excl := int32(max(c.CoresPercent, 0)), c.Exclusive()
	var t nodeTotals
	found := 0
	mem := int64(-1)
	for i := range v.gpu[:v.n] {
		g := &v.gpu[i]
		if !g.usable {
			continue
		}
		m := max(c.MemoryOn(int64(g.totalMiB)), 0)
		if mem < 0 {
			mem = m
		} else if m != mem {
			return 0, false // the node's totals would depend on which GPUs Pick takes
		}
		// capacityRefusal with nothing of the pod booked yet.
		// In int64, so that no sum of packed int32 figures wraps.
		if !g.excl && !(excl && g.sharers > 0) && int64(g.sharers)+1 <= int64(v.split) && g.usedMiB+m <= g.capMiB && int64(g.cores)+int64(cores) <= 100 {
			found++
		}
		t.add(g.usedMiB, g.capMiB, int(g.sharers), int(v.split))
	}
	if found < n {
		return 0, false
	}
	t.mem += int64(n) * mem
	t.sharers += int64(n)
	return t.score(req.NodePolicy), true
}

// Package allocator is the pure placement core: Fit (does a pod fit a node, and if not, why),
// Score (node binpack/spread, 0..10) and Pick (which GPUs for each container). It imports no
// Kubernetes client and does no I/O; callers pass the node's Inventory and current usage in.
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

// ChargeOf computes the charge of an allocation (planned or claimed) from the allocation alone.
func ChargeOf(a *device.Allocation) Charge { panic("not implemented") }

// Add books c onto u. Sub releases it (never below zero).
func (u NodeUsage) Add(c Charge) { panic("not implemented") }
func (u NodeUsage) Sub(c Charge) { panic("not implemented") }

// Fit reports whether req fits on the node described by inv with usage used. It returns nil or
// an *Unfit whose Reason a user can act on ("GPU-3: 2000 MiB free, 8000 requested").
func Fit(inv *device.Inventory, used NodeUsage, req *device.PodRequest) error {
	panic("not implemented")
}

// Unfit is Fit's and Pick's error: why a pod does not fit a node.
type Unfit struct{ Reason string }

func (u *Unfit) Error() string { return u.Reason }

// Score rates the node for req by req.NodePolicy, 0..10 (10 = best): binpack prefers the node
// whose GPUs are fullest after placing req, spread the emptiest. A node req does not fit scores 0.
func Score(inv *device.Inventory, used NodeUsage, req *device.PodRequest) int {
	panic("not implemented")
}

// Pick chooses each GPU container's devices on the node by req.GPUPolicy and returns the
// allocation (Node = inv.Node; containers by name, in req order; each GPU at most once per
// container; memory in MiB resolved from percentages). Multi-GPU containers prefer
// NVLink-connected sets, and a single NUMA node (required when req.NUMABind). It fails with
// *Unfit exactly when Fit does.
func Pick(inv *device.Inventory, used NodeUsage, req *device.PodRequest) (device.Allocation, error) {
	panic("not implemented")
}

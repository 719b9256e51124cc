package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/dra"
	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/fake"
)

// Pod is one pod of the workload: GPUs devices, each with MemMiB MiB and Cores percent.
type Pod struct {
	GPUs   int
	MemMiB int64
	Cores  int
}

// Workload is n pods drawn from seed: one-GPU pods of 1000..40000 MiB (1000 MiB steps) and
// 0..50 % cores (5 % steps); twoGPUPercent of them ask two GPUs of that size each.
func Workload(seed uint64, n, twoGPUPercent int) []Pod {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]Pod, n)
	for i := range out {
		p := Pod{GPUs: 1, MemMiB: int64(1+r.IntN(40)) * 1000, Cores: 5 * r.IntN(11)}
		if r.IntN(100) < twoGPUPercent {
			p.GPUs = 2
		}
		out[i] = p
	}
	return out
}

// Fleet is the simulated cluster: nodes of GPUs identical H100 80 GB (the fake dgxh100
// fleet's memory), with the driver's split count and no reserve.
type Fleet struct {
	Nodes   int
	GPUs    int
	MemMiB  int64
	Split   int
	Slice   dra.SliceConfig
	nodeGPU [][]dra.GPUInfo
}

// NewFleet builds the GPUs of every node.
func NewFleet(nodes, gpus int, memMiB int64, split int) *Fleet {
	f := &Fleet{Nodes: nodes, GPUs: gpus, MemMiB: memMiB, Split: split,
		Slice: dra.SliceConfig{SplitCount: split, MemoryScaling: 1}}
	for n := 0; n < nodes; n++ {
		var gs []dra.GPUInfo
		for i := 0; i < gpus; i++ {
			gs = append(gs, dra.GPUInfo{GPU: device.GPU{UUID: fake.GPUUUID(nodeName(n), i), Index: i, Model: "NVIDIA H100 80GB HBM3",
				MemoryMiB: memMiB, NUMANode: i / 4, Healthy: true}})
		}
		f.nodeGPU = append(f.nodeGPU, gs)
	}
	return f
}

func nodeName(n int) string { return "node-" + strconv.Itoa(n) }

// Result is one run: how many pods were placed before the first refusal and each GPU's
// booked memory (MiB) and sharers at that point.
type Result struct {
	Placed  int
	MemMiB  []int64
	Sharers []int64
}

// RunHAMi places the pods in order with pkg/allocator (the extender's Fit, Score and Pick) under
// the binpack GPU and node policies; equal node scores are broken by r, as kube-scheduler
// picks among its best nodes at random.
func RunHAMi(f *Fleet, pods []Pod, r *rand.Rand) Result {
	invs := make([]*device.Inventory, f.Nodes)
	used := make([]allocator.NodeUsage, f.Nodes)
	for n := range invs {
		inv := &device.Inventory{Node: nodeName(n), SplitCount: f.Split, MemoryScaling: 1}
		for _, g := range f.nodeGPU[n] {
			inv.GPUs = append(inv.GPUs, g.GPU)
		}
		invs[n], used[n] = inv, allocator.NodeUsage{}
	}
	placed := 0
	for i, p := range pods {
		req := &device.PodRequest{Containers: []device.ContainerRequest{{Name: "main", Kind: device.KindApp, Count: p.GPUs,
			MemoryMiB: p.MemMiB, CoresPercent: p.Cores}}, GPUPolicy: device.Binpack, NodePolicy: device.Binpack}
		best, bestScore, ties := -1, -1, 0
		for n := range invs {
			if allocator.Fit(invs[n], used[n], req) != nil {
				continue
			}
			s := allocator.Score(invs[n], used[n], req)
			switch {
			case s > bestScore:
				best, bestScore, ties = n, s, 1
			case s == bestScore:
				ties++
				if r.IntN(ties) == 0 {
					best = n
				}
			}
		}
		if best < 0 {
			break
		}
		a, err := allocator.Pick(invs[best], used[best], req)
		if err != nil {
			panic(fmt.Sprintf("pod %d: Pick after Fit: %v", i, err))
		}
		used[best].Add(allocator.ChargeOf(&a))
		placed++
	}
	res := Result{Placed: placed}
	for n := range invs {
		for _, g := range invs[n].GPUs {
			u := used[n][g.UUID]
			res.MemMiB = append(res.MemMiB, u.MemoryMiB)
			res.Sharers = append(res.Sharers, int64(u.Sharers))
		}
	}
	return res
}

// classes is the DeviceClass lister of the chart's class gpu.hami-go.io.
type classes struct{ c *resourceapi.DeviceClass }

func (l classes) List() ([]*resourceapi.DeviceClass, error) {
	return []*resourceapi.DeviceClass{l.c}, nil
}
func (l classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if name != l.c.Name {
		return nil, fmt.Errorf("no DeviceClass %q", name)
	}
	return l.c, nil
}

// Features are kube-scheduler v1.37's default DRA features (the gates on by default there:
// DRAConsumableCapacity, DRAPartitionableDevices, DRAFractionalCapacityRange,
// DRADeviceBindingConditions (beta); DRAPrioritizedList, DRADeviceTaints, DRAAdminAccess,
// DRAResourceClaimDeviceStatus (GA)), as the dynamicresources plugin passes them.
var Features = structured.Features{AdminAccess: true, PrioritizedList: true, PartitionableDevices: true, DeviceTaints: true,
	DeviceBindingAndStatus: true, ConsumableCapacity: true, FractionalCapacityRange: true}

// DRAMode is how the driver orders its devices in the simulation: Order, and Lag, the number
// of pods placed cluster-wide between two republishes (1 = the order is current at every
// allocation; larger models a burst that the scheduler places before the driver has prepared
// the claims and republished).
type DRAMode struct {
	Order dra.DeviceOrder
	Lag   int
	// MostAllocated scores the feasible nodes as a kube-scheduler profile with NodeResourcesFit's
	// MostAllocated strategy on hami-go.io/gpu-memory alone does (docs/dra.md, "Packing under
	// concurrency"): booked GPU memory with the pod's over the node's, times 100, rounded down;
	// the best score wins, ties at random. Off: every feasible node ties (kube-scheduler's
	// defaults score no device).
	MostAllocated bool
}

// RunDRA places the pods in order through kube-scheduler's device allocator
// (structured.NewAllocator / Allocate, one allocator per pod as the dynamicresources plugin
// builds one per scheduling cycle) over the ResourceSlices pkg/dra builds (dra.Order and
// dra.Devices), one claim per pod of the chart's DeviceClass with the pod's capacity requests
// per device (count 2 for two GPUs). Every node that can allocate the claim is feasible; the
// node is chosen among them by r (kube-scheduler does not score devices: the plugin's Score
// only ranks prioritized-list subrequests, so all these nodes tie).
func RunDRA(ctx context.Context, f *Fleet, pods []Pod, m DRAMode, r *rand.Rand) (Result, error) {
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: draapi.DriverName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "` + draapi.DriverName + `"`}}}}}
	state := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	celCache := cel.NewCache(10, cel.Features{})
	nodes := make([]*v1.Node, f.Nodes)
	use := make([]map[string]dra.GPUUse, f.Nodes)       // what the claims hold now
	published := make([]map[string]dra.GPUUse, f.Nodes) // what the driver last published by
	byName := make([]map[string]string, f.Nodes)        // device name -> UUID
	for n := range nodes {
		nodes[n] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(n)}}
		use[n], published[n], byName[n] = map[string]dra.GPUUse{}, map[string]dra.GPUUse{}, map[string]string{}
		for _, g := range f.nodeGPU[n] {
			byName[n][dra.DeviceName(g.GPU.Index)] = g.GPU.UUID
		}
	}
	slices := make([]*resourceapi.ResourceSlice, f.Nodes)
	publish := func() {
		for n := range nodes {
			published[n] = clone(use[n])
			name := nodes[n].Name
			slices[n] = &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu.hami-go.io"},
				Spec: resourceapi.ResourceSliceSpec{Driver: draapi.DriverName, NodeName: &name,
					Pool:    resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1},
					Devices: dra.Devices(dra.Order(f.nodeGPU[n], published[n], f.Slice, m.Order), f.Slice)}}
		}
	}
	publish()
	lag := max(m.Lag, 1)
	placed := 0
	for i, p := range pods {
		claim := podClaim(i, p)
		alloc, err := structured.NewAllocator(ctx, Features, state, classes{class}, slices, celCache)
		if err != nil {
			return Result{}, err
		}
		best, ties, bestScore := -1, 0, int64(-1)
		var bestRes resourceapi.AllocationResult
		for n, node := range nodes {
			res, err := alloc.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
			if err != nil {
				return Result{}, fmt.Errorf("pod %d on %s: %w", i, node.Name, err)
			}
			if len(res) == 0 {
				continue
			}
			var score int64
			if m.MostAllocated {
				score = mostAllocated(use[n], int64(p.GPUs)*p.MemMiB, int64(f.GPUs)*f.MemMiB)
			}
			switch {
			case score > bestScore:
				bestScore, ties = score, 0
				fallthrough
			case score == bestScore: // reservoir sampling among the best: uniform
				ties++
				if r.IntN(ties) == 0 {
					best, bestRes = n, res[0]
				}
			}
		}
		if best < 0 {
			break
		}
		for _, d := range bestRes.Devices.Results {
			id := structured.MakeDeviceID(d.Driver, d.Pool, d.Device)
			state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, d.ShareID))
			state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, d.ConsumedCapacity))
			uuid := byName[best][d.Device]
			u := use[best][uuid]
			mem := d.ConsumedCapacity[draapi.CapacityMemory]
			sh := d.ConsumedCapacity[draapi.CapacitySharers]
			u.MemoryMiB += mem.Value() / dra.MiB
			u.Sharers += sh.Value()
			use[best][uuid] = u
		}
		placed++
		if placed%lag == 0 {
			publish()
		}
	}
	res := Result{Placed: placed}
	for n := range nodes {
		for _, g := range f.nodeGPU[n] {
			u := use[n][g.GPU.UUID]
			res.MemMiB = append(res.MemMiB, u.MemoryMiB)
			res.Sharers = append(res.Sharers, u.Sharers)
		}
	}
	return res, nil
}

// mostAllocated is NodeResourcesFit's MostAllocated score of a node on one resource: the
// node's booked GPU memory (use, MiB) plus the pod's (podMiB) over the node's (nodeMiB), times
// 100, rounded down (kube-scheduler's mostRequestedScore).
func mostAllocated(use map[string]dra.GPUUse, podMiB, nodeMiB int64) int64 {
	req := podMiB
	for _, u := range use {
		req += u.MemoryMiB
	}
	if nodeMiB == 0 || req > nodeMiB {
		return 0
	}
	return req * 100 / nodeMiB
}

func clone(m map[string]dra.GPUUse) map[string]dra.GPUUse {
	out := make(map[string]dra.GPUUse, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// podClaim is the claim the webhook writes for p (docs/dra.md, "Claim shapes"): one request of
// p.GPUs devices, each consuming p.MemMiB and p.Cores.
func podClaim(i int, p Pod) *resourceapi.ResourceClaim {
	caps := map[resourceapi.QualifiedName]resource.Quantity{
		draapi.CapacityMemory: *resource.NewQuantity(p.MemMiB*dra.MiB, resource.BinarySI),
	}
	if p.Cores > 0 {
		caps[draapi.CapacityCores] = *resource.NewQuantity(int64(p.Cores), resource.DecimalSI)
	}
	name := "pod-" + strconv.Itoa(i)
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: draapi.DriverName,
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(p.GPUs),
				Capacity: &resourceapi.CapacityRequirements{Requests: caps}},
		}}}},
	}
}

package main

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/hami-go/hami-go/pkg/dra"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// filterNodes is how many idle nodes one pod's DRA Filter is timed against: scheduler_perf's
// 500Nodes, where hami-go's claims place at 0.77 of plain ones (docs/bench/report.md, section 3).
const filterNodes = 500

// BenchmarkDRAFilter times kube-scheduler's DynamicResources Filter for one pod over
// filterNodes idle nodes: one structured.NewAllocator (the plugin's PreFilter builds one per
// pod) and its Allocate on every node (the plugin's Filter, once per node), with kube-scheduler
// v1.37's default DRA features (Features). Every node publishes 8 H100s of 81920 MiB, and
// elsewhere in the cluster `claims` claims are already allocated. Two kinds, the same devices:
//
//   - slices: the devices as pkg/dra publishes them (allowMultipleAllocations; consumable
//     memory, cores and sharers, split count 10) and hami-go's claim, one device with 4000 MiB
//     and 10 % cores (the webhook's shape, docs/dra.md "Claim shapes"). Each claim allocated
//     elsewhere is a share: an entry of AllocatedSharedDeviceIDs and AggregatedCapacity.
//   - plain: the same devices without allowMultipleAllocations and capacities, and a claim of
//     one whole device. Each claim allocated elsewhere is an entry of AllocatedDevices.
//
// ns/op is one pod's Filter over all the nodes. A node's answer does not depend on other
// nodes' claims, so neither should its cost; in v0.37.2's allocator the slices kind's does:
// deviceCapacityInUse ranges over every share in the cluster for each candidate device no
// claim uses yet (hack/dra-repro/capacity-scan, where compare.sh runs this benchmark against
// the allocator with the proposed fix).
func BenchmarkDRAFilter(b *testing.B) {
	for _, kind := range []string{"plain", "slices"} {
		for _, claims := range []int{0, 1000, 8000} {
			b.Run(fmt.Sprintf("%s/claims=%d", kind, claims), func(b *testing.B) {
				benchDRAFilter(b, kind == "slices", claims)
			})
		}
	}
}

func benchDRAFilter(b *testing.B, shared bool, claims int) {
	ctx := context.Background()
	f := NewFleet(filterNodes, 8, 81920, 10)
	nodes := make([]*v1.Node, f.Nodes)
	slices := make([]*resourceapi.ResourceSlice, f.Nodes)
	for n := range nodes {
		name := nodeName(n)
		nodes[n] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		devs := dra.Devices(dra.Order(f.nodeGPU[n], nil, f.Slice, dra.OrderIndex), f.Slice)
		if !shared {
			for i := range devs {
				devs[i].AllowMultipleAllocations, devs[i].Capacity = nil, nil
			}
		}
		slices[n] = &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + draapi.DriverName},
			Spec: resourceapi.ResourceSliceSpec{Driver: draapi.DriverName, NodeName: &name,
				Pool: resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1}, Devices: devs}}
	}
	claim := podClaim(0, Pod{GPUs: 1, MemMiB: 4000, Cores: 10})
	if !shared {
		claim.Spec.Devices.Requests[0].Exactly.Capacity = nil
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: draapi.DriverName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "` + draapi.DriverName + `"`}}}}}
	state := allocatedElsewhere(shared, claims)
	celCache := cel.NewCache(10, cel.Features{})
	pod := []*resourceapi.ResourceClaim{claim}
	for b.Loop() {
		alloc, err := structured.NewAllocator(ctx, Features, state, classes{class}, slices, celCache)
		if err != nil {
			b.Fatal(err)
		}
		for _, node := range nodes {
			res, err := alloc.Allocate(ctx, node, pod)
			if err != nil {
				b.Fatalf("%s: %v", node.Name, err)
			}
			if len(res) != 1 || len(res[0].Devices.Results) != 1 || res[0].Devices.Results[0].Device != dra.DeviceName(0) {
				b.Fatalf("%s: allocated %+v, want %s of the idle node", node.Name, res, dra.DeviceName(0))
			}
			if got := res[0].Devices.Results[0].ShareID != nil; got != shared {
				b.Fatalf("%s: a share ID %v, want one: %v", node.Name, got, shared)
			}
		}
	}
}

// allocatedElsewhere is the state of a cluster where n claims are allocated on other nodes'
// GPUs (pools busy-<i/8>, one claim per GPU): shares of 4000 MiB and 10 % cores (shared), or
// whole devices.
func allocatedElsewhere(shared bool, n int) structured.AllocatedState {
	state := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	for i := range n {
		id := structured.MakeDeviceID(draapi.DriverName, "busy-"+strconv.Itoa(i/8), dra.DeviceName(i%8))
		if !shared {
			state.AllocatedDevices.Insert(id)
			continue
		}
		share := types.UID("share-" + strconv.Itoa(i))
		state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, &share))
		state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, map[resourceapi.QualifiedName]resource.Quantity{
			draapi.CapacityMemory:  *resource.NewQuantity(4000*dra.MiB, resource.BinarySI),
			draapi.CapacityCores:   *resource.NewQuantity(10, resource.DecimalSI),
			draapi.CapacitySharers: *resource.NewQuantity(1, resource.DecimalSI),
		}))
	}
	return state
}

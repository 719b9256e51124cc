package main

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuview"
)

func rayTestPod(name string) rayPod {
	return rayPod{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ray-demo", Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ray-worker"}}},
	}}
}

// In DRA mode a worker's allocation is what its claims were allocated (gpuview's slices), in the
// device plugin's allocation shape, so the report checks both modes with one rule.
func TestDRAAllocations(t *testing.T) {
	node := &gpuview.Node{Name: "hami-node1", Mode: gpuview.ModeDRA, SplitCount: 10, GPUs: []gpuview.GPU{
		{Index: 0, UUID: "GPU-a", CapacityMiB: 81559, Slices: []gpuview.Slice{
			{Namespace: "ray-demo", Pod: "w1", Container: "gpu", Claim: "w1-gpu-x", MemoryMiB: 20000, CoresPercent: 25},
			{Namespace: "other", Pod: "w1", Container: "gpu", Claim: "w1-other", MemoryMiB: 100},
			{Namespace: "ray-demo", Pod: "", Container: "gpu", Claim: "unreserved", MemoryMiB: 100},
		}},
		{Index: 1, UUID: "GPU-b", CapacityMiB: 81559, Slices: []gpuview.Slice{
			{Namespace: "ray-demo", Pod: "w2", Container: "gpu", Claim: "w2-gpu-y", MemoryMiB: 20000, CoresPercent: 25},
		}},
	}}
	pods := []rayPod{rayTestPod("head"), rayTestPod("w1"), rayTestPod("w2")}
	draAllocations(node, pods)
	if pods[0].alloc != nil {
		t.Errorf("head: allocation %+v, want none", pods[0].alloc)
	}
	want := &device.Allocation{Node: "hami-node1", Containers: []device.ContainerAllocation{{
		Name: "ray-worker", Kind: device.KindApp, Devices: []device.DeviceGrant{{UUID: "GPU-a", MemoryMiB: 20000, CoresPercent: 25}},
	}}}
	if !reflect.DeepEqual(pods[1].alloc, want) {
		t.Errorf("w1: allocation %+v, want %+v", pods[1].alloc, want)
	}
	if got := pods[2].alloc.Containers[0].Devices; len(got) != 1 || got[0].UUID != "GPU-b" {
		t.Errorf("w2: devices %+v, want GPU-b", got)
	}
	wantLine := "ResourceClaim w1-gpu-x (request gpu): GPU-0 GPU-a, memory 20000 MiB, cores 25%"
	if !reflect.DeepEqual(pods[1].claims, []string{wantLine}) {
		t.Errorf("w1 claim lines %q, want [%q]", pods[1].claims, wantLine)
	}
	inv, err := draInventory(node)
	if err != nil || inv.SplitCount != 10 || len(inv.GPUs) != 2 || inv.GPUs[1].MemoryMiB != 81559 || inv.MemoryScaling != 1 {
		t.Errorf("draInventory = %+v, %v", inv, err)
	}
	if _, err := draInventory(&gpuview.Node{Name: "n", Mode: gpuview.ModeDevicePlugin}); err == nil {
		t.Error("draInventory of a device-plugin node: no error")
	}
}

package gpuview

import (
	"strings"
	"testing"

	"github.com/hami-go/hami-go/pkg/draapi"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func draSlice(node, pool string, devs ...resourcev1.Device) resourcev1.ResourceSlice {
	return resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + pool},
		Spec:       resourcev1.ResourceSliceSpec{Driver: draapi.DriverName, NodeName: &node, Pool: resourcev1.ResourcePool{Name: pool}, Devices: devs},
	}
}

func draGPU(name, uuid string, index int64, memBytes string, shared bool) resourcev1.Device {
	model := "NVIDIA H100 80GB HBM3"
	return resourcev1.Device{
		Name: name,
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"uuid": {StringValue: &uuid}, "model": {StringValue: &model}, "index": {IntValue: &index},
		},
		Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
			"memory": {Value: resource.MustParse(memBytes)}, "cores": {Value: resource.MustParse("100")}, "sharers": {Value: resource.MustParse("10")},
		},
		AllowMultipleAllocations: &shared,
	}
}

func draClaim(ns, name, pod, driver, pool, device string, consumed map[resourcev1.QualifiedName]resource.Quantity) resourcev1.ResourceClaim {
	c := resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: driver, Pool: pool, Device: device, ConsumedCapacity: consumed,
	}}}}
	if pod != "" {
		c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: "uid"}}
	}
	return c
}

// TestBuildDRA: the DRA source fills the same rows from ResourceSlices (memory bytes → MiB,
// index order, taints → Unhealthy) and claims' consumed capacity; other drivers, unpublished
// devices and unallocated claims are ignored; a node in both modes is reported.
func TestBuildDRA(t *testing.T) {
	tainted := draGPU("gpu-1", "GPU-d1", 1, "80Gi", true)
	tainted.Taints = []resourcev1.DeviceTaint{{Key: "gpu.hami-go.io/xid", Effect: resourcev1.DeviceTaintEffectNoSchedule}}
	q := resource.MustParse
	objs := Objects{
		Nodes: []corev1.Node{rawNode("d1", ""), nodeObj(t, inventory("both", 1, 1000, 2))},
		ResourceSlices: []resourcev1.ResourceSlice{
			draSlice("d1", "d1", tainted, draGPU("gpu-0", "GPU-d0", 0, "80Gi", true), draGPU("gpu-2", "GPU-d2", 2, "80Gi", false)),
			draSlice("both", "both", draGPU("gpu-0", "GPU-b0", 0, "1Gi", true)),
			{Spec: resourcev1.ResourceSliceSpec{Driver: "other.example.com", NodeName: ptr("d1"), Pool: resourcev1.ResourcePool{Name: "x"}, Devices: []resourcev1.Device{{Name: "x"}}}},
		},
		ResourceClaims: []resourcev1.ResourceClaim{
			draClaim("a", "c1", "p1", draapi.DriverName, "d1", "gpu-0", map[resourcev1.QualifiedName]resource.Quantity{"memory": q("20000Mi"), "cores": q("25")}),
			draClaim("a", "c2", "", draapi.DriverName, "d1", "gpu-0", map[resourcev1.QualifiedName]resource.Quantity{"memory": q("10000000000")}), // 9536.74 MiB → 9537
			draClaim("a", "c3", "p3", draapi.DriverName, "d1", "gpu-2", nil),                                                                      // whole, exclusive device
			draClaim("a", "other", "p", "other.example.com", "d1", "gpu-0", map[resourcev1.QualifiedName]resource.Quantity{"memory": q("1Gi")}),
			draClaim("a", "gone", "p", draapi.DriverName, "d1", "gpu-9", map[resourcev1.QualifiedName]resource.Quantity{"memory": q("1Gi")}),
			{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "pending"}},
		},
	}
	v := Build(objs, DefaultConfig(), t0)
	n := nodeOf(t, &v, "d1")
	if n.Mode != ModeDRA || n.Status != StatusReady || n.SplitCount != 10 || len(n.GPUs) != 3 {
		t.Fatalf("d1: %+v", n)
	}
	g0, g1, g2 := n.GPUs[0], n.GPUs[1], n.GPUs[2]
	if g0.UUID != "GPU-d0" || g0.MemoryMiB != 81920 || g0.BookedMiB != 20000+9537 || g0.BookedCoresPercent != 25 || g0.Sharers != 2 || g0.Exclusive {
		t.Errorf("gpu-0: %+v", g0)
	}
	want := []Slice{
		{Namespace: "a", Pod: "p1", Container: "gpu", Kind: "claim", MemoryMiB: 20000, CoresPercent: 25, Source: "allocated", Claim: "c1"},
		{Namespace: "a", Pod: "", Container: "gpu", Kind: "claim", MemoryMiB: 9537, CoresPercent: 0, Source: "allocated", Claim: "c2"},
	}
	if len(g0.Slices) != 2 || g0.Slices[0] != want[0] || g0.Slices[1] != want[1] {
		t.Errorf("gpu-0 slices %+v, want %+v", g0.Slices, want)
	}
	if g1.UUID != "GPU-d1" || g1.Health != "Unhealthy" || g1.Sharers != 0 {
		t.Errorf("gpu-1: %+v", g1)
	}
	if g2.BookedMiB != 81920 || g2.BookedCoresPercent != 100 || !g2.Exclusive || g2.Sharers != 1 {
		t.Errorf("gpu-2: %+v", g2)
	}
	if b := nodeOf(t, &v, "both"); b.Mode != ModeDevicePlugin || len(b.Errors) != 1 || !strings.Contains(b.Errors[0], "one mode per node") {
		t.Errorf("both: %+v", b)
	}
	var out strings.Builder
	if err := WriteTable(&out, &v); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"a/p1 [claim c1, request gpu]", "a/(not reserved) [claim c2, request gpu]", "Healthy            29537/81920  25%    2/10"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
}

package main

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/gpuview"
)

// draCluster is a DRA-mode cluster in a fake clientset (unit test only): node n1 publishes
// gpu-0 (81920 MiB, split 4, 20000 MiB held by claim a/held) and gpu-1, tainted unhealthy
// after XID 79; pod a/p is Pending with a claim made from template gpu-90g asking 90000 MiB.
func draCluster() []runtime.Object {
	capacity := func(v, def int64, f resource.Format) resourcev1.DeviceCapacity {
		return resourcev1.DeviceCapacity{Value: *resource.NewQuantity(v, f), RequestPolicy: &resourcev1.CapacityRequestPolicy{Default: resource.NewQuantity(def, f)}}
	}
	gpu := func(name string) resourcev1.Device {
		return resourcev1.Device{Name: name, AllowMultipleAllocations: ptr.To(true), Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
			draapi.CapacityMemory:  capacity(81920<<20, 81920<<20, resource.BinarySI),
			draapi.CapacityCores:   capacity(100, 0, resource.DecimalSI),
			draapi.CapacitySharers: capacity(4, 1, resource.DecimalSI),
		}}
	}
	tainted := gpu("gpu-1")
	tainted.Taints = []resourcev1.DeviceTaint{{Key: draapi.TaintUnhealthy, Value: "xid-79", Effect: resourcev1.DeviceTaintEffectNoSchedule}}
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "n1-gpu"},
		Spec: resourcev1.ResourceSliceSpec{Driver: draapi.DriverName, NodeName: ptr.To("n1"), Pool: resourcev1.ResourcePool{Name: "n1", ResourceSliceCount: 1},
			Devices: []resourcev1.Device{gpu("gpu-0"), tainted}},
	}
	claim := func(name string, mem string) *resourcev1.ResourceClaim {
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name}}
		c.Spec.Devices.Requests = []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{
			DeviceClassName: draapi.DriverName, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
			Capacity: &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{draapi.CapacityMemory: resource.MustParse(mem)}},
		}}}
		return c
	}
	held := claim("held", "20000Mi")
	held.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: draapi.DriverName, Pool: "n1", Device: "gpu-0",
		ConsumedCapacity: map[resourcev1.QualifiedName]resource.Quantity{draapi.CapacityMemory: resource.MustParse("20000Mi"), draapi.CapacitySharers: resource.MustParse("1")},
	}}}}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p", UID: "uid-p"}}
	p.Spec.SchedulerName = "default-scheduler"
	p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu-90g")}}
	p.Status.Phase = corev1.PodPending
	p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("p-gpu-x1")}}
	return []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, slice, held, claim("p-gpu-x1", "90000Mi"), p}
}

// TestWhyDRA: `why` on a Pending DRA pod reads the slices and claims through the API and gives
// each device's reason; `-o json` carries mode "dra" and the claim.
func TestWhyDRA(t *testing.T) {
	out, err := run(t, draCluster(), "why", "p", "-n", "a")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Pod a/p: Pending, scheduler default-scheduler\n",
		"  gpu: claim p-gpu-x1 from template gpu-90g\n",
		`  n1: claim p-gpu-x1 request "gpu" (1 device, 90000 MiB): gpu-0 61920 MiB free of 81920 (too small); gpu-1 tainted unhealthy (xid-79) (even with the node's devices free)` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("why p lacks %q:\n%s", want, out)
		}
	}
	out, err = run(t, draCluster(), "why", "p", "-n", "a", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var e gpuview.Explanation
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatal(err)
	}
	if e.Mode != gpuview.ModeDRA || len(e.Claims) != 1 || e.Claims[0].Template != "gpu-90g" || len(e.Nodes) != 1 || !e.Nodes[0].Unresolvable || !strings.Contains(out, `"mode": "dra"`) {
		t.Errorf("why -o json: %+v\n%s", e, out)
	}
	if out, _ := run(t, draCluster(), "why", "p", "-n", "a", "-o", "yaml"); !strings.Contains(out, "\nmode: dra\n") {
		t.Errorf("why -o yaml lacks mode: dra:\n%s", out)
	}
}

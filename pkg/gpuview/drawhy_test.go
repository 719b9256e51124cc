package gpuview

import (
	"strings"
	"testing"

	"github.com/hami-go/hami-go/pkg/draapi"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// pubGPU is a device as pkg/dra/slices.go publishes it: shareable, memory (bytes, default
// whole), cores (percent, default 0) and sharers (the split count, default 1) with request
// policies.
func pubGPU(name, uuid string, index int64, memMiB, split int64) resourcev1.Device {
	d := draGPU(name, uuid, index, "1", true)
	capacity := func(v, def int64, f resource.Format) resourcev1.DeviceCapacity {
		return resourcev1.DeviceCapacity{Value: *resource.NewQuantity(v, f), RequestPolicy: &resourcev1.CapacityRequestPolicy{Default: resource.NewQuantity(def, f)}}
	}
	d.Capacity = map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
		draapi.CapacityMemory:  capacity(memMiB<<20, memMiB<<20, resource.BinarySI),
		draapi.CapacityCores:   capacity(100, 0, resource.DecimalSI),
		draapi.CapacitySharers: capacity(split, 1, resource.DecimalSI),
	}
	return d
}

// gpuClaim is an unallocated claim of namespace x with one request "gpu" of the class: count
// devices, memory and cores ("" = not set), and CEL selectors.
func gpuClaim(name string, count int64, mem, cores string, selectors ...string) resourcev1.ResourceClaim {
	x := &resourcev1.ExactDeviceRequest{DeviceClassName: draapi.DriverName, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count}
	if mem != "" || cores != "" {
		x.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{}}
		if mem != "" {
			x.Capacity.Requests[draapi.CapacityMemory] = resource.MustParse(mem)
		}
		if cores != "" {
			x.Capacity.Requests[draapi.CapacityCores] = resource.MustParse(cores)
		}
	}
	for _, s := range selectors {
		x.Selectors = append(x.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: s}})
	}
	c := resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name}}
	c.Spec.Devices.Requests = []resourcev1.DeviceRequest{{Name: "gpu", Exactly: x}}
	return c
}

// claimPod is a Pending pod of namespace x whose claim "gpu" is the ResourceClaim claim.
func claimPod(name, claim string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: name, UID: types.UID("uid-" + name)}}
	p.Spec.SchedulerName = "default-scheduler"
	p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr(claim)}}
	p.Status.Phase = corev1.PodPending
	return p
}

// draFleet: node n1 has a free 80 GiB GPU (split 4) and one tainted unhealthy after XID 79;
// on n2, gpu-0 (split 2) is shared by two claims of 1000 MiB and gpu-1 holds 70000 MiB and 50%.
func draFleet(extra ...resourcev1.ResourceClaim) Objects {
	tainted := pubGPU("gpu-1", "GPU-n1-1", 1, 81920, 4)
	tainted.Taints = []resourcev1.DeviceTaint{{Key: draapi.TaintUnhealthy, Value: "xid-79", Effect: resourcev1.DeviceTaintEffectNoSchedule}}
	q := resource.MustParse
	one := func(mem string) map[resourcev1.QualifiedName]resource.Quantity {
		return map[resourcev1.QualifiedName]resource.Quantity{"memory": q(mem), "cores": q("0"), "sharers": q("1")}
	}
	s3 := draClaim("x", "s3", "holder", draapi.DriverName, "n2", "gpu-1", map[resourcev1.QualifiedName]resource.Quantity{"memory": q("70000Mi"), "cores": q("50"), "sharers": q("1")})
	return Objects{
		ResourceSlices: []resourcev1.ResourceSlice{
			draSlice("n1", "n1", pubGPU("gpu-0", "GPU-n1-0", 0, 81920, 4), tainted),
			draSlice("n2", "n2", pubGPU("gpu-0", "GPU-n2-0", 0, 81920, 2), pubGPU("gpu-1", "GPU-n2-1", 1, 81920, 4)),
		},
		ResourceClaims: append([]resourcev1.ResourceClaim{
			draClaim("x", "s1", "p1", draapi.DriverName, "n2", "gpu-0", one("1000Mi")),
			draClaim("x", "s2", "p2", draapi.DriverName, "n2", "gpu-0", map[resourcev1.QualifiedName]resource.Quantity{"memory": q("1000Mi")}), // sharers not stated: 1
			s3,
		}, extra...),
	}
}

// TestExplainDRAPending: per node and device, why each request of a Pending DRA pod does not
// fit, with real figures: a claim larger than any GPU, the split count exhausted via sharers, a
// tainted device, a two-device request on a node with one free device, a selector pinning a
// UUID, a memory ask left to the device default and a selector the view does not evaluate.
func TestExplainDRAPending(t *testing.T) {
	const taint = "gpu-1 tainted unhealthy (xid-79)"
	cases := []struct {
		name  string
		claim resourcev1.ResourceClaim
		note  string
		want  map[string]NodeFit
	}{{
		name:  "too large",
		claim: gpuClaim("big", 1, "90000Mi", "25"),
		note:  "its claims fit on no node now",
		want: map[string]NodeFit{
			"n1": {Node: "n1", Unresolvable: true, Reason: `claim big request "gpu" (1 device, 90000 MiB, 25% cores): gpu-0 81920 MiB free of 81920 (too small); ` + taint + " (even with the node's devices free)"},
			"n2": {Node: "n2", Unresolvable: true, Reason: `claim big request "gpu" (1 device, 90000 MiB, 25% cores): gpu-0 79920 MiB free of 81920 (too small), 2/2 sharers used; gpu-1 11920 MiB free of 81920 (too small) (even with the node's devices free)`},
		},
	}, {
		name:  "sharers exhausted, uuid selector",
		claim: gpuClaim("pinned", 1, "1000Mi", "", `device.attributes["gpu.hami-go.io"].uuid == "GPU-n2-0"`),
		note:  "its claims fit on no node now",
		want: map[string]NodeFit{
			"n1": {Node: "n1", Unresolvable: true, Reason: `claim pinned request "gpu" (1 device, 1000 MiB): gpu-0 selector device.attributes["gpu.hami-go.io"].uuid == "GPU-n2-0" does not match; ` + taint + " (even with the node's devices free)"},
			"n2": {Node: "n2", Reason: `claim pinned request "gpu" (1 device, 1000 MiB): gpu-0 2/2 sharers used; gpu-1 selector device.attributes["gpu.hami-go.io"].uuid == "GPU-n2-0" does not match`},
		},
	}, {
		name:  "two devices, one free",
		claim: gpuClaim("two", 2, "1000Mi", "10"),
		note:  "its claims fit on no node now",
		want: map[string]NodeFit{
			"n1": {Node: "n1", Unresolvable: true, Reason: `claim two request "gpu" (2 devices, 1000 MiB, 10% cores): 1 of 2 devices fit (gpu-0); ` + taint + " (even with the node's devices free)"},
			"n2": {Node: "n2", Reason: `claim two request "gpu" (2 devices, 1000 MiB, 10% cores): 1 of 2 devices fit (gpu-1); gpu-0 2/2 sharers used`},
		},
	}, {
		name:  "memory default, selector not evaluated",
		claim: gpuClaim("whole", 1, "", "", `device.attributes["gpu.hami-go.io"].memoryMiB >= 40000`),
		note:  "its claims fit on 1 node(s) now",
		want: map[string]NodeFit{
			"n1": {Node: "n1", Fits: true},
			"n2": {Node: "n2", Reason: `claim whole request "gpu" (1 device, memory: device default, 1 selector(s) not evaluated): gpu-0 79920 MiB free of 81920 (too small), 2/2 sharers used; gpu-1 11920 MiB free of 81920 (too small)`},
		},
	}}
	tolerating := gpuClaim("tol", 2, "1000Mi", "")
	tolerating.Spec.Devices.Requests[0].Exactly.Tolerations = []resourcev1.DeviceToleration{{Key: draapi.TaintUnhealthy, Operator: resourcev1.DeviceTolerationOpExists}}
	cases = append(cases, struct {
		name  string
		claim resourcev1.ResourceClaim
		note  string
		want  map[string]NodeFit
	}{
		name: "taint tolerated", claim: tolerating, note: "its claims fit on 1 node(s) now",
		want: map[string]NodeFit{
			"n1": {Node: "n1", Fits: true},
			"n2": {Node: "n2", Reason: `claim tol request "gpu" (2 devices, 1000 MiB): 1 of 2 devices fit (gpu-1); gpu-0 2/2 sharers used`},
		},
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := draFleet(tc.claim)
			e := Explain(claimPod("p", tc.claim.Name), objs, nil, DefaultConfig(), t0)
			if e.Mode != ModeDRA || !strings.HasPrefix(e.Note, tc.note) || len(e.Claims) != 1 || e.Claims[0].Claim != tc.claim.Name {
				t.Fatalf("explanation %+v", e)
			}
			if len(e.Nodes) != len(tc.want) {
				t.Fatalf("nodes %+v", e.Nodes)
			}
			for _, f := range e.Nodes {
				if f != tc.want[f.Node] {
					t.Errorf("%s:\n got %+v\nwant %+v", f.Node, f, tc.want[f.Node])
				}
			}
		})
	}
}

// TestExplainDRATemplateAndRunning: a claim made from a ResourceClaimTemplate is found by
// pod.status.resourceClaimStatuses (and one not made yet is a problem); a pod whose claim is
// allocated shows its devices instead of node reasons; the table names claims and reasons.
func TestExplainDRATemplateAndRunning(t *testing.T) {
	made := gpuClaim("p-gpu-7xk2q", 1, "20000Mi", "30")
	objs := draFleet(made)
	p := claimPod("p", "")
	p.Spec.ResourceClaims[0] = corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr("gpu-20g")}
	p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr("p-gpu-7xk2q")}}
	e := Explain(p, objs, nil, DefaultConfig(), t0)
	c := e.Claims
	if e.Mode != ModeDRA || len(c) != 1 || c[0].Template != "gpu-20g" || c[0].Claim != "p-gpu-7xk2q" || len(c[0].Requests) != 1 ||
		*c[0].Requests[0].MemoryMiB != 20000 || *c[0].Requests[0].CoresPercent != 30 || c[0].Requests[0].Count != 1 {
		t.Fatalf("template claim: %+v", e)
	}
	// n2 has no room for 20000 MiB: gpu-0's split count is used up, gpu-1 has 11920 MiB free.
	if !strings.HasPrefix(e.Note, "its claims fit on 1 node(s) now") || len(e.Nodes) != 2 || !e.Nodes[0].Fits || e.Nodes[1].Fits {
		t.Errorf("template claim nodes: %q %+v", e.Note, e.Nodes)
	}
	var b strings.Builder
	if err := WriteExplanation(&b, &e); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"  gpu: claim p-gpu-7xk2q from template gpu-20g\n",
		`    request "gpu" (1 device, 20000 MiB, 30% cores)` + "\n",
		"  fits: n1\n",
		`  n2: claim p-gpu-7xk2q request "gpu" (1 device, 20000 MiB, 30% cores): gpu-0 2/2 sharers used; gpu-1 11920 MiB free of 81920 (too small)` + "\n",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("table lacks %q:\n%s", line, b.String())
		}
	}

	// A firstAvailable request of the class makes the pod a DRA pod, its fit not evaluated.
	alt := resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "alt"}}
	alt.Spec.Devices.Requests = []resourcev1.DeviceRequest{{Name: "any", FirstAvailable: []resourcev1.DeviceSubRequest{{Name: "big", DeviceClassName: draapi.DriverName, Count: 1}}}}
	objs2 := draFleet(alt)
	e = Explain(claimPod("p", "alt"), objs2, nil, DefaultConfig(), t0)
	if e.Mode != ModeDRA || len(e.Claims) != 1 || len(e.Claims[0].Requests) != 1 || len(e.Claims[0].Requests[0].NotEvaluated) != 1 || len(e.Nodes) != 2 || !e.Nodes[1].Fits {
		t.Errorf("firstAvailable: %+v", e)
	}

	p.Status.ResourceClaimStatuses = nil
	e = Explain(p, objs, nil, DefaultConfig(), t0)
	if e.Mode != ModeDRA || len(e.Problems) != 1 || !strings.Contains(e.Problems[0], "no ResourceClaim made from template gpu-20g yet") || e.Nodes != nil {
		t.Errorf("template not made yet: %+v", e)
	}

	// Running: the holder of s3 (70000 MiB, 50% of n2's gpu-1).
	run := claimPod("holder", "s3")
	run.Spec.NodeName, run.Status.Phase = "n2", corev1.PodRunning
	s3 := gpuClaim("s3", 1, "70000Mi", "50")
	s3.Status = objs.ResourceClaims[2].Status
	objs.ResourceClaims[2] = s3
	e = Explain(run, objs, nil, DefaultConfig(), t0)
	want := DRAAllocatedDevice{Request: "gpu", Pool: "n2", Device: "gpu-1", MemoryMiB: 70000, CoresPercent: 50}
	if e.Mode != ModeDRA || e.Nodes != nil || len(e.Claims) != 1 || len(e.Claims[0].Allocated) != 1 || e.Claims[0].Allocated[0] != want ||
		e.Note != "bound to node n2; its claims' devices are below" {
		t.Errorf("running: %+v", e)
	}
	b.Reset()
	_ = WriteExplanation(&b, &e)
	if !strings.Contains(b.String(), `    allocated "gpu": n2/gpu-1  70000 MiB  50% cores`+"\n") {
		t.Errorf("running table:\n%s", b.String())
	}
}

// TestExplainDRATwoRequestsAndWholeDevice: two requests of one claim are placed in order, the
// first charged before the second (n1's only usable GPU has 31920 MiB left for the second);
// a device that is not shareable and already allocated is "held whole"; n2's gpu-0 has the
// memory but no sharer left.
func TestExplainDRATwoRequestsAndWholeDevice(t *testing.T) {
	c := gpuClaim("pair", 1, "50000Mi", "")
	second := *c.Spec.Devices.Requests[0].DeepCopy()
	second.Name = "gpu2"
	c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, second)
	objs := draFleet(c)
	objs.ResourceSlices = append(objs.ResourceSlices, draSlice("n3", "n3", draGPU("gpu-0", "GPU-n3-0", 0, "80Gi", false)))
	objs.ResourceClaims = append(objs.ResourceClaims, draClaim("x", "whole", "w", draapi.DriverName, "n3", "gpu-0", nil))
	e := Explain(claimPod("p", "pair"), objs, nil, DefaultConfig(), t0)
	want := map[string]NodeFit{
		"n1": {Node: "n1", Unresolvable: true, Reason: `claim pair request "gpu2" (1 device, 50000 MiB): gpu-0 31920 MiB free of 81920 (too small); gpu-1 tainted unhealthy (xid-79) (even with the node's devices free)`},
		"n2": {Node: "n2", Reason: `claim pair request "gpu" (1 device, 50000 MiB): gpu-0 2/2 sharers used; gpu-1 11920 MiB free of 81920 (too small)`},
		// Even free, n3's one whole device serves only one of the two requests.
		"n3": {Node: "n3", Unresolvable: true, Reason: `claim pair request "gpu" (1 device, 50000 MiB): gpu-0 held whole by claim x/whole (not shareable) (even with the node's devices free)`},
	}
	if len(e.Nodes) != 3 {
		t.Fatalf("nodes %+v", e.Nodes)
	}
	for _, f := range e.Nodes {
		if f != want[f.Node] {
			t.Errorf("%s:\n got %+v\nwant %+v", f.Node, f, want[f.Node])
		}
	}
}

package webhook

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// matches compiles expr with Kubernetes' own DRA CEL compiler (what kube-scheduler and the API
// server use, consumable capacity on) and evaluates it on d.
func matches(t *testing.T, expr string, d resourceapi.Device) bool {
	t.Helper()
	res := cel.GetCompiler(cel.Features{EnableConsumableCapacity: true}).CompileCELExpression(expr, cel.Options{})
	if res.Error != nil {
		t.Fatalf("%s: %v", expr, res.Error)
	}
	ok, _, err := res.DeviceMatches(context.Background(), cel.Device{Driver: draapi.DriverName, Attributes: d.Attributes, Capacity: d.Capacity})
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return ok
}

// case C06 in DRA mode: the model selector is device.ModelMatches (whole tokens) as CEL. Every
// filter x product pair must agree with the extender's rule.
func TestDRAModelSelectorIsModelMatches(t *testing.T) {
	products := []string{"NVIDIA A10", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA H20", "Tesla T4", "NVIDIA GeForce RTX 4090", "NVIDIA L40S"}
	filters := []string{"A10", "a100", "A100-SXM4", "H20", "H200", "NVIDIA", "T4", "RTX-4090", "4090", "L40", "80GB PCIe", "SXM4-80GB", "GeForce RTX"}
	for _, f := range filters {
		expr := modelCEL(f)
		for _, p := range products {
			d := gpuDev{name: "gpu-0", uuid: "GPU-x", product: p, memMiB: 1000, sharers: 10, numa: -1}.device()
			if got, want := matches(t, expr, d), device.ModelMatches(f, p); got != want {
				t.Errorf("filter %q on %q: CEL %v, ModelMatches %v (%s)", f, p, got, want, expr)
			}
		}
	}
}

// use/nouse of models and UUIDs, combined, select exactly the allowed devices; every value is
// a quoted literal.
func TestDRASelectors(t *testing.T) {
	devs := map[string]resourceapi.Device{}
	for _, g := range []gpuDev{
		{name: "h100", uuid: "GPU-aaa", product: "NVIDIA H100 80GB HBM3"},
		{name: "a100", uuid: "GPU-bbb", product: "NVIDIA A100-SXM4-40GB"},
		{name: "a10", uuid: "GPU-ccc", product: "NVIDIA A10"},
	} {
		g.memMiB, g.sharers, g.numa = 1000, 10, -1
		devs[g.name] = g.device()
	}
	for _, tc := range []struct {
		anno map[string]string
		want string // allowed devices, sorted
	}{
		{map[string]string{device.AnnoUseGPUType: "A100,H100"}, "a100,h100"},
		{map[string]string{device.AnnoUseGPUType: "A10"}, "a10"},
		{map[string]string{device.AnnoNoUseGPUType: "A10"}, "a100,h100"},
		{map[string]string{device.AnnoUseGPUType: "NVIDIA", device.AnnoNoUseGPUType: "H100"}, "a10,a100"},
		{map[string]string{device.AnnoUseGPUUUID: "GPU-aaa,GPU-ccc"}, "a10,h100"},
		{map[string]string{device.AnnoNoUseGPUUUID: "GPU-aaa"}, "a10,a100"},
		{map[string]string{device.AnnoUseGPUType: "A100", device.AnnoNoUseGPUUUID: "GPU-bbb"}, ""},
	} {
		pod := newPod(ctr("main", "nvidia.com/gpu", "1"))
		pod.Annotations = tc.anno
		r, err := device.ParsePodRequest(pod, device.DefaultResourceNames())
		if err != nil {
			t.Fatal(err)
		}
		sels, err := podSelectors(&r)
		if err != nil {
			t.Fatal(err)
		}
		var ok []string
		for _, name := range []string{"a10", "a100", "h100"} {
			all := true
			for _, s := range sels {
				all = all && matches(t, s, devs[name])
			}
			if all {
				ok = append(ok, name)
			}
		}
		if got := strings.Join(ok, ","); got != tc.want {
			t.Errorf("%v: %q, want %q (selectors %q)", tc.anno, got, tc.want, sels)
		}
	}
}

// The percentage and exclusive pins select exactly the GPUs of their size / split count, as the
// real CEL compiler evaluates them (capacity quantities).
func TestDRAVariantSelectors(t *testing.T) {
	fleet := fleetOf{{40960, 4}, {40960, 10}, {81559, 10}}
	vs, err := variants("f", device.ContainerRequest{Count: 1, MemoryPercent: 50, CoresPercent: 100}, fleet)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 3 || vs[0].memMiB != 20480 || vs[0].sharers != 4 || vs[1].sharers != 10 || vs[2].memMiB != 40780 {
		t.Fatalf("variants %+v", vs)
	}
	for i, v := range vs {
		for j, s := range fleet {
			d := gpuDev{name: "gpu-0", uuid: "GPU-x", product: "P", memMiB: s.MemoryMiB, sharers: s.Sharers, numa: -1}.device()
			all := true
			for _, e := range v.selectors {
				all = all && matches(t, e, d)
			}
			if all != (i == j) {
				t.Errorf("variant %d on device %v: %v", i, s, all)
			}
		}
	}
}

type fleetOf []DeviceShape

func (f fleetOf) Shapes() []DeviceShape { return f }

// Every generated claim compiles with the real CEL compiler (selectors of an exclusive,
// percentage, filtered pod).
func TestDRAGeneratedSelectorsCompile(t *testing.T) {
	e := newDRAEnv(t, defaultFleet()...)
	p := newPod(ctr("main", "nvidia.com/gpu", "2", "nvidia.com/gpumem-percentage", "30", "nvidia.com/gpucores", "100"))
	p.Annotations = map[string]string{device.AnnoUseGPUType: "H100,A100-SXM4", device.AnnoNoUseGPUUUID: "GPU-1,GPU-2"}
	r := run(t, e.h, admissionv1.Create, "team-a", p)
	if !r.resp.Allowed {
		t.Fatal(r.resp.Result.Message)
	}
	n := 0
	for _, tmpl := range e.templates(t, "team-a") {
		for _, sub := range tmpl.Spec.Spec.Devices.Requests[0].FirstAvailable {
			for _, s := range sub.Selectors {
				matches(t, s.CEL.Expression, h100.device())
				n++
			}
		}
	}
	if n != 2*4 {
		t.Errorf("%d selectors, want 8 (2 variants x (memory pin + sharers pin + model + uuid))", n)
	}
}

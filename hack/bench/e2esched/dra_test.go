package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/hami-go/hami-go/hack/bench/e2eresult"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
)

func TestConfigValidateDRAFlags(t *testing.T) {
	ok := Config{Nodes: 100, Pods: 200, Runs: 1, GPUMemMiB: 4000, QPS: 1000, Burst: 1000, Namespace: "x", LeaseRenew: 15 * time.Second,
		DRA: true, DRAPods: 500, DRACores: 10}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		mod  func(*Config)
		want string
	}{
		"too few":       {func(c *Config) { c.DRAPods = 9 }, "--dra-pods: 9 "},
		"too many":      {func(c *Config) { c.DRAPods = 801 }, "--dra-pods: 801 do not fit on 100 nodes of 8"},
		"cores":         {func(c *Config) { c.DRACores = 101 }, "--dra-cores: 101 "},
		"negative core": {func(c *Config) { c.DRACores = -1 }, "--dra-cores: -1 "},
	} {
		c := ok
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", name, err, tc.want)
		}
	}
	off := ok
	off.DRA, off.DRAPods = false, 0
	if err := off.Validate(); err != nil {
		t.Errorf("--dra=false ignores --dra-pods: %v", err)
	}
}

func TestVariants(t *testing.T) {
	cfg := Config{Pods: 2000, DRAPods: 500}
	if v := variants(cfg); !reflect.DeepEqual(v, []string{"extender", "baseline"}) {
		t.Errorf("--dra=false variants %v", v)
	}
	cfg.DRA = true
	if v := variants(cfg); !reflect.DeepEqual(v, []string{"extender", "baseline", "dra-plain", "dra-slices"}) {
		t.Errorf("variants %v", v)
	}
	if p := variantConfig(cfg, "dra-slices").Pods; p != 500 {
		t.Errorf("dra-slices pods %d, want 500", p)
	}
	if p := variantConfig(cfg, "baseline").Pods; p != 2000 {
		t.Errorf("baseline pods %d, want 2000", p)
	}
}

// The dra-slices devices are pkg/dra's (allowMultipleAllocations, memory/cores/sharers); the
// dra-plain ones the same devices without either; each slice is its driver's only one of pool
// <node>, labelled with its driver (the publisher deletes one driver's slices by that label).
func TestNodeSlices(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(3), UID: types.UID("u3")}}
	hami, plain := nodeSlice(n, 3, driverOf("dra-slices")), nodeSlice(n, 3, driverOf("dra-plain"))
	if hami.Spec.Driver != draapi.DriverName || plain.Spec.Driver != PlainDriver || hami.Name == plain.Name {
		t.Errorf("slices %s (driver %q), %s (driver %q)", hami.Name, hami.Spec.Driver, plain.Name, plain.Spec.Driver)
	}
	for _, s := range []*resourceapi.ResourceSlice{hami, plain} {
		if s.Spec.Pool.Name != n.Name || s.Spec.Pool.ResourceSliceCount != 1 || ptr.Deref(s.Spec.NodeName, "") != n.Name ||
			s.Labels[benchLabel] != "true" || s.Labels[sliceDriverLabel] != s.Spec.Driver ||
			len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "u3" || len(s.Spec.Devices) != gpusPerNode {
			t.Errorf("slice %s: pool %+v node %v labels %v owners %v devices %d", s.Name, s.Spec.Pool, s.Spec.NodeName, s.Labels, s.OwnerReferences, len(s.Spec.Devices))
		}
	}
	d := hami.Spec.Devices[2]
	mem, cores, sharers := d.Capacity[draapi.CapacityMemory], d.Capacity[draapi.CapacityCores], d.Capacity[draapi.CapacitySharers]
	if d.Name != "gpu-2" || !ptr.Deref(d.AllowMultipleAllocations, false) || mem.Value.Value() != gpuMiB<<20 || cores.Value.Value() != 100 || sharers.Value.Value() != splitCount {
		t.Errorf("hami device %s: multi %v memory %v cores %v sharers %v", d.Name, d.AllowMultipleAllocations, mem.Value.String(), cores.Value.String(), sharers.Value.String())
	}
	if u := d.Attributes[draapi.AttrUUID]; ptr.Deref(u.StringValue, "") != simGPUs(3)[2].UUID {
		t.Errorf("uuid %v, want the inventory's %s", u.StringValue, simGPUs(3)[2].UUID)
	}
	p := plain.Spec.Devices[2]
	if p.Name != "gpu-2" || p.AllowMultipleAllocations != nil || p.Capacity != nil || len(p.Attributes) != len(d.Attributes) {
		t.Errorf("plain device %+v", p)
	}
}

func TestDeviceClassesAndTemplates(t *testing.T) {
	cls := deviceClasses()
	if len(cls) != 2 || cls[0].Name != PlainClass || cls[1].Name != SlicesClass ||
		cls[0].Spec.Selectors[0].CEL.Expression != `device.driver == "bench-plain.hami-go.io"` ||
		cls[1].Spec.Selectors[0].CEL.Expression != `device.driver == "gpu.hami-go.io"` || cls[1].Labels[benchLabel] != "true" {
		t.Errorf("classes %+v", cls)
	}
	ts := claimTemplates(Config{Namespace: "ns", GPUMemMiB: 4000, DRACores: 10})
	if len(ts) != 2 || ts[0].Namespace != "ns" || ts[0].Name != "dra-plain" || ts[1].Name != "dra-slices" {
		t.Fatalf("templates %+v", ts)
	}
	plain := ts[0].Spec.Spec.Devices.Requests[0].Exactly
	if plain.DeviceClassName != PlainClass || plain.Count != 1 || plain.Capacity != nil {
		t.Errorf("plain request %+v", plain)
	}
	sl := ts[1].Spec.Spec.Devices.Requests[0].Exactly
	mem, cores := sl.Capacity.Requests[draapi.CapacityMemory], sl.Capacity.Requests[draapi.CapacityCores]
	if sl.DeviceClassName != SlicesClass || sl.Count != 1 || mem.Value() != 4000<<20 || mem.String() != "4000Mi" || cores.Value() != 10 {
		t.Errorf("slices request class %s count %d memory %s cores %s", sl.DeviceClassName, sl.Count, mem.String(), cores.String())
	}
}

func TestBenchPodDRA(t *testing.T) {
	p := benchPod(Config{Namespace: "ns", GPUMemMiB: 4000}, e2eresult.VariantDRASlices, "2", 7)
	if p.Name != "dra-slices-2-0007" || p.Spec.SchedulerName != DRAScheduler || p.Labels[device.LabelOptOut] != "true" ||
		p.Labels["hami-go.io/bench-run"] != "dra-slices-2" || p.Spec.NodeSelector[benchLabel] != "true" {
		t.Errorf("pod %s scheduler %s labels %v", p.Name, p.Spec.SchedulerName, p.Labels)
	}
	if len(p.Spec.ResourceClaims) != 1 || ptr.Deref(p.Spec.ResourceClaims[0].ResourceClaimTemplateName, "") != "dra-slices" {
		t.Errorf("claims %+v", p.Spec.ResourceClaims)
	}
	r := p.Spec.Containers[0].Resources
	if len(r.Limits) != 0 || len(r.Claims) != 1 || r.Claims[0].Name != p.Spec.ResourceClaims[0].Name {
		t.Errorf("resources %+v", r)
	}
	if podClaimed(p) {
		t.Error("claimed before the controller wrote the status")
	}
	p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("dra-slices-2-0007-gpu-x")}}
	if !podClaimed(p) {
		t.Error("not claimed with the status written")
	}
	if podClaimed(benchPod(Config{}, "baseline", "1", 0)) {
		t.Error("a baseline pod counts as claimed")
	}
}

func TestSchedulerConfigDRA(t *testing.T) {
	s := schedulerConfig(Config{Kubeconfig: "/k", QPS: 1000, Burst: 1000}, DRAScheduler, "")
	if !strings.Contains(s, "schedulerName: hami-go-bench-dra\n") || strings.Contains(s, "extenders") || !strings.Contains(s, "percentageOfNodesToScore: 100") {
		t.Errorf("DRA scheduler config:\n%s", s)
	}
}

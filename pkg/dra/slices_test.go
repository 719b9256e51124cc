package dra

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hami-go/hami-go/pkg/draapi"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/hami-go/hami-go/pkg/device"
)

// validateDevice reproduces the resource.k8s.io/v1 validation rules a published device must
// pass (k8s.io/kubernetes v1.37.2 pkg/apis/resource/validation, which is not a dependency of
// this module, and the API's field documentation in k8s.io/api/resource/v1): a DNS-label name;
// at most 32 attributes and capacities; exactly one value per attribute, strings and versions
// at most 64 bytes, versions semantic; a request policy only with allowMultipleAllocations; a
// policy's default set and inside its valid range; min >= 0, min <= max <= value; with a step,
// min + step <= value and max − min and default − min multiples of the step; taint keys
// qualified names
// and effects NoSchedule, NoExecute or None.
func validateDevice(d resourceapi.Device) []string {
	var errs []string
	bad := func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) }
	for _, e := range validation.IsDNS1123Label(d.Name) {
		bad("name %q: %s", d.Name, e)
	}
	if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		bad("%d attributes and capacities, more than %d", n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	}
	semver := regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$`)
	for name, a := range d.Attributes {
		set := 0
		if a.StringValue != nil {
			set++
			if len(*a.StringValue) > resourceapi.DeviceAttributeMaxValueLength {
				bad("attribute %s: string longer than 64", name)
			}
		}
		if a.IntValue != nil {
			set++
		}
		if a.BoolValue != nil {
			set++
		}
		if a.VersionValue != nil {
			set++
			if !semver.MatchString(*a.VersionValue) {
				bad("attribute %s: version %q is not semantic", name, *a.VersionValue)
			}
		}
		if set != 1 {
			bad("attribute %s: %d values", name, set)
		}
	}
	multi := d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
	for name, c := range d.Capacity {
		p := c.RequestPolicy
		if p == nil {
			continue
		}
		if !multi {
			bad("capacity %s: requestPolicy without allowMultipleAllocations", name)
		}
		if p.Default == nil || p.ValidRange == nil || p.ValidRange.Min == nil {
			bad("capacity %s: default or validRange.min missing", name)
			continue
		}
		v, def, lo := c.Value.Value(), p.Default.Value(), p.ValidRange.Min.Value()
		hi := v
		if p.ValidRange.Max != nil {
			hi = p.ValidRange.Max.Value()
		}
		if lo < 0 || lo > hi || hi > v || def < lo || def > hi {
			bad("capacity %s: min %d, default %d, max %d, value %d out of order", name, lo, def, hi, v)
		}
		if s := p.ValidRange.Step; s != nil {
			st := s.Value()
			if st <= 0 || lo+st > v || (hi-lo)%st != 0 || (def-lo)%st != 0 {
				bad("capacity %s: step %d with min %d, max %d, default %d, value %d", name, st, lo, hi, def, v)
			}
		}
	}
	for _, t := range d.Taints {
		for _, e := range validation.IsQualifiedName(t.Key) {
			bad("taint key %q: %s", t.Key, e)
		}
		switch t.Effect {
		case resourceapi.DeviceTaintEffectNoSchedule, resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNone:
		default:
			bad("taint effect %q", t.Effect)
		}
	}
	return errs
}

// Every fake fleet (one model, and mixed models) publishes one valid shareable device per
// GPU with the capacities and attributes of docs/dra.md.
func TestDevicesPerFleet(t *testing.T) {
	const mixed = "2x24576:NVIDIA A10+2x81920:NVIDIA A100-SXM4-80GB"
	for _, tc := range []struct {
		profile  string
		n        int
		memMiB   []int64 // per device
		product  []string
		model    []string
		arch, cc string
	}{
		{"dgxh100", 8, []int64{81920}, []string{"NVIDIA H100 80GB HBM3"}, []string{"H100"}, "Hopper", "9.0.0"},
		{"dgxa100", 8, []int64{40960}, []string{"Mock NVIDIA A100-SXM4-40GB"}, []string{"NVIDIA"}, "Ampere", "8.0.0"},
		{mixed, 4, []int64{24576, 24576, 81920, 81920}, []string{"NVIDIA A10", "NVIDIA A10", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"}, []string{"A10", "A10", "A100", "A100"}, "Ampere", "8.0.0"},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			d, _ := newTestDriver(t, testConfig(t.TempDir()), tc.profile)
			devs := Devices(d.GPUs(), SliceConfig{SplitCount: 10, MemoryScaling: 1})
			if len(devs) != tc.n {
				t.Fatalf("%d devices, want %d", len(devs), tc.n)
			}
			at := func(s []string, i int) string { return s[min(i, len(s)-1)] }
			for i, dev := range devs {
				if errs := validateDevice(dev); len(errs) > 0 {
					t.Errorf("device %s invalid: %s", dev.Name, strings.Join(errs, "; "))
				}
				mem := tc.memMiB[min(i, len(tc.memMiB)-1)]
				g := d.GPUs()[i].GPU
				if dev.Name != fmt.Sprintf("gpu-%d", i) || dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations {
					t.Errorf("device %d: name %q, allowMultipleAllocations %v", i, dev.Name, dev.AllowMultipleAllocations)
				}
				m := dev.Capacity[draapi.CapacityMemory]
				if m.Value.Value() != mem*MiB || m.RequestPolicy.Default.Value() != mem*MiB ||
					m.RequestPolicy.ValidRange.Min.Value() != MiB || m.RequestPolicy.ValidRange.Max.Value() != mem*MiB || m.RequestPolicy.ValidRange.Step.Value() != MiB {
					t.Errorf("device %s memory = %+v, want %d MiB, default all, 1Mi..all step 1Mi", dev.Name, m, mem)
				}
				c := dev.Capacity[draapi.CapacityCores]
				if c.Value.Value() != 100 || c.RequestPolicy.Default.Value() != 0 || c.RequestPolicy.ValidRange.Min.Value() != 0 || c.RequestPolicy.ValidRange.Step.Value() != 1 {
					t.Errorf("device %s cores = %+v", dev.Name, c)
				}
				s := dev.Capacity[draapi.CapacitySharers]
				if s.Value.Value() != 10 || s.RequestPolicy.Default.Value() != 1 {
					t.Errorf("device %s sharers = %+v", dev.Name, s)
				}
				want := map[resourceapi.QualifiedName]string{
					draapi.AttrUUID: g.UUID, draapi.AttrProductName: at(tc.product, i), draapi.AttrModel: at(tc.model, i), draapi.AttrArchitecture: tc.arch,
					deviceattribute.StandardDeviceAttributePCIBusID: fmt.Sprintf("0000:%02x:00.0", i+1),
				}
				for k, v := range want {
					if a := dev.Attributes[k]; a.StringValue == nil || *a.StringValue != v {
						t.Errorf("device %s attribute %s = %v, want %q", dev.Name, k, a.StringValue, v)
					}
				}
				vers := map[resourceapi.QualifiedName]string{draapi.AttrComputeCapability: tc.cc, draapi.AttrDriverVersion: "550.54.15", draapi.AttrCUDAVersion: "12.4.0"}
				for k, v := range vers {
					if a := dev.Attributes[k]; a.VersionValue == nil || *a.VersionValue != v {
						t.Errorf("device %s attribute %s = %v, want %q", dev.Name, k, a.VersionValue, v)
					}
				}
				ints := map[resourceapi.QualifiedName]int64{draapi.AttrIndex: int64(i), draapi.AttrMemoryMiB: mem, deviceattribute.StandardDeviceAttributeNUMANode: int64(g.NUMANode)}
				for k, v := range ints {
					if a := dev.Attributes[k]; a.IntValue == nil || *a.IntValue != v {
						t.Errorf("device %s attribute %s = %v, want %d", dev.Name, k, a.IntValue, v)
					}
				}
				if len(dev.Taints) != 0 {
					t.Errorf("healthy device %s has taints %v", dev.Name, dev.Taints)
				}
			}
		})
	}
}

// The memory capacity applies the reserved memory, then the scaling factor, in whole MiB; a
// split count of 1 gives a sharers range without a step (min + step would exceed the value).
func TestDevicesScalingReservedSplitOne(t *testing.T) {
	gi := GPUInfo{GPU: deviceGPU("GPU-a", 0, 81559, 1)}
	devs := Devices([]GPUInfo{gi, {GPU: deviceGPU("GPU-b", 1, 1025, -1)}}, SliceConfig{SplitCount: 1, MemoryScaling: 1.5, ReservedMemory: device.MemoryReserve{AllMiB: 1024}})
	if len(devs) != 1 {
		t.Fatalf("%d devices, want 1 (GPU-b has 1 MiB left after reservation)", len(devs))
	}
	d := devs[0]
	if errs := validateDevice(d); len(errs) > 0 {
		t.Fatal(strings.Join(errs, "; "))
	}
	// (81559 - 1024) * 1.5 = 120802.5 -> 120802 MiB
	mc := d.Capacity[draapi.CapacityMemory]
	if got := mc.Value.Value(); got != 120802*MiB {
		t.Fatalf("memory = %d bytes, want %d (120802 MiB)", got, 120802*MiB)
	}
	s := d.Capacity[draapi.CapacitySharers]
	if s.Value.Value() != 1 || s.RequestPolicy.ValidRange.Step != nil || s.RequestPolicy.Default.Value() != 1 {
		t.Fatalf("sharers = %+v, want 1 without step", s)
	}
	if _, ok := d.Attributes[deviceattribute.StandardDeviceAttributeNUMANode]; !ok {
		t.Fatal("numaNode missing for NUMA node 1")
	}
	noNUMA := Devices([]GPUInfo{{GPU: deviceGPU("GPU-c", 2, 4096, -1)}}, SliceConfig{SplitCount: 2, MemoryScaling: 1})
	if _, ok := noNUMA[0].Attributes[deviceattribute.StandardDeviceAttributeNUMANode]; ok {
		t.Fatal("numaNode published for a GPU without NUMA affinity")
	}
}

// An unhealthy GPU carries a NoSchedule taint naming the XID, stamped with the time it
// became unhealthy.
func TestDevicesTaint(t *testing.T) {
	since := time.Date(2026, 12, 1, 5, 1, 2, 300, time.UTC)
	devs := Devices([]GPUInfo{{GPU: deviceGPU("GPU-a", 0, 4096, 0), Unhealthy: &Unhealthy{XID: 79, Since: since}}}, SliceConfig{SplitCount: 2, MemoryScaling: 1})
	if len(devs[0].Taints) != 1 {
		t.Fatalf("taints = %v", devs[0].Taints)
	}
	tt := devs[0].Taints[0]
	if tt.Key != "gpu.hami-go.io/unhealthy" || tt.Value != "xid-79" || tt.Effect != resourceapi.DeviceTaintEffectNoSchedule || !tt.TimeAdded.Time.Equal(since.Truncate(time.Second)) {
		t.Fatalf("taint = %+v", tt)
	}
	if errs := validateDevice(devs[0]); len(errs) > 0 {
		t.Fatal(strings.Join(errs, "; "))
	}
}

func TestSemVerAndPCIBusID(t *testing.T) {
	for in, want := range map[string]string{"9.0": "9.0.0", "550.54.15": "550.54.15", "535.104.05": "535.104.5", "12.4": "12.4.0", "": "", "1.2.3.4": "", "x.1": "", "12": "12.0.0"} {
		if got := SemVer(in); got != want {
			t.Errorf("SemVer(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"00000000:07:00.0": "0000:07:00.0", "00000000:AB:00.0": "0000:ab:00.0", "0000:07:00.0": "0000:07:00.0", "": "", "bogus": "", "00000001:07:00.0": "0001:07:00.0", "10000000:07:00.0": ""} {
		if got := PCIBusID(in); got != want {
			t.Errorf("PCIBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

// Issue 29: every device names the node's enforcement mode (attribute enforcement), and a node
// whose enforcement is missing taints every device NoSchedule (gpu.hami-go.io/enforcement-missing
// = the mode), beside an unhealthy GPU's own taint; a ready one carries no taint.
func TestDevicesEnforcement(t *testing.T) {
	gpus := []GPUInfo{{GPU: deviceGPU("GPU-a", 0, 4096, 0)}, {GPU: deviceGPU("GPU-b", 1, 4096, 0), Unhealthy: &Unhealthy{XID: 79, Since: time.Now()}}}
	missing := Devices(gpus, SliceConfig{SplitCount: 2, MemoryScaling: 1, Enforcement: device.Enforcement{Mode: "hami-core", Reason: "library not found"}})
	for i, d := range missing {
		if a := d.Attributes["enforcement"]; a.StringValue == nil || *a.StringValue != "hami-core" {
			t.Errorf("device %d: enforcement attribute %+v; want hami-core", i, a)
		}
		if len(d.Taints) == 0 || d.Taints[0].Key != "gpu.hami-go.io/enforcement-missing" || d.Taints[0].Value != "hami-core" || d.Taints[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
			t.Errorf("device %d: taints %+v; want enforcement-missing=hami-core NoSchedule first", i, d.Taints)
		}
		if errs := validateDevice(d); len(errs) > 0 {
			t.Error(strings.Join(errs, "; "))
		}
	}
	if n := len(missing[1].Taints); n != 2 {
		t.Errorf("unhealthy device without enforcement: %d taints, want 2", n)
	}
	ready := Devices(gpus[:1], SliceConfig{SplitCount: 2, MemoryScaling: 1, Enforcement: device.Enforcement{Mode: "hami-core", Ready: true}})
	if len(ready[0].Taints) != 0 {
		t.Errorf("ready enforcement: taints %+v, want none", ready[0].Taints)
	}
}

package dra

import (
	"strconv"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"k8s.io/utils/ptr"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// MiB is one mebibyte in bytes.
const MiB = int64(1) << 20

// GPUInfo is one GPU as the slice builder needs it: discovery, facts and the host's view of
// its PCIe root (from sysfs; "" = unknown), and its health.
type GPUInfo struct {
	GPU   device.GPU
	Facts device.GPUFacts
	// PCIeRoot is "pci<domain>:<bus>" (deviceattribute.GetPCIeRootAttributeByPCIBusID).
	PCIeRoot string
	// Unhealthy is set after a fatal XID until recovery.
	Unhealthy *Unhealthy
}

// Unhealthy describes a GPU's fatal XID.
type Unhealthy struct {
	// XID is the latest fatal XID.
	XID uint64
	// Since is when the GPU became unhealthy.
	Since time.Time
}

// SliceConfig is what the published capacities depend on.
type SliceConfig struct {
	SplitCount    int
	MemoryScaling float64
	// ReservedMemory is the per-GPU memory used outside Kubernetes (device.MemoryReserve, C41).
	ReservedMemory device.MemoryReserve
	// Enforcement is the node's slice enforcement (gpuenv.CheckEnforcement): published as
	// draapi.AttrEnforcement, and a draapi.TaintEnforcementMissing taint on every device when it
	// is not Ready. The zero value publishes neither.
	Enforcement device.Enforcement
}

// DeviceName is the ResourceSlice device name of the GPU with NVML index i: "gpu-<i>".
func DeviceName(index int) string { return "gpu-" + strconv.Itoa(index) }

// BookableMiB is the memory claims may book on g, MiB: the device plugin's rule (case C41),
// device.OfferedMemoryMiB(total, the reserve of g) and then the scaling factor
// (device.Inventory.CapacityMiB), rounded down to whole MiB; 0 when the reserve leaves nothing.
func BookableMiB(g device.GPU, c SliceConfig) int64 {
	offered, err := device.OfferedMemoryMiB(g.MemoryMiB, c.ReservedMemory.ForGPU(g))
	if err != nil {
		return 0
	}
	inv := device.Inventory{MemoryScaling: c.MemoryScaling}
	return inv.CapacityMiB(&device.GPU{MemoryMiB: offered})
}

// Devices returns the published devices of the given GPUs, in their order: one device per GPU
// with allowMultipleAllocations, capacities memory (bytes: default the whole bookable memory,
// valid 1 MiB .. all of it in 1 MiB steps), cores (0..100 %, default 0) and sharers (the split
// count, default 1), the attributes a CEL selector needs, and a NoSchedule taint
// draapi.TaintUnhealthy on an unhealthy GPU. It is pure. A GPU with less than 2 MiB bookable memory
// (all reserved) is left out: no request policy could be valid for it.
func Devices(gpus []GPUInfo, c SliceConfig) []resourceapi.Device {
	out := make([]resourceapi.Device, 0, len(gpus))
	for _, gi := range gpus {
		g := gi.GPU
		mem := BookableMiB(g, c)
		if mem < 2 {
			continue
		}
		d := resourceapi.Device{
			Name:                     DeviceName(g.Index),
			AllowMultipleAllocations: ptr.To(true),
			Attributes:               attributes(gi),
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				draapi.CapacityMemory:  rangeCapacity(mem*MiB, mem*MiB, MiB, MiB, resource.BinarySI),
				draapi.CapacityCores:   rangeCapacity(100, 0, 0, 1, resource.DecimalSI),
				draapi.CapacitySharers: rangeCapacity(int64(c.SplitCount), 1, 1, 1, resource.DecimalSI),
			},
		}
		if c.Enforcement.Mode != "" {
			d.Attributes[draapi.AttrEnforcement] = resourceapi.DeviceAttribute{StringValue: ptr.To(c.Enforcement.Mode)}
		}
		if !c.Enforcement.Ready && c.Enforcement.Mode != "" {
			// No TimeAdded: Devices stays pure (the API server sets it).
			d.Taints = append(d.Taints, resourceapi.DeviceTaint{
				Key: draapi.TaintEnforcementMissing, Value: c.Enforcement.Mode,
				Effect: resourceapi.DeviceTaintEffectNoSchedule,
			})
		}
		if u := gi.Unhealthy; u != nil {
			t := metav1.NewTime(u.Since.Truncate(time.Second))
			d.Taints = append(d.Taints, resourceapi.DeviceTaint{
				Key: draapi.TaintUnhealthy, Value: "xid-" + strconv.FormatUint(u.XID, 10),
				Effect: resourceapi.DeviceTaintEffectNoSchedule, TimeAdded: &t,
			})
		}
		out = append(out, d)
	}
	return out
}

// rangeCapacity is a capacity of value with request policy default def and valid range
// min..value in steps of step. The API requires min + step <= value; when that fails (a
// sharers capacity of 1), the range has no step.
func rangeCapacity(value, def, lo, step int64, f resource.Format) resourceapi.DeviceCapacity {
	q := func(v int64) *resource.Quantity { return resource.NewQuantity(v, f) }
	r := &resourceapi.CapacityRequestPolicyRange{Min: q(lo), Max: q(value)}
	if lo+step <= value {
		r.Step = q(step)
	}
	return resourceapi.DeviceCapacity{
		Value:         *q(value),
		RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: q(def), ValidRange: r},
	}
}

func attributes(gi GPUInfo) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	g, f := gi.GPU, gi.Facts
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	num := func(v int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: &v} }
	a := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		draapi.AttrUUID:      str(g.UUID),
		draapi.AttrIndex:     num(int64(g.Index)),
		draapi.AttrModel:     str(device.RayAcceleratorType(g.Model)),
		draapi.AttrMemoryMiB: num(g.MemoryMiB),
	}
	if g.Model != "" {
		a[draapi.AttrProductName] = str(truncate(g.Model, resourceapi.DeviceAttributeMaxValueLength))
	}
	if v := SemVer(f.ComputeCapability); v != "" {
		a[draapi.AttrComputeCapability] = resourceapi.DeviceAttribute{VersionValue: &v}
	}
	if f.Architecture != "" {
		a[draapi.AttrArchitecture] = str(f.Architecture)
	}
	if v := SemVer(f.DriverVersion); v != "" {
		a[draapi.AttrDriverVersion] = resourceapi.DeviceAttribute{VersionValue: &v}
	}
	if v := SemVer(f.CUDADriverVersion); v != "" {
		a[draapi.AttrCUDAVersion] = resourceapi.DeviceAttribute{VersionValue: &v}
	}
	if bdf := PCIBusID(g.PCIBusID); bdf != "" {
		a[deviceattribute.StandardDeviceAttributePCIBusID] = str(bdf)
	}
	if gi.PCIeRoot != "" {
		a[deviceattribute.StandardDeviceAttributePCIeRoot] = str(gi.PCIeRoot)
	}
	// A device with no NUMA affinity must not publish numaNode (deviceattribute package docs).
	if g.NUMANode >= 0 {
		a[deviceattribute.StandardDeviceAttributeNUMANode] = num(int64(g.NUMANode))
	}
	return a
}

// PCIBusID turns NVML's bus id ("00000000:07:00.0", 8-digit domain) into the extended BDF
// form the standard attribute resource.kubernetes.io/pciBusID takes ("0000:07:00.0",
// lower case); "" when it is not a bus id.
func PCIBusID(nvml string) string {
	s := strings.ToLower(nvml)
	if i := strings.IndexByte(s, ':'); i > 4 && strings.Trim(s[:i-4], "0") == "" {
		s = s[i-4:]
	}
	if _, err := deviceattribute.GetPCIBusIDAttribute(s); err != nil {
		return ""
	}
	return s
}

// SemVer turns a dotted version ("9.0", "550.54.15", "535.104.05", "12.4") into the semantic
// version a VersionValue attribute needs ("9.0.0", "550.54.15", "535.104.5", "12.4.0"); ""
// when it is not 1 to 3 dot-separated numbers.
func SemVer(v string) string {
	if v == "" {
		return ""
	}
	parts := strings.Split(v, ".")
	if len(parts) > 3 {
		return ""
	}
	out := make([]string, 3)
	for i := range out {
		out[i] = "0"
		if i < len(parts) {
			n, err := strconv.ParseUint(parts[i], 10, 32)
			if err != nil {
				return ""
			}
			out[i] = strconv.FormatUint(n, 10)
		}
	}
	return strings.Join(out, ".")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

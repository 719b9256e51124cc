package allocator

import (
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// case C40: ChargeOf is the one function that says what a pod's allocation books on each GPU;
// the extender's usage and the device plugin's per-GPU metrics (hami_go_gpu_memory_allocated_bytes,
// hami_go_gpu_cores_allocated_percent, hami_go_gpu_sharers) both use it. The values are case
// C03's on 16384 MiB GPUs (A: three classic inits of 10240 one after another; B: a sidecar and
// an app, 50% each, together; C: a sidecar 50% beside a classic init 60%), and the dashboard's
// [init 60%][app 50%] of C40.
func TestC40GPUChargeFollowsC03(t *testing.T) {
	ct := func(name string, kind device.ContainerKind, uuid string, mib int64, cores int) device.ContainerAllocation {
		return device.ContainerAllocation{Name: name, Kind: kind, Devices: []device.DeviceGrant{{UUID: uuid, MemoryMiB: mib, CoresPercent: cores}}}
	}
	for _, tc := range []struct {
		name string
		cs   []device.ContainerAllocation
		want Charge
	}{
		{"C03 A: three inits on one GPU run one by one", []device.ContainerAllocation{
			ct("i1", device.KindInit, "G", 10240, 0), ct("i2", device.KindInit, "G", 10240, 0), ct("i3", device.KindInit, "G", 10240, 0),
		}, Charge{"G": {MemoryMiB: 10240, Sharers: 1}}},
		{"C03 A: three inits on three GPUs", []device.ContainerAllocation{
			ct("i1", device.KindInit, "G0", 10240, 0), ct("i2", device.KindInit, "G1", 10240, 0), ct("i3", device.KindInit, "G2", 10240, 0),
		}, Charge{"G0": {MemoryMiB: 10240, Sharers: 1}, "G1": {MemoryMiB: 10240, Sharers: 1}, "G2": {MemoryMiB: 10240, Sharers: 1}}},
		{"C03 B: sidecar 50% and app 50% run together", []device.ContainerAllocation{
			ct("side", device.KindSidecar, "G", 8192, 0), ct("app", device.KindApp, "G", 8192, 0),
		}, Charge{"G": {MemoryMiB: 16384, Sharers: 2}}},
		{"C03 C: sidecar 50% beside init 60% at init time", []device.ContainerAllocation{
			ct("side", device.KindSidecar, "G", 8192, 0), ct("init", device.KindInit, "G", 9831, 0),
		}, Charge{"G": {MemoryMiB: 18023, Sharers: 2}}},
		{"C40: init 60% then app 50%: the larger, once", []device.ContainerAllocation{
			ct("init", device.KindInit, "G", 9831, 60), ct("app", device.KindApp, "G", 8192, 50),
		}, Charge{"G": {MemoryMiB: 9831, CoresPercent: 60, Sharers: 1}}},
		{"C40: init 60% then app 50% on different GPUs", []device.ContainerAllocation{
			ct("init", device.KindInit, "G0", 9831, 60), ct("app", device.KindApp, "G1", 8192, 50),
		}, Charge{"G0": {MemoryMiB: 9831, CoresPercent: 60, Sharers: 1}, "G1": {MemoryMiB: 8192, CoresPercent: 50, Sharers: 1}}},
	} {
		got := ChargeOf(&device.Allocation{Node: "n", Containers: tc.cs})
		if len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			continue
		}
		for u, w := range tc.want {
			if got[u] != w {
				t.Errorf("%s: GPU %s %+v, want %+v", tc.name, u, got[u], w)
			}
		}
	}
}

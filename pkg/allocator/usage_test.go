package allocator

import (
	"math/rand"
	"reflect"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// phaseRanges is the allocation-free form of device.PodRequest.Phases: same membership for every
// mix of kinds.
func TestPhaseRangesMatchPhases(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	kinds := []device.ContainerKind{device.KindInit, device.KindSidecar, device.KindApp}
	for iter := 0; iter < 2000; iter++ {
		n := rng.Intn(7)
		var r device.PodRequest
		// kubelet order: init and sidecar containers interleaved, then app containers
		for i := 0; i < n; i++ {
			r.Containers = append(r.Containers, device.ContainerRequest{Kind: kinds[rng.Intn(2)]})
		}
		for i := rng.Intn(3); i > 0; i-- {
			r.Containers = append(r.Containers, device.ContainerRequest{Kind: device.KindApp})
		}
		ranges := make([]phaseRange, len(r.Containers))
		nph := phaseRanges(len(r.Containers), func(i int) device.ContainerKind { return r.Containers[i].Kind }, ranges)
		got := make([][]int, nph)
		for i, pr := range ranges {
			for p := pr.lo; p <= pr.hi; p++ {
				got[p] = append(got[p], i)
			}
		}
		var nonEmpty [][]int
		for _, p := range got {
			if len(p) > 0 {
				nonEmpty = append(nonEmpty, p)
			}
		}
		if want := r.Phases(); !reflect.DeepEqual(nonEmpty, want) && !(len(nonEmpty) == 0 && len(want) == 0) {
			t.Fatalf("kinds %v: phases %v, want %v", r.Containers, nonEmpty, want)
		}
	}
}

func TestChargeOf(t *testing.T) {
	g := func(u string, mib int64, cores int) device.DeviceGrant {
		return device.DeviceGrant{UUID: u, MemoryMiB: mib, CoresPercent: cores}
	}
	for _, tc := range []struct {
		name string
		a    *device.Allocation
		want Charge
	}{
		{"nil", nil, Charge{}},
		{"two apps on one GPU add up", &device.Allocation{Node: "n", Containers: []device.ContainerAllocation{
			{Name: "a", Kind: device.KindApp, Devices: []device.DeviceGrant{g("A", 1000, 10), g("B", 1000, 10)}},
			{Name: "b", Kind: device.KindApp, Devices: []device.DeviceGrant{g("A", 500, 20)}},
		}}, Charge{"A": {MemoryMiB: 1500, CoresPercent: 30, Sharers: 2}, "B": {MemoryMiB: 1000, CoresPercent: 10, Sharers: 1}}},
		// case C03: inits one by one; the app phase is the sidecar plus the app.
		{"phases take the max per field", &device.Allocation{Node: "n", Containers: []device.ContainerAllocation{
			{Name: "i1", Kind: device.KindInit, Devices: []device.DeviceGrant{g("A", 9000, 0)}},
			{Name: "s", Kind: device.KindSidecar, Devices: []device.DeviceGrant{g("A", 1000, 50)}},
			{Name: "i2", Kind: device.KindInit, Devices: []device.DeviceGrant{g("A", 2000, 40)}},
			{Name: "app", Kind: device.KindApp, Devices: []device.DeviceGrant{g("A", 3000, 0)}},
		}}, Charge{"A": {MemoryMiB: 9000, CoresPercent: 90, Sharers: 2}}},
		{"exclusive", &device.Allocation{Node: "n", Containers: []device.ContainerAllocation{
			{Name: "x", Kind: device.KindApp, Devices: []device.DeviceGrant{g("A", 1000, 100)}},
		}}, Charge{"A": {MemoryMiB: 1000, CoresPercent: 100, Sharers: 1, Exclusive: true}}},
	} {
		if got := ChargeOf(tc.a); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAddSub(t *testing.T) {
	u := NodeUsage{}
	c1 := Charge{"A": {MemoryMiB: 1000, CoresPercent: 10, Sharers: 1}}
	c2 := Charge{"A": {MemoryMiB: 500, Sharers: 1}, "B": {MemoryMiB: 100, CoresPercent: 100, Sharers: 1, Exclusive: true}}
	u.Add(c1)
	u.Add(c2)
	want := NodeUsage{"A": {MemoryMiB: 1500, CoresPercent: 10, Sharers: 2}, "B": {MemoryMiB: 100, CoresPercent: 100, Sharers: 1, Exclusive: true}}
	if !reflect.DeepEqual(u, want) {
		t.Fatalf("after Add: %v, want %v", u, want)
	}
	u.Sub(c2)
	if want := (NodeUsage{"A": {MemoryMiB: 1000, CoresPercent: 10, Sharers: 1}}); !reflect.DeepEqual(u, want) {
		t.Fatalf("after Sub: %v, want %v", u, want)
	}
	// Never below zero; releasing what is not booked changes nothing.
	u.Sub(Charge{"A": {MemoryMiB: 5000, CoresPercent: 50, Sharers: 3}, "Z": {MemoryMiB: 1}})
	if len(u) != 0 {
		t.Fatalf("after over-release: %v, want empty", u)
	}
}

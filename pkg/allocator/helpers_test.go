package allocator

import (
	"fmt"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// node builds an inventory of healthy GPUs with the given MiB each, UUIDs "GPU-<node>-<i>",
// NUMA node 0, split count 10 and no over-commit.
func node(name string, mib ...int64) *device.Inventory {
	inv := &device.Inventory{Node: name, SplitCount: 10, MemoryScaling: 1}
	for i, m := range mib {
		inv.GPUs = append(inv.GPUs, device.GPU{
			UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: "NVIDIA A100-SXM4-80GB",
			MemoryMiB: m, NUMANode: 0, Healthy: true,
		})
	}
	return inv
}

// ctr is an app container asking count GPUs of mib MiB each and cores percent.
func ctr(name string, count int, mib int64, cores int) device.ContainerRequest {
	return device.ContainerRequest{Name: name, Kind: device.KindApp, Count: count, MemoryMiB: mib, CoresPercent: cores}
}

func pod(cs ...device.ContainerRequest) *device.PodRequest {
	return &device.PodRequest{Containers: cs, GPUPolicy: device.Binpack, NodePolicy: device.Binpack}
}

// mustPick picks and books the allocation onto used, failing the test on Unfit, and checks that
// Fit agrees and that no capacity is exceeded afterwards.
func mustPick(t *testing.T, inv *device.Inventory, used NodeUsage, req *device.PodRequest) device.Allocation {
	t.Helper()
	if err := Fit(inv, used, req); err != nil {
		t.Fatalf("Fit: %v", err)
	}
	a, err := Pick(inv, used, req)
	if err != nil {
		t.Fatalf("Pick: %v", err)
	}
	if err := a.Validate(); err != nil {
		t.Fatalf("Pick's allocation does not validate: %v", err)
	}
	used.Add(ChargeOf(&a))
	checkCapacity(t, inv, used)
	return a
}

// checkCapacity fails the test when any GPU's booked usage exceeds its capacity. (Exclusive GPUs
// are checked per pod by the property test: one pod's phases may share a GPU it holds exclusively
// in another phase.)
func checkCapacity(t *testing.T, inv *device.Inventory, used NodeUsage) {
	t.Helper()
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		u := used[g.UUID]
		if u.MemoryMiB > inv.CapacityMiB(g) || u.CoresPercent > 100 || u.Sharers > inv.SplitCount {
			t.Fatalf("GPU %s over capacity: %+v (capacity %d MiB, split %d)", g.UUID, u, inv.CapacityMiB(g), inv.SplitCount)
		}
	}
}

// uuids lists the GPUs of the named container.
func uuids(a device.Allocation, name string) []string {
	c := a.Container(name)
	if c == nil {
		return nil
	}
	var out []string
	for _, d := range c.Devices {
		out = append(out, d.UUID)
	}
	return out
}

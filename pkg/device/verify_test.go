package device

import (
	"strings"
	"testing"
)

// case C36: CheckAllocation accepts exactly what the request asks on the node's GPUs (MiB,
// percent of each GPU's own memory, cores) and names the field of anything else;
// FloorAllocation raises a lowered record to the request and refuses one of other containers.
func TestCheckAndFloorAllocationC36(t *testing.T) {
	gpus := map[string]int64{"GPU-A": 40000, "GPU-B": 80000}
	mem := func(u string) (int64, bool) { v, ok := gpus[u]; return v, ok }
	req := PodRequest{Containers: []ContainerRequest{
		{Name: "init", Kind: KindInit, Count: 1, MemoryMiB: 1000},
		{Name: "main", Kind: KindApp, Count: 2, MemoryPercent: 25, CoresPercent: 30},
	}}
	ok := func() Allocation {
		return Allocation{Node: "n", Containers: []ContainerAllocation{
			{Name: "init", Kind: KindInit, Devices: []DeviceGrant{{UUID: "GPU-A", MemoryMiB: 1000}}},
			{Name: "main", Kind: KindApp, Devices: []DeviceGrant{{UUID: "GPU-B", MemoryMiB: 20000, CoresPercent: 30}, {UUID: "GPU-A", MemoryMiB: 10000, CoresPercent: 30}}},
		}}
	}
	a := ok()
	if err := CheckAllocation(&a, &req, mem); err != nil {
		t.Fatalf("exact allocation refused: %v", err)
	}
	for want, f := range map[string]func(*Allocation){
		"allocation.containers[0].devices[0].memoryMiB: 1001, but container \"init\" asks for 1000 MiB on this GPU":   func(a *Allocation) { a.Containers[0].Devices[0].MemoryMiB = 1001 },
		"allocation.containers[1].devices[1].memoryMiB: 20000, but container \"main\" asks for 10000 MiB on this GPU": func(a *Allocation) { a.Containers[1].Devices[1].MemoryMiB = 20000 },
		"allocation.containers[1].devices[0].coresPercent: 100, but container \"main\" asks for 30%":                  func(a *Allocation) { a.Containers[1].Devices[0].CoresPercent = 100 },
		"allocation.containers[1].devices: 1 GPUs, but container \"main\" asks for 2":                                 func(a *Allocation) { a.Containers[1].Devices = a.Containers[1].Devices[:1] },
		"allocation.containers[1].devices[1].uuid: \"GPU-B\" is granted twice":                                        func(a *Allocation) { a.Containers[1].Devices[1] = a.Containers[1].Devices[0] },
		"allocation.containers[0].devices[0].uuid: \"GPU-X\" is not a GPU of this node":                               func(a *Allocation) { a.Containers[0].Devices[0].UUID = "GPU-X" },
		"allocation.containers[0].kind: \"sidecar\", but container \"init\" is \"init\"":                              func(a *Allocation) { a.Containers[0].Kind = KindSidecar },
		"allocation.containers: 1 entries, but the pod has 2 GPU containers":                                          func(a *Allocation) { a.Containers = a.Containers[1:] },
	} {
		a := ok()
		f(&a)
		if err := CheckAllocation(&a, &req, mem); err == nil || err.Error() != want {
			t.Errorf("error %v, want %q", err, want)
		}
	}
	low := ok()
	low.Containers[1].Devices[0].MemoryMiB, low.Containers[1].Devices[0].CoresPercent = 1, 0
	low.Containers[0].Devices[0].MemoryMiB = 5000 // more than asked: kept
	f, err := FloorAllocation(&low, &req, mem)
	if err != nil {
		t.Fatal(err)
	}
	if g := f.Containers[1].Devices[0]; g.MemoryMiB != 20000 || g.CoresPercent != 30 || f.Containers[0].Devices[0].MemoryMiB != 5000 || low.Containers[1].Devices[0].MemoryMiB != 1 {
		t.Fatalf("floored %+v (input %+v)", f, low)
	}
	other := ok()
	other.Containers[1].Name = "intruder"
	if _, err := FloorAllocation(&other, &req, mem); err == nil || !strings.Contains(err.Error(), `"intruder" is not a GPU container of the pod`) {
		t.Fatalf("foreign container: %v", err)
	}
}

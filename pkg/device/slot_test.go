package device

import "testing"

func TestSlotKey(t *testing.T) {
	a := &Allocation{Node: "n1", Containers: []ContainerAllocation{
		{Name: "init", Kind: KindInit, Devices: []DeviceGrant{{UUID: "GPU-A", MemoryMiB: 9000}}},
		{Name: "app", Kind: KindApp, Devices: []DeviceGrant{{UUID: "GPU-A", MemoryMiB: 4000, CoresPercent: 30}, {UUID: "GPU-B", MemoryMiB: 4000}}, SliceIDs: []string{"GPU-A::1", "GPU-B::0"}},
	}}
	if got, want := SlotKey(a), "init GPU-A:9000:0;app GPU-A:4000:30 GPU-B:4000:0;"; got != want {
		t.Fatalf("SlotKey = %q, want %q", got, want)
	}
	// Names and slice IDs are not part of the key; memory and cores are.
	b := Allocation{Node: "n1", Containers: []ContainerAllocation{a.Containers[0], a.Containers[1]}}
	b.Containers[0].Name, b.Containers[1].Name, b.Containers[1].SliceIDs = "i2", "main", nil
	if SlotKey(&b) != SlotKey(a) {
		t.Fatalf("renaming changed the key: %q vs %q", SlotKey(&b), SlotKey(a))
	}
	b.Containers[1].Devices = []DeviceGrant{a.Containers[1].Devices[0], {UUID: "GPU-B", MemoryMiB: 4001}}
	if SlotKey(&b) == SlotKey(a) {
		t.Fatal("a different memory limit gave the same key")
	}
}

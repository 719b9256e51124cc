package device

import "testing"

func TestSlotKeyAndRenamed(t *testing.T) {
	a := &Allocation{Node: "n1", Containers: []ContainerAllocation{
		{Name: "init", Kind: KindInit, Devices: []DeviceGrant{{UUID: "GPU-A", MemoryMiB: 9000}}},
		{Name: "app", Kind: KindApp, Devices: []DeviceGrant{{UUID: "GPU-A", MemoryMiB: 4000, CoresPercent: 30}, {UUID: "GPU-B", MemoryMiB: 4000}}, SliceIDs: []string{"GPU-A::1", "GPU-B::0"}},
	}}
	if got, want := SlotKey(a), "init GPU-A:9000:0;app GPU-A:4000:30 GPU-B:4000:0;"; got != want {
		t.Fatalf("SlotKey = %q, want %q", got, want)
	}
	owner := &Allocation{Node: "n1", Containers: []ContainerAllocation{{Name: "i2"}, {Name: "main"}}}
	r := Renamed(a, owner)
	if r.Containers[0].Name != "i2" || r.Containers[1].Name != "main" || r.Containers[1].SliceIDs != nil || r.Node != "n1" {
		t.Fatalf("Renamed = %+v", r)
	}
	if SlotKey(r) != SlotKey(a) {
		t.Fatalf("renaming changed the slot: %q vs %q", SlotKey(r), SlotKey(a))
	}
	r.Containers[1].Devices[0].UUID = "GPU-Z"
	if a.Containers[1].Devices[0].UUID != "GPU-A" {
		t.Fatal("Renamed shares its devices with the slot")
	}
	if k := Renamed(a, nil); k.Containers[1].Name != "app" {
		t.Fatalf("Renamed without owner renamed: %+v", k)
	}
	// Names and slice IDs are not part of the slot; memory and cores are.
	b := *Renamed(a, owner)
	b.Containers[1].Devices[1].MemoryMiB = 4001
	if SlotKey(&b) == SlotKey(a) {
		t.Fatal("a different memory limit gave the same slot")
	}
}

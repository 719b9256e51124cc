package device

import (
	"strings"
	"testing"
)

func validInventory() Inventory {
	return Inventory{
		Node:          "node-1",
		SplitCount:    10,
		MemoryScaling: 1,
		GPUs: []GPU{
			{UUID: "GPU-aaaaaaaa-0000", Index: 0, Model: "NVIDIA A10", MemoryMiB: 24576, SMCount: 72, NUMANode: 0, PCIBusID: "00000000:07:00.0", Healthy: true, NVLinkPeers: []string{"GPU-bbbbbbbb-1111"}},
			{UUID: "GPU-bbbbbbbb-1111", Index: 1, Model: "NVIDIA A10", MemoryMiB: 24576, NUMANode: -1, Healthy: false, MIGEnabled: true},
		},
	}
}

func TestInventoryValidate(t *testing.T) {
	inv := validInventory()
	if err := inv.Validate(); err != nil {
		t.Fatalf("valid inventory: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Inventory)
		want   string
	}{
		{"empty node", func(i *Inventory) { i.Node = "" }, "inventory.node is empty"},
		{"split 0", func(i *Inventory) { i.SplitCount = 0 }, "inventory.splitCount: 0 is outside 1..1000"},
		{"split 1001", func(i *Inventory) { i.SplitCount = 1001 }, "inventory.splitCount: 1001 is outside 1..1000"},
		{"scaling 0.5", func(i *Inventory) { i.MemoryScaling = 0.5 }, "inventory.memoryScaling: 0.5 is outside 1..100"},
		{"scaling 0 (unset)", func(i *Inventory) { i.MemoryScaling = 0 }, "inventory.memoryScaling: 0 is outside"},
		{"scaling 101", func(i *Inventory) { i.MemoryScaling = 101 }, "inventory.memoryScaling: 101 is outside"},
		{"empty uuid", func(i *Inventory) { i.GPUs[1].UUID = "" }, `inventory.gpus[1].uuid: "" is not a GPU UUID`},
		{"uuid with comma", func(i *Inventory) { i.GPUs[0].UUID = "GPU-a,GPU-b" }, `inventory.gpus[0].uuid: "GPU-a,GPU-b" is not a GPU UUID`},
		{"uuid with ::", func(i *Inventory) { i.GPUs[0].UUID = "GPU-a::1" }, `inventory.gpus[0].uuid: "GPU-a::1" is not a GPU UUID`},
		{"duplicate uuid", func(i *Inventory) { i.GPUs[1].UUID = i.GPUs[0].UUID }, `inventory.gpus[1].uuid: "GPU-aaaaaaaa-0000" is also inventory.gpus[0]`},
		{"memory 0", func(i *Inventory) { i.GPUs[0].MemoryMiB = 0 }, "inventory.gpus[0].memoryMiB: 0 is outside 1..4194304"},
		{"memory too large", func(i *Inventory) { i.GPUs[1].MemoryMiB = MaxGPUMemoryMiB + 1 }, "inventory.gpus[1].memoryMiB: 4194305 is outside"},
		{"numa -2", func(i *Inventory) { i.GPUs[0].NUMANode = -2 }, "inventory.gpus[0].numaNode: -2 is below -1"},
		{"sm negative", func(i *Inventory) { i.GPUs[0].SMCount = -1 }, "inventory.gpus[0].smCount: -1 is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := validInventory()
			tc.mutate(&inv)
			err := inv.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCapacityMiB(t *testing.T) {
	g := &GPU{MemoryMiB: 24576}
	for _, tc := range []struct {
		scaling float64
		want    int64
	}{{1, 24576}, {1.5, 36864}, {2, 49152}} {
		inv := Inventory{MemoryScaling: tc.scaling}
		if got := inv.CapacityMiB(g); got != tc.want {
			t.Errorf("CapacityMiB at scaling %v = %d, want %d", tc.scaling, got, tc.want)
		}
	}
}

func TestSliceID(t *testing.T) {
	if got := SliceID("GPU-8d2c", 3); got != "GPU-8d2c::3" {
		t.Fatalf("SliceID = %q, want GPU-8d2c::3", got)
	}
	for _, n := range []int{0, 1, 9, 99, 999} {
		id := SliceID("GPU-1234-abcd", n)
		uuid, got, err := ParseSliceID(id)
		if err != nil || uuid != "GPU-1234-abcd" || got != n {
			t.Errorf("ParseSliceID(%q) = %q, %d, %v", id, uuid, got, err)
		}
	}
	for _, bad := range []string{"", "GPU-a", "::3", "GPU-a::", "GPU-a::x", "GPU-a::-1", "GPU-a::+1", "GPU-a::01", "GPU-a:3", "GPU-a::1 "} {
		if uuid, n, err := ParseSliceID(bad); err == nil {
			t.Errorf("ParseSliceID(%q) = %q, %d, nil; want an error", bad, uuid, n)
		} else if !strings.Contains(err.Error(), "<GPU-UUID>::<n>") {
			t.Errorf("ParseSliceID(%q) error %q does not say the expected shape", bad, err)
		}
	}
}

func TestResourceNames(t *testing.T) {
	d := DefaultResourceNames()
	want := ResourceNames{Count: "nvidia.com/gpu", Memory: "nvidia.com/gpumem", MemoryPercent: "nvidia.com/gpumem-percentage", Cores: "nvidia.com/gpucores"}
	if d != want {
		t.Fatalf("DefaultResourceNames() = %+v", d)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	empty := d
	empty.Cores = ""
	if err := empty.Validate(); err == nil || !strings.Contains(err.Error(), "resource name cores is empty") {
		t.Errorf("empty cores: %v", err)
	}
	dup := d
	dup.MemoryPercent = d.Memory
	if err := dup.Validate(); err == nil || !strings.Contains(err.Error(), `memory and memoryPercent are both "nvidia.com/gpumem"`) {
		t.Errorf("duplicate: %v", err)
	}
}

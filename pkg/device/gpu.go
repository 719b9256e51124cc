package device

import (
	"fmt"
	"strconv"
	"strings"
)

// GPU is one physical GPU as the device plugin discovered it (through NVML or the fake backend).
type GPU struct {
	// UUID is NVML's device UUID ("GPU-8d2c…"); it identifies the GPU everywhere.
	UUID string `json:"uuid"`
	// Index is NVML's device index on the node (0-based).
	Index int `json:"index"`
	// Minor is the driver's minor number of the GPU's device node, /dev/nvidia<Minor>
	// (nvmlDeviceGetMinorNumber); it need not equal Index (NVML orders by PCI bus, the driver
	// numbers in probe order). Not on the wire: only the node's own agent uses it (its CDI
	// spec), and an extender of the previous release refuses an inventory with unknown fields
	// during a rolling upgrade.
	Minor int `json:"-"`
	// Model is NVML's device name, e.g. "NVIDIA H100 80GB HBM3".
	Model string `json:"model"`
	// MemoryMiB is the GPU's total memory in MiB.
	MemoryMiB int64 `json:"memoryMiB"`
	// SMCount is the number of streaming multiprocessors (NVML multiprocessor count); 0 = unknown.
	SMCount int `json:"smCount,omitempty"`
	// NUMANode is the host NUMA node the GPU is attached to; -1 = unknown.
	NUMANode int `json:"numaNode"`
	// PCIBusID is the PCI bus id, e.g. "00000000:07:00.0".
	PCIBusID string `json:"pciBusID,omitempty"`
	// Healthy is false after a fatal XID until the GPU recovers.
	Healthy bool `json:"healthy"`
	// MIGEnabled is true when MIG mode is on; such a GPU is not sliced by hami-go.
	MIGEnabled bool `json:"migEnabled,omitempty"`
	// NVLinkPeers are the UUIDs of GPUs reachable from this one over NVLink (P2P).
	NVLinkPeers []string `json:"nvlinkPeers,omitempty"`
}

// Inventory is what one node offers: its GPUs and how they are sliced. The device plugin
// publishes it on its Node (AnnoInventory); the extender places pods against it.
type Inventory struct {
	// Node is the Kubernetes node name.
	Node string `json:"node"`
	// SplitCount is how many containers may share one GPU (devices advertised per GPU), >= 1.
	SplitCount int `json:"splitCount"`
	// MemoryScaling lets memory be over-committed: a GPU may be booked up to
	// MemoryMiB × MemoryScaling. 1.0 = never over-commit. Must be >= 1.
	MemoryScaling float64 `json:"memoryScaling"`
	// GPUs in NVML index order.
	GPUs []GPU `json:"gpus"`
	// Enforcement is the node's slice enforcement as its agent checked it; nil from agents that
	// predate the field (then nothing is refused for it).
	Enforcement *Enforcement `json:"enforcement,omitempty"`
}

// Bounds of Inventory.SplitCount and Inventory.MemoryScaling, and of the node agents'
// --split-count and --memory-scaling that set them (pkg/nodeagent).
const (
	MinSplitCount    = 1
	MaxSplitCount    = 1000
	MinMemoryScaling = 1.0
	MaxMemoryScaling = 100.0
)

// CheckSplitCount returns nil when n is within MinSplitCount..MaxSplitCount, else an error
// naming n and the bounds; callers prefix the field or flag.
func CheckSplitCount(n int) error {
	if n < MinSplitCount || n > MaxSplitCount {
		return fmt.Errorf("%d is outside %d..%d", n, MinSplitCount, MaxSplitCount)
	}
	return nil
}

// CheckMemoryScaling returns nil when f is within MinMemoryScaling..MaxMemoryScaling (NaN is
// not), else an error naming f and the bounds; callers prefix the field or flag.
func CheckMemoryScaling(f float64) error {
	if !(f >= MinMemoryScaling && f <= MaxMemoryScaling) {
		return fmt.Errorf("%v is outside %v..%v", f, MinMemoryScaling, MaxMemoryScaling)
	}
	return nil
}

// Validate reports the first malformed field, naming it and its value.
func (inv *Inventory) Validate() error {
	if inv.Node == "" {
		return fmt.Errorf("inventory.node is empty")
	}
	if err := CheckSplitCount(inv.SplitCount); err != nil {
		return fmt.Errorf("inventory.splitCount: %w", err)
	}
	if err := CheckMemoryScaling(inv.MemoryScaling); err != nil {
		return fmt.Errorf("inventory.memoryScaling: %w", err)
	}
	if inv.Enforcement != nil {
		if err := inv.Enforcement.Validate(); err != nil {
			return err
		}
	}
	seen := make(map[string]int, len(inv.GPUs))
	for i, g := range inv.GPUs {
		f := "inventory.gpus[" + strconv.Itoa(i) + "]"
		if g.UUID == "" || strings.ContainsAny(g.UUID, ", \t\n") || strings.Contains(g.UUID, "::") {
			return fmt.Errorf("%s.uuid: %q is not a GPU UUID", f, g.UUID)
		}
		if j, dup := seen[g.UUID]; dup {
			return fmt.Errorf("%s.uuid: %q is also inventory.gpus[%d]", f, g.UUID, j)
		}
		seen[g.UUID] = i
		if g.MemoryMiB <= 0 || g.MemoryMiB > MaxGPUMemoryMiB {
			return fmt.Errorf("%s.memoryMiB: %d is outside 1..%d", f, g.MemoryMiB, MaxGPUMemoryMiB)
		}
		if g.NUMANode < -1 {
			return fmt.Errorf("%s.numaNode: %d is below -1 (unknown)", f, g.NUMANode)
		}
		if g.SMCount < 0 {
			return fmt.Errorf("%s.smCount: %d is negative", f, g.SMCount)
		}
	}
	return nil
}

// CapacityMiB is the memory that may be booked on g under the inventory's scaling factor.
func (inv *Inventory) CapacityMiB(g *GPU) int64 {
	return int64(float64(g.MemoryMiB) * inv.MemoryScaling)
}

// SliceID returns the kubelet device ID of slice n of the GPU with the given UUID:
// "<GPU-UUID>::<n>", n = 0 .. split count - 1. The kubelet checkpoints these IDs, so the format
// is fixed.
func SliceID(uuid string, n int) string { return uuid + "::" + strconv.Itoa(n) }

// ParseSliceID splits a device ID made by SliceID. It fails on any other shape, including
// non-canonical numbers ("GPU-a::01", "GPU-a::+1"), so every accepted ID is exactly
// SliceID(uuid, n).
func ParseSliceID(id string) (uuid string, n int, err error) {
	i := strings.LastIndex(id, "::")
	if i <= 0 {
		return "", 0, fmt.Errorf("device id %q is not <GPU-UUID>::<n>", id)
	}
	n, err = strconv.Atoi(id[i+2:])
	if err != nil || n < 0 || strconv.Itoa(n) != id[i+2:] { // canonical only: no "+1", "01"
		return "", 0, fmt.Errorf("device id %q is not <GPU-UUID>::<n>", id)
	}
	return id[:i], n, nil
}

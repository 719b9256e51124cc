package device

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// WireVersion is the version of both wire formats (inventory and allocation). Decoders reject any
// other version.
const WireVersion = "v1"

// maxWireBytes bounds what a decoder reads from an annotation (the API server caps all of a
// object's annotations at 256 KiB).
const maxWireBytes = 256 << 10

type inventoryWire struct {
	Version string `json:"version"`
	Inventory
	// OwnPlanAtCreate was written (true) by device plugins that still offered matching Allocate
	// to a pod as an option; it is decoded, and ignored, so that their inventories stay valid
	// while a rolling upgrade replaces them: every device plugin now applies each pod's own plan
	// at container creation. Removed in v0.3.0.
	OwnPlanAtCreate bool `json:"ownPlanAtCreate,omitempty"`
}

type allocationWire struct {
	Version string `json:"version"`
	Allocation
}

// EncodeInventory is the one encoder of the node inventory (AnnoInventory): versioned JSON,
// {"version":"v1","node":…,"splitCount":…,"memoryScaling":…,"gpus":[…]}. It validates first.
func EncodeInventory(inv Inventory) (string, error) {
	if err := inv.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(inventoryWire{Version: WireVersion, Inventory: inv})
	return string(b), err
}

// DecodeInventory is the one decoder of the node inventory. It rejects unknown versions, unknown
// fields, trailing data and any value Validate rejects, with an error naming the field.
func DecodeInventory(s string) (Inventory, error) {
	var w inventoryWire
	if err := decodeStrict("inventory", s, &w); err != nil {
		return Inventory{}, err
	}
	if err := w.Inventory.Validate(); err != nil {
		return Inventory{}, err
	}
	return w.Inventory, nil
}

// EncodeAllocation is the one encoder of a pod allocation, planned (AnnoPlanned) or claimed
// (AnnoClaimed): versioned JSON, {"version":"v1","node":…,"containers":[{"name":…,"devices":[{"uuid":…,"memoryMiB":…,"coresPercent":…}],"sliceIDs":[…]}]}.
func EncodeAllocation(a Allocation) (string, error) {
	if err := a.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(allocationWire{Version: WireVersion, Allocation: a})
	return string(b), err
}

// DecodeAllocation is the one decoder of a pod allocation, with the same strictness as
// DecodeInventory.
func DecodeAllocation(s string) (Allocation, error) {
	var w allocationWire
	if err := decodeStrict("allocation", s, &w); err != nil {
		return Allocation{}, err
	}
	if err := w.Allocation.Validate(); err != nil {
		return Allocation{}, err
	}
	return w.Allocation, nil
}

func decodeStrict(what, s string, v any) error {
	if len(s) > maxWireBytes {
		return fmt.Errorf("%s: %d bytes, more than %d", what, len(s), maxWireBytes)
	}
	var probe struct {
		Version *string `json:"version"`
	}
	if err := json.Unmarshal([]byte(s), &probe); err != nil {
		return fmt.Errorf("%s: not JSON: %v", what, err)
	}
	if probe.Version == nil {
		return fmt.Errorf("%s.version is missing", what)
	}
	if *probe.Version != WireVersion {
		return fmt.Errorf("%s.version: %q is not supported (want %q)", what, *probe.Version, WireVersion)
	}
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	if d.More() {
		return fmt.Errorf("%s: trailing data after the JSON object", what)
	}
	return nil
}

// Validate reports the first malformed field of an allocation, naming it and its value.
func (a *Allocation) Validate() error {
	if a.Node == "" {
		return fmt.Errorf("allocation.node is empty")
	}
	names := map[string]bool{}
	for i, c := range a.Containers {
		f := "allocation.containers[" + strconv.Itoa(i) + "]"
		if c.Name == "" {
			return fmt.Errorf("%s.name is empty", f)
		}
		if names[c.Name] {
			return fmt.Errorf("%s.name: %q appears twice", f, c.Name)
		}
		names[c.Name] = true
		if c.Kind != KindInit && c.Kind != KindSidecar && c.Kind != KindApp {
			return fmt.Errorf("%s.kind: %q is not init, sidecar or app", f, c.Kind)
		}
		if len(c.Devices) == 0 {
			return fmt.Errorf("%s.devices is empty", f)
		}
		uuids := map[string]bool{}
		for j, d := range c.Devices {
			df := f + ".devices[" + strconv.Itoa(j) + "]"
			if d.UUID == "" {
				return fmt.Errorf("%s.uuid is empty", df)
			}
			if uuids[d.UUID] {
				return fmt.Errorf("%s.uuid: %q appears twice in one container", df, d.UUID)
			}
			uuids[d.UUID] = true
			if d.MemoryMiB <= 0 || d.MemoryMiB > MaxGPUMemoryMiB {
				return fmt.Errorf("%s.memoryMiB: %d is outside 1..%d", df, d.MemoryMiB, MaxGPUMemoryMiB)
			}
			if d.CoresPercent < 0 || d.CoresPercent > 100 {
				return fmt.Errorf("%s.coresPercent: %d is outside 0..100", df, d.CoresPercent)
			}
		}
		for j, id := range c.SliceIDs {
			if _, _, err := ParseSliceID(id); err != nil {
				return fmt.Errorf("%s.sliceIDs[%d]: %v", f, j, err)
			}
		}
	}
	return nil
}

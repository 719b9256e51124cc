package device

import (
	"reflect"
	"strings"
	"testing"
)

func validAllocation() Allocation {
	return Allocation{
		Node: "node-1",
		Containers: []ContainerAllocation{
			{Name: "init", Kind: KindInit, Devices: []DeviceGrant{{UUID: "GPU-a", MemoryMiB: 10240}}},
			{Name: "train", Kind: KindApp, Devices: []DeviceGrant{{UUID: "GPU-b", MemoryMiB: 30000, CoresPercent: 30}, {UUID: "GPU-a", MemoryMiB: 10000, CoresPercent: 30}},
				SliceIDs: []string{"GPU-b::0", "GPU-a::3"}},
			{Name: "side", Kind: KindSidecar, Devices: []DeviceGrant{{UUID: "GPU-a", MemoryMiB: 4800, CoresPercent: 100}}},
		},
	}
}

func TestInventoryRoundTrip(t *testing.T) {
	inv := validInventory()
	s, err := EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s, `{"version":"v1","node":"node-1","splitCount":10,"memoryScaling":1,"gpus":[{"uuid":"GPU-aaaaaaaa-0000"`) {
		t.Errorf("wire form %s", s)
	}
	got, err := DecodeInventory(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, inv) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, inv)
	}
	// An inventory of a device plugin from before the single slot protocol still decodes.
	old := strings.Replace(s, `"version":"v1",`, `"version":"v1","ownPlanAtCreate":true,`, 1)
	if got, err := DecodeInventory(old); err != nil || !reflect.DeepEqual(got, inv) {
		t.Errorf("inventory with ownPlanAtCreate: %+v, %v; want it decoded as %+v", got, err, inv)
	}
}

func TestAllocationRoundTrip(t *testing.T) {
	a := validAllocation()
	s, err := EncodeAllocation(a)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s, `{"version":"v1","node":"node-1","containers":[{"name":"init","kind":"init","devices":[{"uuid":"GPU-a","memoryMiB":10240}]}`) {
		t.Errorf("wire form %s", s)
	}
	got, err := DecodeAllocation(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, a)
	}
	if c := got.Container("train"); c == nil || len(c.Devices) != 2 || c.Devices[0].UUID != "GPU-b" {
		t.Errorf("Container(train) = %+v", c)
	}
	if got.Container("missing") != nil {
		t.Error("Container(missing) is not nil")
	}
}

func TestDecodeRejects(t *testing.T) {
	inv, _ := EncodeInventory(validInventory())
	alloc, _ := EncodeAllocation(validAllocation())
	for _, tc := range []struct {
		name, in, want string
		alloc          bool
	}{
		{"unknown version", strings.Replace(inv, `"v1"`, `"v2"`, 1), `inventory.version: "v2" is not supported (want "v1")`, false},
		{"missing version", strings.Replace(inv, `"version":"v1",`, ``, 1), "inventory.version is missing", false},
		{"unknown field", strings.Replace(inv, `"node":`, `"zone":"z","node":`, 1), `inventory: json: unknown field "zone"`, false},
		{"unknown nested field", strings.Replace(inv, `"index":0`, `"index":0,"temp":40`, 1), `unknown field "temp"`, false},
		{"trailing data", inv + ` {}`, "inventory: not JSON", false},
		{"trailing brace", inv + `}`, "inventory: not JSON", false},
		{"malformed", `{"version":"v1",`, "inventory: not JSON", false},
		{"empty", ``, "inventory: not JSON", false},
		{"wrong type", strings.Replace(inv, `"splitCount":10`, `"splitCount":"10"`, 1), "inventory: json: cannot unmarshal string", false},
		{"invalid value", strings.Replace(inv, `"splitCount":10`, `"splitCount":0`, 1), "inventory.splitCount: 0 is outside 1..1000", false},
		{"too large", `{"version":"v1","node":"` + strings.Repeat("n", 300<<10) + `"}`, "inventory: 307226 bytes, more than 262144", false},
		{"allocation unknown version", strings.Replace(alloc, `"v1"`, `"1"`, 1), `allocation.version: "1" is not supported`, true},
		{"allocation unknown field", strings.Replace(alloc, `"memoryMiB":10240`, `"memoryMiB":10240,"memMiB":1`, 1), `allocation: json: unknown field "memMiB"`, true},
		{"allocation trailing data", alloc + "x", "allocation: not JSON", true},
		{"allocation malformed", `[]`, "allocation: not JSON", true},
		{"allocation invalid value", strings.Replace(alloc, `"memoryMiB":10240`, `"memoryMiB":0`, 1), "allocation.containers[0].devices[0].memoryMiB: 0 is outside", true},
		{"allocation null", `null`, "allocation.version is missing", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.alloc {
				_, err = DecodeAllocation(tc.in)
			} else {
				_, err = DecodeInventory(tc.in)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("decode error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestEncodeValidates(t *testing.T) {
	inv := validInventory()
	inv.GPUs[0].MemoryMiB = -1
	if s, err := EncodeInventory(inv); err == nil || s != "" || !strings.Contains(err.Error(), "inventory.gpus[0].memoryMiB: -1") {
		t.Errorf("EncodeInventory of a bad inventory = %q, %v", s, err)
	}
	a := validAllocation()
	a.Node = ""
	if s, err := EncodeAllocation(a); err == nil || s != "" || !strings.Contains(err.Error(), "allocation.node is empty") {
		t.Errorf("EncodeAllocation of a bad allocation = %q, %v", s, err)
	}
}

func TestAllocationValidate(t *testing.T) {
	a := validAllocation()
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Allocation)
		want   string
	}{
		{"empty node", func(a *Allocation) { a.Node = "" }, "allocation.node is empty"},
		{"empty name", func(a *Allocation) { a.Containers[1].Name = "" }, "allocation.containers[1].name is empty"},
		{"duplicate name", func(a *Allocation) { a.Containers[2].Name = "init" }, `allocation.containers[2].name: "init" appears twice`},
		{"bad kind", func(a *Allocation) { a.Containers[0].Kind = "job" }, `allocation.containers[0].kind: "job" is not init, sidecar or app`},
		{"no devices", func(a *Allocation) { a.Containers[0].Devices = nil }, "allocation.containers[0].devices is empty"},
		{"empty uuid", func(a *Allocation) { a.Containers[1].Devices[1].UUID = "" }, "allocation.containers[1].devices[1].uuid is empty"},
		{"GPU twice in one container", func(a *Allocation) { a.Containers[1].Devices[1].UUID = "GPU-b" }, `allocation.containers[1].devices[1].uuid: "GPU-b" appears twice in one container`},
		{"memory 0", func(a *Allocation) { a.Containers[0].Devices[0].MemoryMiB = 0 }, "allocation.containers[0].devices[0].memoryMiB: 0 is outside 1..4194304"},
		{"cores 101", func(a *Allocation) { a.Containers[2].Devices[0].CoresPercent = 101 }, "allocation.containers[2].devices[0].coresPercent: 101 is outside 0..100"},
		{"cores -1", func(a *Allocation) { a.Containers[2].Devices[0].CoresPercent = -1 }, "allocation.containers[2].devices[0].coresPercent: -1 is outside"},
		{"bad slice id", func(a *Allocation) { a.Containers[1].SliceIDs[1] = "GPU-a" }, `allocation.containers[1].sliceIDs[1]: device id "GPU-a" is not <GPU-UUID>::<n>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := validAllocation()
			tc.mutate(&a)
			if err := a.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// normalizeInventory makes empty omitempty slices nil: `"nvlinkPeers":[]` and a missing field
// are the same value (the encoder omits both).
func normalizeInventory(inv Inventory) Inventory {
	for i := range inv.GPUs {
		if len(inv.GPUs[i].NVLinkPeers) == 0 {
			inv.GPUs[i].NVLinkPeers = nil
		}
	}
	return inv
}

func normalizeAllocation(a Allocation) Allocation {
	for i := range a.Containers {
		if len(a.Containers[i].SliceIDs) == 0 {
			a.Containers[i].SliceIDs = nil
		}
	}
	return a
}

// FuzzDecodeInventory: DecodeInventory never panics; whatever it accepts re-encodes and decodes
// to an equal value.
func FuzzDecodeInventory(f *testing.F) {
	valid, _ := EncodeInventory(validInventory())
	for _, s := range []string{valid, "", "null", "{}", `{"version":"v1"}`, `{"version":"v2"}`,
		`{"version":"v1","node":"n","splitCount":1,"memoryScaling":1,"gpus":[]}`,
		`{"version":"v1","node":"n","splitCount":1,"memoryScaling":1,"gpus":null}`,
		`{"version":"v1","node":"n","splitCount":1,"memoryScaling":1.5,"gpus":[{"uuid":"GPU-1","index":0,"model":"m","memoryMiB":1,"numaNode":-1,"healthy":true,"nvlinkPeers":[]}]}`,
		`{"version":"v1","node":"n","splitCount":1,"memoryScaling":1,"gpus":[]} x`,
		`{"VERSION":"v1","Node":"n","splitcount":3,"memoryScaling":1e0,"gpus":[]}`,
		valid + "}", strings.Replace(valid, "true", "1", 1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		inv, err := DecodeInventory(s)
		if err != nil {
			return
		}
		enc, err := EncodeInventory(inv)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", s, err)
		}
		back, err := DecodeInventory(enc)
		if err != nil {
			t.Fatalf("cannot decode own encoding %q: %v", enc, err)
		}
		if !reflect.DeepEqual(normalizeInventory(back), normalizeInventory(inv)) {
			t.Fatalf("round trip changed the value:\n in  %+v\n out %+v", inv, back)
		}
	})
}

// FuzzDecodeAllocation: DecodeAllocation never panics; whatever it accepts re-encodes and
// decodes to an equal value.
func FuzzDecodeAllocation(f *testing.F) {
	valid, _ := EncodeAllocation(validAllocation())
	for _, s := range []string{valid, "", "null", "[]", "{}", `{"version":"v1"}`,
		`{"version":"v1","node":"n","containers":[]}`,
		`{"version":"v1","node":"n","containers":[{"name":"c","kind":"app","devices":[{"uuid":"GPU-1","memoryMiB":1}],"sliceIDs":[]}]}`,
		`{"version":"v1","node":"n","containers":[{"name":"c","kind":"app","devices":[{"uuid":"GPU-1","memoryMiB":1,"coresPercent":100}],"sliceIDs":["GPU-1::0"]}]}`,
		`{"version":"v1","node":"n","containers":[{"name":"c","kind":"app","devices":[{"uuid":"GPU-1","memoryMiB":1}],"sliceIDs":["GPU-1::01"]}]}`,
		`{"version":"v1","node":"n","containers":null}`,
		valid + " ", valid + "\n{}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := DecodeAllocation(s)
		if err != nil {
			return
		}
		enc, err := EncodeAllocation(a)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", s, err)
		}
		back, err := DecodeAllocation(enc)
		if err != nil {
			t.Fatalf("cannot decode own encoding %q: %v", enc, err)
		}
		if !reflect.DeepEqual(normalizeAllocation(back), normalizeAllocation(a)) {
			t.Fatalf("round trip changed the value:\n in  %+v\n out %+v", a, back)
		}
	})
}

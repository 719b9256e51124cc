package fake

import (
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

func mustFleet(t *testing.T, node, spec string) *Fleet {
	t.Helper()
	p, err := ParseProfile(spec)
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(node, p)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestGPUUUIDDeterministic(t *testing.T) {
	// A fixed value: the UUID is part of the kubelet's checkpointed device IDs, so it must not
	// change between releases for the same node and index.
	if got, want := GPUUUID("node-1", 0), "GPU-3a969122-f115-5af3-a299-639afb66297d"; got != want {
		t.Fatalf("GPUUUID(node-1, 0) = %s, want %s", got, want)
	}
	if got, want := GPUUUID("node-1", 7), "GPU-965227f8-ab22-5b7a-94d9-156dadee47ae"; got != want {
		t.Fatalf("GPUUUID(node-1, 7) = %s, want %s", got, want)
	}
	a, b, c := GPUUUID("node-1", 0), GPUUUID("node-1", 1), GPUUUID("node-2", 0)
	if a == b || a == c || b == c {
		t.Errorf("UUIDs collide: %s %s %s", a, b, c)
	}
	// Version 5 UUID: the version nibble is 5.
	if !strings.HasPrefix(a, "GPU-") || a[4+14] != '5' {
		t.Errorf("GPUUUID = %q, want GPU-<version 5 UUID>", a)
	}
	f1, f2 := mustFleet(t, "node-1", "dgxh100"), mustFleet(t, "node-1", "dgxh100")
	for i, u := range f1.UUIDs() {
		if u != f2.UUIDs()[i] || u != GPUUUID("node-1", i) {
			t.Errorf("fleet uuid %d = %s / %s, want %s", i, u, f2.UUIDs()[i], GPUUUID("node-1", i))
		}
	}
}

func TestNewErrors(t *testing.T) {
	p, _ := ParseProfile("dgxh100")
	if _, err := New("", p); err == nil || !strings.Contains(err.Error(), "node name is empty") {
		t.Errorf("New(\"\") = %v", err)
	}
	if _, err := New("n", Profile{Spec: "nothing"}); err == nil || !strings.Contains(err.Error(), `"nothing" has no GPUs`) {
		t.Errorf("New(empty profile) = %v", err)
	}
	bad := p
	bad.Server = "dgxz900"
	if _, err := New("n", bad); err == nil || !strings.Contains(err.Error(), `profile.server "dgxz900"`) {
		t.Errorf("New(unknown server) = %v", err)
	}
	short := p
	short.GPUs = p.GPUs[:3]
	if _, err := New("n", short); err == nil || !strings.Contains(err.Error(), "lists 3 GPUs but mock server") {
		t.Errorf("New(server with wrong count) = %v", err)
	}
}

func TestSetUsageErrors(t *testing.T) {
	f := mustFleet(t, "node-1", "1x1000:NVIDIA A10")
	u := f.UUIDs()[0]
	if err := f.SetUsage(u, 1, 600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		uuid string
		pid  uint32
		mib  int64
		want string
	}{
		{"GPU-x", 1, 1, `no GPU with uuid "GPU-x"`},
		{u, 0, 1, "pid 0"},
		{u, 2, -1, "usedMiB -1 is negative"},
		{u, 2, 401, "1001 MiB of its 1000 MiB"},
		{u, 2, 1 << 62, "more than the GPU's 1000 MiB"},
	}
	for _, tt := range tests {
		if err := f.SetUsage(tt.uuid, tt.pid, tt.mib); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("SetUsage(%s, %d, %d) = %v, want error containing %q", tt.uuid, tt.pid, tt.mib, err, tt.want)
		}
	}
	// Nothing was half-applied: still one process of 600 MiB; replacing it with 1000 fits.
	h, _ := f.Library().DeviceGetHandleByUUID(u)
	if mem, _ := h.GetMemoryInfo(); mem.Used != 600<<20 {
		t.Errorf("used = %d MiB, want 600", mem.Used>>20)
	}
	if err := f.SetUsage(u, 1, 1000); err != nil {
		t.Errorf("SetUsage replacing pid 1's use with 1000 MiB: %v", err)
	}
	if err := f.InjectXID("GPU-x", 79); err == nil {
		t.Error("InjectXID(unknown) succeeded")
	}
	if err := f.Recover("GPU-x"); err == nil {
		t.Error("Recover(unknown) succeeded")
	}
}

func TestLibraryTopology(t *testing.T) {
	for _, tt := range []struct {
		spec   string
		nvlink bool
	}{{"dgxa100", true}, {"4x24576:NVIDIA A10", false}} {
		lib := mustFleet(t, "n", tt.spec).Library()
		d0, _ := lib.DeviceGetHandleByIndex(0)
		d1, _ := lib.DeviceGetHandleByIndex(1)
		dLast, _ := lib.DeviceGetHandleByIndex(3)
		st, ret := d0.GetP2PStatus(d1, gonvml.P2P_CAPS_INDEX_NVLINK)
		if ret != gonvml.SUCCESS || (st == gonvml.P2P_STATUS_OK) != tt.nvlink {
			t.Errorf("%s: P2P NVLink 0->1 = %v, %v; want OK=%v", tt.spec, st, ret, tt.nvlink)
		}
		if st, _ := d0.GetP2PStatus(d0, gonvml.P2P_CAPS_INDEX_NVLINK); st == gonvml.P2P_STATUS_OK {
			t.Errorf("%s: a GPU is its own NVLink peer", tt.spec)
		}
		state, ret := d0.GetNvLinkState(0)
		if tt.nvlink && (ret != gonvml.SUCCESS || state != gonvml.FEATURE_ENABLED) {
			t.Errorf("%s: NVLink 0 state = %v, %v; want enabled", tt.spec, state, ret)
		}
		if !tt.nvlink && ret != gonvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s: NVLink 0 ret = %v; want NOT_SUPPORTED", tt.spec, ret)
		}
		if _, ret := d0.GetNvLinkState(12); tt.nvlink && ret != gonvml.ERROR_INVALID_ARGUMENT {
			t.Errorf("%s: A100 link 12 ret = %v, want INVALID_ARGUMENT (12 links)", tt.spec, ret)
		}
		if lvl, _ := d0.GetTopologyCommonAncestor(d1); lvl != gonvml.TOPOLOGY_NODE {
			t.Errorf("%s: topology 0-1 = %v, want NODE", tt.spec, lvl)
		}
		if lvl, _ := d0.GetTopologyCommonAncestor(dLast); tt.spec == "4x24576:NVIDIA A10" && lvl != gonvml.TOPOLOGY_SYSTEM {
			t.Errorf("%s: topology 0-3 = %v, want SYSTEM (other NUMA node)", tt.spec, lvl)
		}
	}
}

func TestNUMAHalves(t *testing.T) {
	for n, want := range map[int][]int{1: {0}, 2: {0, 1}, 3: {0, 0, 1}, 8: {0, 0, 0, 0, 1, 1, 1, 1}} {
		for i, w := range want {
			if got := numaNode(i, n); got != w {
				t.Errorf("numaNode(%d, %d) = %d, want %d", i, n, got, w)
			}
		}
	}
}

func TestEventSetSemantics(t *testing.T) {
	f := mustFleet(t, "n", "dgxh100")
	lib := f.Library()
	set, ret := lib.EventSetCreate()
	if ret != gonvml.SUCCESS {
		t.Fatal(ret)
	}
	d2, _ := lib.DeviceGetHandleByIndex(2)
	if ret := d2.RegisterEvents(gonvml.EventTypeXidCriticalError|gonvml.EventTypeSingleBitEccError, set); ret != gonvml.ERROR_NOT_SUPPORTED {
		t.Errorf("register ECC events = %v, want NOT_SUPPORTED", ret)
	}
	if ret := d2.RegisterEvents(gonvml.EventTypeXidCriticalError, set); ret != gonvml.SUCCESS {
		t.Fatalf("register XID = %v", ret)
	}
	if _, ret := set.Wait(1); ret != gonvml.ERROR_TIMEOUT {
		t.Errorf("Wait on empty set = %v, want TIMEOUT", ret)
	}
	u := f.UUIDs()
	_ = f.InjectXID(u[1], 79) // not registered: not delivered
	_ = f.InjectXID(u[2], 94)
	_ = f.InjectXID(u[2], 13)
	for _, want := range []uint64{94, 13} {
		ev, ret := set.Wait(uint32(time.Minute.Milliseconds()))
		if ret != gonvml.SUCCESS || ev.EventData != want || ev.EventType != gonvml.EventTypeXidCriticalError || ev.Device != d2 {
			t.Errorf("Wait = %+v, %v; want XID %d on device 2", ev, ret, want)
		}
	}
	if _, ret := set.Wait(1); ret != gonvml.ERROR_TIMEOUT {
		t.Errorf("Wait after draining = %v, want TIMEOUT", ret)
	}
	// A blocked Wait wakes on injection.
	var wg sync.WaitGroup
	wg.Add(1)
	var got uint64
	go func() {
		defer wg.Done()
		ev, _ := set.Wait(uint32(time.Minute.Milliseconds()))
		got = ev.EventData
	}()
	_ = f.InjectXID(u[2], 48)
	wg.Wait()
	if got != 48 {
		t.Errorf("blocked Wait got XID %d, want 48", got)
	}
	if ret := set.Free(); ret != gonvml.SUCCESS {
		t.Errorf("Free = %v", ret)
	}
	if ret := set.Free(); ret != gonvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("second Free = %v, want INVALID_ARGUMENT", ret)
	}
	if _, ret := set.Wait(1); ret != gonvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("Wait on a freed set = %v, want INVALID_ARGUMENT", ret)
	}
	other := mustFleet(t, "m", "dgxh100")
	oset, _ := other.Library().EventSetCreate()
	if ret := d2.RegisterEvents(gonvml.EventTypeXidCriticalError, oset); ret != gonvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("register on another fleet's set = %v, want INVALID_ARGUMENT", ret)
	}
}

// TestLibraryDoesNotGrowCallLog: the calls a fake device plugin repeats forever (handle by
// UUID, memory info, processes, event waits) must not be recorded by go-nvml's mock.
func TestLibraryDoesNotGrowCallLog(t *testing.T) {
	f := mustFleet(t, "n", "dgxh100")
	lib := f.Library()
	set, _ := lib.EventSetCreate()
	for i := 0; i < 100; i++ {
		h, ret := lib.DeviceGetHandleByUUID(f.UUIDs()[i%8])
		if ret != gonvml.SUCCESS {
			t.Fatal(ret)
		}
		h.GetMemoryInfo()
		h.GetComputeRunningProcesses()
		set.Wait(0)
	}
	if n := len(f.server.DeviceGetHandleByUUIDCalls()); n != 0 {
		t.Errorf("mock recorded %d DeviceGetHandleByUUID calls, want 0", n)
	}
	if _, ret := lib.DeviceGetHandleByUUID("GPU-nope"); ret != gonvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("unknown UUID = %v, want INVALID_ARGUMENT", ret)
	}
	if _, ret := lib.DeviceGetHandleByIndex(8); ret != gonvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("index 8 = %v, want INVALID_ARGUMENT", ret)
	}
	if n, _ := lib.DeviceGetCount(); n != 8 {
		t.Errorf("count = %d, want 8", n)
	}
}

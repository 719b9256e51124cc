package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unsafe"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/hami-go/hami-go/hack/simgpu/daemon"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/nvml"
)

// TestNVMLChild runs only as the child of TestNVMLBackendOverSimulatedDriver (env
// SIMGPU_TEST_CHILD): it loads the simulated libnvidia-ml.so in this fresh process.
func TestNVMLChild(t *testing.T) {
	raw := os.Getenv("SIMGPU_TEST_CHILD")
	if raw == "" {
		t.Skip("runs as a child process of TestNVMLBackendOverSimulatedDriver")
	}
	var env childEnv
	if err := json.Unmarshal([]byte(raw), &env); err != nil {
		t.Fatal(err)
	}
	lib := gonvml.New(gonvml.WithLibraryPath(env.Lib))
	if env.Visible == nil {
		if ret := lib.Init(); ret != gonvml.ERROR_DRIVER_NOT_LOADED {
			t.Fatalf("Init without a daemon = %v, want ERROR_DRIVER_NOT_LOADED", ret)
		}
		return
	}
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		t.Fatalf("Init = %v", ret)
	}
	defer lib.Shutdown()
	all, err := daemon.Devices(testNode, env.Profile)
	if err != nil {
		t.Fatal(err)
	}
	b := nvml.NewBackend(lib, nvml.Options{Name: "simgpu", EventWait: 100 * time.Millisecond})
	gpus, err := b.Discover()
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != len(env.Visible) {
		t.Fatalf("Discover found %d GPUs, want %d: %+v", len(gpus), len(env.Visible), gpus)
	}
	for i, h := range env.Visible {
		d, g := all[h], gpus[i]
		want := device.GPU{UUID: d.UUID, Index: i, Minor: d.Minor, Model: d.Name, MemoryMiB: int64(d.TotalBytes >> 20),
			SMCount: d.SMs, NUMANode: d.NUMA, PCIBusID: d.PCIBusID, Healthy: true}
		for _, o := range env.Visible { // NVLink as pkg/fake: all-to-all on DGX profiles, none on custom ones
			if o != h && d.NVLinks > 0 && all[o].NVLinks > 0 {
				want.NVLinkPeers = append(want.NVLinkPeers, all[o].UUID)
			}
		}
		if !reflect.DeepEqual(g, want) {
			t.Errorf("GPU %d = %+v, want %+v", i, g, want)
		}
		handle, ret := lib.DeviceGetHandleByIndex(i)
		if minor, ret2 := handle.GetMinorNumber(); ret != gonvml.SUCCESS || ret2 != gonvml.SUCCESS || minor != d.Minor {
			t.Errorf("GPU %d minor %d (%v %v), want %d", i, minor, ret, ret2, d.Minor)
		}
		if byBus, ret := lib.DeviceGetHandleByPciBusId(d.PCIBusID); ret != gonvml.SUCCESS || byBus != handle {
			t.Errorf("handle by bus id %s: %v", d.PCIBusID, ret)
		}
	}
	if env.Profile == testProfile && len(gpus[0].NVLinkPeers) != len(gpus)-1 {
		t.Errorf("GPU 0's NVLink peers %v, want the %d other GPUs", gpus[0].NVLinkPeers, len(gpus)-1)
	}
	uuid := gpus[len(gpus)-1].UUID
	f, err := b.(device.FactsSource).Facts(uuid)
	if env.Profile == testProfile && (err != nil || f != (device.GPUFacts{ComputeCapability: "9.0", Architecture: "Hopper",
		DriverVersion: daemon.DefaultDriverVersion, CUDADriverVersion: "13.0"})) {
		t.Errorf("Facts = %+v, %v", f, err)
	}
	checkErrors(t, lib, len(gpus))
	checkNVLink(t, lib, all[env.Visible[0]].NVLinks)
	checkProcesses(t, b, env, uuid)
	checkXID(t, b, env.Socket, uuid, 79)
	checkLost(t, lib, b, env.Socket, uuid)
}

// checkNVLink: NVLink state and P2P of NVML index 0 as pkg/fake answers them (links = the
// profile's NVLink link count, 0 without NVLink).
func checkNVLink(t *testing.T, lib gonvml.Interface, links int) {
	h0, _ := lib.DeviceGetHandleByIndex(0)
	h1, _ := lib.DeviceGetHandleByIndex(1)
	state, ret := h0.GetNvLinkState(0)
	switch {
	case links > 0 && (ret != gonvml.SUCCESS || state != gonvml.FEATURE_ENABLED):
		t.Errorf("NVLink 0 state = %v, %v; want enabled", state, ret)
	case links == 0 && ret != gonvml.ERROR_NOT_SUPPORTED:
		t.Errorf("NVLink 0 state: %v, want ERROR_NOT_SUPPORTED without NVLink", ret)
	}
	if _, ret := h0.GetNvLinkState(links); links > 0 && ret != gonvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("NVLink %d (one past the last) state: %v, want ERROR_INVALID_ARGUMENT", links, ret)
	}
	if st, ret := h0.GetP2PStatus(h0, gonvml.P2P_CAPS_INDEX_NVLINK); ret != gonvml.SUCCESS || st != gonvml.P2P_STATUS_NOT_SUPPORTED {
		t.Errorf("P2P NVLink 0->0 = %v, %v; a GPU is not its own peer", st, ret)
	}
	st, ret := h0.GetP2PStatus(h1, gonvml.P2P_CAPS_INDEX_NVLINK)
	if ret != gonvml.SUCCESS || (st == gonvml.P2P_STATUS_OK) != (links > 0) {
		t.Errorf("P2P NVLink 0->1 = %v, %v; want OK=%v", st, ret, links > 0)
	}
}

// checkLost: after a non-application XID (checkXID's 79) the GPU is lost as in pkg/fake:
// Probe, memory info, processes and utilization answer ERROR_GPU_IS_LOST while its identity
// stays readable; `simgpu recover` repairs it; an application XID (43) does not break it.
func checkLost(t *testing.T, lib gonvml.Interface, b device.Backend, socket, uuid string) {
	if err := b.Probe(uuid); !nvml.IsReturn(err, gonvml.ERROR_GPU_IS_LOST) {
		t.Errorf("Probe after XID 79 = %v, want ERROR_GPU_IS_LOST", err)
	}
	if _, err := b.Processes(uuid); !nvml.IsReturn(err, gonvml.ERROR_GPU_IS_LOST) {
		t.Errorf("Processes after XID 79 = %v, want ERROR_GPU_IS_LOST", err)
	}
	h, ret := lib.DeviceGetHandleByUUID(uuid)
	if ret != gonvml.SUCCESS {
		t.Fatalf("handle by UUID of a lost GPU: %v", ret)
	}
	if _, ret := h.GetMemoryInfo(); ret != gonvml.ERROR_GPU_IS_LOST {
		t.Errorf("GetMemoryInfo of a lost GPU = %v, want ERROR_GPU_IS_LOST", ret)
	}
	if _, ret := h.GetMemoryInfo_v2(); ret != gonvml.ERROR_GPU_IS_LOST {
		t.Errorf("GetMemoryInfo_v2 of a lost GPU = %v, want ERROR_GPU_IS_LOST", ret)
	}
	if _, ret := h.GetUtilizationRates(); ret != gonvml.ERROR_GPU_IS_LOST {
		t.Errorf("GetUtilizationRates of a lost GPU = %v, want ERROR_GPU_IS_LOST", ret)
	}
	if got, ret := h.GetUUID(); ret != gonvml.SUCCESS || got != uuid {
		t.Errorf("GetUUID of a lost GPU = %q, %v; identity stays readable", got, ret)
	}
	cmd := newRootCmd()
	cmd.SetArgs([]string{"recover", "--socket", socket, "--gpu", uuid})
	cmd.SetOut(io.Discard)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if err := b.Probe(uuid); err != nil {
		t.Errorf("Probe after simgpu recover: %v", err)
	}
	checkXID(t, b, socket, uuid, 43)
	if err := b.Probe(uuid); err != nil {
		t.Errorf("Probe after application XID 43: %v, want the GPU unbroken", err)
	}
	if _, err := b.Processes(uuid); err != nil {
		t.Errorf("Processes after application XID 43: %v", err)
	}
}

// checkErrors: bad indices, UUIDs and handles get NVML's errors, and do not crash.
func checkErrors(t *testing.T, lib gonvml.Interface, n int) {
	if _, ret := lib.DeviceGetHandleByIndex(n); ret != gonvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("handle by index %d = %v, want ERROR_INVALID_ARGUMENT", n, ret)
	}
	if _, ret := lib.DeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000"); ret != gonvml.ERROR_NOT_FOUND {
		t.Errorf("handle by unknown UUID = %v, want ERROR_NOT_FOUND", ret)
	}
	if _, ret := lib.DeviceGetHandleByPciBusId("00000000:FF:00.0"); ret != gonvml.ERROR_NOT_FOUND {
		t.Errorf("handle by unknown bus id = %v, want ERROR_NOT_FOUND", ret)
	}
	h, _ := lib.DeviceGetHandleByIndex(0)
	// A handle go-nvml never got from the library: the same struct with its C pointer moved.
	v := reflect.New(reflect.TypeOf(h)).Elem()
	v.Set(reflect.ValueOf(h))
	*(*uintptr)(unsafe.Pointer(v.Field(0).UnsafeAddr())) += 8
	bogus := v.Interface().(gonvml.Device)
	if _, ret := bogus.GetUUID(); ret != gonvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GetUUID on a bogus handle = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if _, ret := bogus.GetMemoryInfo(); ret != gonvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GetMemoryInfo on a bogus handle = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if _, _, ret := h.GetMigMode(); ret != gonvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GetMigMode = %v, want ERROR_NOT_SUPPORTED", ret)
	}
	if _, ret := h.GetGpuFabricInfoV().V3(); ret != gonvml.ERROR_NOT_SUPPORTED { // a generated stub
		t.Errorf("GetGpuFabricInfoV = %v, want ERROR_NOT_SUPPORTED", ret)
	}
}

// checkProcesses: memory this process allocates shows up under its host pid.
func checkProcesses(t *testing.T, b device.Backend, env childEnv, uuid string) {
	cl, err := daemon.Dial(env.Socket, "child")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	host := env.Visible[len(env.Visible)-1]
	if _, err := cl.Request("ALLOC " + strconv.Itoa(host) + " " + strconv.Itoa(3<<30)); err != nil {
		t.Fatal(err)
	}
	procs, err := b.Processes(uuid)
	if err != nil || len(procs) != 1 || procs[0] != (device.ProcessMemory{PID: uint32(os.Getpid()), UsedMiB: 3072}) {
		t.Errorf("Processes = %+v, %v; want pid %d with 3072 MiB", procs, err, os.Getpid())
	}
	if err := b.Probe(uuid); err != nil {
		t.Error(err)
	}
}

// checkXID: an XID injected with `simgpu xid` reaches pkg/nvml's event watch.
func checkXID(t *testing.T, b device.Backend, socket, uuid string, xid uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	ch := make(chan device.XIDEvent, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.WatchXIDs(ctx, []string{uuid}, ch)
	}()
	defer func() { cancel(); <-done }()            // the watch ends before the caller shuts NVML down
	tick := time.NewTicker(500 * time.Millisecond) // the watch may not have registered yet: inject again
	defer tick.Stop()
	for {
		select {
		case ev := <-ch:
			if ev.UUID != uuid || ev.XID != xid {
				t.Errorf("event %+v, want XID %d on %s", ev, xid, uuid)
			}
			return
		case <-tick.C:
			cmd := newRootCmd()
			cmd.SetArgs([]string{"xid", "--socket", socket, "--gpu", uuid, "--xid", strconv.FormatUint(xid, 10)})
			cmd.SetOut(io.Discard)
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("no XID event")
		}
	}
}

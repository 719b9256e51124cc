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
	all, err := daemon.Devices(testNode, testProfile)
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
		want := device.GPU{UUID: d.UUID, Index: i, Model: d.Name, MemoryMiB: int64(d.TotalBytes >> 20),
			SMCount: d.SMs, NUMANode: d.NUMA, PCIBusID: d.PCIBusID, Healthy: true}
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
	uuid := gpus[len(gpus)-1].UUID
	f, err := b.(device.FactsSource).Facts(uuid)
	if err != nil || f != (device.GPUFacts{ComputeCapability: "9.0", Architecture: "Hopper",
		DriverVersion: daemon.DefaultDriverVersion, CUDADriverVersion: "13.0"}) {
		t.Errorf("Facts = %+v, %v", f, err)
	}
	checkErrors(t, lib, len(gpus))
	checkProcesses(t, b, env, uuid)
	checkXID(t, b, env.Socket, uuid)
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
func checkXID(t *testing.T, b device.Backend, socket, uuid string) {
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
			if ev.UUID != uuid || ev.XID != 79 {
				t.Errorf("event %+v, want XID 79 on %s", ev, uuid)
			}
			return
		case <-tick.C:
			cmd := newRootCmd()
			cmd.SetArgs([]string{"xid", "--socket", socket, "--gpu", uuid, "--xid", "79"})
			cmd.SetOut(io.Discard)
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("no XID event")
		}
	}
}

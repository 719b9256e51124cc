package nvml_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/hami-go/hami-go/pkg/nvml"
)

// mockDevice returns device i of a go-nvml mock server.
func mockDevice(s *server.Server, i int) *server.Device { return s.Devices[i].(*server.Device) }

// TestDiscoverOnGoNVMLMock runs discovery against go-nvml's own dgxh100 mock, with the
// functions the mock leaves nil filled in for NUMA and attributes.
func TestDiscoverOnGoNVMLMock(t *testing.T) {
	s := dgxh100.New()
	for i := range s.Devices {
		d := mockDevice(s, i)
		node := i / 4
		d.GetNumaNodeIdFunc = func() (int, gonvml.Return) { return node, gonvml.SUCCESS }
		d.GetAttributesFunc = func() (gonvml.DeviceAttributes, gonvml.Return) {
			return gonvml.DeviceAttributes{MultiprocessorCount: 132}, gonvml.SUCCESS
		}
	}
	b := nvml.NewBackend(s, nvml.Options{})
	if b.Name() != "nvml" {
		t.Errorf("Name() = %q, want nvml", b.Name())
	}
	gpus, err := b.Discover()
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if len(gpus) != 8 {
		t.Fatalf("Discover found %d GPUs, want 8", len(gpus))
	}
	for i, g := range gpus {
		if g.UUID != mockDevice(s, i).UUID {
			t.Errorf("gpu %d UUID = %q, want the mock's %q", i, g.UUID, mockDevice(s, i).UUID)
		}
		if g.Index != i || g.Model != "NVIDIA H100 80GB HBM3" || g.MemoryMiB != 81920 || g.SMCount != 132 ||
			g.NUMANode != i/4 || !g.Healthy || g.MIGEnabled || len(g.NVLinkPeers) != 0 {
			t.Errorf("gpu %d = %+v, want index %d, H100 80GB HBM3, 81920 MiB, 132 SMs, NUMA %d, healthy, no MIG, no peers",
				i, g, i, i/4)
		}
	}
}

// TestDiscoverMockNilFuncsDegrade: the raw mock panics on NUMA, attributes and P2P; discovery
// must treat those as unknown rather than crash (SM count then comes from the model table).
func TestDiscoverMockNilFuncsDegrade(t *testing.T) {
	s := dgxh100.New()
	gpus, err := nvml.NewBackend(s, nvml.Options{}).Discover()
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if len(gpus) != 8 {
		t.Fatalf("got %d GPUs, want 8", len(gpus))
	}
	for i, g := range gpus {
		if g.NUMANode != -1 || g.SMCount != 132 || g.NVLinkPeers != nil || g.MemoryMiB != 81920 {
			t.Errorf("gpu %d = %+v, want NUMA -1, SM 132 (model table), no peers, 81920 MiB", i, g)
		}
	}
}

func TestDiscoverMIGModeAndNotSupported(t *testing.T) {
	s := dgxh100.New()
	d := mockDevice(s, 2)
	if ret, _ := d.SetMigMode(gonvml.DEVICE_MIG_ENABLE); ret != gonvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}
	mockDevice(s, 5).GetNumaNodeIdFunc = func() (int, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
	mockDevice(s, 6).GetNumaNodeIdFunc = func() (int, gonvml.Return) { return 0, gonvml.ERROR_FUNCTION_NOT_FOUND }
	mockDevice(s, 7).GetNumaNodeIdFunc = func() (int, gonvml.Return) { return 1, gonvml.SUCCESS }
	gpus, err := nvml.NewBackend(s, nvml.Options{}).Discover()
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	for i, g := range gpus {
		if want := i == 2; g.MIGEnabled != want {
			t.Errorf("gpu %d MIGEnabled = %v, want %v", i, g.MIGEnabled, want)
		}
	}
	if gpus[5].NUMANode != -1 || gpus[6].NUMANode != -1 || gpus[7].NUMANode != 1 {
		t.Errorf("NUMA nodes 5,6,7 = %d,%d,%d, want -1,-1,1", gpus[5].NUMANode, gpus[6].NUMANode, gpus[7].NUMANode)
	}
}

func TestDiscoverErrorsNameCallAndDevice(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(d *server.Device)
		want   []string
	}{
		{
			name: "required call fails",
			mutate: func(d *server.Device) {
				d.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) { return gonvml.Memory{}, gonvml.ERROR_UNKNOWN }
			},
			want: []string{"nvmlDeviceGetMemoryInfo", "ERROR_UNKNOWN"},
		},
		{
			name:   "required call missing in the mock",
			mutate: func(d *server.Device) { d.GetNameFunc = nil },
			want:   []string{"nvmlDeviceGetName", "panicked"},
		},
		{
			name: "optional call fails with a real error",
			mutate: func(d *server.Device) {
				d.GetNumaNodeIdFunc = func() (int, gonvml.Return) { return 0, gonvml.ERROR_GPU_IS_LOST }
			},
			want: []string{"nvmlDeviceGetNumaNodeId", "ERROR_GPU_IS_LOST"},
		},
		{
			name: "P2P fails with a real error",
			mutate: func(d *server.Device) {
				d.GetP2PStatusFunc = func(gonvml.Device, gonvml.GpuP2PCapsIndex) (gonvml.GpuP2PStatus, gonvml.Return) {
					return 0, gonvml.ERROR_UNKNOWN
				}
			},
			want: []string{"nvmlDeviceGetP2PStatus", "ERROR_UNKNOWN"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := dgxh100.New()
			d := mockDevice(s, 3)
			tt.mutate(d)
			gpus, err := nvml.NewBackend(s, nvml.Options{}).Discover()
			if err == nil {
				t.Fatalf("Discover succeeded with %d GPUs, want an error", len(gpus))
			}
			for _, w := range append(tt.want, d.UUID) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestDiscoverCountFails(t *testing.T) {
	s := dgxh100.New()
	s.DeviceGetCountFunc = func() (int, gonvml.Return) { return 0, gonvml.ERROR_UNINITIALIZED }
	_, err := nvml.NewBackend(s, nvml.Options{}).Discover()
	if !nvml.IsReturn(err, gonvml.ERROR_UNINITIALIZED) || !strings.Contains(err.Error(), "nvmlDeviceGetCount") {
		t.Fatalf("Discover error = %v, want nvmlDeviceGetCount ERROR_UNINITIALIZED", err)
	}
}

func TestProcessesOnMockRoundsUpAndMarksUnknown(t *testing.T) {
	s := dgxh100.New()
	d := mockDevice(s, 0)
	d.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
		return []gonvml.ProcessInfo{
			{Pid: 300, UsedGpuMemory: ^uint64(0)}, // NVML_VALUE_NOT_AVAILABLE
			{Pid: 20, UsedGpuMemory: 1},           // one byte: 1 MiB, never 0
			{Pid: 100, UsedGpuMemory: 3 << 20},
		}, gonvml.SUCCESS
	}
	got, err := nvml.NewBackend(s, nvml.Options{}).Processes(d.UUID)
	if err != nil {
		t.Fatalf("Processes: %v", err)
	}
	want := "[{20 1} {100 3} {300 -1}]"
	if fmtProcs(got) != want {
		t.Errorf("Processes = %s, want %s", fmtProcs(got), want)
	}
	d.GetComputeRunningProcessesFunc = nil // the raw mock panics here
	if _, err := nvml.NewBackend(s, nvml.Options{}).Processes(d.UUID); err == nil ||
		!strings.Contains(err.Error(), "nvmlDeviceGetComputeRunningProcesses("+d.UUID+")") {
		t.Errorf("Processes on a mock without the function: err = %v, want one naming the call and device", err)
	}
}

func TestProbeUnknownUUID(t *testing.T) {
	err := nvml.NewBackend(dgxh100.New(), nvml.Options{}).Probe("GPU-nope")
	if !nvml.IsReturn(err, gonvml.ERROR_INVALID_ARGUMENT) || !strings.Contains(err.Error(), "nvmlDeviceGetHandleByUUID(GPU-nope)") {
		t.Fatalf("Probe(GPU-nope) = %v, want nvmlDeviceGetHandleByUUID(GPU-nope) ERROR_INVALID_ARGUMENT", err)
	}
}

// TestOpenWithoutDriver: on a machine without libnvidia-ml.so.1, Open says so clearly.
func TestOpenWithoutDriver(t *testing.T) {
	b, closer, err := nvml.Open()
	if err == nil {
		closer()
		t.Skipf("a real NVML is present (%s); nothing to check here", b.Name())
	}
	if !strings.Contains(err.Error(), "libnvidia-ml.so.1 not found") &&
		!strings.Contains(err.Error(), "initializing NVML") {
		t.Fatalf("Open error = %q, want it to name libnvidia-ml.so.1 or NVML initialization", err)
	}
}

// TestDiscoverSMCountFallback: nvmlDeviceGetAttributes supports MIG handles only, so on a full
// GPU any failure falls back to the model's SM count (0 when unknown), never fails discovery.
func TestDiscoverSMCountFallback(t *testing.T) {
	s := dgxh100.New()
	mockDevice(s, 0).GetAttributesFunc = func() (gonvml.DeviceAttributes, gonvml.Return) {
		return gonvml.DeviceAttributes{}, gonvml.ERROR_INVALID_ARGUMENT
	}
	mockDevice(s, 1).GetAttributesFunc = func() (gonvml.DeviceAttributes, gonvml.Return) {
		return gonvml.DeviceAttributes{MultiprocessorCount: 100}, gonvml.SUCCESS
	}
	mockDevice(s, 2).GetNameFunc = func() (string, gonvml.Return) { return "Acme Z9", gonvml.SUCCESS }
	gpus, err := nvml.NewBackend(s, nvml.Options{}).Discover()
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if gpus[0].SMCount != 132 || gpus[1].SMCount != 100 || gpus[2].SMCount != 0 {
		t.Errorf("SM counts = %d, %d, %d; want 132 (table), 100 (NVML), 0 (unknown model)",
			gpus[0].SMCount, gpus[1].SMCount, gpus[2].SMCount)
	}
}

func TestSMCountOf(t *testing.T) {
	for model, want := range map[string]int{
		"NVIDIA H100 80GB HBM3":   132,
		"NVIDIA H100 PCIe":        114,
		"NVIDIA H100 NVL":         132,
		"NVIDIA H200":             132,
		"NVIDIA H200 141GB HBM3e": 132,
		"NVIDIA H20":              78, // case C06: H20 is not H200
		"NVIDIA A100-SXM4-80GB":   108,
		"NVIDIA A10":              72, // case C06: A10 is not A100
		"NVIDIA B200":             148,
		"Tesla T4":                40,
		"Acme Z9":                 0,
	} {
		if got := nvml.SMCountOf(model); got != want {
			t.Errorf("SMCountOf(%q) = %d, want %d", model, got, want)
		}
	}
}

// TestDiscoverNUMAFromSysfs: when NVML cannot tell the NUMA node, Options.PCIDevicesDir's
// <bus id>/numa_node is used (-1 there stays unknown).
func TestDiscoverNUMAFromSysfs(t *testing.T) {
	dir := t.TempDir()
	s := dgxh100.New()
	for i, numa := range map[int]string{0: "1\n", 1: "-1\n", 2: "junk"} {
		bus := fmt.Sprintf("00000000:%02X:00.0", 0x1A+i)
		d := mockDevice(s, i)
		d.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
			var p gonvml.PciInfo
			for k, c := range []byte(bus) {
				p.BusId[k] = int8(c)
			}
			return p, gonvml.SUCCESS
		}
		sys := filepath.Join(dir, fmt.Sprintf("0000:%02x:00.0", 0x1A+i))
		if err := os.MkdirAll(sys, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sys, "numa_node"), []byte(numa), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gpus, err := nvml.NewBackend(s, nvml.Options{PCIDevicesDir: dir}).Discover()
	if err != nil {
		t.Fatal(err)
	}
	if gpus[0].PCIBusID != "00000000:1A:00.0" {
		t.Errorf("PCIBusID = %q, want 00000000:1A:00.0", gpus[0].PCIBusID)
	}
	if got := []int{gpus[0].NUMANode, gpus[1].NUMANode, gpus[2].NUMANode, gpus[3].NUMANode}; fmt.Sprint(got) != "[1 -1 -1 -1]" {
		t.Errorf("NUMA nodes = %v, want [1 -1 -1 -1] (sysfs 1, sysfs -1, junk, no file)", got)
	}
}

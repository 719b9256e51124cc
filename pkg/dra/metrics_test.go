package dra

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/hami-go/hami-go/pkg/device"
)

// gpuGauge returns the value of the driver's per-GPU series name for GPU uuid.
func gpuGauge(t *testing.T, d *Driver, name, uuid string) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1000)
	NewCollector(d).Collect(ch)
	close(ch)
	for m := range ch {
		if !strings.Contains(m.Desc().String(), `"`+name+`"`) {
			continue
		}
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		for _, l := range pb.GetLabel() {
			if l.GetName() == "uuid" && l.GetValue() == uuid {
				return pb.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no %s series for %s", name, uuid)
	return 0
}

// A prepared claim shows as a slice (namespace, claim) under the device plugin's metric names
// and adds to its GPU's allocated series; unprepare removes the slice series.
func TestMetricsPerClaim(t *testing.T) {
	d, _ := newTestDriver(t, testConfig(t.TempDir()), "2x24576:NVIDIA A10")
	c := testClaim("a", 4000, 25, result{device: "gpu-0", memMiB: 4000, cores: 25})
	prepare(t, d, c)
	uuid := d.GPUs()[0].GPU.UUID
	want := `
# HELP hami_go_gpu_memory_allocated_bytes GPU memory booked on the GPU by the pods placed there, bytes, charged as scheduling charges it (init containers one at a time, case C40).
# TYPE hami_go_gpu_memory_allocated_bytes gauge
hami_go_gpu_memory_allocated_bytes{index="0",model="NVIDIA A10",node="node-1",uuid="` + uuid + `"} 4.194304e+09
hami_go_gpu_memory_allocated_bytes{index="1",model="NVIDIA A10",node="node-1",uuid="` + d.GPUs()[1].GPU.UUID + `"} 0
# HELP hami_go_gpu_sharers Slices of the GPU held by containers that can run at one time (scheduling's count).
# TYPE hami_go_gpu_sharers gauge
hami_go_gpu_sharers{index="0",model="NVIDIA A10",node="node-1",uuid="` + uuid + `"} 1
hami_go_gpu_sharers{index="1",model="NVIDIA A10",node="node-1",uuid="` + d.GPUs()[1].GPU.UUID + `"} 0
# HELP hami_go_slice_cores_limit_percent Compute limit of the container on the GPU, percent (0 = none).
# TYPE hami_go_slice_cores_limit_percent gauge
hami_go_slice_cores_limit_percent{claim="a",index="0",model="NVIDIA A10",namespace="default",node="node-1",uuid="` + uuid + `"} 25
# HELP hami_go_slice_memory_limit_bytes Memory limit of the container on the GPU, bytes.
# TYPE hami_go_slice_memory_limit_bytes gauge
hami_go_slice_memory_limit_bytes{claim="a",index="0",model="NVIDIA A10",namespace="default",node="node-1",uuid="` + uuid + `"} 4.194304e+09
`
	col := NewCollector(d)
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "hami_go_gpu_memory_allocated_bytes", "hami_go_gpu_sharers",
		"hami_go_slice_cores_limit_percent", "hami_go_slice_memory_limit_bytes"); err != nil {
		t.Fatal(err)
	}
	obj := kubeletplugin.NamespacedObject{UID: c.UID}
	if _, err := d.UnprepareResourceClaims(bg, []kubeletplugin.NamespacedObject{obj}); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(col, "hami_go_slice_memory_limit_bytes", "hami_go_slice_cores_limit_percent"); n != 0 {
		t.Fatalf("%d slice series after unprepare, want 0", n)
	}
}

// hami_go_gpu_memory_total_bytes is the memory the GPU offers, as the ResourceSlice publishes
// its memory capacity and the device plugin exports it: the reserve taken off, then the scaling
// (24576 MiB - 2048 MiB reserved = 22528 MiB, × 1.5 = 33792 MiB).
func TestMetricsTotalIsOfferedMemory(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MemoryScaling = 1.5
	cfg.ReservedMemory = device.MemoryReserve{AllMiB: 2048}
	d, _ := newTestDriver(t, cfg, "2x24576:NVIDIA A10")
	for _, gi := range d.GPUs() {
		got := gpuGauge(t, d, "hami_go_gpu_memory_total_bytes", gi.GPU.UUID)
		if want := float64(33792 << 20); got != want {
			t.Errorf("GPU %s: total %v bytes, want %v (33792 MiB)", gi.GPU.UUID, got, want)
		}
		published := Devices([]GPUInfo{gi}, d.sliceConfig())[0].Capacity["memory"].Value
		if got != float64(published.Value()) {
			t.Errorf("GPU %s: total %v bytes, the ResourceSlice publishes %s", gi.GPU.UUID, got, published.String())
		}
	}
}

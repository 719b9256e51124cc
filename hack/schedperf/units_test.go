package schedperf

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/utils/ptr"

	"github.com/hami-go/hami-go/pkg/draapi"
)

func TestExtenderAddr(t *testing.T) {
	addr, err := extenderAddr(extenderConfigFile)
	if err != nil || addr != "127.0.0.1:39123" {
		t.Errorf("extenderAddr(%s) = %q, %v; want 127.0.0.1:39123", extenderConfigFile, addr, err)
	}
	bad := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := extenderAddr(bad); err == nil || !strings.Contains(err.Error(), "extenders: none configured") {
		t.Errorf("no extender: err %v, want one naming extenders", err)
	}
}

func TestTestCaseOf(t *testing.T) {
	for name, want := range map[string]string{
		"BenchmarkPerfScheduling/HamiExtenderSlice/500Nodes_1000Pods": "HamiExtenderSlice",
		"TestSchedPerf/DRAWholeGPU/4Nodes_10Pods":                     "DRAWholeGPU",
		"TestSchedPerf": "",
	} {
		if got := testCaseOf(name); got != want {
			t.Errorf("testCaseOf(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestBucketQuantile: 10 observations, 4 in (0, 1 ms], 4 in (1, 2 ms], 2 in (2, 5 ms].
func TestBucketQuantile(t *testing.T) {
	h := &dto.Histogram{SampleCount: ptr.To[uint64](10), SampleSum: ptr.To(0.02), Bucket: []*dto.Bucket{
		{UpperBound: ptr.To(0.001), CumulativeCount: ptr.To[uint64](4)},
		{UpperBound: ptr.To(0.002), CumulativeCount: ptr.To[uint64](8)},
		{UpperBound: ptr.To(0.005), CumulativeCount: ptr.To[uint64](10)},
	}}
	for _, c := range []struct{ q, want float64 }{{0.2, 0.0005}, {0.5, 0.00125}, {0.9, 0.0035}, {1, 0.005}} {
		if got := bucketQuantile(c.q, h); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("q%.2f = %g, want %g", c.q, got, c.want)
		}
	}
	f := verbFigures(h)
	if f.Calls != 10 || math.Abs(f.MeanMs-2) > 1e-9 || math.Abs(f.P50Ms-1.25) > 1e-9 || math.Abs(f.TotalMs-20) > 1e-9 {
		t.Errorf("verbFigures = %+v, want 10 calls, mean 2 ms, p50 1.25 ms, total 20 ms", f)
	}
}

// TestDevices: hami-go's devices come from the driver's builder (shared capacity, the three
// capacities, the split count as sharers); the baseline's are the same devices without them.
func TestDevices(t *testing.T) {
	h, w := hamiDevices(3), wholeDevices(3)
	if len(h) != gpusPerNode || len(w) != gpusPerNode {
		t.Fatalf("%d and %d devices, want %d", len(h), len(w), gpusPerNode)
	}
	if h[0].Name != "gpu-0" || !ptr.Deref(h[0].AllowMultipleAllocations, false) {
		t.Errorf("hami device %s allowMultipleAllocations %v, want gpu-0 shared", h[0].Name, h[0].AllowMultipleAllocations)
	}
	if s := h[0].Capacity[draapi.CapacitySharers].Value; s.Value() != splitCount {
		t.Errorf("sharers %v, want %d", s.String(), splitCount)
	}
	if m := h[0].Capacity[draapi.CapacityMemory].Value; m.Value() != gpuMiB<<20 {
		t.Errorf("memory %v, want %d MiB", m.String(), gpuMiB)
	}
	if w[0].AllowMultipleAllocations != nil || w[0].Capacity != nil || w[0].Name != "gpu-0" || len(w[0].Attributes) != len(h[0].Attributes) {
		t.Errorf("whole device %+v, want gpu-0 with the attributes and no sharing", w[0])
	}
	if *h[0].Attributes[draapi.AttrUUID].StringValue == *hamiDevices(4)[0].Attributes[draapi.AttrUUID].StringValue {
		t.Error("two nodes' GPU 0 share a UUID")
	}
}

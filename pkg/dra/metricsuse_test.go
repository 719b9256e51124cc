package dra

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	testclock "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/pkg/nri"
)

// Issue 35 item 6: the DRA driver exports hami_go_slice_memory_used_bytes per claim, from the
// processes NVML lists (host PIDs) mapped to containers (the PID resolver) and from containers
// to the claim their CDI devices named (the NRI plugin's Granted): two containers sharing one
// claim add up in its one series, a process of an unknown container counts only in the GPU's
// used memory, a claim on another GPU gets only that GPU's processes. Unprepare forgets the
// claim's containers and its series go.
func TestMetricsSliceUsedPerClaim(t *testing.T) {
	b, fleet := fakeBackend(t, "2x24576:NVIDIA A10")
	id := func(c byte) string { return strings.Repeat(string(c), 64) }
	pids := map[uint32]string{10: id('a'), 11: id('b'), 12: id('e'), 13: id('c')}
	resolve := func(pid uint32) (string, bool) { s, ok := pids[pid]; return s, ok }
	d, err := New(testConfig(t.TempDir()), b, Options{Clock: testclock.NewFakeClock(t0), FileExists: fileExists, PIDResolver: resolve})
	if err != nil {
		t.Fatal(err)
	}
	shared := testClaim("shared", 4000, 0, result{device: "gpu-0", memMiB: 4000})
	other := testClaim("other", 3000, 0, result{device: "gpu-1", memMiB: 3000})
	prepare(t, d, shared, other)
	for _, c := range []nri.Container{
		{PodUID: "pod-uid-shared", Name: "a", ID: id('a'), CDIDevices: []string{ClaimCDIDevice(shared.UID)}, Creating: true},
		{PodUID: "pod-uid-shared", Name: "b", ID: id('b'), CDIDevices: []string{ClaimCDIDevice(shared.UID)}, Creating: true},
		{PodUID: "pod-uid-other", Name: "c", ID: id('c'), CDIDevices: []string{ClaimCDIDevice(other.UID)}, Creating: true},
	} {
		if g, err := d.Granted(bg, c); err != nil || !g.GPU {
			t.Fatalf("Granted(%s) = %+v, %v", c.Name, g, err)
		}
	}
	u0, u1 := d.GPUs()[0].GPU.UUID, d.GPUs()[1].GPU.UUID
	for _, s := range []struct {
		uuid string
		pid  uint32
		mib  int64
	}{{u0, 10, 1024}, {u0, 11, 512}, {u0, 12, 256}, {u1, 13, 300}, {u1, 10, 64}} {
		if err := fleet.SetUsage(s.uuid, s.pid, s.mib); err != nil {
			t.Fatal(err)
		}
	}
	// pid 10 (container a, claim shared on gpu-0) also holds 64 MiB on gpu-1, which claim shared
	// does not grant: it counts in gpu-1's use only.
	want := `
# HELP hami_go_gpu_memory_used_bytes GPU memory used by processes, bytes (from the backend).
# TYPE hami_go_gpu_memory_used_bytes gauge
hami_go_gpu_memory_used_bytes{index="0",model="NVIDIA A10",node="node-1",uuid="` + u0 + `"} 1.879048192e+09
hami_go_gpu_memory_used_bytes{index="1",model="NVIDIA A10",node="node-1",uuid="` + u1 + `"} 3.81681664e+08
# HELP hami_go_slice_memory_used_bytes Memory the container's processes use on the GPU, bytes.
# TYPE hami_go_slice_memory_used_bytes gauge
hami_go_slice_memory_used_bytes{claim="other",index="1",model="NVIDIA A10",namespace="default",node="node-1",uuid="` + u1 + `"} 3.145728e+08
hami_go_slice_memory_used_bytes{claim="shared",index="0",model="NVIDIA A10",namespace="default",node="node-1",uuid="` + u0 + `"} 1.610612736e+09
`
	col := NewCollector(d)
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "hami_go_gpu_memory_used_bytes", "hami_go_slice_memory_used_bytes"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.UnprepareResourceClaims(bg, []kubeletplugin.NamespacedObject{{UID: shared.UID}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.claimOf(id('a'), u0); ok {
		t.Error("container a still maps to a claim after its claim was unprepared")
	}
	if n := testutil.CollectAndCount(col, "hami_go_slice_memory_used_bytes"); n != 1 {
		t.Errorf("%d slice used series after unpreparing claim shared, want 1 (claim other)", n)
	}
}

// Without a PID resolver the driver exports no per-claim use (rather than a wrong 0), and the
// GPU's used memory still.
func TestMetricsSliceUsedNeedsResolver(t *testing.T) {
	b, fleet := fakeBackend(t, "1x24576:NVIDIA A10")
	d, err := New(testConfig(t.TempDir()), b, Options{Clock: testclock.NewFakeClock(t0), FileExists: fileExists})
	if err != nil {
		t.Fatal(err)
	}
	c := testClaim("a", 4000, 0, result{device: "gpu-0", memMiB: 4000})
	prepare(t, d, c)
	if _, err := d.Granted(bg, nri.Container{PodUID: "p", Name: "a", ID: strings.Repeat("a", 64), CDIDevices: []string{ClaimCDIDevice(c.UID)}}); err != nil {
		t.Fatal(err)
	}
	if err := fleet.SetUsage(d.GPUs()[0].GPU.UUID, 10, 1024); err != nil {
		t.Fatal(err)
	}
	col := NewCollector(d)
	if n := testutil.CollectAndCount(col, "hami_go_slice_memory_used_bytes"); n != 0 {
		t.Errorf("%d slice used series without a resolver, want 0", n)
	}
	if got := gpuGauge(t, d, "hami_go_gpu_memory_used_bytes", d.GPUs()[0].GPU.UUID); got != 1024<<20 {
		t.Errorf("GPU used %v bytes, want 1 GiB", got)
	}
}

package dra

import (
	"strings"
	"testing"

	testclock "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/metricstest"
	"github.com/hami-go/hami-go/pkg/nri"
)

// What the DRA driver serves on /metrics, with a prepared claim whose container uses memory, passes promlint (`promtool
// check metrics`) and is exactly the DRA driver's rows of the metric reference in
// docs/components.md.
func TestMetricsLintAndReference(t *testing.T) {
	b, fleet := fakeBackend(t, "2x24576:NVIDIA A10")
	cid := strings.Repeat("a", 64)
	d, err := New(testConfig(t.TempDir()), b, Options{Clock: testclock.NewFakeClock(t0), FileExists: fileExists,
		PIDResolver: func(pid uint32) (string, bool) { return cid, pid == 10 }})
	if err != nil {
		t.Fatal(err)
	}
	claim := testClaim("a", 4000, 25, result{device: "gpu-0", memMiB: 4000, cores: 25})
	prepare(t, d, claim)
	// A container of the claim with a process using 700 MiB: the per-claim used series is served.
	if g, err := d.Granted(bg, nri.Container{PodUID: "pod-uid-a", Name: "c", ID: cid, CDIDevices: []string{ClaimCDIDevice(claim.UID)}, Creating: true}); err != nil || !g.GPU {
		t.Fatalf("Granted = %+v, %v", g, err)
	}
	if err := fleet.SetUsage(d.GPUs()[0].GPU.UUID, 10, 700); err != nil {
		t.Fatal(err)
	}
	fams := metricstest.Check(t, "dra-driver", MetricsHandler(d, nil, &Registration{}))
	if got := fams["hami_go_slice_memory_used_bytes"].GetMetric()[0].GetGauge().GetValue(); got != 700<<20 {
		t.Errorf("slice used %v bytes, want %d", got, 700<<20)
	}
	var limits []float64
	for _, m := range fams["hami_go_slice_memory_limit_bytes"].GetMetric() {
		limits = append(limits, m.GetGauge().GetValue())
	}
	if len(limits) != 1 || limits[0] != 4000<<20 {
		t.Errorf("slice limits %v, want [%d]", limits, 4000<<20)
	}
}

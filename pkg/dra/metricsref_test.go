package dra

import (
	"testing"

	"github.com/hami-go/hami-go/internal/metricstest"
)

// What the DRA driver serves on /metrics, with a prepared claim, passes promlint (`promtool
// check metrics`) and is exactly the DRA driver's rows of the metric reference in
// docs/components.md.
func TestMetricsLintAndReference(t *testing.T) {
	d, _ := newTestDriver(t, testConfig(t.TempDir()), "2x24576:NVIDIA A10")
	prepare(t, d, testClaim("a", 4000, 25, result{device: "gpu-0", memMiB: 4000, cores: 25}))
	fams := metricstest.Check(t, "dra-driver", MetricsHandler(d, nil, &Registration{}))
	var limits []float64
	for _, m := range fams["hami_go_slice_memory_limit_bytes"].GetMetric() {
		limits = append(limits, m.GetGauge().GetValue())
	}
	if len(limits) != 1 || limits[0] != 4000<<20 {
		t.Errorf("slice limits %v, want [%d]", limits, 4000<<20)
	}
}

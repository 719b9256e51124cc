package schedplugin

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hami-go/hami-go/internal/metricstest"
	"github.com/hami-go/hami-go/internal/podtest"
)

// TestMetricReference: what the plugin adds to kube-scheduler's /metrics (its Collectors, with a
// pod bound) passes promlint and is, family for family, docs/components.md's metric reference
// for kube-scheduler-hami-go; the booked pod's memory is 8000 MiB.
func TestMetricReference(t *testing.T) {
	e := newEnv(t, nil, []string{"node-a"}, map[string]int64{"node-a": 81920})
	pod := podtest.Pending("default", "web", podtest.GPU("main", 1, "8000", 25))
	e.create(pod)
	st, _ := e.preFilter(pod)
	if s := e.p.Reserve(context.Background(), st, pod, "node-a"); !s.IsSuccess() {
		t.Fatal(s)
	}
	if s := e.p.Bind(context.Background(), st, pod, "node-a"); !s.IsSuccess() {
		t.Fatalf("Bind: %v", s)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(e.p.Metrics())
	fams := metricstest.Check(t, "kube-scheduler-hami-go", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if got := fams["hami_go_extender_pod_allocated_memory_mib"].GetMetric()[0].GetGauge().GetValue(); got != 8000 {
		t.Errorf("pod allocated %v MiB, want 8000", got)
	}
}

package schedplugin

import (
	"context"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/hami-go/hami-go/internal/podtest"
)

// gatherExtender returns the hami_go_extender_* families kube-scheduler's /metrics serves
// (component-base's legacyregistry, which New registers the plugin's metrics on), by name.
func gatherExtender(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatalf("gather kube-scheduler's registry: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "hami_go_extender_") {
			out[f.GetName()] = f
		}
	}
	return out
}

// TestMetricsServedByKubeScheduler: the plugin's GPU bookings are series of kube-scheduler's own
// registry (so its /metrics serves them): after a 3000 MiB, 40 % pod is reserved and bound on
// node-a's one GPU, hami_go_extender_gpu_sharers is 1 and the GPU's booked memory 3000 MiB;
// Close (kube-scheduler closing its plugins) takes every series off.
func TestMetricsServedByKubeScheduler(t *testing.T) {
	e := newEnv(t, nil, []string{"node-a"}, map[string]int64{"node-a": 8192})
	pod := podtest.Pending("default", "p", podtest.GPU("c", 1, "3000", 40))
	e.create(pod)
	st, _ := e.preFilter(pod)
	if s := e.p.Reserve(context.Background(), st, pod, "node-a"); !s.IsSuccess() {
		t.Fatal(s)
	}
	if s := e.p.Bind(context.Background(), st, pod, "node-a"); !s.IsSuccess() {
		t.Fatalf("Bind: %v", s)
	}
	fams := gatherExtender(t)
	for name, want := range map[string]float64{
		"hami_go_extender_gpu_sharers":                 1,
		"hami_go_extender_gpu_allocated_memory_mib":    3000,
		"hami_go_extender_gpu_allocated_cores_percent": 40,
		"hami_go_extender_pod_allocated_memory_mib":    3000,
	} {
		f := fams[name]
		if f == nil || len(f.GetMetric()) != 1 {
			t.Errorf("%s: %v, want one series", name, f)
			continue
		}
		m := f.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if got := m.GetGauge().GetValue(); got != want || labels["node"] != "node-a" || labels["uuid"] != "GPU-node-a-0" {
			t.Errorf("%s = %v %v, want %v on node-a's GPU-node-a-0", name, got, labels, want)
		}
	}
	if err := e.p.Close(); err != nil {
		t.Fatal(err)
	}
	if fams := gatherExtender(t); len(fams) != 0 {
		t.Errorf("after Close kube-scheduler's registry still serves %d hami_go_extender_* families", len(fams))
	}
}

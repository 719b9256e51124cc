package extender

import (
	"net/http/httptest"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/hami-go/hami-go/internal/metricstest"
	"github.com/hami-go/hami-go/internal/podtest"
)

// What the extender serves on its metrics address, after a filter and a bind (a pod booked on
// a GPU), passes promlint (`promtool check metrics`) and is exactly the extender's rows of the
// metric reference in docs/components.md.
func TestMetricsLintAndReference(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 1, 24576, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	srv := httptest.NewServer(e.ext.APIHandler())
	defer srv.Close()
	p := podtest.Pending("default", "web", podtest.GPU("main", 1, "8000", 25))
	e.create(p)
	nodes := []string{"node-1"}
	if code, body := post(t, srv.URL+"/filter", mustJSON(t, extenderv1.ExtenderArgs{Pod: p, NodeNames: &nodes})); code != 200 {
		t.Fatalf("filter %d %s", code, body)
	}
	if code, body := post(t, srv.URL+"/bind", mustJSON(t, extenderv1.ExtenderBindingArgs{PodName: "web", PodNamespace: "default", PodUID: p.UID, Node: "node-1"})); code != 200 || string(body) != `{"Error":""}` {
		t.Fatalf("bind %d %s", code, body)
	}
	fams := metricstest.Check(t, "scheduler-extender", e.ext.MetricsHandler(e.reg))
	if got := fams["hami_go_extender_pod_allocated_memory_mib"].GetMetric()[0].GetGauge().GetValue(); got != 8000 {
		t.Errorf("pod allocated %v MiB, want 8000", got)
	}
	if got := fams["hami_go_extender_requests_total"].GetMetric(); len(got) != 2 {
		t.Errorf("%d verb/outcome series, want 2 (filter ok, bind ok): %v", len(got), got)
	}
}

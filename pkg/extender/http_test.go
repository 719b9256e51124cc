package extender

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/hami-go/hami-go/internal/podtest"
)

func post(t *testing.T, url string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The wire format kube-scheduler sends and reads: the extender/v1 Go types, marshalled.
func TestHTTPWireFormat(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 1, 24576, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	srv := httptest.NewServer(e.ext.Handler(e.reg))
	defer srv.Close()
	p := podtest.Pending("default", "web", podtest.GPU("main", 1, "8000", 0))
	e.create(p)
	all := []string{"node-1", "node-x"}
	code, body := post(t, srv.URL+"/filter", mustJSON(t, extenderv1.ExtenderArgs{Pod: p, NodeNames: &all}))
	if code != 200 {
		t.Fatalf("filter %d %s", code, body)
	}
	// Field names exactly as the Go types marshal them (no json tags: NodeNames, FailedNodes...).
	if !strings.Contains(string(body), `"NodeNames":["node-1"]`) || !strings.Contains(string(body), `"FailedAndUnresolvableNodes":{"node-x":"no inventory from device plugin"}`) {
		t.Fatalf("filter reply %s", body)
	}
	code, body = post(t, srv.URL+"/prioritize", mustJSON(t, extenderv1.ExtenderArgs{Pod: p, NodeNames: &all}))
	// node-x (no inventory) scores 0 and is left out: kube-scheduler adds nothing for it either way.
	if code != 200 || string(body) != `[{"Host":"node-1","Score":10}]` {
		t.Fatalf("prioritize %d %s", code, body)
	}
	// A pod of another scheduler scores 0 everywhere: the list stays whole (kube-scheduler then
	// draws its random tie-breaker for every node, as without the extender's scores).
	other := podtest.Pending("default", "other", podtest.GPU("main", 1, "1000", 0))
	other.Spec.SchedulerName = "default-scheduler"
	code, body = post(t, srv.URL+"/prioritize", mustJSON(t, extenderv1.ExtenderArgs{Pod: other, NodeNames: &all}))
	if code != 200 || string(body) != `[{"Host":"node-1","Score":0},{"Host":"node-x","Score":0}]` {
		t.Fatalf("prioritize of a pod scored 0 everywhere: %d %s", code, body)
	}
	code, body = post(t, srv.URL+"/bind", mustJSON(t, extenderv1.ExtenderBindingArgs{PodName: "web", PodNamespace: "default", PodUID: p.UID, Node: "node-1"}))
	if code != 200 || string(body) != `{"Error":""}` {
		t.Fatalf("bind %d %s", code, body)
	}
	if got := e.getPod("default", "web"); got.Spec.NodeName != "node-1" || plannedOf(t, got).Containers[0].Devices[0].MemoryMiB != 8000 {
		t.Fatalf("pod after bind: %q %v", got.Spec.NodeName, got.Annotations)
	}
	// A second pod that does not fit: the bind answers the reason in Error.
	q := podtest.Pending("default", "big", podtest.GPU("main", 1, "20000", 0))
	e.create(q)
	code, body = post(t, srv.URL+"/bind", mustJSON(t, extenderv1.ExtenderBindingArgs{PodName: "big", PodNamespace: "default", PodUID: q.UID, Node: "node-1"}))
	var br extenderv1.ExtenderBindingResult
	if code != 200 || json.Unmarshal(body, &br) != nil || !strings.Contains(br.Error, "16576 of 24576 MiB free") {
		t.Fatalf("refused bind %d %s", code, body)
	}
	// Metrics reflect the booking and the calls.
	want := `
# HELP hami_go_extender_gpu_allocated_memory_mib GPU memory booked on the GPU (bound pods and reservations), MiB.
# TYPE hami_go_extender_gpu_allocated_memory_mib gauge
hami_go_extender_gpu_allocated_memory_mib{index="0",model="NVIDIA H100 80GB HBM3",node="node-1",uuid="GPU-node-1-0"} 8000
# HELP hami_go_extender_pod_allocated_memory_mib GPU memory allocated to the container on the GPU, MiB.
# TYPE hami_go_extender_pod_allocated_memory_mib gauge
hami_go_extender_pod_allocated_memory_mib{container="main",index="0",model="NVIDIA H100 80GB HBM3",namespace="default",node="node-1",pod="web",pod_uid="uid-default-web",uuid="GPU-node-1-0"} 8000
`
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(want), "hami_go_extender_gpu_allocated_memory_mib", "hami_go_extender_pod_allocated_memory_mib"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(e.ext.metrics.outcomes.WithLabelValues("bind", "refused")); n != 1 {
		t.Fatalf("bind refused count %v", n)
	}
	if n := testutil.ToFloat64(e.ext.metrics.outcomes.WithLabelValues("filter", "ok")); n != 1 {
		t.Fatalf("filter ok count %v", n)
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `hami_go_extender_request_duration_seconds_count{verb="bind"} 2`) {
		t.Fatalf("/metrics lacks the bind histogram")
	}
}

func TestHTTPMalformedAndHealth(t *testing.T) {
	e := newEnv(t, nil)
	srv := httptest.NewServer(e.ext.Handler(e.reg))
	defer srv.Close()
	for _, tc := range []struct{ path, body, want string }{
		{"/filter", `{"Pod":`, "malformed *v1.ExtenderArgs"},
		{"/filter", `{"NodeNames":["a"]}`, "ExtenderArgs.Pod is missing"},
		{"/prioritize", `[1,2]`, "malformed *v1.ExtenderArgs"},
		{"/bind", `{"PodName":"x"}`, "ExtenderBindingArgs needs PodName, PodNamespace, PodUID and Node"},
		{"/bind", `nope`, "malformed *v1.ExtenderBindingArgs"},
		{"/preempt", `{"Pod":{"metadata":{"name":3}}}`, "malformed *v1.ExtenderPreemptionArgs"},
	} {
		code, body := post(t, srv.URL+tc.path, []byte(tc.body))
		if code != 400 || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s %s: %d %s", tc.path, tc.body, code, body)
		}
	}
	if resp, err := http.Get(srv.URL + "/filter"); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /filter: %v %v", resp.StatusCode, err)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if resp, err := http.Get(srv.URL + p); err != nil || resp.StatusCode != 200 {
			t.Errorf("%s: %v", p, err)
		}
	}
	e.stop()
	if resp, err := http.Get(srv.URL + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz after stop: %d", resp.StatusCode)
	}
}

// A panic inside a handler is answered 500 with its message; the process lives on.
func TestHTTPRecoversPanics(t *testing.T) {
	e := newEnv(t, nil)
	h := e.ext.verb("filter", func(http.ResponseWriter, *http.Request) string { panic("boom") })
	rr := httptest.NewRecorder()
	h(rr, httptest.NewRequest("POST", "/filter", strings.NewReader("{}")))
	if rr.Code != 500 || !strings.Contains(rr.Body.String(), "internal error in filter: boom") {
		t.Fatalf("%d %s", rr.Code, rr.Body.String())
	}
	if n := testutil.ToFloat64(e.ext.metrics.outcomes.WithLabelValues("filter", "error")); n != 1 {
		t.Fatalf("error count %v", n)
	}
}

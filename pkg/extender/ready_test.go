package extender

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
	hmetrics "github.com/hami-go/hami-go/pkg/metrics"
)

// readyFixture is an extender that was never Run (Ready false: it just started or restarted and
// its informers have not synced) whose cache was nevertheless fed part of the cluster by hand, as
// informers part-way through their first list would: node-1 (one 24576 MiB GPU) and its Lease,
// and, unless podsMissing, the victim pod holding 20000 MiB of it. The API holds all of them and
// the pending pod want (8000 MiB, priority 100): a cache that skipped the victim would book
// 8000 MiB on a GPU with 4576 MiB free.
type readyFixture struct {
	ext    *Extender
	client *fake.Clientset
	srv    *httptest.Server
	victim *corev1.Pod
	want   *corev1.Pod
}

func newReadyFixture(t *testing.T, podsMissing bool) *readyFixture {
	t.Helper()
	inv := testInventory("node-1", 1, 24576, 10)
	node, lease := testNode(t, inv), testLease("node-1", t0)
	victim := prioritized(boundPod(t, "v", "victim", "node-1", inv.GPUs[0].UUID, 20000, true), 0)
	want := prioritized(podtest.Pending("default", "want", podtest.GPU("main", 1, "8000", 0)), 100)
	client := fake.NewClientset(node, lease, victim, want)
	clk := clocktesting.NewFakeClock(t0)
	reg := hmetrics.NewRegistry()
	ext, err := New(DefaultConfig(), client, record.NewFakeRecorder(100), clk, reg)
	if err != nil {
		t.Fatal(err)
	}
	ext.cache.OnNode(node)
	ext.cache.OnLease(lease)
	if !podsMissing {
		ext.cache.OnPod(victim)
	}
	srv := httptest.NewServer(ext.Handler(reg))
	t.Cleanup(srv.Close)
	return &readyFixture{ext: ext, client: client, srv: srv, victim: victim, want: want}
}

// bindings counts the Bindings the extender created through its client.
func (f *readyFixture) bindings() int {
	n := 0
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "create" && a.GetSubresource() == "binding" {
			n++
		}
	}
	return n
}

// Issue 37 item 1: until Run has rebuilt the cache (Ready false), every verb refuses, whatever the
// cache holds so far: /filter answers 200 with every node in FailedNodes and ErrNotReady as the
// reason (an HTTP error would make kube-scheduler clear the pod's nomination), /prioritize scores
// no node, /bind answers ErrNotReady and creates no Binding, /preempt keeps no victim (not even
// kube-scheduler's proposal). Before the fix the verbs answered from the partial cache: /filter
// passed node-1 and /bind bound 8000 MiB onto a GPU with 4576 MiB free.
func TestVerbsBeforeReadyRefuse(t *testing.T) {
	for _, podsMissing := range []bool{true, false} {
		f := newReadyFixture(t, podsMissing)
		nodes := []string{"node-1", "node-2"}
		for _, tc := range []struct {
			verb  string
			args  any
			check func(t *testing.T, body []byte)
		}{
			{"filter", extenderv1.ExtenderArgs{Pod: f.want, NodeNames: &nodes}, func(t *testing.T, body []byte) {
				var res extenderv1.ExtenderFilterResult
				if err := json.Unmarshal(body, &res); err != nil {
					t.Fatal(err)
				}
				if res.NodeNames == nil || len(*res.NodeNames) != 0 || res.Error != "" || len(res.FailedAndUnresolvableNodes) != 0 {
					t.Fatalf("filter before ready: %s; want no node, no Error, nothing unresolvable", body)
				}
				if len(res.FailedNodes) != 2 || res.FailedNodes["node-1"] != ErrNotReady.Error() || res.FailedNodes["node-2"] != ErrNotReady.Error() {
					t.Fatalf("filter before ready: FailedNodes %v; want node-1 and node-2 failed with %q", res.FailedNodes, ErrNotReady)
				}
			}},
			{"prioritize", extenderv1.ExtenderArgs{Pod: f.want, NodeNames: &nodes}, func(t *testing.T, body []byte) {
				if string(body) != "[]" {
					t.Fatalf("prioritize before ready: %s; want []", body)
				}
			}},
			{"bind", extenderv1.ExtenderBindingArgs{PodName: "want", PodNamespace: "default", PodUID: f.want.UID, Node: "node-1"}, func(t *testing.T, body []byte) {
				var res extenderv1.ExtenderBindingResult
				if err := json.Unmarshal(body, &res); err != nil {
					t.Fatal(err)
				}
				if res.Error != ErrNotReady.Error() {
					t.Fatalf("bind before ready: Error %q; want %q", res.Error, ErrNotReady)
				}
				if n := f.bindings(); n != 0 {
					t.Fatalf("bind before ready created %d Bindings", n)
				}
				if f.ext.cache.ownBooking(device.RefOf(f.want)) != nil {
					t.Fatal("bind before ready booked the pod in the cache")
				}
			}},
			{"preempt", extenderv1.ExtenderPreemptionArgs{Pod: f.want, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{
				"node-1": {Pods: []*extenderv1.MetaPod{{UID: string(f.victim.UID)}}},
			}}, func(t *testing.T, body []byte) {
				var res extenderv1.ExtenderPreemptionResult
				if err := json.Unmarshal(body, &res); err != nil {
					t.Fatal(err)
				}
				if res.NodeNameToMetaVictims == nil || len(res.NodeNameToMetaVictims) != 0 {
					t.Fatalf("preempt before ready: %s; want an empty NodeNameToMetaVictims", body)
				}
			}},
		} {
			t.Run(fmt.Sprintf("podsMissing=%v/%s", podsMissing, tc.verb), func(t *testing.T) {
				code, body := post(t, f.srv.URL+"/"+tc.verb, mustJSON(t, tc.args))
				if code != 200 {
					t.Fatalf("%s before ready: HTTP %d %s; want 200 with a refusal in the body", tc.verb, code, body)
				}
				tc.check(t, body)
			})
		}
		for _, v := range []string{"filter", "prioritize", "bind", "preempt"} {
			if n := testutil.ToFloat64(f.ext.metrics.outcomes.WithLabelValues(v, "refused")); n != 1 {
				t.Errorf("podsMissing=%v: %s refused count %v; want 1", podsMissing, v, n)
			}
		}
		// Direct callers of Bind are refused the same way.
		if err := f.ext.Bind(t.Context(), device.RefOf(f.want), "node-1"); !errors.Is(err, ErrNotReady) {
			t.Fatalf("Bind before ready: %v; want ErrNotReady", err)
		}
	}
}

// Once ready, the same cache answers: the refusals come from readiness alone. With the victim in
// the cache, 8000 MiB does not fit beside its 20000 MiB; without it (the fixture's partial cache,
// what an extender serving before ready would have used) node-1 would pass.
func TestVerbsAnswerOnceReady(t *testing.T) {
	for _, tc := range []struct {
		podsMissing bool
		wantFit     []string
	}{
		{podsMissing: false, wantFit: []string{}},
		{podsMissing: true, wantFit: []string{"node-1"}},
	} {
		f := newReadyFixture(t, tc.podsMissing)
		f.ext.ready.Store(true)
		nodes := []string{"node-1"}
		code, body := post(t, f.srv.URL+"/filter", mustJSON(t, extenderv1.ExtenderArgs{Pod: f.want, NodeNames: &nodes}))
		var res extenderv1.ExtenderFilterResult
		if code != 200 || json.Unmarshal(body, &res) != nil || res.NodeNames == nil {
			t.Fatalf("filter once ready: %d %s", code, body)
		}
		if got := *res.NodeNames; len(got) != len(tc.wantFit) || (len(got) == 1 && got[0] != tc.wantFit[0]) {
			t.Fatalf("podsMissing=%v: filter once ready fits %v; want %v (%s)", tc.podsMissing, got, tc.wantFit, body)
		}
		for _, why := range res.FailedNodes {
			if why == ErrNotReady.Error() {
				t.Fatalf("filter once ready still answers %q", why)
			}
		}
	}
}

// An extender that stops (its context ends: SIGTERM, or Run returned) is not ready again: the
// verbs refuse as before the first sync, with ErrStopping as the reason (issue 37 item 6), so a
// kube-scheduler still leading cannot book from a cache nobody keeps current.
func TestVerbsRefuseAfterStop(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 1, 24576, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	srv := httptest.NewServer(e.ext.Handler(e.reg))
	defer srv.Close()
	p := podtest.Pending("default", "web", podtest.GPU("main", 1, "8000", 0))
	e.create(p)
	nodes := []string{"node-1"}
	filter := func() extenderv1.ExtenderFilterResult {
		t.Helper()
		code, body := post(t, srv.URL+"/filter", mustJSON(t, extenderv1.ExtenderArgs{Pod: p, NodeNames: &nodes}))
		var res extenderv1.ExtenderFilterResult
		if code != 200 || json.Unmarshal(body, &res) != nil || res.NodeNames == nil {
			t.Fatalf("filter: %d %s", code, body)
		}
		return res
	}
	if res := filter(); len(*res.NodeNames) != 1 {
		t.Fatalf("filter while ready: %+v; want node-1", res)
	}
	e.stop()
	if res := filter(); len(*res.NodeNames) != 0 || res.FailedNodes["node-1"] != ErrStopping.Error() {
		t.Fatalf("filter after stop: %+v; want node-1 failed with ErrStopping", res)
	}
	code, body := post(t, srv.URL+"/bind", mustJSON(t, extenderv1.ExtenderBindingArgs{PodName: "web", PodNamespace: "default", PodUID: p.UID, Node: "node-1"}))
	var br extenderv1.ExtenderBindingResult
	if code != 200 || json.Unmarshal(body, &br) != nil || br.Error != ErrStopping.Error() {
		t.Fatalf("bind after stop: %d %s", code, body)
	}
	if got := e.getPod("default", "web"); got.Spec.NodeName != "" {
		t.Fatalf("bind after stop bound the pod to %q", got.Spec.NodeName)
	}
}

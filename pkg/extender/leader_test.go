package extender

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

const (
	testLeaderNS   = "hami"
	testLeaderName = "hami-go-scheduler"
)

// leaderCfg is the default config with the leader gate on, for the kube-scheduler of host "sched-a".
func leaderCfg() *Config {
	c := DefaultConfig()
	c.LeaderLease = testLeaderNS + "/" + testLeaderName
	c.Identity = "sched-a"
	return &c
}

// schedulerLease is kube-scheduler's leader-election Lease held by holder ("" released).
func schedulerLease(holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testLeaderNS, Name: testLeaderName},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15)},
	}
}

func (e *env) setSchedulerHolder(holder string) {
	e.t.Helper()
	if _, err := e.client.CoordinationV1().Leases(testLeaderNS).Update(context.Background(), schedulerLease(holder), metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// filterWhy is the extender's /filter answer for p on node-1, through the HTTP handler's gate:
// "" when node-1 fits, else node-1's reason.
func (e *env) filterWhy(p *corev1.Pod) string {
	e.t.Helper()
	why := e.ext.refusal()
	if why != nil {
		return refusedFilter([]string{"node-1"}, why).FailedNodes["node-1"]
	}
	res := e.ext.sched.Filter(p, []string{"node-1"})
	if len(*res.NodeNames) == 1 {
		return ""
	}
	if r := res.FailedNodes["node-1"]; r != "" {
		return r
	}
	return res.FailedAndUnresolvableNodes["node-1"]
}

// kube-scheduler's identity is <hostname>_<uuid>: only this host's counts, whatever the uuid;
// another host whose name starts with ours does not.
func TestLeadershipIdentity(t *testing.T) {
	l := newLeadership("sched-a", 10*time.Second, t0)
	for _, tc := range []struct {
		holder string
		ours   bool
	}{{"sched-a_6f1c", true}, {"sched-a_", true}, {"sched-a", false}, {"sched-a2_6f1c", false}, {"sched-b_6f1c", false}, {"", false}} {
		if got := l.ours(tc.holder); got != tc.ours {
			t.Errorf("ours(%q) = %v, want %v", tc.holder, got, tc.ours)
		}
	}
	// A new uuid of ours (kube-scheduler restarted and took the Lease again) is a new term: its
	// hold starts again.
	l.observe("sched-a_1", t0)
	term, _, _ := l.pending()
	if _, ok := l.settle(term); !ok || l.refusal(t0.Add(10*time.Second)) != nil {
		t.Fatal("term 1 not settled after its hold")
	}
	l.observe("sched-a_1", t0.Add(11*time.Second)) // a renewal: nothing changes
	if err := l.refusal(t0.Add(11 * time.Second)); err != nil {
		t.Fatalf("after a renewal: %v", err)
	}
	l.observe("sched-a_2", t0.Add(12*time.Second))
	if err := l.refusal(t0.Add(30 * time.Second)); !errors.Is(err, ErrHandOver) {
		t.Fatalf("a new uuid of ours, not settled: %v, want ErrHandOver", err)
	}
	if _, ok := l.settle(term); ok {
		t.Fatal("the old term settled the new one")
	}
	term2, until, need := l.pending()
	if term2 == term || !need || !until.Equal(t0.Add(22*time.Second)) {
		t.Fatalf("pending = %d, %v, %v; want a new term held until t0+22s", term2, until, need)
	}
	l.settle(term2)
	if err := l.refusal(t0.Add(21 * time.Second)); !errors.Is(err, ErrHandOver) {
		t.Fatalf("settled before the hold passed: %v, want ErrHandOver until t0+22s", err)
	}
	l.observe("", t0.Add(40*time.Second)) // released
	if err := l.refusal(t0.Add(41 * time.Second)); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("released: %v, want ErrNotLeading", err)
	}
}

// Issue 37 item 6: the extender serves only while its kube-scheduler holds the Lease, and a new
// term only after the bind API timeout and a cache current with the API. While another holds it
// every verb refuses (ErrNotLeading); for APITimeout after the extender saw its kube-scheduler
// take it, ErrHandOver; then it serves, and the pod refused meanwhile is requeued; once another
// holds the Lease again, ErrNotLeading. Before the fix the extender served at once.
func TestHandOverHoldsVerbs(t *testing.T) {
	inv := testInventory("node-1", 1, 24576, 4)
	objs, _ := setupNodes(t, inv)
	objs = append(objs, schedulerLease("sched-b_1"))
	e := newEnv(t, leaderCfg(), objs...)
	e.waitNodes("node-1")
	p := podtest.Pending("default", "web", podtest.GPU("main", 1, "1000", 0))
	e.create(p)
	eventually(t, "the Lease of sched-b seen", func() bool { return errors.Is(e.ext.refusal(), ErrNotLeading) })
	if why := e.filterWhy(p); why != ErrNotLeading.Error() {
		t.Fatalf("sched-b leads: filter %q, want %q", why, ErrNotLeading)
	}
	if err := e.ext.Bind(context.Background(), device.RefOf(p), "node-1"); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("sched-b leads: Bind %v, want ErrNotLeading", err)
	}

	e.setSchedulerHolder("sched-a_7e2d")
	eventually(t, "the hand-over seen", func() bool { return errors.Is(e.ext.refusal(), ErrHandOver) })
	srv := httptest.NewServer(e.ext.Handler(e.reg))
	defer srv.Close()
	code, body := post(t, srv.URL+"/filter", mustJSON(t, extenderv1.ExtenderArgs{Pod: p, NodeNames: &[]string{"node-1"}}))
	var res extenderv1.ExtenderFilterResult
	if code != 200 || json.Unmarshal(body, &res) != nil || res.NodeNames == nil || len(*res.NodeNames) != 0 {
		t.Fatalf("hand-over: /filter %d %s; want no node", code, body)
	}
	if why := res.FailedNodes["node-1"]; why != ErrHandOver.Error() {
		t.Fatalf("hand-over: filter %q, want %q", why, ErrHandOver)
	}
	if err := e.ext.Bind(context.Background(), device.RefOf(p), "node-1"); !errors.Is(err, ErrHandOver) {
		t.Fatalf("hand-over: Bind %v, want ErrHandOver", err)
	}
	if got := e.getPod("default", "web"); got.Spec.NodeName != "" {
		t.Fatalf("hand-over: bound to %q", got.Spec.NodeName)
	}
	e.clock.Step(e.ext.cfg.APITimeout - time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	if err := e.ext.refusal(); !errors.Is(err, ErrHandOver) {
		t.Fatalf("1 ms before the bind API timeout passed: %v, want ErrHandOver", err)
	}
	e.clock.Step(time.Millisecond)
	eventually(t, "serving after the hold", func() bool { return e.ext.refusal() == nil })
	eventually(t, "the pod refused during the hand-over requeued", func() bool {
		e.clock.Step(requeueSettle)
		return e.getPod("default", "web").Annotations[device.AnnoRequeue] != ""
	})
	if why := e.filterWhy(p); why != "" {
		t.Fatalf("leading, hand-over over: filter %q, want node-1", why)
	}

	e.setSchedulerHolder("sched-b_2")
	eventually(t, "the Lease lost", func() bool { return errors.Is(e.ext.refusal(), ErrNotLeading) })
	if err := e.ext.Bind(context.Background(), device.RefOf(p), "node-1"); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("lost the Lease: Bind %v, want ErrNotLeading", err)
	}
}

// Issue 37 item 6, the over-commit the hand-over prevents, on the real extender: one GPU with
// one slot; the old leader (sched-b) released the Lease at its SIGTERM with the Bind of y in
// flight, and this extender's kube-scheduler (sched-a) took it. Its first Filter of x comes
// before y's Binding commits: it refuses (ErrHandOver) instead of placing x on the slot y's
// Binding takes. Once the hold passed and the cache has y, x does not fit, and no GPU is over
// its split count. Before the fix x was placed and bound, and y's Binding then made two sharers.
func TestHandOverWaitsForOldLeadersBinding(t *testing.T) {
	inv := testInventory("node-1", 1, 24576, 1)
	objs, _ := setupNodes(t, inv)
	y := podtest.Pending("default", "y", podtest.GPU("main", 1, "1000", 0))
	x := podtest.Pending("default", "x", podtest.GPU("main", 1, "1000", 0))
	objs = append(objs, schedulerLease(""), y, x) // released by sched-b at its SIGTERM
	e := newEnv(t, leaderCfg(), objs...)
	e.waitNodes("node-1")
	e.setSchedulerHolder("sched-a_1") // within retryPeriod of the release
	eventually(t, "the hand-over seen", func() bool { return errors.Is(e.ext.refusal(), ErrHandOver) })
	if why := e.filterWhy(x); why != ErrHandOver.Error() {
		t.Fatalf("first Filter of the new leader: %q, want %q", why, ErrHandOver)
	}
	if err := e.ext.Bind(context.Background(), device.RefOf(x), "node-1"); !errors.Is(err, ErrHandOver) {
		t.Fatalf("first Bind of the new leader: %v, want ErrHandOver", err)
	}
	// The old leader's Binding of y (with its plan) commits, within its bind API timeout.
	e.clock.Step(3 * time.Second)
	landed := boundPod(t, "default", "y", "node-1", inv.GPUs[0].UUID, 1000, false)
	landed.UID, landed.Spec = y.UID, *y.Spec.DeepCopy()
	landed.Spec.NodeName = "node-1"
	e.updatePod(landed)
	e.clock.Step(e.ext.cfg.APITimeout)
	eventually(t, "serving after the hold", func() bool { return e.ext.refusal() == nil })
	if u := gpuUse(e.ext.cache, "node-1", 0); u.Sharers != 1 {
		t.Fatalf("serving, but the cache has %+v on the GPU; want y's one sharer", u)
	}
	if why := e.filterWhy(x); why == "" {
		t.Fatal("x placed on the GPU slot y's Binding holds")
	}
	if err := e.ext.Bind(context.Background(), device.RefOf(x), "node-1"); err == nil {
		t.Fatal("x bound onto the GPU slot y's Binding holds")
	}
	checkInvariants(t, e.ext.cache)
}

// Issue 37 item 6: the extender's own preemption runs only while its kube-scheduler leads. An
// offer that settles while another holds the Lease evicts nobody; once ours and the hand-over
// is over, the same offer evicts the victim (the positive control). Before the fix the loop
// preempted whoever led.
func TestOwnPreemptionOnlyWhileLeading(t *testing.T) {
	e, low, pre := onceFixture(t, leaderCfg(), func(c *fake.Clientset) {
		if err := c.Tracker().Add(schedulerLease("sched-b_1")); err != nil {
			t.Fatal(err)
		}
	})
	eventually(t, "the Lease of sched-b seen", func() bool { return errors.Is(e.ext.refusal(), ErrNotLeading) })
	if res := e.ext.sched.Filter(pre, []string{"node-1"}); len(*res.NodeNames) != 0 {
		t.Fatal("pre fits")
	}
	for i := 0; i < 5; i++ {
		e.clock.Step(preemptSettle)
		time.Sleep(20 * time.Millisecond)
	}
	if !e.exists("v", low.Name) || e.getPod("p", "pre").Status.NominatedNodeName != "" {
		t.Fatal("own preemption ran while another kube-scheduler leads")
	}
	e.setSchedulerHolder("sched-a_1")
	eventually(t, "leading and settled", func() bool {
		e.clock.Step(time.Second)
		return e.ext.refusal() == nil
	})
	if res := e.ext.sched.Filter(pre, []string{"node-1"}); len(*res.NodeNames) != 0 {
		t.Fatal("pre fits")
	}
	eventually(t, "low evicted for pre once leading", func() bool {
		e.clock.Step(preemptSettle)
		return !e.exists("v", low.Name) && e.getPod("p", "pre").Status.NominatedNodeName == "node-1"
	})
}

// Issue 37 item 6: at SIGTERM (Run's context ends) the verbs refuse at once (ErrStopping,
// /readyz 503) while a Bind in flight finishes: Run returns only after it, and the pod is bound.
// Before the fix Run returned at once and main shut the listeners down under the Bind.
func TestStopLetsBindInFlightFinish(t *testing.T) {
	inv := testInventory("node-1", 1, 24576, 4)
	objs, _ := setupNodes(t, inv)
	entered, release := make(chan struct{}), make(chan struct{})
	e := newEnvSetup(t, nil, func(c *fake.Clientset) {
		c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() == "binding" {
				close(entered)
				<-release
			}
			return false, nil, nil
		})
	}, objs...)
	e.waitNodes("node-1")
	p := podtest.Pending("default", "web", podtest.GPU("main", 1, "1000", 0))
	q := podtest.Pending("default", "late", podtest.GPU("main", 1, "1000", 0))
	e.create(p, q)
	eventually(t, "the pods in the informer", func() bool {
		l := e.ext.pods.Load()
		_, err1 := (*l).Pods("default").Get("web")
		_, err2 := (*l).Pods("default").Get("late")
		return err1 == nil && err2 == nil
	})
	bound := make(chan error, 1)
	go func() { bound <- e.ext.Bind(context.Background(), device.RefOf(p), "node-1") }()
	<-entered
	e.cancel() // SIGTERM
	eventually(t, "the verbs closed", func() bool { return errors.Is(e.ext.refusal(), ErrStopping) })
	if e.ext.Ready() {
		t.Fatal("stopping but /readyz still ready")
	}
	if err := e.ext.Bind(context.Background(), device.RefOf(q), "node-1"); !errors.Is(err, ErrStopping) {
		t.Fatalf("Bind after SIGTERM: %v, want ErrStopping", err)
	}
	select {
	case <-e.done:
		t.Fatal("Run returned with a Bind in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-bound; err != nil {
		t.Fatalf("the Bind in flight: %v", err)
	}
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the Bind finished")
	}
	e.cancel = nil
	if got := e.getPod("default", "web"); got.Spec.NodeName != "node-1" || got.Annotations[device.AnnoPlanned] == "" {
		t.Fatalf("the Bind in flight left %q, plan %q", got.Spec.NodeName, got.Annotations[device.AnnoPlanned])
	}
	if got := e.getPod("default", "late"); got.Spec.NodeName != "" {
		t.Fatalf("a Bind after SIGTERM bound to %q", got.Spec.NodeName)
	}
}

// The hold follows only a Lease seen held by another or released: where the first Lease the
// extender sees is its own kube-scheduler's (a first install, an extender restarted beside its
// leading kube-scheduler), no previous leader's Bind can be in flight, and the verbs open once
// the cache caught up, without waiting the bind API timeout.
func TestHandOverHoldOnlyAfterAnotherLeader(t *testing.T) {
	first := newLeadership("sched-a", 10*time.Second, t0)
	first.observe("sched-a_1", t0)
	term, until, need := first.pending()
	if !need || !until.Equal(t0) {
		t.Fatalf("first Lease ours: pending until %v (need %v), want t0 (no hold)", until, need)
	}
	first.settle(term)
	if err := first.refusal(t0); err != nil {
		t.Fatalf("first Lease ours, settled: %v, want serving", err)
	}
	for _, before := range []string{"sched-b_9", ""} {
		l := newLeadership("sched-a", 10*time.Second, t0)
		l.observe(before, t0)
		l.observe("sched-a_1", t0.Add(time.Second))
		term, until, _ := l.pending()
		if !until.Equal(t0.Add(11 * time.Second)) {
			t.Fatalf("after %q: hold until %v, want t0+11s", before, until)
		}
		l.settle(term)
		if err := l.refusal(t0.Add(10 * time.Second)); !errors.Is(err, ErrHandOver) {
			t.Fatalf("after %q, inside the hold: %v, want ErrHandOver", before, err)
		}
	}
}

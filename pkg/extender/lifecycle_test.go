package extender

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// boundPod is a pod bound to node with a planned allocation on the given GPUs (claimed too when
// claimed is set), as the extender and device plugin leave it.
func boundPod(t testing.TB, ns, name, node string, uuid string, mib int64, claimed bool) *corev1.Pod {
	p := podtest.Pending(ns, name, podtest.GPU("main", 1, fmt.Sprint(mib), 0))
	p.Spec.NodeName = node
	s, err := device.EncodeAllocation(device.Allocation{Node: node, Containers: []device.ContainerAllocation{{Name: "main", Kind: device.KindApp, Devices: []device.DeviceGrant{{UUID: uuid, MemoryMiB: mib}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[device.AnnoPlanned] = s
	if claimed {
		p.Annotations[device.AnnoClaimed] = s
	}
	return p
}

// Restart: a new extender rebuilds every booking from the API (the plan, or the claimed record
// where there is none) before it reports ready; pods that ended or are unbound are not charged.
func TestRestartRebuildsFromAPI(t *testing.T) {
	inv := testInventory("node-1", 2, 24576, 10)
	objs, _ := setupNodes(t, inv)
	g0, g1 := inv.GPUs[0].UUID, inv.GPUs[1].UUID
	claimedOnly := boundPod(t, "a", "claimed-only", "node-1", g1, 1000, true)
	delete(claimedOnly.Annotations, device.AnnoPlanned)
	ended := boundPod(t, "a", "ended", "node-1", g0, 5000, true)
	ended.Status.Phase = corev1.PodSucceeded
	unbound := boundPod(t, "a", "unbound", "node-1", g0, 7000, false)
	unbound.Spec.NodeName = ""
	terminating := boundPod(t, "a", "terminating", "node-1", g1, 3000, true)
	now := metav1.NewTime(t0)
	terminating.DeletionTimestamp = &now
	objs = append(objs, boundPod(t, "a", "planned", "node-1", g0, 2000, false), claimedOnly, ended, unbound, terminating)
	e := newEnv(t, nil, objs...) // newEnv returns once Ready: the rebuild is complete by then
	if u0, u1 := gpuUse(e.ext.cache, "node-1", 0), gpuUse(e.ext.cache, "node-1", 1); u0.MemoryMiB != 2000 || u1.MemoryMiB != 4000 || u0.Sharers != 1 || u1.Sharers != 2 {
		t.Fatalf("rebuilt usage GPU0 %+v GPU1 %+v; want 2000 MiB/1 and 4000 MiB/2", u0, u1)
	}
	if _, st, _ := e.ext.cache.PodState(device.RefOf(claimedOnly)); st != "claimed" {
		t.Fatalf("claimed-only pod stage %q", st)
	}
}

func TestReadyOnlyAfterRebuild(t *testing.T) {
	ext, err := New(DefaultConfig(), nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ext.Ready() {
		t.Fatal("ready before Run")
	}
}

// Deletion in all its forms releases the usage of exactly that pod.
func TestDeletionForms(t *testing.T) {
	inv := testInventory("node-1", 1, 81920, 10)
	objs, _ := setupNodes(t, inv)
	g := inv.GPUs[0].UUID
	e := newEnv(t, nil, objs...)
	e.waitNodes("node-1")
	c := e.ext.cache
	pods := map[string]*corev1.Pod{}
	for i, n := range []string{"plain", "tomb", "tomb-bare", "tomb-key", "succeeded", "failed", "terminating", "keep"} {
		p := boundPod(t, "d", n, "node-1", g, int64(1000*(i+1)), true)
		pods[n] = p
		c.OnPod(p)
	}
	total := func() int64 { return gpuUse(c, "node-1", 0).MemoryMiB }
	if total() != 36000 {
		t.Fatalf("total %d", total())
	}
	c.OnPodDelete(pods["plain"], nil)
	if total() != 35000 {
		t.Fatalf("plain delete: %d", total())
	}
	c.OnPodDelete(cache.DeletedFinalStateUnknown{Key: "d/tomb", Obj: pods["tomb"]}, nil)
	if total() != 33000 {
		t.Fatalf("tombstone: %d", total())
	}
	bare := pods["tomb-bare"].DeepCopy()
	bare.Annotations = nil // the last state lost its annotations
	c.OnPodDelete(cache.DeletedFinalStateUnknown{Key: "d/tomb-bare", Obj: bare}, nil)
	if total() != 30000 {
		t.Fatalf("tombstone without annotations: %d", total())
	}
	c.OnPodDelete(cache.DeletedFinalStateUnknown{Key: "d/tomb-key", Obj: "not a pod"}, func(ns, name string) (types.UID, bool) { return "", false })
	if total() != 26000 {
		t.Fatalf("tombstone with key only: %d", total())
	}
	for _, n := range []string{"succeeded", "failed"} {
		p := pods[n].DeepCopy()
		p.Status.Phase = corev1.PodSucceeded
		if n == "failed" {
			p.Status.Phase, p.Status.Reason = corev1.PodFailed, "UnexpectedAdmissionError"
		}
		c.OnPod(p)
	}
	if total() != 15000 {
		t.Fatalf("ended pods: %d", total())
	}
	p := pods["terminating"].DeepCopy()
	now := metav1.NewTime(t0)
	p.DeletionTimestamp = &now
	c.OnPod(p)
	if total() != 15000 {
		t.Fatalf("terminating pod released early: %d", total())
	}
	// A pod that lost its annotations while alive keeps its booking.
	k := pods["keep"].DeepCopy()
	k.Annotations = map[string]string{}
	c.OnPod(k)
	if total() != 15000 {
		t.Fatalf("pod without annotations lost its booking: %d", total())
	}
	c.OnPodDelete(p, nil)
	c.OnPodDelete(k, nil)
	if total() != 0 {
		t.Fatalf("after all deletions: %d", total())
	}
	checkInvariants(t, c)
}

// A tombstone with only a key never releases a live pod of the same name (recreated, new UID).
func TestTombstoneKeyKeepsLivePod(t *testing.T) {
	inv := testInventory("node-1", 1, 81920, 10)
	objs, _ := setupNodes(t, inv)
	e := newEnv(t, nil, objs...)
	c := e.ext.cache
	live := boundPod(t, "d", "web", "node-1", inv.GPUs[0].UUID, 1000, true)
	c.OnPod(live)
	c.OnPodDelete(cache.DeletedFinalStateUnknown{Key: "d/web"}, func(ns, name string) (types.UID, bool) { return live.UID, true })
	if gpuUse(c, "node-1", 0).MemoryMiB != 1000 {
		t.Fatal("live pod released by a key-only tombstone")
	}
}

// Bind failures: a definite API error releases the booking (and records an Event); a timeout
// after which the pod shows up bound is reconciled as bound.
func TestBindFailureReconcile(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 1, 24576, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	p := podtest.Pending("default", "p", podtest.GPU("main", 1, "1000", 0))
	e.create(p)
	e.ext.sched.Filter(p, names)
	e.mu.Lock()
	e.bindErr = apierrors.NewForbidden(corev1.Resource("pods/binding"), "p", errors.New("denied"))
	e.mu.Unlock()
	err := e.ext.Bind(context.Background(), device.RefOf(p), "node-1")
	if err == nil || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("bind error %v", err)
	}
	if n, _, _ := e.ext.cache.PodState(device.RefOf(p)); n != "" || gpuUse(e.ext.cache, "node-1", 0).MemoryMiB != 0 {
		t.Fatalf("definite failure kept the booking on %q", n)
	}
	if ev := <-e.rec.Events; !strings.HasPrefix(ev, "Warning "+EventReasonBindFailed) || !strings.Contains(ev, "denied") {
		t.Fatalf("event %q", ev)
	}
	// Timeout after commit: the Binding landed; the reconcile read sees spec.nodeName.
	e.mu.Lock()
	e.bindErr, e.bindCommits = context.DeadlineExceeded, true
	e.mu.Unlock()
	if err := e.ext.Bind(context.Background(), device.RefOf(p), "node-1"); err != nil {
		t.Fatalf("bind that committed before timing out: %v", err)
	}
	if n, st, _ := e.ext.cache.PodState(device.RefOf(p)); n != "node-1" || (st != "planned" && st != "claimed") {
		t.Fatalf("after reconcile: %q %q", n, st)
	}
	if gpuUse(e.ext.cache, "node-1", 0).MemoryMiB != 1000 {
		t.Fatal("usage lost")
	}
}

// A timeout without commit keeps the booking as a reservation (never forgotten), which the
// informer turns into a planned booking if the Binding lands later.
func TestBindTimeoutKeepsReservation(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 1, 24576, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	p := podtest.Pending("default", "p", podtest.GPU("main", 1, "1000", 0))
	e.create(p)
	e.mu.Lock()
	e.bindErr = context.DeadlineExceeded
	e.mu.Unlock()
	if err := e.ext.Bind(context.Background(), device.RefOf(p), "node-1"); err == nil {
		t.Fatal("bind succeeded")
	}
	if n, st, _ := e.ext.cache.PodState(device.RefOf(p)); n != "node-1" || st != "reserved" {
		t.Fatalf("after timeout: %q %q", n, st)
	}
	// The Binding was committed after all: the informer shows the pod bound with its plan (one
	// write carries both, so they land together).
	got := e.getPod("default", "p")
	if _, ok := got.Annotations[device.AnnoPlanned]; ok {
		t.Fatal("the plan reached the pod without the Binding")
	}
	_, _, a := e.ext.cache.PodState(device.RefOf(p))
	enc, err := device.EncodeAllocation(*a)
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.NodeName = "node-1"
	got.Annotations[device.AnnoPlanned] = enc
	e.updatePod(got)
	eventually(t, "informer confirms", func() bool { _, st, _ := e.ext.cache.PodState(device.RefOf(p)); return st == "planned" })
}

// Reservations: a second Filter replaces the first; an unconfirmed one expires; a bound pod's
// booking never does.
func TestReservationLifecycle(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 1, 24576, 10), testInventory("node-2", 1, 24576, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	c := e.ext.cache
	p := podtest.Pending("default", "p", podtest.GPU("main", 1, "20000", 0))
	q := podtest.Pending("default", "q", podtest.GPU("main", 1, "20000", 0))
	NewScheduler(c).Filter(p, names)
	n1, st, _ := c.PodState(device.RefOf(p))
	if st != "reserved" {
		t.Fatalf("no reservation: %q", st)
	}
	res := NewScheduler(c).Filter(q, names) // sees p's reservation
	if len(*res.NodeNames) != 1 || (*res.NodeNames)[0] == n1 || !strings.Contains(res.FailedNodes[n1], "4576 of 24576 MiB free") {
		t.Fatalf("second pod's filter ignores the reservation: %+v", res)
	}
	NewScheduler(c).Filter(p, []string{other(n1)}) // re-filter where q holds the GPU: nothing fits, old one dropped
	if n, _, _ := c.PodState(device.RefOf(p)); n != "" {
		t.Fatalf("reservation not dropped by a re-filter: %q", n)
	}
	c.OnPodDelete(q, nil)
	NewScheduler(c).Filter(p, []string{other(n1)}) // re-filter: replaces
	if n, _, _ := c.PodState(device.RefOf(p)); n != other(n1) {
		t.Fatalf("reservation not moved by a re-filter: %q", n)
	}
	e.clock.Step(DefaultConfig().ReservationTTL + time.Second)
	c.Sweep()
	if n, _, _ := c.PodState(device.RefOf(p)); n != "" {
		t.Fatalf("stale reservation kept on %q", n)
	}
}

func other(n string) string {
	if n == "node-1" {
		return "node-2"
	}
	return "node-1"
}

// Stale and missing Leases make a node unresolvable with the reason; renewal brings it back.
func TestStaleAndMissingLease(t *testing.T) {
	objs := []runtime.Object{testNode(t, testInventory("node-1", 1, 24576, 10)), testLease("node-1", t0), testNode(t, testInventory("node-2", 1, 24576, 10))}
	e := newEnv(t, nil, objs...)
	e.waitNodes("node-1")
	eventually(t, "node-2", func() bool { return e.ext.cache.node("node-2") != nil })
	p := podtest.Pending("default", "p", podtest.GPU("main", 1, "1000", 0))
	e.clock.Step(61 * time.Second)
	res := e.ext.sched.Filter(p, []string{"node-1", "node-2"})
	if r := res.FailedAndUnresolvableNodes["node-1"]; r != "inventory stale since 2026-03-01T12:00:00Z (device plugin Lease not renewed for 1m0s)" {
		t.Fatalf("stale reason %q", r)
	}
	if r := res.FailedAndUnresolvableNodes["node-2"]; r != "no heartbeat from device plugin (Lease kube-node-lease/hami-go-node-2 not found)" {
		t.Fatalf("missing lease reason %q", r)
	}
}

// case C42: a node whose agent publishes its enforcement missing takes no GPU pod, with the
// agent's reason; one whose enforcement is ready, or an agent older than the field, does.
func TestC42FilterRefusesUnenforcedNode(t *testing.T) {
	missing := testInventory("node-1", 1, 24576, 10)
	missing.Enforcement = &device.Enforcement{Mode: device.EnforcementHAMiCore, Reason: "HAMi-core library /usr/local/vgpu/libvgpu.so not found on the host"}
	ready := testInventory("node-2", 1, 24576, 10)
	ready.Enforcement = &device.Enforcement{Mode: device.EnforcementHAMiCore, Ready: true}
	old := testInventory("node-3", 1, 24576, 10)
	objs := []runtime.Object{testNode(t, missing), testLease("node-1", t0), testNode(t, ready), testLease("node-2", t0), testNode(t, old), testLease("node-3", t0)}
	e := newEnv(t, nil, objs...)
	e.waitNodes("node-1", "node-2", "node-3")
	p := podtest.Pending("default", "p", podtest.GPU("main", 1, "1000", 0))
	res := e.ext.sched.Filter(p, []string{"node-1", "node-2", "node-3"})
	if r := res.FailedAndUnresolvableNodes["node-1"]; r != "enforcement hami-core missing on the node: HAMi-core library /usr/local/vgpu/libvgpu.so not found on the host" {
		t.Fatalf("node-1 (enforcement missing): reason %q", r)
	}
	if res.NodeNames == nil || !slices.Equal(*res.NodeNames, []string{"node-2", "node-3"}) {
		t.Fatalf("nodes that fit %v, want node-2 and node-3", res.NodeNames)
	}
}

// Pods of another scheduler profile pass through: every node, score 0, bound without a plan.
func TestOtherSchedulerPassesThrough(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 1, 24576, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	p := podtest.Pending("default", "other", podtest.GPU("main", 1, "99999", 0))
	p.Spec.SchedulerName = "default-scheduler"
	e.create(p)
	res := e.ext.sched.Filter(p, []string{"node-1", "nowhere"})
	if len(*res.NodeNames) != 2 {
		t.Fatalf("filter %+v", res)
	}
	if s := e.ext.sched.Prioritize(p, names); s[0].Score != 0 {
		t.Fatalf("score %+v", s)
	}
	if err := e.ext.Bind(context.Background(), device.RefOf(p), "node-1"); err != nil {
		t.Fatal(err)
	}
	got := e.getPod("default", "other")
	if got.Spec.NodeName != "node-1" || got.Annotations[device.AnnoPlanned] != "" {
		t.Fatalf("bound %q with plan %q", got.Spec.NodeName, got.Annotations[device.AnnoPlanned])
	}
}

// --node-policy sets the default; the pod's annotation overrides it.
func TestNodePolicyDefaultAndAnnotation(t *testing.T) {
	for _, tc := range []struct {
		flag device.Policy
		anno string
		want string // the node that scores higher
	}{{device.Binpack, "", "node-1"}, {device.Spread, "", "node-2"}, {device.Spread, "binpack", "node-1"}, {device.Binpack, "spread", "node-2"}} {
		t.Run(fmt.Sprintf("%s-%s", tc.flag, tc.anno), func(t *testing.T) {
			inv1 := testInventory("node-1", 1, 24576, 10)
			objs, names := setupNodes(t, inv1, testInventory("node-2", 1, 24576, 10))
			objs = append(objs, boundPod(t, "x", "busy", "node-1", inv1.GPUs[0].UUID, 12000, true))
			cfg := DefaultConfig()
			cfg.NodePolicy = tc.flag
			e := newEnv(t, &cfg, objs...)
			e.waitNodes(names...)
			p := podtest.Pending("default", "p", podtest.GPU("main", 1, "1000", 0))
			if tc.anno != "" {
				p.Annotations[device.AnnoNodePolicy] = tc.anno
			}
			s := e.ext.sched.Prioritize(p, names)
			best := s[0]
			if s[1].Score > best.Score {
				best = s[1]
			}
			if best.Host != tc.want || s[0].Score == s[1].Score {
				t.Fatalf("scores %+v, want %s higher", s, tc.want)
			}
		})
	}
}

// --gpu-policy sets the default GPU choice; the annotation overrides it.
func TestGPUPolicyDefault(t *testing.T) {
	inv := testInventory("node-1", 2, 24576, 10)
	objs, names := setupNodes(t, inv)
	objs = append(objs, boundPod(t, "x", "busy", "node-1", inv.GPUs[0].UUID, 1000, true))
	for _, pol := range []device.Policy{device.Binpack, device.Spread} {
		cfg := DefaultConfig()
		cfg.GPUPolicy = pol
		e := newEnv(t, &cfg, objs...)
		e.waitNodes(names...)
		p := podtest.Pending("default", "p-"+string(pol), podtest.GPU("main", 1, "1000", 0))
		e.create(p)
		if _, err := e.schedule(p, names); err != nil {
			t.Fatal(err)
		}
		want := inv.GPUs[0].UUID
		if pol == device.Spread {
			want = inv.GPUs[1].UUID
		}
		if got := plannedOf(t, e.getPod("default", p.Name)).Containers[0].Devices[0].UUID; got != want {
			t.Fatalf("%s: GPU %s, want %s", pol, got, want)
		}
		e.stop()
	}
}

// Bind is ONE API write: the pods/binding subresource with the plan as the Binding's annotation
// (the API server merges it into the pod's annotations in the update that sets spec.nodeName);
// no patch of the pod before it, so there is no window with the plan but not the node or the
// other way round.
func TestBindIsOneAPIWrite(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 2, 24576, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	p := podtest.Pending("default", "p", podtest.GPU("main", 1, "3000", 20))
	e.create(p)
	e.ext.sched.Filter(p, names)
	e.client.ClearActions()
	if err := e.ext.Bind(context.Background(), device.RefOf(p), "node-1"); err != nil {
		t.Fatal(err)
	}
	var writes []string
	var binding *corev1.Binding
	for _, a := range e.client.Actions() {
		if a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		writes = append(writes, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		if c, ok := a.(interface{ GetObject() runtime.Object }); ok {
			if b, ok := c.GetObject().(*corev1.Binding); ok {
				binding = b
			}
		}
	}
	if len(writes) != 1 || writes[0] != "create pods/binding" || binding == nil {
		t.Fatalf("API writes of a bind: %v; want exactly [create pods/binding]", writes)
	}
	if binding.UID != p.UID || binding.Target.Name != "node-1" {
		t.Fatalf("binding %+v", binding)
	}
	got := e.getPod("default", "p")
	if got.Spec.NodeName != "node-1" || got.Annotations[device.AnnoPlanned] != binding.Annotations[device.AnnoPlanned] {
		t.Fatalf("pod after bind: node %q, plan %q; binding carried %q", got.Spec.NodeName, got.Annotations[device.AnnoPlanned], binding.Annotations[device.AnnoPlanned])
	}
	a, err := device.DecodeAllocation(got.Annotations[device.AnnoPlanned])
	if err != nil {
		t.Fatal(err)
	}
	if a.Node != "node-1" || len(a.Containers) != 1 || len(a.Containers[0].Devices) != 1 ||
		a.Containers[0].Devices[0].MemoryMiB != 3000 || a.Containers[0].Devices[0].CoresPercent != 20 {
		t.Fatalf("planned allocation %+v", a)
	}
	if _, _, ca := e.ext.cache.PodState(device.RefOf(p)); ca == nil || ca.Containers[0].Devices[0].UUID != a.Containers[0].Devices[0].UUID {
		t.Fatalf("cache charges %+v, the pod's plan is %+v", ca, a)
	}
}

// A bind that timed out may still be committed, with its plan, on its node: the booking stays
// there. A new Filter of the pod (kube-scheduler retries it) does not move it to another node,
// even one listed first among equals; a bind to another node is refused with a reason naming
// the first; a bind to the same node confirms it; another pod's Filter still sees its capacity
// booked. (Moving it would let other pods fill the GPU the committed plan holds: over-commit,
// case C04's invariant.)
func TestBindTimeoutBookingStaysOnItsNode(t *testing.T) {
	e, p, _ := timedOutBind(t)
	c := e.ext.cache
	if n, st, _ := c.PodState(device.RefOf(p)); n != "node-1" || st != "reserved" {
		t.Fatalf("after the timeout: %q %q, want node-1 reserved", n, st)
	}
	// kube-scheduler retries the pod; node-2 comes first among equally scored nodes. Only
	// node-1 passes: node-2 is refused with a reason (no bind there could succeed meanwhile).
	res := NewScheduler(c).Filter(p, []string{"node-2", "node-1"})
	if len(*res.NodeNames) != 1 || (*res.NodeNames)[0] != "node-1" ||
		!strings.Contains(res.FailedAndUnresolvableNodes["node-2"], "the pod's bind to node node-1 timed out and may still be committed there") {
		t.Fatalf("retry filter: %+v", res)
	}
	if n, _, _ := c.PodState(device.RefOf(p)); n != "node-1" {
		t.Fatalf("the retry's Filter moved the booking to %s; the timed-out Binding may hold node-1", n)
	}
	pl := NewScheduler(c).Prioritize(p, []string{"node-2", "node-1"})
	if pl[1].Host != "node-1" || pl[1].Score != 10 || pl[0].Score > 9 {
		t.Fatalf("prioritize %+v, want node-1 at 10 and node-2 below", pl)
	}
	q := podtest.Pending("default", "q", podtest.GPU("main", 1, "20000", 0))
	if res := NewScheduler(c).Filter(q, []string{"node-1"}); len(*res.NodeNames) != 0 || !strings.Contains(res.FailedNodes["node-1"], "4576 of 24576 MiB free") {
		t.Fatalf("q's filter does not see p's booking on node-1: %+v", res)
	}
	e.mu.Lock()
	e.bindErr = nil
	e.mu.Unlock()
	err := e.ext.Bind(context.Background(), device.RefOf(p), "node-2")
	if err == nil || !strings.Contains(err.Error(), "its bind to node node-1 timed out and may still be committed there") {
		t.Fatalf("bind to node-2: %v, want a refusal naming node-1", err)
	}
	if n, st, _ := c.PodState(device.RefOf(p)); n != "node-1" || st != "reserved" {
		t.Fatalf("after the refused bind: %q %q", n, st)
	}
	if err := e.ext.Bind(context.Background(), device.RefOf(p), "node-1"); err != nil {
		t.Fatalf("bind to node-1 again: %v", err)
	}
	if n, st, _ := c.PodState(device.RefOf(p)); n != "node-1" || st != "planned" {
		t.Fatalf("after the second bind: %q %q, want node-1 planned", n, st)
	}
}

// A pinned booking (its bind timed out) whose outcome never shows up goes after ReservationTTL,
// like any reservation: the pod is free to go elsewhere, and no capacity stays booked.
func TestBindTimeoutBookingExpires(t *testing.T) {
	e, p, names := timedOutBind(t)
	c := e.ext.cache
	e.clock.Step(c.cfg.ReservationTTL / 2)
	c.Sweep()
	if n, st, _ := c.PodState(device.RefOf(p)); n != "node-1" || st != "reserved" {
		t.Fatalf("half a TTL later: %q %q, want still node-1 reserved", n, st)
	}
	e.clock.Step(c.cfg.ReservationTTL)
	c.Sweep()
	if n, st, _ := c.PodState(device.RefOf(p)); n != "" || st != "" {
		t.Fatalf("after the TTL: %q %q, want no booking", n, st)
	}
	if u := gpuUse(c, "node-1", 0); u.MemoryMiB != 0 || u.Sharers != 0 {
		t.Fatalf("node-1 still books %+v", u)
	}
	for _, n := range names { // the device plugins kept renewing meanwhile
		c.OnLease(testLease(n, e.clock.Now()))
	}
	if res := NewScheduler(c).Filter(p, []string{"node-2", "node-1"}); len(*res.NodeNames) != 2 {
		t.Fatalf("filter after the TTL: %+v", res)
	}
}

// Prioritize tops the reserved node even where the policy scores it 0: an empty node under
// binpack (Filter reserved there because every node scores the same). Case C04: otherwise
// kube-scheduler may bind a burst's pod elsewhere and the bind fails on capacity the reservation
// already holds.
func TestPrioritizeTopsReservedNodeScoredZero(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 8, 81920, 10), testInventory("node-2", 8, 81920, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	c := e.ext.cache
	p := podtest.Pending("default", "p", podtest.GPU("main", 1, "100", 0))
	NewScheduler(c).Filter(p, names)
	n, st, _ := c.PodState(device.RefOf(p))
	if st != "reserved" {
		t.Fatalf("no reservation: %q", st)
	}
	pl := NewScheduler(c).Prioritize(p, names)
	for _, h := range pl {
		switch {
		case h.Host == n && h.Score != 10:
			t.Errorf("reserved node %s scored %d, want 10", n, h.Score)
		case h.Host != n && h.Score != 0:
			t.Errorf("node %s scored %d, want 0 (1 of 80 slices, 100 of 655360 MiB)", h.Host, h.Score)
		}
	}
}

// timedOutBind sets up two nodes of one 24576 MiB GPU, and pod p (1 GPU, 20000 MiB) whose bind to
// node-1 timed out (the API call returned context.DeadlineExceeded).
func timedOutBind(t *testing.T) (e *env, p *corev1.Pod, names []string) {
	t.Helper()
	objs, names := setupNodes(t, testInventory("node-1", 1, 24576, 10), testInventory("node-2", 1, 24576, 10))
	e = newEnv(t, nil, objs...)
	e.waitNodes(names...)
	p = podtest.Pending("default", "p", podtest.GPU("main", 1, "20000", 0))
	e.create(p)
	e.mu.Lock()
	e.bindErr = context.DeadlineExceeded
	e.mu.Unlock()
	if err := e.ext.Bind(context.Background(), device.RefOf(p), "node-1"); err == nil {
		t.Fatal("bind succeeded")
	}
	return e, p, names
}

package extender

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// prioritized sets p's spec.priority.
func prioritized(p *corev1.Pod, prio int32) *corev1.Pod {
	p.Spec.Priority = &prio
	return p
}

// case C43: on a fragmented node (every GPU partly used) PlanPreemption chooses, exact per GPU,
// the victims kube-scheduler's order prefers: lowest highest priority first (two pods of priority
// 0 rather than one of 50), then fewest; never a pod of equal or higher priority; nothing when the
// pod fits or when no eviction makes it fit.
func TestPlanPreemptionFragmentedNode(t *testing.T) {
	inv := testInventory("node-1", 3, 24576, 10)
	c := NewCache(DefaultConfig(), clocktesting.NewFakeClock(t0))
	c.OnNode(testNode(t, inv))
	c.OnLease(testLease("node-1", t0))
	g := func(i int) string { return inv.GPUs[i].UUID }
	for _, p := range []*corev1.Pod{
		prioritized(boundPod(t, "v", "a50", "node-1", g(0), 15000, true), 50),
		prioritized(boundPod(t, "v", "b0", "node-1", g(1), 10000, true), 0),
		prioritized(boundPod(t, "v", "c0", "node-1", g(1), 5000, true), 0),
		prioritized(boundPod(t, "v", "d200", "node-1", g(2), 15000, true), 200),
	} {
		c.OnPod(p)
	}
	want := podtest.Pending("p", "want", podtest.GPU("main", 1, "20000", 0))
	req, _, err := c.ParseRequest(want)
	if err != nil {
		t.Fatal(err)
	}
	k := device.RefOf(want)
	plan, ok := c.PlanPreemption(k, req, 100, []string{"node-1"}, nil)
	if !ok || plan.Node != "node-1" || len(plan.Victims) != 2 || plan.Victims[0].Name != "b0" || plan.Victims[1].Name != "c0" {
		t.Fatalf("plan %+v ok=%v; want b0 and c0 on GPU 1 (highest victim priority 0 beats one victim of 50; d200 outranks the pod)", plan, ok)
	}
	// A PodDisruptionBudget on b0 makes the single a50 the better choice.
	plan, ok = c.PlanPreemption(k, req, 100, []string{"node-1"}, PerPodDisruption(func(r device.PodRef) bool { return r.Name == "b0" }))
	if !ok || len(plan.Victims) != 1 || plan.Victims[0].Name != "a50" || plan.Choice.PDBViolations != 0 {
		t.Fatalf("plan %+v ok=%v; want a50 alone (no PDB violation)", plan, ok)
	}
	// Priority 50: only b0 and c0 rank below.
	if plan, ok = c.PlanPreemption(k, req, 50, []string{"node-1"}, nil); !ok || len(plan.Victims) != 2 {
		t.Fatalf("priority 50: plan %+v ok=%v; want b0 and c0", plan, ok)
	}
	// Priority 0: nobody ranks below.
	if plan, ok = c.PlanPreemption(k, req, 0, []string{"node-1"}, nil); ok {
		t.Fatalf("priority 0: plan %+v; want none", plan)
	}
	// 30000 MiB exceeds every GPU: no eviction helps.
	big := podtest.Pending("p", "big", podtest.GPU("main", 1, "30000", 0))
	bigReq, _, _ := c.ParseRequest(big)
	if plan, ok = c.PlanPreemption(device.RefOf(big), bigReq, 1000, []string{"node-1"}, nil); ok {
		t.Fatalf("30000 MiB: plan %+v; want none", plan)
	}
	// 4000 MiB fits on GPU 0 already: no preemption.
	small := podtest.Pending("p", "small", podtest.GPU("main", 1, "4000", 0))
	smallReq, _, _ := c.ParseRequest(small)
	if plan, ok = c.PlanPreemption(device.RefOf(small), smallReq, 1000, []string{"node-1"}, nil); ok {
		t.Fatalf("4000 MiB: plan %+v; want none (it fits)", plan)
	}
	// b0 and c0 terminating (the victims of an earlier preemption): the pod will fit on GPU 1
	// once they are gone, so nobody else is evicted for it (as kube-scheduler's
	// PodEligibleToPreemptOthers waits for them).
	now := metav1.NewTime(t0)
	for _, n := range []string{"b0", "c0"} {
		p := prioritized(boundPod(t, "v", n, "node-1", g(1), map[string]int64{"b0": 10000, "c0": 5000}[n], true), 0)
		p.DeletionTimestamp = &now
		c.OnPod(p)
	}
	if plan, ok = c.PlanPreemption(k, req, 100, []string{"node-1"}, nil); ok {
		t.Fatalf("with the earlier victims terminating: plan %+v; want none (wait for them)", plan)
	}
	checkInvariants(t, c)
}

// case C43: a nominated pod holds the share its terminating victims free. The hold is placed when
// the victim starts terminating, keeps a pod of lower priority out while the victim terminates
// and after it is gone, is the preemptor's own when it binds, and ends with its nomination.
func TestNominationHoldsTheFreedShare(t *testing.T) {
	inv := testInventory("node-1", 1, 24576, 10)
	c := NewCache(DefaultConfig(), clocktesting.NewFakeClock(t0))
	c.OnNode(testNode(t, inv))
	c.OnLease(testLease("node-1", t0))
	s := NewScheduler(c)
	g0 := inv.GPUs[0].UUID
	victim := prioritized(boundPod(t, "v", "victim", "node-1", g0, 20000, true), 0)
	c.OnPod(victim)
	pre := prioritized(podtest.Pending("p", "pre", podtest.GPU("main", 1, "20000", 0)), 100)
	pre.Status.NominatedNodeName = "node-1"
	c.OnPod(pre)
	if node, st, a := c.PodState(device.RefOf(pre)); node != "node-1" || st != "nominated" || a != nil {
		t.Fatalf("before the victim terminates: %s %s %v; want nominated on node-1 without a placement", node, st, a)
	}
	now := metav1.NewTime(t0)
	terminating := victim.DeepCopy()
	terminating.DeletionTimestamp = &now
	c.OnPod(terminating)
	if _, st, a := c.PodState(device.RefOf(pre)); st != "nominated" || a == nil {
		t.Fatalf("after the victim started terminating: %s %v; want the hold placed", st, a)
	}
	if u := gpuUse(c, "node-1", 0).MemoryMiB; u != 40000 {
		t.Fatalf("GPU 0 booked %d MiB; want 40000 (the terminating victim and the hold)", u)
	}
	other := prioritized(podtest.Pending("p", "other", podtest.GPU("main", 1, "10000", 0)), 0)
	if res := s.Filter(other, []string{"node-1"}); len(*res.NodeNames) != 0 {
		t.Fatalf("a low-priority pod fits into the held share while the victim terminates")
	}
	if res := s.Filter(pre, []string{"node-1"}); len(*res.NodeNames) != 0 {
		t.Fatalf("the preemptor fits before its victim is gone")
	}
	if _, st, _ := c.PodState(device.RefOf(pre)); st != "nominated" {
		t.Fatalf("a refused Filter dropped the hold (stage %s)", st)
	}
	c.OnPodDelete(terminating, nil)
	if res := s.Filter(other, []string{"node-1"}); len(*res.NodeNames) != 0 {
		t.Fatalf("a low-priority pod takes the held share after the victim is gone")
	}
	if res := s.Filter(pre, []string{"node-1"}); len(*res.NodeNames) != 1 {
		t.Fatalf("the preemptor does not fit once its victim is gone: %v", res.FailedNodes)
	}
	a, _, err := s.BookForBind(device.RefOf(pre), mustReq(t, c, pre), "node-1")
	if err != nil || a.Containers[0].Devices[0].UUID != g0 {
		t.Fatalf("bind: %v %v", a, err)
	}
	checkInvariants(t, c)

	// A nomination that ends releases its hold.
	late := prioritized(podtest.Pending("p", "late", podtest.GPU("main", 1, "1000", 0)), 100)
	late.Status.NominatedNodeName = "node-1"
	c.OnPod(late)
	if _, st, _ := c.PodState(device.RefOf(late)); st != "nominated" {
		t.Fatalf("late: stage %q; want nominated", st)
	}
	late = late.DeepCopy()
	late.Status.NominatedNodeName = ""
	c.OnPod(late)
	if node, _, _ := c.PodState(device.RefOf(late)); node != "" {
		t.Fatalf("late: still booked on %q after its nomination was cleared", node)
	}
	checkInvariants(t, c)
}

func mustReq(t testing.TB, c *Cache, p *corev1.Pod) *device.PodRequest {
	t.Helper()
	r, ours, err := c.ParseRequest(p)
	if err != nil || !ours {
		t.Fatalf("parse %s: ours=%v err=%v", p.Name, ours, err)
	}
	return r
}

// case C43: the extender's own preemption, end to end over a fake API (unit test only): a pod
// refused on a fragmented node is nominated there, its victim gets kube-scheduler's
// DisruptionTarget condition and "Preempted" Event and is deleted; the pod gets a GPUPreemption
// Event. A pod with preemptionPolicy Never is never offered.
func TestOwnPreemptionNominatesAndEvicts(t *testing.T) {
	inv := testInventory("node-1", 2, 24576, 10)
	objs, _ := setupNodes(t, inv)
	e := newEnv(t, nil, objs...)
	e.waitNodes("node-1")
	c := e.ext.cache
	low := prioritized(boundPod(t, "v", "low", "node-1", inv.GPUs[0].UUID, 15000, true), 0)
	mid := prioritized(boundPod(t, "v", "mid", "node-1", inv.GPUs[1].UUID, 15000, true), 10)
	pre := prioritized(podtest.Pending("p", "pre", podtest.GPU("main", 1, "20000", 0)), 100)
	never := prioritized(podtest.Pending("p", "never", podtest.GPU("main", 1, "20000", 0)), 100)
	pn := corev1.PreemptNever
	never.Spec.PreemptionPolicy = &pn
	e.create(low, mid, pre, never)
	eventually(t, "the victims charged", func() bool { return gpuUse(c, "node-1", 1).MemoryMiB == 15000 })
	if res := e.ext.sched.Filter(never, []string{"node-1"}); len(*res.NodeNames) != 0 {
		t.Fatal("never fits")
	}
	if got := c.TakePreemptionOffers(); len(got) != 0 {
		t.Fatalf("preemptionPolicy Never offered: %v", got)
	}
	if res := e.ext.sched.Filter(pre, []string{"node-1"}); len(*res.NodeNames) != 0 || res.FailedNodes["node-1"] == "" {
		t.Fatalf("pre: %+v; want refused (resolvable) on node-1", res)
	}
	eventually(t, "pre nominated to node-1 and low deleted", func() bool {
		e.clock.Step(preemptSettle)
		_, err := e.client.CoreV1().Pods("v").Get(context.Background(), "low", metav1.GetOptions{})
		return e.getPod("p", "pre").Status.NominatedNodeName == "node-1" && err != nil
	})
	if p := e.getPod("v", "mid"); p == nil || p.DeletionTimestamp != nil {
		t.Fatal("mid (priority 10) evicted; want only low (priority 0)")
	}
	var all string
	want := []string{
		"Normal Preempted Preempted by pod " + string(pre.UID) + " on node node-1",
		"Normal GPUPreemption Preempting 1 pod(s) of lower priority on node node-1 to free its GPUs: v/low",
	}
	eventually(t, "the Preempted and GPUPreemption Events", func() bool {
		for len(e.rec.Events) > 0 {
			all += <-e.rec.Events + "\n"
		}
		return strings.Contains(all, want[0]) && strings.Contains(all, want[1])
	})
	var sawCondition bool
	for _, a := range e.client.Actions() {
		if a.GetVerb() == "patch" && a.GetSubresource() == "status" && strings.Contains(string(a.(interface{ GetPatch() []byte }).GetPatch()), `"reason":"PreemptionByScheduler"`) {
			sawCondition = true
		}
	}
	if !sawCondition {
		t.Error("no DisruptionTarget condition (reason PreemptionByScheduler) patched onto the victim")
	}
}

// case C43: a pod bound by this extender but not yet seen bound by the informer has no known
// priority: it is never a victim (it may outrank the preemptor).
func TestPreemptionSkipsPodsTheInformerHasNotShown(t *testing.T) {
	inv := testInventory("node-1", 1, 24576, 10)
	c := NewCache(DefaultConfig(), clocktesting.NewFakeClock(t0))
	c.OnNode(testNode(t, inv))
	c.OnLease(testLease("node-1", t0))
	s := NewScheduler(c)
	high := prioritized(podtest.Pending("v", "high", podtest.GPU("main", 1, "20000", 0)), 1000)
	k := device.RefOf(high)
	if _, _, err := s.BookForBind(k, mustReq(t, c, high), "node-1"); err != nil {
		t.Fatal(err)
	}
	s.FinishBind(k, "node-1", outcomeBound)
	want := podtest.Pending("p", "want", podtest.GPU("main", 1, "20000", 0))
	if plan, ok := c.PlanPreemption(device.RefOf(want), mustReq(t, c, want), 100, []string{"node-1"}, nil); ok {
		t.Fatalf("plan %+v evicts a pod whose priority the informer has not shown", plan)
	}
	bound := high.DeepCopy()
	bound.Spec.NodeName = "node-1"
	a := c.pods[k].planned
	enc, err := device.EncodeAllocation(*a)
	if err != nil {
		t.Fatal(err)
	}
	bound.Annotations[device.AnnoPlanned] = enc
	c.OnPod(bound)
	if plan, ok := c.PlanPreemption(device.RefOf(want), mustReq(t, c, want), 100, []string{"node-1"}, nil); ok {
		t.Fatalf("plan %+v evicts a pod of priority 1000 for one of 100", plan)
	}
	if plan, ok := c.PlanPreemption(device.RefOf(want), mustReq(t, c, want), 2000, []string{"node-1"}, nil); !ok || len(plan.Victims) != 1 {
		t.Fatalf("priority 2000: plan %+v ok=%v; want the bound pod as victim once the informer showed it", plan, ok)
	}
}

// case C50 (C43's preemption; found by the e2e on the local cluster), with issue 37's order
// (nominate, then evict): kube-scheduler may bind the preemptor before the extender writes its
// nomination (a victim of an earlier preemption ended, a pod finished), and the API server refuses
// status.nominatedNodeName on a bound pod. The pod needs nobody evicted then: no victim is
// deleted, no GPUPreemption Event, no error, and the nomination is not retried.
func TestOwnPreemptionPodBoundBeforeItsNomination(t *testing.T) {
	inv := testInventory("node-1", 2, 24576, 10)
	objs, _ := setupNodes(t, inv)
	var mu sync.Mutex
	refused := 0
	refusedN := func() int { mu.Lock(); defer mu.Unlock(); return refused }
	e := newEnvSetup(t, nil, func(c *fake.Clientset) {
		c.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			pa := a.(k8stesting.PatchAction)
			if pa.GetSubresource() != "status" || !strings.Contains(string(pa.GetPatch()), "nominatedNodeName") {
				return false, nil, nil
			}
			// kube-scheduler bound it meanwhile
			o, err := c.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), pa.GetNamespace(), pa.GetName())
			if err != nil {
				return true, nil, err
			}
			p := o.(*corev1.Pod).DeepCopy()
			p.Spec.NodeName = "node-1"
			if err := c.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, p.Namespace); err != nil {
				return true, nil, err
			}
			mu.Lock()
			refused++
			mu.Unlock()
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, pa.GetName(), field.ErrorList{
				field.Forbidden(field.NewPath("status", "nominatedNodeName"), "may not be set on pods that are already bound to a node")})
		})
	}, objs...)
	e.waitNodes("node-1")
	c := e.ext.cache
	low := prioritized(boundPod(t, "v", "low", "node-1", inv.GPUs[0].UUID, 15000, true), 0)
	mid := prioritized(boundPod(t, "v", "mid", "node-1", inv.GPUs[1].UUID, 15000, true), 10)
	pre := prioritized(podtest.Pending("p", "pre", podtest.GPU("main", 1, "20000", 0)), 100)
	e.create(low, mid, pre)
	eventually(t, "the victims charged", func() bool { return gpuUse(c, "node-1", 1).MemoryMiB == 15000 })
	if res := e.ext.sched.Filter(pre, []string{"node-1"}); len(*res.NodeNames) != 0 {
		t.Fatalf("pre: %+v; want refused on node-1", res)
	}
	eventually(t, "the nomination tried and refused", func() bool {
		e.clock.Step(preemptSettle)
		return refusedN() == 1
	})
	time.Sleep(50 * time.Millisecond)
	e.clock.Step(preemptSettle)
	if _, err := e.client.CoreV1().Pods("v").Get(context.Background(), "low", metav1.GetOptions{}); err != nil {
		t.Errorf("low evicted although the preemptor was bound before its nomination: %v", err)
	}
	for len(e.rec.Events) > 0 {
		if ev := <-e.rec.Events; strings.Contains(ev, EventReasonPreempting) || strings.Contains(ev, EventReasonPreempted) {
			t.Errorf("event %q; want none", ev)
		}
	}
	if n := refusedN(); n != 1 {
		t.Errorf("nomination refused %d times; want 1 (no retry)", n)
	}
	if _, st, _ := c.PodState(device.RefOf(pre)); st == "nominated" {
		t.Error("the hold stays after the nomination was refused")
	}
}

// Filter offers a pod refused for GPUs to the own preemption only with preemption own: with verb
// or none no loop takes offers, and those of pods deleted while pending would stay for good.
func TestOffersOnlyWithOwnPreemption(t *testing.T) {
	inv := testInventory("node-1", 1, 24576, 10)
	for mode, want := range map[PreemptionMode]int{PreemptionOwn: 1, PreemptionVerb: 0, PreemptionNone: 0} {
		cfg := DefaultConfig()
		cfg.Preemption = mode
		c := NewCache(cfg, clocktesting.NewFakeClock(t0))
		c.OnNode(testNode(t, inv))
		c.OnLease(testLease("node-1", t0))
		c.OnPod(prioritized(boundPod(t, "v", "low", "node-1", inv.GPUs[0].UUID, 20000, true), 0))
		pre := prioritized(podtest.Pending("p", "pre", podtest.GPU("main", 1, "20000", 0)), 100)
		if res := NewScheduler(c).Filter(pre, []string{"node-1"}); len(*res.NodeNames) != 0 || res.FailedNodes["node-1"] == "" {
			t.Fatalf("%s: %+v; want refused (resolvable) on node-1", mode, res)
		}
		if got := c.TakePreemptionOffers(); len(got) != want {
			t.Errorf("preemption %s: offers %v, want %d", mode, got, want)
		}
	}
}

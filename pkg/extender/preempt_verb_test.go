package extender

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// budgetsOver is pdbViolation over listers holding pods and pdbs (unit tests only).
func budgetsOver(t testing.TB, pods []*corev1.Pod, pdbs []*policyv1.PodDisruptionBudget) DisruptionCheck {
	t.Helper()
	pi := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	bi := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range pods {
		if err := pi.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range pdbs {
		if err := bi.Add(b); err != nil {
			t.Fatal(err)
		}
	}
	return pdbViolation(corelisters.NewPodLister(pi), policylisters.NewPodDisruptionBudgetLister(bi))
}

func budget(ns, name string, allowed int32, app string, disrupted ...string) *policyv1.PodDisruptionBudget {
	b := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed, DisruptedPods: map[string]metav1.Time{}},
	}
	for _, d := range disrupted {
		b.Status.DisruptedPods[d] = metav1.NewTime(t0)
	}
	return b
}

func labelled(p *corev1.Pod, app string) *corev1.Pod {
	if app != "" {
		p.Labels = map[string]string{"app": app}
	}
	return p
}

// Issue 37 item 3: PodDisruptionBudgets are decremented across the victims, as kube-scheduler's
// filterPodsWithPDBViolation does: a budget allowing 1 with 3 of its pods in the set counts 2.
func TestDisruptionCheckDecrementsBudgets(t *testing.T) {
	pod := func(ns, name, app string) *corev1.Pod {
		return labelled(podtest.Pending(ns, name, podtest.Ctr{Name: "c", NoGPU: true}), app)
	}
	pods := []*corev1.Pod{pod("a", "x1", "x"), pod("a", "x2", "x"), pod("a", "x3", "x"), pod("a", "y1", "y"), pod("a", "bare", ""), pod("b", "x1", "x")}
	ref := func(ns, name string) device.PodRef {
		return device.PodRef{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)}
	}
	for _, tc := range []struct {
		name    string
		pdbs    []*policyv1.PodDisruptionBudget
		victims []device.PodRef
		want    []bool
	}{
		{"allows 1, 3 of its pods: 2 violations", []*policyv1.PodDisruptionBudget{budget("a", "x", 1, "x")},
			[]device.PodRef{ref("a", "x1"), ref("a", "x2"), ref("a", "x3")}, []bool{false, true, true}},
		{"allows 0: every pod violates", []*policyv1.PodDisruptionBudget{budget("a", "x", 0, "x")},
			[]device.PodRef{ref("a", "x1"), ref("a", "x2")}, []bool{true, true}},
		{"allows 2, 2 of its pods: none", []*policyv1.PodDisruptionBudget{budget("a", "x", 2, "x")},
			[]device.PodRef{ref("a", "x1"), ref("a", "x2")}, []bool{false, false}},
		{"a pod in disruptedPods is counted already", []*policyv1.PodDisruptionBudget{budget("a", "x", 1, "x", "x1")},
			[]device.PodRef{ref("a", "x1"), ref("a", "x2"), ref("a", "x3")}, []bool{false, false, true}},
		{"by UID only (kube-scheduler's proposal)", []*policyv1.PodDisruptionBudget{budget("a", "x", 0, "x")},
			[]device.PodRef{{UID: "uid-a-x1"}}, []bool{true}},
		{"no labels, other namespace, other app: none", []*policyv1.PodDisruptionBudget{budget("a", "x", 0, "x")},
			[]device.PodRef{ref("a", "bare"), ref("b", "x1"), ref("a", "y1")}, []bool{false, false, false}},
		{"two budgets, each decremented", []*policyv1.PodDisruptionBudget{budget("a", "x", 1, "x"), budget("a", "y", 0, "y")},
			[]device.PodRef{ref("a", "y1"), ref("a", "x1"), ref("a", "x2")}, []bool{true, false, true}},
		{"unknown pod: none", []*policyv1.PodDisruptionBudget{budget("a", "x", 0, "x")},
			[]device.PodRef{{Namespace: "a", Name: "x1", UID: "other"}}, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := budgetsOver(t, pods, tc.pdbs)(tc.victims)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("violations %v; want %v", got, tc.want)
			}
		})
	}
}

// verbFixture: node-1 (one 24576 MiB GPU) runs v1 and v2 (10000 MiB each, priority 0); node-2
// (one GPU) runs v3 (2000 MiB) and v4 (20000 MiB). The preemptor asks 14000 MiB at priority 100.
// terminating marks v2 terminating.
func verbFixture(t *testing.T, terminating bool) (*Cache, map[string]*corev1.Pod) {
	inv1, inv2 := testInventory("node-1", 1, 24576, 10), testInventory("node-2", 1, 24576, 10)
	c := NewCache(DefaultConfig(), clocktesting.NewFakeClock(t0))
	for _, inv := range []device.Inventory{inv1, inv2} {
		c.OnNode(testNode(t, inv))
		c.OnLease(testLease(inv.Node, t0))
	}
	pods := map[string]*corev1.Pod{
		"v1": boundPod(t, "v", "v1", "node-1", inv1.GPUs[0].UUID, 10000, true),
		"v2": boundPod(t, "v", "v2", "node-1", inv1.GPUs[0].UUID, 10000, true),
		"v3": boundPod(t, "v", "v3", "node-2", inv2.GPUs[0].UUID, 2000, true),
		"v4": boundPod(t, "v", "v4", "node-2", inv2.GPUs[0].UUID, 20000, true),
	}
	if terminating {
		now := metav1.NewTime(t0)
		pods["v2"].DeletionTimestamp = &now
	}
	for _, p := range pods {
		c.OnPod(p)
	}
	return c, pods
}

// Issue 37 item 2: the preempt verb keeps kube-scheduler's proposal whole (GPU pods it chose for
// CPU, memory or a pod slot, and pods without GPUs) and adds only the victims the GPUs need; a
// terminating pod of lower priority counts as gone (as in the extender's own preemption).
func TestPreemptVerbKeepsTheProposal(t *testing.T) {
	uid := func(p *corev1.Pod) string { return string(p.UID) }
	for _, tc := range []struct {
		name        string
		terminating bool
		prio        int32
		mode        PreemptionMode
		node        string
		proposal    func(map[string]*corev1.Pod) []string
		want        func(map[string]*corev1.Pod) []string // nil: the node is dropped
	}{
		{name: "GPU pods proposed for host resources are kept", prio: 100, node: "node-1",
			proposal: func(p map[string]*corev1.Pod) []string { return []string{uid(p["v1"]), uid(p["v2"]), "uid-cpu"} },
			want:     func(p map[string]*corev1.Pod) []string { return []string{uid(p["v1"]), uid(p["v2"]), "uid-cpu"} }},
		{name: "a proposed GPU pod that frees too little is kept, the GPU victim added", prio: 100, node: "node-2",
			proposal: func(p map[string]*corev1.Pod) []string { return []string{uid(p["v3"])} },
			want:     func(p map[string]*corev1.Pod) []string { return []string{uid(p["v3"]), uid(p["v4"])} }},
		{name: "pods without GPUs are kept, one GPU victim added", prio: 100, node: "node-1",
			proposal: func(map[string]*corev1.Pod) []string { return []string{"uid-cpu"} },
			want:     func(p map[string]*corev1.Pod) []string { return []string{"uid-cpu", uid(p["v1"])} }},
		{name: "a terminating pod counts as gone: nothing added", terminating: true, prio: 100, node: "node-1",
			proposal: func(map[string]*corev1.Pod) []string { return []string{"uid-cpu"} },
			want:     func(map[string]*corev1.Pod) []string { return []string{"uid-cpu"} }},
		{name: "priority 0 outranks nobody the GPUs need: dropped", prio: 0, node: "node-1",
			proposal: func(map[string]*corev1.Pod) []string { return []string{"uid-cpu"} }},
		{name: "preemption none: dropped", prio: 100, mode: PreemptionNone, node: "node-2",
			proposal: func(p map[string]*corev1.Pod) []string { return []string{uid(p["v3"])} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, pods := verbFixture(t, tc.terminating)
			if tc.mode != "" {
				c.cfg.Preemption = tc.mode
			}
			p := prioritized(podtest.Pending("default", "want", podtest.GPU("main", 1, "14000", 0)), tc.prio)
			mv := &extenderv1.MetaVictims{NumPDBViolations: 1}
			for _, u := range tc.proposal(pods) {
				mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: u})
			}
			res := NewScheduler(c).Preempt(&extenderv1.ExtenderPreemptionArgs{Pod: p, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{tc.node: mv}})
			got := res.NodeNameToMetaVictims[tc.node]
			if tc.want == nil {
				if got != nil {
					t.Fatalf("node kept with victims %v; want it dropped", metaUIDs(got))
				}
				return
			}
			if got == nil || !slices.Equal(metaUIDs(got), tc.want(pods)) || got.NumPDBViolations != 1 {
				t.Fatalf("victims %v (%+v); want %v with kube-scheduler's 1 PDB violation", metaUIDs(got), got, tc.want(pods))
			}
		})
	}
	// Full victims (nodeCacheCapable false) answer the same way.
	c, pods := verbFixture(t, false)
	p := prioritized(podtest.Pending("default", "want", podtest.GPU("main", 1, "14000", 0)), 100)
	res := NewScheduler(c).Preempt(&extenderv1.ExtenderPreemptionArgs{Pod: p, NodeNameToVictims: map[string]*extenderv1.Victims{
		"node-2": {Pods: []*corev1.Pod{pods["v3"]}},
	}})
	if got := metaUIDs(res.NodeNameToMetaVictims["node-2"]); !slices.Equal(got, []string{string(pods["v3"].UID), string(pods["v4"].UID)}) {
		t.Fatalf("full victims: %v; want v3 and v4", got)
	}
}

func metaUIDs(mv *extenderv1.MetaVictims) []string {
	if mv == nil {
		return nil
	}
	out := make([]string, 0, len(mv.Pods))
	for _, p := range mv.Pods {
		out = append(out, p.UID)
	}
	return out
}

// Issue 37 items 2 and 3: three GPU pods of one budget allowing 1 disruption must all go: the
// extender's plan and the verb (over the union with kube-scheduler's proposal) count 2 violations.
func TestPreemptionCountsBudgetsAcrossVictims(t *testing.T) {
	inv := testInventory("node-1", 1, 24576, 10)
	c := NewCache(DefaultConfig(), clocktesting.NewFakeClock(t0))
	c.OnNode(testNode(t, inv))
	c.OnLease(testLease("node-1", t0))
	var pods []*corev1.Pod
	for _, n := range []string{"a", "b", "c"} {
		p := labelled(boundPod(t, "v", n, "node-1", inv.GPUs[0].UUID, 8000, true), "x")
		pods = append(pods, p)
		c.OnPod(p)
	}
	cpu := labelled(podtest.Pending("v", "cpu", podtest.Ctr{Name: "c", NoGPU: true}), "x")
	check := budgetsOver(t, append(pods, cpu), []*policyv1.PodDisruptionBudget{budget("v", "x", 1, "x")})
	want := prioritized(podtest.Pending("p", "want", podtest.GPU("main", 1, "24000", 0)), 100)
	plan, ok := c.PlanPreemption(device.RefOf(want), mustReq(t, c, want), 100, []string{"node-1"}, check)
	if !ok || len(plan.Victims) != 3 || plan.Choice.PDBViolations != 2 {
		t.Fatalf("plan %+v ok=%v; want a, b, c with 2 PDB violations", plan, ok)
	}
	s := NewScheduler(c)
	s.SetDisruptionCheck(check)
	res := s.Preempt(&extenderv1.ExtenderPreemptionArgs{Pod: want, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{
		"node-1": {Pods: []*extenderv1.MetaPod{{UID: string(cpu.UID)}}},
	}})
	if got := res.NodeNameToMetaVictims["node-1"]; got == nil || len(got.Pods) != 4 || got.NumPDBViolations != 3 {
		t.Fatalf("verb: %v (%+v); want cpu, a, b, c with 3 PDB violations (4 pods of a budget allowing 1)", metaUIDs(got), got)
	}
}

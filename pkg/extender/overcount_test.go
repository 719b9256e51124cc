package extender

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// slicePod is a one-slice pod (1 GPU, mib MiB) bound to node with a planned allocation on uuid,
// as the extender's Bind leaves it.
func slicePod(t testing.TB, name, node, uuid string, mib int64) *corev1.Pod {
	t.Helper()
	return boundPod(t, "burst", name, node, uuid, mib, false)
}

// withClaim returns a copy of p whose claimed annotation is a (nil: annotation removed), as the
// device plugin's merge patch leaves it.
func withClaim(t testing.TB, p *corev1.Pod, a *device.Allocation) *corev1.Pod {
	t.Helper()
	q := p.DeepCopy()
	if a == nil {
		delete(q.Annotations, device.AnnoClaimed)
		return q
	}
	s, err := device.EncodeAllocation(*a)
	if err != nil {
		t.Fatal(err)
	}
	q.Annotations[device.AnnoClaimed] = s
	return q
}

// claimOf is the device plugin's claimed record of a pod whose planned container got slice
// IDs ids (Ledger.TryAllocate copies the plan's container and adds the kubelet's IDs).
func claimOf(t testing.TB, p *corev1.Pod, ids ...string) *device.Allocation {
	t.Helper()
	a := plannedOf(t, p)
	a.Containers[0].SliceIDs = ids
	return &a
}

func sharersOf(c *Cache, node string) []int {
	var out []int
	for _, g := range c.NodeGPUUsage(node) {
		out = append(out, g.Usage.Sharers)
	}
	return out
}

// swapSetup is the field report's node in miniature: 2 GPUs of split 10, GPU-0 holds 9 running
// one-slice pods and P (planned there, seen first by the device plugin), GPU-1 holds Q. The
// kubelet admits Q first; its devices are on GPU-0 (preferred for P, the first seen), so the
// plugin claims them for P, whose plan is on GPU-0, and P's record is written.
func swapSetup(t *testing.T) (c *Cache, pp, qp *corev1.Pod, claimP *device.Allocation, step func(string, ...int)) {
	inv := testInventory("node-1", 2, 24576, 10)
	c = memoCache(t, inv)
	g0, g1 := inv.GPUs[0].UUID, inv.GPUs[1].UUID
	for i := 0; i < 9; i++ {
		p := slicePod(t, fmt.Sprintf("fill-%d", i), "node-1", g0, 1000)
		c.OnPod(withClaim(t, p, claimOf(t, p, device.SliceID(g0, i))))
	}
	pp = slicePod(t, "p", "node-1", g0, 1000)
	qp = slicePod(t, "q", "node-1", g1, 1000)
	c.OnPod(pp)
	c.OnPod(qp)
	step = func(what string, want ...int) {
		t.Helper()
		checkInvariants(t, c)
		if got := sharersOf(c, "node-1"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: sharers per GPU %v, want %v", what, got, want)
		}
	}
	step("bound", 10, 1)
	claimP = claimOf(t, pp, device.SliceID(g0, 9))
	c.OnPod(withClaim(t, pp, claimP))
	step("P claimed", 10, 1)
	return c, pp, qp, claimP, step
}

func gpuCharged(t *testing.T, c *Cache, p *corev1.Pod) int {
	t.Helper()
	_, _, a := c.PodState(device.RefOf(p))
	if a == nil {
		t.Fatalf("%s charged nothing", p.Name)
	}
	for _, g := range c.NodeGPUUsage(a.Node) {
		if g.GPU.UUID == a.Containers[0].Devices[0].UUID {
			return g.GPU.Index
		}
	}
	t.Fatalf("%s charged on an unknown GPU: %+v", p.Name, a)
	return -1
}

// case C04: the field report (one node, 8 H100, split 10, bursts of 50 one-slice pods): Filter
// reasons said `GPU-0 11/10 slices used` during the burst. The kubelet admits interchangeable
// pods in its own order; the device plugin records a claim on the pod whose plan matches the
// devices (P), then its Reconcile learns from PodResources that the kubelet gave them to Q, swaps
// P's and Q's records and writes the two pods' AnnoClaimed one after the other. Between the two
// writes the informer shows P and Q claiming the same slice. The cache charged both (the second
// claim found no free slot of its kind in the group's pool and consumed Q's own planned slot
// instead): GPU-0 11/10 and GPU-1 one short. A slice is held by one pod: the older record is
// stale and counts as unclaimed, so GPU-0 stays 10/10 and GPU-1 keeps the slot P now holds.
func TestOvercountReconcileSwapDuplicateClaim(t *testing.T) {
	c, pp, qp, claimP, step := swapSetup(t)
	// Reconcile swaps the records; Q's write lands first: Q claims P's slice, P still does.
	c.OnPod(withClaim(t, qp, claimP))
	step("Q claims P's slice, P's record not yet rewritten", 10, 1)
	if gq, gp := gpuCharged(t, c, qp), gpuCharged(t, c, pp); gq != 0 || gp != 1 {
		t.Fatalf("Q charged on GPU-%d, P on GPU-%d; want Q on GPU-0 (its claim), P on GPU-1 (Q's plan, now P's)", gq, gp)
	}

	// The Filter reason a pending pod reads shows the GPU as it is: 10/10, never 11/10.
	r := podtest.Pending("burst", "r", podtest.GPU("main", 2, "1000", 0))
	res := NewScheduler(c).Filter(r, []string{"node-1"})
	why := res.FailedNodes["node-1"]
	if !strings.Contains(why, "GPU-0 10/10 slices used") || strings.Contains(why, "11/10") {
		t.Fatalf("Filter reason %q, want GPU-0 10/10 slices used", why)
	}

	// P's write lands: P holds nothing claimed; the group's free slot (GPU-1) is P's.
	c.OnPod(withClaim(t, pp, nil))
	step("P's record rewritten", 10, 1)
	if g := gpuCharged(t, c, pp); g != 1 {
		t.Fatalf("P charged on GPU-%d, want GPU-1 (the slot Q left)", g)
	}
	// The kubelet admits P; the plugin claims Q's former plan (GPU-1) for it.
	c.OnPod(withClaim(t, pp, claimOf(t, qp, device.SliceID(gpuOf(plannedPtr(t, qp)), 0))))
	step("P claimed GPU-1", 10, 1)
	c.OnPodDelete(qp, nil)
	step("Q deleted", 9, 1)
	c.OnPodDelete(pp, nil)
	step("P deleted", 9, 0)
}

// case C04: Q, running on P's slot after the swap, ends before P is admitted and before P's
// record is rewritten. The device plugin frees Q's record (GPU-0) and keeps P on Q's former plan
// (GPU-1); the cache must free GPU-0, not GPU-1, although P's stale record still names GPU-0 and
// P's own plan is GPU-0: else GPU-0 looks taken and GPU-1 free, and the next pod planned on
// GPU-1 over-commits it once P is admitted there.
func TestOvercountSwappedHolderEnds(t *testing.T) {
	c, pp, qp, claimP, step := swapSetup(t)
	c.OnPod(withClaim(t, qp, claimP))
	step("Q claims P's slice", 10, 1)
	ended := withClaim(t, qp, claimP)
	ended.Status.Phase = corev1.PodSucceeded
	c.OnPod(ended)
	step("Q ended", 9, 1)
	if g := gpuCharged(t, c, pp); g != 1 {
		t.Fatalf("P charged on GPU-%d, want GPU-1 (Q's former plan, which the plugin gave P)", g)
	}
	c.OnPod(withClaim(t, pp, nil))
	step("P's record rewritten", 9, 1)
	c.OnPod(withClaim(t, pp, claimOf(t, qp, device.SliceID(gpuOf(plannedPtr(t, qp)), 0))))
	step("P claimed GPU-1", 9, 1)
	c.OnPodDelete(pp, nil)
	step("P deleted", 9, 0)
}

// withRV returns p with resourceVersion rv, as the API server stamps every write.
func withRV(p *corev1.Pod, rv int) *corev1.Pod {
	q := p.DeepCopy()
	q.ResourceVersion = fmt.Sprint(rv)
	return q
}

// case C04 after an extender restart: the device plugin's swap is caught between its two
// patches, so two records name slice X: the holder's, written last (resourceVersion 160), and
// the old owner's, not yet rewritten (150). The informer lists pods by name, the old owner
// last. Ordered as listed, the old owner's record would hold X and the holder's be stale; when
// the old owner is then deleted, X would be freed while the holder runs on it, and GPU-0 would
// take an 11th slice. Ordered by resourceVersion (KEP-5504), the holder keeps X.
func TestOvercountRestartListsStaleRecordLast(t *testing.T) {
	inv := testInventory("node-1", 2, 24576, 10)
	c := memoCache(t, inv)
	g0, g1 := inv.GPUs[0].UUID, inv.GPUs[1].UUID
	step := func(what string, want ...int) {
		t.Helper()
		checkInvariants(t, c)
		if got := sharersOf(c, "node-1"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: sharers per GPU %v, want %v", what, got, want)
		}
	}
	for i := 0; i < 9; i++ {
		p := slicePod(t, fmt.Sprintf("fill-%d", i), "node-1", g0, 1000)
		c.OnPod(withRV(withClaim(t, p, claimOf(t, p, device.SliceID(g0, i))), 100+i))
	}
	old := slicePod(t, "pod-b", "node-1", g0, 1000)    // planned on GPU-0, claimed X first
	holder := slicePod(t, "pod-a", "node-1", g1, 1000) // planned on GPU-1, runs on X
	x := claimOf(t, old, device.SliceID(g0, 9))
	c.OnPod(withRV(withClaim(t, holder, x), 160))
	c.OnPod(withRV(withClaim(t, old, x), 150))
	step("listed after the restart", 10, 1)
	if g := gpuCharged(t, c, holder); g != 0 {
		t.Fatalf("holder charged on GPU-%d, want GPU-0 (its record, resourceVersion 160, is the later one)", g)
	}
	c.OnPodDelete(withRV(withClaim(t, old, x), 170), nil)
	step("old owner deleted before its record was rewritten", 10, 0)
	if g := gpuCharged(t, c, holder); g != 0 {
		t.Fatalf("holder charged on GPU-%d after the old owner went, want GPU-0", g)
	}
}

// case C04, a move no rewrite settles: P (planned GPU-0) runs on Q's planned slot on GPU-1
// after a swap, Q will run on GPU-0, S is planned on GPU-1. P goes: the cache keeps the
// difference as a move (+GPU-0, -GPU-1) until the device plugin's rewrite of Q's planned
// annotation lands; Q goes before that write (one scale-down deletes both), so no rewrite ever
// settles the move. After the reservation TTL the move is dropped and S is charged on GPU-1,
// where the plugin holds it, as a cache rebuilt from the API charges it.
func TestOvercountMoveWithoutRewriteExpires(t *testing.T) {
	inv := testInventory("node-1", 2, 24576, 4)
	c := memoCache(t, inv)
	g0, g1 := inv.GPUs[0].UUID, inv.GPUs[1].UUID
	pp := slicePod(t, "p", "node-1", g0, 1000)
	qp := slicePod(t, "q", "node-1", g1, 1000)
	sp := slicePod(t, "s", "node-1", g1, 1000)
	for _, x := range []*corev1.Pod{pp, qp, sp} {
		c.OnPod(x)
	}
	c.OnPod(withClaim(t, pp, claimOf(t, qp, device.SliceID(g1, 0)))) // the swap: P holds Q's slot
	c.OnPodDelete(pp, nil)
	c.OnPodDelete(qp, nil)
	c.clock.(*clocktesting.FakeClock).Step(DefaultConfig().SlotMoveTTL + time.Second)
	c.Sweep()
	checkInvariants(t, c)
	if got := sharersOf(c, "node-1"); fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("after the TTL: sharers per GPU %v, want [0 1] (S on its plan, GPU-1)", got)
	}
	rebuilt := memoCache(t, inv)
	rebuilt.OnPod(sp)
	if got := sharersOf(rebuilt, "node-1"); fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("rebuilt cache: sharers per GPU %v, want [0 1]", got)
	}
}

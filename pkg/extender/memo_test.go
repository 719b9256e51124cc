package extender

import (
	"strconv"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// memoCache is a cache (no API) with the given nodes, each with a fresh Lease.
func memoCache(t *testing.T, invs ...device.Inventory) *Cache {
	t.Helper()
	c := NewCache(DefaultConfig(), clocktesting.NewFakeClock(t0))
	renew := metav1.NewMicroTime(t0)
	for _, inv := range invs {
		enc, err := device.EncodeInventory(inv)
		if err != nil {
			t.Fatal(err)
		}
		c.OnNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: inv.Node, Annotations: map[string]string{device.AnnoInventory: enc}}})
		c.OnLease(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultConfig().LeaseNamespace, Name: device.LeasePrefix + inv.Node},
			Spec: coordinationv1.LeaseSpec{RenewTime: &renew}})
	}
	return c
}

func scoresOf(l extenderv1.HostPriorityList) map[string]int64 {
	m := map[string]int64{}
	for _, h := range l {
		m[h.Host] = h.Score
	}
	return m
}

// Prioritize answers from Filter's scores for the same pod (same UID and resourceVersion) while
// the nodes are unchanged, and recomputes a node another pod changed in between: the answer is
// always the one a fresh computation gives.
func TestPrioritizeFromFilterMemo(t *testing.T) {
	c := memoCache(t, testInventory("node-1", 1, 10000, 10), testInventory("node-2", 1, 10000, 10))
	names := []string{"node-1", "node-2"}
	p := podtest.Pending("default", "p", podtest.GPU("main", 1, "2000", 0))
	p.ResourceVersion = "7"
	if res := NewScheduler(c).Filter(p, names); len(*res.NodeNames) != 2 {
		t.Fatalf("filter %+v", res)
	}
	m := c.memos.take(p.UID, "7")
	if m == nil {
		t.Fatal("Filter left no memo")
	}
	for _, n := range names {
		ns := c.node(n)
		ns.mu.Lock()
		_, ok := m.score(ns)
		ns.mu.Unlock()
		if !ok {
			t.Fatalf("memo of %s is stale right after Filter (its reservation must not invalidate it)", n)
		}
	}
	c.memos.publish(m)
	// Binpack, both empty: 2000 of 10000 MiB (200‰) + 1 of 10 slices (100‰) → 150‰ → 2 (rounded
	// half up: (150+50)/100). The reserved node scores 10, the other at most 9.
	got := scoresOf(NewScheduler(c).Prioritize(p, names))
	reserved, _, _ := c.PodState(device.RefOf(p))
	other := "node-2"
	if reserved == "node-2" {
		other = "node-1"
	}
	if got[reserved] != 10 || got[other] != 2 {
		t.Fatalf("scores %v (reserved on %s); want 10 and 2", got, reserved)
	}
	// Another pod books 6000 MiB on the other node: its score must follow (8000 MiB, 2 slices:
	// 800‰ and 200‰ → 500‰ → 5), not Filter's memo.
	q := podtest.Pending("default", "q", podtest.GPU("main", 1, "6000", 0))
	qr, _, err := c.ParseRequest(q)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := NewScheduler(c).BookForBind(device.RefOf(q), qr, other); err != nil {
		t.Fatal(err)
	}
	got = scoresOf(NewScheduler(c).Prioritize(p, names))
	if got[reserved] != 10 || got[other] != 5 {
		t.Fatalf("after another pod booked %s: %v; want %s 10, %s 5", other, got, reserved, other)
	}
	// A changed pod (new resourceVersion) gets no memo: same figures, computed afresh.
	p2 := p.DeepCopy()
	p2.ResourceVersion = "8"
	if m := c.memos.take(p2.UID, "8"); m != nil {
		t.Fatal("memo served for another resourceVersion")
	}
	if got2 := scoresOf(NewScheduler(c).Prioritize(p2, names)); got2[reserved] != 10 || got2[other] != 5 {
		t.Fatalf("fresh prioritize %v", got2)
	}
}

// The memo table keeps at most memoCapacity pods and reuses evicted buffers.
func TestMemoTableBounded(t *testing.T) {
	var tab = newMemoTable()
	for i := 0; i < 3*memoCapacity; i++ {
		m := tab.fresh(uidN(i), "1", 100)
		tab.publish(m)
	}
	if len(tab.byUID) != memoCapacity || len(tab.order) != memoCapacity {
		t.Fatalf("table holds %d (%d in order), want %d", len(tab.byUID), len(tab.order), memoCapacity)
	}
	if tab.take(uidN(0), "1") != nil || tab.take(uidN(3*memoCapacity-1), "1") == nil {
		t.Fatal("eviction order wrong")
	}
}

func uidN(i int) k8stypes.UID { return k8stypes.UID("uid-" + strconv.Itoa(i)) }

// byScore: best score first, kube-scheduler's order among equals; nodes without a score (-1)
// never; stopping early stops.
func TestByScoreOrder(t *testing.T) {
	var states []*nodeState
	var scores []int8
	var count [maxScore + 1]int
	for _, x := range []struct {
		name  string
		score int8
	}{{"a", 3}, {"b", 10}, {"x", -1}, {"c", 3}, {"d", 0}, {"e", 10}, {"f", 7}} {
		states, scores = append(states, &nodeState{name: x.name}), append(scores, x.score)
		if x.score >= 0 {
			count[x.score]++
		}
	}
	got := ""
	for ns := range byScore(states, scores, &count) {
		got += ns.name
	}
	if got != "befacd" {
		t.Fatalf("order %q, want befacd", got)
	}
	got = ""
	for ns := range byScore(states, scores, &count) {
		if got += ns.name; len(got) == 2 {
			break
		}
	}
	if got != "be" {
		t.Fatalf("stopped after 2: %q", got)
	}
}

// PrioritizeInto reuses a list long enough and resets every entry: scores of a previous call
// never leak into the next one; a short list is replaced.
func TestPrioritizeIntoReuses(t *testing.T) {
	c := memoCache(t, testInventory("node-1", 1, 10000, 10), testInventory("node-2", 1, 10000, 10))
	names := []string{"node-1", "node-2"}
	p := podtest.Pending("default", "p", podtest.GPU("main", 1, "2000", 0))
	NewScheduler(c).Filter(p, names)
	want := NewScheduler(c).Prioritize(p, names)
	dst := make(extenderv1.HostPriorityList, 2, 8)
	dst[0], dst[1] = extenderv1.HostPriority{Host: "stale", Score: 7}, extenderv1.HostPriority{Host: "stale", Score: 7}
	got := NewScheduler(c).PrioritizeInto(dst, p, names)
	if &got[0] != &dst[0] || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("into a reusable list: %+v, want %+v in the same array", got, want)
	}
	other := podtest.Pending("default", "o", podtest.GPU("main", 1, "2000", 0))
	other.Spec.SchedulerName = "default-scheduler"
	if got := NewScheduler(c).PrioritizeInto(got, other, names); got[0].Score != 0 || got[1].Score != 0 || got[1].Host != "node-2" {
		t.Fatalf("a pod that is not the extender's kept old scores: %+v", got)
	}
	if got := NewScheduler(c).PrioritizeInto(make(extenderv1.HostPriorityList, 0, 1), p, names); len(got) != 2 || got[0] != want[0] {
		t.Fatalf("into a short list: %+v", got)
	}
}

package drapreempt

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// fixture: node-1 with 2 GPUs of 81920 MiB, each held by a low-priority pod; a pending
// preemptor of priority 100 asking 40000 MiB.
func fixture(t *testing.T, evict func(name string) error) (*Controller, *fake.Clientset, *clocktesting.FakeClock, *corev1.Pod, *record.FakeRecorder) {
	t.Helper()
	lowA, lowB := mkPod("default", "low-a", 0), mkPod("default", "low-b", 0)
	lowA.Spec.NodeName, lowB.Spec.NodeName = "node-1", "node-1"
	high := mkPod("default", "high", 100)
	high.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("n")}}
	high.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/1 nodes are available: 1 cannot allocate all claims."}}
	objs := []runtime.Object{lowA, lowB, high, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, gpuSlice("node-1", 2, 81920, 10),
		held("ca", "node-1", 0, 81920, lowA), held("cb", "node-1", 1, 81920, lowB), need("n", 1, 40000)}
	cs := fake.NewClientset(objs...)
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(interface{ GetName() string }).GetName()
		return true, nil, evict(name)
	})
	f := informers.NewSharedInformerFactory(cs, 0)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rec := record.NewFakeRecorder(100)
	c, err := New(cs, f, rec, clk, Config{Timeout: time.Minute, RetryAfter: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	cs.ClearActions()
	return c, cs, clk, high, rec
}

// writes are the client's mutating actions, as "verb resource/subresource name".
func writes(cs *fake.Clientset) []string {
	var out []string
	for _, a := range cs.Actions() {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" || a.GetVerb() == "get" {
			continue
		}
		name := ""
		switch x := a.(type) {
		case k8stesting.PatchAction:
			name = x.GetName()
		case k8stesting.CreateAction:
			name = x.GetObject().(interface{ GetName() string }).GetName()
		}
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource()+" "+name)
	}
	return out
}

func TestControllerNominatesThenEvictsOnce(t *testing.T) {
	var evicted []string
	c, cs, _, high, rec := fixture(t, func(name string) error { evicted = append(evicted, name); return nil })
	ctx := context.Background()
	if err := c.Sync(ctx, "default/high"); err != nil {
		t.Fatal(err)
	}
	got := writes(cs)
	want := []string{"patch pods/status high", "create pods/eviction low-a"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("actions %v, want %v (nominate before evict, one victim)", got, want)
	}
	if node, ok := c.InFlight(high.UID); !ok || node != "node-1" {
		t.Fatalf("in flight: %q %v", node, ok)
	}
	// A second look while in flight does nothing more.
	cs.ClearActions()
	if err := c.Sync(ctx, "default/high"); err != nil {
		t.Fatal(err)
	}
	if w := writes(cs); len(w) != 0 {
		t.Fatalf("second sync wrote %v; want nothing (one preemption per pod)", w)
	}
	if len(evicted) != 1 {
		t.Fatalf("evicted %v", evicted)
	}
	events := drain(rec)
	if !hasPrefix(events, "Normal Preempting") || !hasPrefix(events, "Normal Preempted Preempted by pod uid-high on node node-1") {
		t.Fatalf("events %v", events)
	}
}

func TestControllerRetriesAfter429(t *testing.T) {
	refuse := true
	var evicted []string
	c, cs, clk, high, _ := fixture(t, func(name string) error {
		if refuse {
			return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		evicted = append(evicted, name)
		return nil
	})
	ctx := context.Background()
	if err := c.Sync(ctx, "default/high"); err != nil {
		t.Fatal(err)
	}
	got := writes(cs)
	if len(got) != 2 || got[1] != "create pods/eviction low-a" {
		t.Fatalf("actions %v: want the nomination and one refused eviction, nothing else", got)
	}
	// Before RetryAfter: nothing.
	cs.ClearActions()
	clk.Step(5 * time.Second)
	if err := c.Sync(ctx, "default/high"); err != nil {
		t.Fatal(err)
	}
	if w := writes(cs); len(w) != 0 {
		t.Fatalf("retried early: %v", w)
	}
	// After: the same victim again, and only it.
	refuse = false
	clk.Step(6 * time.Second)
	if err := c.Sync(ctx, "default/high"); err != nil {
		t.Fatal(err)
	}
	if w := writes(cs); len(w) != 1 || w[0] != "create pods/eviction low-a" {
		t.Fatalf("retry wrote %v", w)
	}
	if len(evicted) != 1 || evicted[0] != "low-a" {
		t.Fatalf("evicted %v", evicted)
	}
	if _, ok := c.InFlight(high.UID); !ok {
		t.Fatal("the preemption should stay in flight until the pod is bound")
	}
}

func TestControllerTimeoutAndNotHelpful(t *testing.T) {
	c, cs, clk, high, rec := fixture(t, func(string) error { return nil })
	ctx := context.Background()
	if err := c.Sync(ctx, "default/high"); err != nil {
		t.Fatal(err)
	}
	clk.Step(2 * time.Minute)
	if err := c.Sync(ctx, "default/high"); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.InFlight(high.UID); ok {
		t.Fatal("still in flight after the timeout")
	}
	// Never-preempting pods are told why, once.
	never := high.DeepCopy()
	never.Spec.PreemptionPolicy = ptr.To(corev1.PreemptNever)
	never.Status.NominatedNodeName = ""
	if _, err := cs.CoreV1().Pods("default").Update(ctx, never, metav1UpdateOptions()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		p, _ := c.pods.Pods("default").Get("high")
		return p != nil && p.Spec.PreemptionPolicy != nil
	})
	drain(rec)
	cs.ClearActions()
	for range 2 {
		if err := c.Sync(ctx, "default/high"); err != nil {
			t.Fatal(err)
		}
	}
	if w := writes(cs); len(w) != 0 {
		t.Fatalf("wrote %v for a Never pod", w)
	}
	if ev := drain(rec); len(ev) != 1 || !hasPrefix(ev, "Normal PreemptionNotHelpful") {
		t.Fatalf("events %v", ev)
	}
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func hasPrefix(events []string, p string) bool {
	for _, e := range events {
		if strings.HasPrefix(e, p) {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for range 200 {
		if ok() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("timed out")
}

func metav1UpdateOptions() metav1.UpdateOptions { return metav1.UpdateOptions{} }

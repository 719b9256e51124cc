package extender

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// case C13 (the next pod proceeds at once): which refused pods a release hands out: refused within requeueWindow before it and not
// filtered since; each once.
func TestRefusedBeforeRelease(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	c := NewCache(DefaultConfig(), clk)
	key := func(n string) device.PodRef {
		return device.PodRef{Namespace: "r", Name: n, UID: types.UID("uid-" + n)}
	}
	c.refusals.refused(key("old"), t0)
	c.refusals.refused(key("recent"), t0.Add(2*time.Second))
	c.refusals.refused(key("again"), t0.Add(2*time.Second))
	c.refusals.refused(key("fits"), t0.Add(2*time.Second))
	c.refusals.fits(key("fits"))
	c.refusals.released(t0.Add(3 * time.Second))
	c.refusals.refused(key("again"), t0.Add(3500*time.Millisecond)) // kube-scheduler's own retry after the release
	select {
	case <-c.Released():
	default:
		t.Fatal("a release did not signal Released")
	}
	got, freed := c.RefusedBeforeRelease()
	if len(got) != 1 || got[0] != key("recent") || !freed.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("handed out %v (release %v); want only recent, refused 1 s before the release at t0+3s (old: 3 s before, beyond the window; again: filtered after; fits: fitted)", got, freed)
	}
	if again, _ := c.RefusedBeforeRelease(); len(again) != 0 {
		t.Fatalf("handed out twice: %v", again)
	}
}

// case C13: the next pod proceeds at once, also when kube-scheduler retries the waiter on the
// holder's delete event before the extender's informer releases the holder; that retry is
// refused, and nothing would retry it again for minutes. After the release the extender updates the waiter, an
// event kube-scheduler retries it on (fake clientset: unit test only).
func TestRequeueAfterReleaseUpdatesTheRefusedPod(t *testing.T) {
	inv := testInventory("node-1", 1, 81920, 10)
	objs, _ := setupNodes(t, inv)
	e := newEnv(t, nil, objs...)
	e.waitNodes("node-1")
	c := e.ext.cache
	holder := boundPod(t, "r", "holder", "node-1", inv.GPUs[0].UUID, 81920, true)
	waiter := podtest.Pending("r", "waiter", podtest.GPU("main", 1, "40960", 0))
	e.create(holder, waiter)
	eventually(t, "the holder charged", func() bool { return gpuUse(c, "node-1", 0).MemoryMiB == 81920 })
	if res := NewScheduler(c).Filter(waiter, []string{"node-1"}); len(*res.NodeNames) != 0 {
		t.Fatalf("waiter fits beside the holder: %v", *res.NodeNames)
	}
	if err := e.client.CoreV1().Pods("r").Delete(context.Background(), "holder", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the holder released", func() bool { return gpuUse(c, "node-1", 0).MemoryMiB == 0 })
	eventually(t, "the waiter updated", func() bool {
		e.clock.Step(requeueSettle)
		return e.getPod("r", "waiter").Annotations[device.AnnoRequeue] == t0.UTC().Format(time.RFC3339Nano)
	})
}

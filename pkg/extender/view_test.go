package extender

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// The packed view Filter reads first follows every change of the node: a new inventory (a GPU
// turned unhealthy, a split count lowered) and new bookings, also when no pod event follows.
func TestFilterViewFollowsInventoryAndBookings(t *testing.T) {
	inv := testInventory("node-1", 2, 10000, 2)
	c := memoCache(t, inv)
	names := []string{"node-1"}
	a := podtest.Pending("default", "a", podtest.GPU("main", 1, "1000", 0))
	if res := NewScheduler(c).Filter(a, names); len(*res.NodeNames) != 1 {
		t.Fatalf("a: %+v", res)
	}
	// a's reservation is on one GPU; a second pod sees it through the view.
	b := podtest.Pending("default", "b", podtest.GPU("main", 2, "9500", 0))
	if res := NewScheduler(c).Filter(b, names); len(*res.NodeNames) != 0 || !strings.Contains(res.FailedNodes["node-1"], "9000 of 10000 MiB free") {
		t.Fatalf("b does not see a's reservation: %+v", res)
	}
	update := func(inv device.Inventory) {
		enc, err := device.EncodeInventory(inv)
		if err != nil {
			t.Fatal(err)
		}
		c.OnNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: inv.Node, Annotations: map[string]string{device.AnnoInventory: enc}}})
	}
	sick := testInventory("node-1", 2, 10000, 2)
	sick.GPUs[0].Healthy, sick.GPUs[1].Healthy = false, false
	update(sick)
	p := podtest.Pending("default", "p", podtest.GPU("main", 1, "100", 0))
	if res := NewScheduler(c).Filter(p, names); len(*res.NodeNames) != 0 || !strings.Contains(res.FailedNodes["node-1"]+res.FailedAndUnresolvableNodes["node-1"], "unhealthy") {
		t.Fatalf("after both GPUs turned unhealthy: %+v", res)
	}
	update(inv)
	if res := NewScheduler(c).Filter(p, names); len(*res.NodeNames) != 1 {
		t.Fatalf("after recovery: %+v", res)
	}
}

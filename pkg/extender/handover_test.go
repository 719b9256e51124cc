package extender

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// heldLease is the node's liveness Lease renewed at renew, with holder ("" = released).
func heldLease(node, holder string, renew time.Time) *coordinationv1.Lease {
	l := testLease(node, renew)
	l.Spec.HolderIdentity = ptr.To(holder)
	return l
}

// case C45: while a node's device plugin has released its Lease (it stops serving the kubelet:
// a restart, a DaemonSet update), Filter refuses the node, and Bind refuses it even for a pod
// Filter reserved there before the release: the kubelet would fail the pod at admission. Once the
// Lease is held again the node fits, and the pods refused since the release, however long ago,
// are handed out for requeueing.
func TestReleasedLeaseFencesTheNode(t *testing.T) {
	inv := testInventory("node-1", 1, 81920, 10)
	c, clk := cacheWith(t, DefaultConfig(), inv)
	s := NewScheduler(c)
	c.OnLease(heldLease("node-1", "node-1", clk.Now()))
	reserved := podtest.Pending("r", "reserved", podtest.GPU("main", 1, "1000", 0))
	if res := s.Filter(reserved, []string{"node-1"}); len(*res.NodeNames) != 1 {
		t.Fatalf("held Lease: Filter = %+v, want node-1", res)
	}

	clk.Step(time.Second)
	c.OnLease(heldLease("node-1", "", clk.Now()))
	const why = "device plugin not serving the kubelet (Lease kube-node-lease/hami-go-node-1 released: starting or restarting)"
	waiter := podtest.Pending("r", "waiter", podtest.GPU("main", 1, "1000", 0))
	res := s.Filter(waiter, []string{"node-1"})
	if len(*res.NodeNames) != 0 || res.FailedAndUnresolvableNodes["node-1"] != why {
		t.Fatalf("released Lease: Filter = %+v, want node-1 refused: %q", res, why)
	}
	req, _, err := c.ParseRequest(reserved)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.BookForBind(device.RefOf(reserved), req, "node-1"); err == nil || !strings.Contains(err.Error(), why) {
		t.Fatalf("released Lease: Bind of a pod reserved before = %v, want refused: %q", err, why)
	}

	clk.Step(10 * time.Second) // longer than requeueWindow
	c.OnLease(heldLease("node-1", "node-1", clk.Now()))
	select {
	case <-c.Released():
	default:
		t.Fatal("the Lease held again did not signal Released")
	}
	got, _ := c.RefusedBeforeRelease()
	if len(got) != 1 || got[0] != device.RefOf(waiter) {
		t.Fatalf("handed out %v, want the waiter refused 10 s before the Lease was held again", got)
	}
	if res := s.Filter(waiter, []string{"node-1"}); len(*res.NodeNames) != 1 {
		t.Fatalf("Lease held again: Filter = %+v, want node-1", res)
	}
}

// A Lease without a holder (written before the release rule, or by another tool) reads as held.
func TestLeaseWithoutHolderIsHeld(t *testing.T) {
	inv := testInventory("node-1", 1, 81920, 10)
	c, clk := cacheWith(t, DefaultConfig(), inv)
	l := testLease("node-1", clk.Now())
	l.Spec.HolderIdentity = nil
	c.OnLease(l)
	if res := NewScheduler(c).Filter(podtest.Pending("r", "p", podtest.GPU("main", 1, "1000", 0)), []string{"node-1"}); len(*res.NodeNames) != 1 {
		t.Fatalf("Filter = %+v, want node-1", res)
	}
}

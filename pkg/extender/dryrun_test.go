package extender

import (
	"strings"
	"testing"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// case C66: FitWithChange is Filter's verdict on one node with the framework's changes applied:
// removed bookings leave the usage, an added pod the cache books on the node is not counted
// twice, one it does not book is placed, lower-priority holds stay out as Filter leaves them,
// and the cache is not modified. One GPU of 24576 MiB holds a (10000) and b (8000).
func TestFitWithChange(t *testing.T) {
	inv := testInventory("node-1", 1, 24576, 10)
	c := NewCache(DefaultConfig(), clocktesting.NewFakeClock(t0))
	c.OnNode(testNode(t, inv))
	c.OnLease(testLease("node-1", t0))
	g0 := inv.GPUs[0].UUID
	a := prioritized(boundPod(t, "p", "a", "node-1", g0, 10000, true), 0)
	b := prioritized(boundPod(t, "p", "b", "node-1", g0, 8000, true), 0)
	c.OnPod(a)
	c.OnPod(b)
	big := prioritized(podtest.Pending("p", "big", podtest.GPU("main", 1, "12000", 0)), 100)
	k, req := device.RefOf(big), mustReq(t, c, big)
	refs := map[string]device.PodRef{"a": device.RefOf(a), "b": device.RefOf(b)}
	removed := func(pods ...string) map[device.PodRef]struct{} {
		m := map[device.PodRef]struct{}{}
		for _, p := range pods {
			m[refs[p]] = struct{}{}
		}
		return m
	}
	nominated := podtest.Pending("p", "nominated", podtest.GPU("main", 1, "6000", 0))
	added := AddedPod{Ref: device.RefOf(nominated), Req: mustReq(t, c, nominated)}
	for _, tc := range []struct {
		name   string
		change *NodeChange
		fits   bool
	}{
		{"no change: 6576 MiB free", nil, false},
		{"b removed: 14576 free", &NodeChange{Removed: removed("b")}, true},
		{"a removed: 16576 free", &NodeChange{Removed: removed("a")}, true},
		{"a removed, a nominated 6000 MiB pod added: 10576 free", &NodeChange{Removed: removed("a"), Added: []AddedPod{added}}, false},
		{"both removed, the nominated pod added: 18576 free", &NodeChange{Removed: removed("a", "b"), Added: []AddedPod{added}}, true},
		{"b removed, a (booked there) added: counted once, 14576 free", &NodeChange{Removed: removed("b"), Added: []AddedPod{{Ref: refs["a"], Req: mustReq(t, c, a)}}}, true},
	} {
		err := c.FitWithChange(k, req, 100, "node-1", tc.change)
		if (err == nil) != tc.fits {
			t.Errorf("%s: err %v, want fits %v", tc.name, err, tc.fits)
		}
	}
	if err := c.FitWithChange(k, req, 100, "node-2", nil); err == nil || !strings.Contains(err.Error(), errNoInventory) {
		t.Errorf("a node without an inventory: %v, want %q", err, errNoInventory)
	}
	if u := gpuUse(c, "node-1", 0).MemoryMiB; u != 18000 {
		t.Fatalf("GPU 0 booked %d MiB after the dry runs, want 18000 (untouched)", u)
	}

	// A lower-priority hold is left out, as Filter leaves it out for a pod that outranks it.
	hold := prioritized(podtest.Pending("p", "hold", podtest.GPU("main", 1, "4000", 0)), 10)
	hold.Status.NominatedNodeName = "node-1"
	c.OnPod(hold)
	if _, st, al := c.PodState(device.RefOf(hold)); st != "nominated" || al == nil {
		t.Fatalf("hold: %s %v, want a nomination with a placement", st, al)
	}
	if err := c.FitWithChange(k, req, 100, "node-1", &NodeChange{Removed: removed("b")}); err != nil {
		t.Errorf("b removed, a hold of lower priority (4000) on the node: %v, want fits (the hold is left out)", err)
	}
	if err := c.FitWithChange(k, req, 5, "node-1", &NodeChange{Removed: removed("b")}); err == nil {
		t.Error("b removed, for a pod below the hold's priority: fits, want refused (10576 free)")
	}
	checkInvariants(t, c)
}

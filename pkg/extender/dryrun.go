package extender

import (
	"errors"
	"fmt"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// NodeChange is a hypothetical change of one node's pods, as kube-scheduler's framework makes
// them while it filters a pod: its preemption's dry run (DefaultPreemption's SelectVictimsOnNode
// removes the node's lower-priority pods and adds back those the pod can live with) and its
// nominated pods (RunFilterPluginsWithNominatedPods adds the pods of equal or higher priority
// nominated to the node). Removed are pods whose bookings on the node stop counting; Added are
// pods that count on the node besides its bookings, each with its parsed GPU request.
type NodeChange struct {
	Removed map[device.PodRef]struct{}
	Added   []AddedPod
}

// AddedPod is a pod NodeChange adds to a node: its reference and GPU request.
type AddedPod struct {
	Ref device.PodRef
	Req *device.PodRequest
}

// Empty reports whether the change changes nothing.
func (ch *NodeChange) Empty() bool { return ch == nil || len(ch.Removed) == 0 && len(ch.Added) == 0 }

// FitWithChange is Filter's verdict on node for pod k (request req, priority prio) with change
// applied to the node's bookings: the usage Filter weighs (the pod's own booking and, while
// holds are in force, lower-priority holds left out), less the charge of every booking of
// change.Removed on the node, plus a placement (allocator.Pick, in order) of every pod of
// change.Added that has no booking on the node (one that has is counted already). nil: the pod
// fits. Otherwise the reason: the node's unusability (no inventory, stale, released), an added
// pod that does not fit, or the pod's *allocator.Unfit. It takes the node's lock; the cache is
// not modified.
func (c *Cache) FitWithChange(k device.PodRef, req *device.PodRequest, prio int32, node string, change *NodeChange) error {
	ns := c.node(node)
	if ns == nil {
		return errors.New(errNoInventory)
	}
	own := c.ownBooking(k)
	holds := c.holds.Load() > 0
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if why := c.unusableLocked(ns, c.clock.Now()); why != "" {
		return errors.New(why)
	}
	u, lowered := allocator.NodeUsage(nil), false
	if holds {
		u, lowered = lowerHoldsUsage(ns, own, prio)
	}
	if !lowered {
		u = copyUsage(usageExcluding(ns, own))
	}
	if change != nil {
		for r := range change.Removed {
			if m := ns.members[r]; m != nil && m != own && m.charge != nil {
				u.Sub(m.charge)
			}
		}
		for _, a := range change.Added {
			if m := ns.members[a.Ref]; (m != nil && m.charge != nil) || a.Ref == k || a.Req == nil {
				continue
			}
			alloc, err := allocator.Pick(ns.inv, u, a.Req)
			if err != nil {
				return fmt.Errorf("pod %s nominated to node %s does not fit its GPUs: %w", a.Ref.Exact(), node, err)
			}
			u.Add(allocator.ChargeOf(&alloc))
		}
	}
	return allocator.Fit(ns.inv, u, req)
}

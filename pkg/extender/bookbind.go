package extender

import (
	"fmt"

	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// BindRefusal is a bind the extender refuses: kube-scheduler reports Reason and retries the pod.
type BindRefusal struct{ Reason string }

func (r *BindRefusal) Error() string { return r.Reason }

func refuse(format string, a ...any) error { return &BindRefusal{Reason: fmt.Sprintf(format, a...)} }

// BookForBind is the in-memory part of Bind: it confirms the pod's reservation on node, or moves
// it there (allocator.Pick under the node's lock), and marks the pod in flight. It never waits:
// the device plugin applies each pod's own plan at container creation, so pods in flight on one
// node together cannot take each other's GPUs (case C20). already is true when the pod is
// already bound to node with a plan (a repeated bind). Refusals are *BindRefusal.
func (s *Scheduler) BookForBind(k device.PodRef, req *device.PodRequest, node string) (a *device.Allocation, already bool, err error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, gone := c.gone[k]; gone {
		return nil, false, refuse("pod %s was deleted or has ended", k.Exact())
	}
	b := c.pods[k]
	if b != nil && b.stage != stageReserved && b.stage != stageNominated {
		switch {
		case b.node != node:
			return nil, false, refuse("pod %s is already bound (or being bound) to node %s", k.Exact(), b.node)
		case b.stage == stageBinding:
			return nil, false, refuse("a bind of pod %s to node %s is already in progress", k.Exact(), node)
		}
		return b.planned, true, nil
	}
	if ns := c.node(node); ns != nil {
		// A reservation Filter made before the node's device plugin released its Lease is not
		// confirmed: the kubelet would fail the pod at admission (device.LeaseReleased).
		ns.mu.Lock()
		released := ns.released
		ns.mu.Unlock()
		if released {
			if b != nil {
				c.removeLocked(b)
			}
			return nil, false, refuse("node %s: %s", node, c.nodeUnusable(ns))
		}
	}
	if b != nil && b.node == node && b.planned != nil {
		c.setStageLocked(b, stageBinding)
		klog.V(4).InfoS("Bind confirms the reservation", "pod", k.Exact(), "node", node)
		return b.planned, false, nil
	}
	if b != nil && b.maybeBound {
		return nil, false, refuse("pod %s: its bind to node %s timed out and may still be committed there; it stays booked on %s until the API shows the outcome (at most %s)",
			k.Exact(), b.node, b.node, c.cfg.ReservationTTL)
	}
	if b != nil {
		c.removeLocked(b)
	}
	ns := c.nodeOrNew(node)
	ns.mu.Lock()
	if why := c.unusableLocked(ns, c.clock.Now()); why != "" {
		ns.mu.Unlock()
		return nil, false, refuse("node %s: %s", node, why)
	}
	alloc, perr := allocator.Pick(ns.inv, ns.used, req)
	ns.mu.Unlock()
	if perr != nil {
		return nil, false, refuse("node %s: %v", node, perr)
	}
	nb := c.newBooking(k, node, stageBinding, req)
	nb.planned = &alloc
	c.putLocked(nb)
	klog.V(4).InfoS("Bind booked the pod", "pod", k.Exact(), "node", node, "movedFrom", movedFrom(b))
	return &alloc, false, nil
}

func movedFrom(b *booking) string {
	if b == nil {
		return ""
	}
	return b.node
}

// bindOutcome is what became of a bind's API calls.
type bindOutcome int

const (
	// outcomeBound: the pod is bound to the node (the Binding succeeded, or the informer or a read
	// shows spec.nodeName = node after an error).
	outcomeBound bindOutcome = iota
	// outcomeFailed: the bind definitely failed (the pod is not bound and will not be by this
	// call): the booking is released.
	outcomeFailed
	// outcomeUnknown: the Binding may still be committed (timeout, transport error): the
	// booking goes back to a reservation that stays on its node (booking.maybeBound), which the
	// informer confirms when the pod shows up bound, and Sweep drops after ReservationTTL.
	outcomeUnknown
)

// FinishBind records the outcome of a bind's API calls for a booking made by BookForBind.
func (s *Scheduler) FinishBind(k device.PodRef, node string, o bindOutcome) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.pods[k]
	if b == nil || b.node != node {
		return
	}
	switch o {
	case outcomeBound:
		if b.stage == stageBinding || b.stage == stageReserved {
			c.setStageLocked(b, stagePlanned)
		}
	case outcomeFailed:
		if b.stage == stageBinding {
			c.removeLocked(b)
		}
	case outcomeUnknown:
		if b.stage == stageBinding {
			c.setStageLocked(b, stageReserved)
			b.maybeBound = true
		}
	}
}

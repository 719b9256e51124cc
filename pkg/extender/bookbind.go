package extender

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// BindRefusal is a bind the extender refuses: kube-scheduler reports Reason and retries the pod.
type BindRefusal struct{ Reason string }

func (r *BindRefusal) Error() string { return r.Reason }

func refuse(format string, a ...any) error { return &BindRefusal{Reason: fmt.Sprintf(format, a...)} }

// confusableLocked returns an in-flight pod on ns that the device plugin could confuse with a
// pod of call key key and signature sig (same call key, different signature; case C20), or nil.
// With sameKey (Config.SerializeSameKey) any in-flight pod of the same call key counts, identical
// ones included. None on a node whose device plugin applies each pod's own plan at container
// creation (device.Inventory.OwnPlanAtCreate): nothing there can be confused. Caller holds mu.
func confusableLocked(ns *nodeState, k device.PodRef, key device.CallKey, sig device.Signature, sameKey bool) *booking {
	if ns.ownPlans.Load() {
		return nil
	}
	for _, m := range ns.members {
		if m.key != k && m.inFlight() && m.hasKey && m.callKey == key && (sameKey || m.sig != sig) {
			return m
		}
	}
	return nil
}

// BookForBind is the in-memory part of Bind: it confirms the pod's reservation on node, or moves
// it there (allocator.Pick under the node's lock), and marks the pod in flight. While node has an
// in-flight pod the device plugin could confuse with this one, it waits (in memory, woken at
// once by every pod event, at most cfg.BindWait) and then refuses. already is true when the pod
// is already bound to node with a plan (a repeated bind). Refusals are *BindRefusal.
func (s *Scheduler) BookForBind(ctx context.Context, k device.PodRef, req *device.PodRequest, node string) (a *device.Allocation, already bool, err error) {
	c := s.c
	deadline := c.clock.Now().Add(c.cfg.BindWait)
	key, hasKey := device.KeyOf(req, c.cfg.Resources)
	sig := device.SignatureOf(req)
	for {
		c.mu.Lock()
		if _, gone := c.gone[k]; gone {
			c.mu.Unlock()
			return nil, false, refuse("pod %s was deleted or has ended", k.Exact())
		}
		b := c.pods[k]
		if b != nil && b.stage != stageReserved {
			st, bn, p := b.stage, b.node, b.planned
			c.mu.Unlock()
			switch {
			case bn != node:
				return nil, false, refuse("pod %s is already bound (or being bound) to node %s", k.Exact(), bn)
			case st == stageBinding:
				return nil, false, refuse("a bind of pod %s to node %s is already in progress", k.Exact(), node)
			}
			return p, true, nil
		}
		ns := c.nodeOrNew(node)
		if hasKey {
			if m := confusableLocked(ns, k, key, sig, c.cfg.SerializeSameKey); m != nil {
				ch := c.changed
				c.mu.Unlock()
				left := deadline.Sub(c.clock.Now())
				if left <= 0 {
					return nil, false, refuse("node %s: pod %s/%s is bound there and not yet allocated, with the same first Allocate call (%s)%s; the device plugin could confuse the two, so this pod waits until that one is allocated, deleted or ends (waited %s)",
						node, m.key.Namespace, m.key.Name, key, sameSig(m.sig == sig), c.cfg.BindWait)
				}
				t := c.clock.NewTimer(left)
				select {
				case <-ch:
				case <-t.C():
				case <-ctx.Done():
					t.Stop()
					return nil, false, refuse("bind of pod %s to node %s: %v", k.Exact(), node, ctx.Err())
				}
				t.Stop()
				continue
			}
		}
		if b != nil && b.node == node {
			c.setStageLocked(b, stageBinding)
			p := b.planned
			c.mu.Unlock()
			klog.V(4).InfoS("Bind confirms the reservation", "pod", k.Exact(), "node", node)
			return p, false, nil
		}
		if b != nil && b.maybeBound {
			bn := b.node
			c.mu.Unlock()
			return nil, false, refuse("pod %s: its bind to node %s timed out and may still be committed there; it stays booked on %s until the API shows the outcome (at most %s)",
				k.Exact(), bn, bn, c.cfg.ReservationTTL)
		}
		if b != nil {
			c.removeLocked(b, "")
		}
		ns.mu.Lock()
		if why := c.unusableLocked(ns, c.clock.Now()); why != "" {
			ns.mu.Unlock()
			c.mu.Unlock()
			return nil, false, refuse("node %s: %s", node, why)
		}
		alloc, perr := allocator.Pick(ns.inv, ns.used, req)
		ns.mu.Unlock()
		if perr != nil {
			c.mu.Unlock()
			return nil, false, refuse("node %s: %v", node, perr)
		}
		nb := c.newBooking(k, node, stageBinding, req)
		nb.planned = &alloc
		c.putLocked(nb)
		c.mu.Unlock()
		klog.V(4).InfoS("Bind booked the pod", "pod", k.Exact(), "node", node, "movedFrom", movedFrom(b))
		return &alloc, false, nil
	}
}

// sameSig words whether a waiting bind's pod has the same GPU request as the one it waits behind.
func sameSig(same bool) string {
	if same {
		return " and the same GPU request"
	}
	return " but a different GPU request"
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
			c.removeLocked(b, "")
		}
	case outcomeUnknown:
		if b.stage == stageBinding {
			c.setStageLocked(b, stageReserved)
			b.maybeBound = true
		}
	}
}

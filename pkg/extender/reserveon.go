package extender

import (
	"iter"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// The reservation of a scheduling framework's Reserve (pkg/schedplugin). kube-scheduler built with
// hami-go's plugin picks the node itself (other plugins score too), so the pod's reservation must
// be on exactly that node before the next scheduling cycle starts, while the binding cycle runs
// asynchronously; Bind then confirms it (BookForBind: reserved → binding) as after the
// extender's own Filter. Unreserve undoes only that reservation.

// ReserveOn books pod p (its parsed request req) as a reservation on exactly node: Filter's
// reservation when it is already there, else a new one made as Filter makes it (allocator.Pick
// on the node's current usage, holds of lower priority left out), which replaces the pod's
// previous reservation or nomination hold. It refuses (a *BindRefusal naming the node) when the
// node has no usable inventory (no inventory, stale, released Lease), when the pod is gone,
// being bound, bound, or pinned elsewhere by a bind that may have been committed, and when its
// GPUs no longer fit on node. A refusal may have dropped the pod's previous reservation; the
// caller's Unreserve is then a no-op.
func (s *Scheduler) ReserveOn(p *corev1.Pod, req *device.PodRequest, node string) error {
	c := s.c
	k := device.RefOf(p)
	ns := c.node(node)
	if ns == nil {
		return refuse("node %s: %s", node, errNoInventory)
	}
	ns.mu.Lock()
	why := c.unusableLocked(ns, c.clock.Now())
	ns.mu.Unlock()
	if why != "" {
		return refuse("node %s: %s", node, why)
	}
	if b := c.ownBooking(k); reservedOn(c, b, node) {
		return nil
	}
	c.reserve(k, req, podPriority(p), only(ns), nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, gone := c.gone[k]; gone {
		return refuse("pod %s was deleted or has ended", k.Exact())
	}
	b := c.pods[k]
	switch {
	case b != nil && b.node == node && b.stage == stageReserved && b.planned != nil:
		klog.V(4).InfoS("Reserved on the chosen node", "pod", k.Exact(), "node", node)
		return nil
	case b != nil && b.maybeBound:
		return refuse("pod %s: its bind to node %s timed out and may still be committed there", k.Exact(), b.node)
	case b != nil && b.stage != stageReserved && b.stage != stageNominated:
		return refuse("pod %s is already bound (or being bound) to node %s", k.Exact(), b.node)
	}
	return refuse("node %s: the pod's GPUs no longer fit there", node)
}

// reservedOn reports whether b is a reservation with a plan on node, not pinned by a bind
// (read under c.mu).
func reservedOn(c *Cache, b *booking, node string) bool {
	if b == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pods[b.key] == b && b.node == node && b.stage == stageReserved && b.planned != nil && !b.maybeBound
}

// only yields ns alone.
func only(ns *nodeState) iter.Seq[*nodeState] {
	return func(yield func(*nodeState) bool) { yield(ns) }
}

// Unreserve drops pod k's reservation on node (node "": wherever it is), if that is what the pod
// holds: a reservation (Filter's or ReserveOn's) that no bind pinned. A pod being bound or bound,
// a reservation whose bind may have been committed (maybeBound: the informer settles it) and a
// nomination hold stay. Unlike Release it does not remember the pod as gone: the pod can be
// filtered and reserved again at once. It reports whether it dropped a reservation. Idempotent.
func (c *Cache) Unreserve(k device.PodRef, node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.pods[k]
	if b == nil || (node != "" && b.node != node) || b.stage != stageReserved || b.maybeBound {
		return false
	}
	c.removeLocked(b)
	c.refreshHoldsLocked(b.node)
	klog.V(4).InfoS("Reservation dropped", "pod", k.Exact(), "node", b.node)
	return true
}

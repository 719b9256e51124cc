package extender

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// Holds for preemptors.
//
// A pod that preempted others waits for its victims to terminate. Kubernetes records where it
// waits in status.nominatedNodeName (set by kube-scheduler's preemption, or by the extender's own,
// preemption.go; KEP-5278 lets a component other than kube-scheduler set it), and kube-scheduler
// counts nominated pods in its own filters meanwhile. The extender does the same for GPUs: the
// nomination is a booking (stageNominated) charged with a placement made as if the node's
// terminating lower-priority pods were already gone, so that the share they free is held for the
// preemptor and no other pod takes it. The hold needs no timer of its own: it ends when the pod
// binds (Filter and Bind turn it into a reservation and a binding), when kube-scheduler clears
// the nomination (it does when preemption no longer helps the pod), or when the pod is deleted.

// onPendingLocked applies a pending (unbound) pod's nomination: it places, keeps or drops the
// pod's hold. A reservation or a bind in progress is left alone. Caller holds mu.
func (c *Cache) onPendingLocked(p *corev1.Pod, b *booking) {
	if b != nil && b.stage != stageNominated {
		return
	}
	nom := p.Status.NominatedNodeName
	if b != nil {
		if b.node == nom && p.DeletionTimestamp == nil {
			if b.planned == nil {
				c.refreshHoldsLocked(nom)
			}
			return
		}
		klog.V(4).InfoS("Nomination ended; releasing the hold", "pod", klog.KObj(p), "node", b.node, "nominatedNode", nom)
		c.removeLocked(b)
	}
	if nom == "" || p.DeletionTimestamp != nil {
		return
	}
	k := device.RefOf(p)
	if _, gone := c.gone[k]; gone {
		return
	}
	req, ours, err := c.ParseRequest(p)
	if err != nil || !ours {
		return
	}
	nb := c.newBooking(k, nom, stageNominated, req)
	nb.priority = podPriority(p)
	nb.planned = c.holdPlacement(nb)
	c.putLocked(nb)
	klog.V(3).InfoS("Holding GPUs for a nominated pod", "pod", klog.KObj(p), "node", nom, "placed", nb.planned != nil)
}

// holdPlacement places hold b's request on its node as if the node's terminating pods of lower
// priority were gone (they are the victims making room) and without b's own charge; nil when it
// does not fit even so (yet: victims may not be terminating yet). Other holds stay charged, so
// two preemptors never hold the same share. Caller holds mu, not the node's lock.
func (c *Cache) holdPlacement(b *booking) *device.Allocation {
	ns := c.node(b.node)
	if ns == nil || b.req == nil {
		return nil
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.inv == nil {
		return nil
	}
	a, err := allocator.Pick(ns.inv, withoutLeaving(ns, b, b.priority), b.req)
	if err != nil {
		return nil
	}
	return &a
}

// refreshHoldsLocked places the holds on node that have no placement yet (their victims had
// not started terminating). Caller holds mu, not the node's lock.
func (c *Cache) refreshHoldsLocked(node string) {
	ns := c.node(node)
	if ns == nil {
		return
	}
	ns.mu.Lock()
	var waiting []*booking
	for _, m := range ns.members {
		if m.stage == stageNominated && m.planned == nil {
			waiting = append(waiting, m)
		}
	}
	ns.mu.Unlock()
	for _, b := range waiting {
		if a := c.holdPlacement(b); a != nil {
			nb := *b
			nb.planned = a
			c.putLocked(&nb)
			klog.V(4).InfoS("Hold placed for a nominated pod", "pod", b.key.Exact(), "node", node)
		}
	}
}

func copyUsage(u allocator.NodeUsage) allocator.NodeUsage {
	out := make(allocator.NodeUsage, len(u))
	for k, v := range u {
		out[k] = v
	}
	return out
}

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
// ownpreempt.go; KEP-5278 lets a component other than kube-scheduler set it), and kube-scheduler
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
	if b != nil && b.nominating {
		if nom == "" && p.DeletionTimestamp == nil {
			return // the extender's own nomination, not seen by the informer yet (Nominate)
		}
		b.nominating = false
	}
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

// Nominate holds pod k's share on node at once, before its victims are evicted (the extender's
// own preemption nominates first, as kube-scheduler 1.37's async preemption does): the hold is
// placed as if victims and the node's terminating pods of lower priority were gone, so that a
// victim that exits at once frees a share only k may take. The informer's view of the nomination
// (onPendingLocked) then keeps this hold. False when the pod is gone, bound or being bound.
func (c *Cache) Nominate(k device.PodRef, node string, req *device.PodRequest, prio int32, victims []device.PodRef) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, gone := c.gone[k]; gone {
		return false
	}
	if old := c.pods[k]; old != nil && old.stage != stageReserved && old.stage != stageNominated {
		return false
	}
	ns := c.node(node)
	if ns == nil {
		return false
	}
	b := c.newBooking(k, node, stageNominated, req)
	b.priority, b.nominating = prio, true
	ns.mu.Lock()
	if ns.inv != nil {
		u := withoutLeaving(ns, c.pods[k], prio)
		for _, v := range victims {
			if m := ns.members[v]; m != nil && m.charge != nil && !(m.terminating && m.priority < prio) {
				u.Sub(m.charge)
			}
		}
		if a, err := allocator.Pick(ns.inv, u, req); err == nil {
			b.planned = &a
		}
	}
	ns.mu.Unlock()
	c.putLocked(b)
	klog.V(3).InfoS("Holding GPUs for a pod nominated by the extender's preemption", "pod", k.Exact(), "node", node, "placed", b.planned != nil)
	return true
}

// Unnominate drops the hold Nominate placed for pod k when its nomination could not be written.
func (c *Cache) Unnominate(k device.PodRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.pods[k]; b != nil && b.stage == stageNominated && b.nominating {
		c.removeLocked(b)
		c.refreshHoldsLocked(b.node)
	}
}

// Holds and priority. kube-scheduler counts a nominated pod against a pod being filtered only
// when the nominated pod's priority is equal or higher (addGetPodsWithNominatedPods... in its
// framework: RunFilterPluginsWithNominatedPods): a pod of higher priority ignores a
// lower-priority hold, and may take its share; the outranked hold loses its placement and gets
// one again when room comes (refreshHoldsLocked).

// lowerHoldsUsage returns ns's usage as a pod of priority prio sees it: without own's charge and
// without the holds of lower priority; ok is false when ns has no such hold (the caller reads
// ns.used as before). Caller holds ns.mu.
func lowerHoldsUsage(ns *nodeState, own *booking, prio int32) (allocator.NodeUsage, bool) {
	var u allocator.NodeUsage
	for _, m := range ns.members {
		if m.stage != stageNominated || m.charge == nil || m.priority >= prio || m == own {
			continue
		}
		if u == nil {
			u = usageExcluding(ns, own)
			if own == nil || ns.members[own.key] != own || own.charge == nil {
				u = copyUsage(u) // usageExcluding returned ns.used itself
			}
		}
		u.Sub(m.charge)
	}
	return u, u != nil
}

// outrankHoldsLocked takes the placement from holds on ns of priority below prio while a GPU
// that placed booking b touches is over its capacity once the node's terminating pods are left
// out: a pod of higher priority took the share they held. Lowest priority first. Caller holds mu,
// not the node's lock.
func (c *Cache) outrankHoldsLocked(ns *nodeState, b *booking, prio int32) {
	if c.holds.Load() == 0 || b.charge == nil {
		return
	}
	for {
		ns.mu.Lock()
		var victim *booking
		if over := overCommitted(ns, b); over {
			for _, m := range ns.members {
				if m.stage == stageNominated && m.charge != nil && m.priority < prio && touches(m.charge, b.charge) &&
					(victim == nil || m.priority < victim.priority) {
					victim = m
				}
			}
		}
		ns.mu.Unlock()
		if victim == nil {
			return
		}
		nb := *victim
		nb.planned = nil
		c.putLocked(&nb)
		klog.V(3).InfoS("A pod of higher priority took a nominated pod's share; its hold waits for room", "pod", victim.key.Exact(), "node", ns.name, "by", b.key.Exact())
	}
}

// overCommitted reports whether a GPU b's charge touches is over capacity on ns, leaving out the
// node's terminating pods. Caller holds ns.mu.
func overCommitted(ns *nodeState, b *booking) bool {
	if ns.inv == nil {
		return false
	}
	u := copyUsage(ns.used)
	for _, m := range ns.members {
		if m.terminating && m.charge != nil {
			u.Sub(m.charge)
		}
	}
	for i := range ns.inv.GPUs {
		g := &ns.inv.GPUs[i]
		if _, ok := b.charge[g.UUID]; !ok {
			continue
		}
		x := u[g.UUID]
		if x.MemoryMiB > ns.inv.CapacityMiB(g) || x.Sharers > ns.inv.SplitCount || x.CoresPercent > 100 {
			return true
		}
	}
	return false
}

// touches reports whether charges a and b share a GPU.
func touches(a, b allocator.Charge) bool {
	for g := range a {
		if _, ok := b[g]; ok {
			return true
		}
	}
	return false
}

package extender

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// OnNode applies a Node's inventory annotation (decoded only when it changed, by
// device.NodeInventory: missing → "no inventory from device plugin"; malformed → the decoder's
// error).
func (c *Cache) OnNode(n *corev1.Node) {
	raw, ok := n.Annotations[device.AnnoInventory]
	ns := c.nodeOrNew(n.Name)
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ok && raw == ns.invRaw && (ns.inv != nil || ns.invWhy != errNoInventory) {
		return
	}
	ns.invRaw = raw
	ns.gen++
	inv, why, err := device.NodeInventory(n.Name, raw, ok)
	if err != nil {
		klog.ErrorS(err, "Malformed node inventory", "node", n.Name)
	}
	ns.inv, ns.invWhy = inv, why
	if inv != nil {
		ns.invWhy = inv.Unenforced()
		klog.V(4).InfoS("Node inventory", "node", n.Name, "gpus", len(inv.GPUs), "splitCount", inv.SplitCount)
	}
	ns.refreshCompact()
}

// OnNodeDelete forgets a node's inventory. Bookings of pods on it stay until the pods go.
func (c *Cache) OnNodeDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	ns := c.node(n.Name)
	if ns == nil {
		return
	}
	ns.mu.Lock()
	ns.inv, ns.invRaw, ns.invWhy = nil, "", errNoInventory
	ns.refreshCompact()
	ns.gen++
	ns.mu.Unlock()
}

// OnLease records a device plugin's heartbeat (spec.renewTime, else spec.acquireTime) and
// whether it holds the Lease (device.LeaseReleased: not while it does not serve the kubelet, as
// during its restart; Filter and Bind then refuse the node). When a released Lease is held
// again, the pods Filter refused since the release are requeued (requeue.go).
func (c *Cache) OnLease(l *coordinationv1.Lease) {
	node := device.LeaseNode(l.Name)
	if node == "" || l.Namespace != c.cfg.LeaseNamespace {
		return
	}
	t, released := device.LeaseHeartbeat(l), device.LeaseReleased(l)
	now := c.clock.Now()
	ns := c.nodeOrNew(node)
	ns.mu.Lock()
	was, since := ns.released, ns.releasedAt
	ns.hasLease, ns.leaseTime, ns.released = true, t, released
	if released && !was {
		ns.releasedAt = now
	}
	ns.mu.Unlock()
	switch {
	case released && !was:
		klog.InfoS("Node's device plugin released its Lease (not serving the kubelet): no GPU pod is placed there until it holds it again", "node", node)
	case was && !released:
		klog.InfoS("Node's device plugin holds its Lease again", "node", node, "released", now.Sub(since))
		c.refusals.reopened(since, now)
	}
}

// OnLeaseDelete forgets a heartbeat.
func (c *Cache) OnLeaseDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || device.LeaseNode(l.Name) == "" || l.Namespace != c.cfg.LeaseNamespace {
		return
	}
	if ns := c.node(device.LeaseNode(l.Name)); ns != nil {
		ns.mu.Lock()
		ns.hasLease, ns.released = false, false
		ns.mu.Unlock()
	}
}

// nodeUnusable is unusableLocked taking ns.mu.
func (c *Cache) nodeUnusable(ns *nodeState) string {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return c.unusableLocked(ns, c.clock.Now())
}

// unusableLocked returns why a node cannot take GPU pods at all now (device.NodeUsability: no
// inventory, malformed, no heartbeat, stale, enforcement missing), or "". Caller holds ns.mu.
func (c *Cache) unusableLocked(ns *nodeState, now time.Time) string {
	n := device.NodeLiveness{Node: ns.name, HasInventory: ns.inv != nil, HasLease: ns.hasLease, Heartbeat: ns.leaseTime, Released: ns.released}
	if n.HasInventory {
		n.Unenforced = ns.invWhy
	} else {
		n.InventoryReason = ns.invWhy
	}
	_, why := device.NodeUsability(n, c.cfg.LeaseNamespace, c.cfg.StaleAfter, now)
	return why
}

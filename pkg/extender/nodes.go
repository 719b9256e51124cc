package extender

import (
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// OnNode applies a Node's inventory annotation (decoded only when it changed). Missing →
// "no inventory from device plugin"; malformed → the decoder's error.
func (c *Cache) OnNode(n *corev1.Node) {
	raw, ok := n.Annotations[device.AnnoInventory]
	ns := c.nodeOrNew(n.Name)
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ok && raw == ns.invRaw && (ns.inv != nil || ns.invErr != errNoInventory) {
		return
	}
	ns.invRaw = raw
	ns.gen++
	switch {
	case !ok:
		ns.inv, ns.invErr = nil, errNoInventory
	default:
		inv, err := device.DecodeInventory(raw)
		switch {
		case err != nil:
			ns.inv, ns.invErr = nil, "malformed inventory from device plugin: "+err.Error()
			klog.ErrorS(err, "Malformed node inventory", "node", n.Name)
		case inv.Node != n.Name:
			ns.inv, ns.invErr = nil, "malformed inventory from device plugin: inventory.node: \""+inv.Node+"\" is not this node"
		default:
			ns.inv, ns.invErr = &inv, ""
			klog.V(4).InfoS("Node inventory", "node", n.Name, "gpus", len(inv.GPUs), "splitCount", inv.SplitCount)
		}
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
	ns.inv, ns.invRaw, ns.invErr = nil, "", errNoInventory
	ns.refreshCompact()
	ns.gen++
	ns.mu.Unlock()
}

// leaseNode returns the node a device-plugin Lease belongs to ("" for other Leases).
func leaseNode(l *coordinationv1.Lease) string {
	if !strings.HasPrefix(l.Name, device.LeasePrefix) {
		return ""
	}
	return strings.TrimPrefix(l.Name, device.LeasePrefix)
}

// OnLease records a device plugin's heartbeat (spec.renewTime, else spec.acquireTime).
func (c *Cache) OnLease(l *coordinationv1.Lease) {
	node := leaseNode(l)
	if node == "" || l.Namespace != c.cfg.LeaseNamespace {
		return
	}
	var t time.Time
	if l.Spec.RenewTime != nil {
		t = l.Spec.RenewTime.Time
	} else if l.Spec.AcquireTime != nil {
		t = l.Spec.AcquireTime.Time
	}
	ns := c.nodeOrNew(node)
	ns.mu.Lock()
	ns.hasLease, ns.leaseTime = true, t
	ns.mu.Unlock()
}

// OnLeaseDelete forgets a heartbeat.
func (c *Cache) OnLeaseDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || leaseNode(l) == "" || l.Namespace != c.cfg.LeaseNamespace {
		return
	}
	if ns := c.node(leaseNode(l)); ns != nil {
		ns.mu.Lock()
		ns.hasLease = false
		ns.mu.Unlock()
	}
}

// unusableLocked returns why a node cannot take GPU pods at all now (no inventory, malformed,
// no heartbeat, stale), or "". Caller holds ns.mu.
func (c *Cache) unusableLocked(ns *nodeState, now time.Time) string {
	if ns.inv == nil {
		return ns.invErr
	}
	if !ns.hasLease {
		return "no heartbeat from device plugin (Lease " + c.cfg.LeaseNamespace + "/" + device.LeasePrefix + ns.name + " not found)"
	}
	if now.Sub(ns.leaseTime) > c.cfg.StaleAfter {
		return "inventory stale since " + ns.leaseTime.UTC().Format(time.RFC3339) + " (device plugin Lease not renewed for " + c.cfg.StaleAfter.String() + ")"
	}
	return ""
}

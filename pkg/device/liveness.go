package device

import (
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// The node-usability rule: whether a node can take GPU pods at all now, from its inventory
// annotation and its node agent's liveness Lease. The scheduler extender's Filter refuses an
// unusable node with the reason below (unresolvable), and kubectl hami-go shows the same
// reason; both call these functions.

// Reasons a node cannot take GPU pods, in the words the extender and kubectl hami-go give.
const (
	// ReasonNoInventory: the node has no inventory annotation (no device plugin published one).
	ReasonNoInventory = "no inventory from device plugin"
	// ReasonMalformedInventory prefixes why the node's inventory annotation cannot be used: the
	// decoder's error, or `inventory.node: "<name>" is not this node`.
	ReasonMalformedInventory = "malformed inventory from device plugin: "
)

// Usability is the verdict of the node-usability rule (NodeUsability).
type Usability uint8

// Verdicts of NodeUsability, in the order the rule checks them.
const (
	// Usable: inventory published and the Lease renewed within the stale limit.
	Usable Usability = iota
	// UnusableNoInventory: no inventory annotation.
	UnusableNoInventory
	// UnusableMalformed: the inventory annotation does not decode or names another node.
	UnusableMalformed
	// UnusableNoHeartbeat: an inventory, but no Lease LeasePrefix + node name.
	UnusableNoHeartbeat
	// UnusableStale: the Lease was last renewed longer ago than the stale limit.
	UnusableStale
	// UnusableUnenforced: the node's enforcement is missing (Inventory.Unenforced).
	UnusableUnenforced
	// UnusableReleased: the Lease was released: no device plugin serves the kubelet there now
	// (one stopping, or one started that has not registered yet; LeaseReleased).
	UnusableReleased
)

// NodeInventory reads a node's inventory annotation (AnnoInventory): raw is its value and
// present whether the node has it. It returns the inventory and "", or nil and why the node
// cannot take GPU pods: ReasonNoInventory, or ReasonMalformedInventory followed by the
// decoder's error or by `inventory.node: "<other>" is not this node`. err is the decoder's
// error (nil otherwise), for the caller's log.
func NodeInventory(node, raw string, present bool) (inv *Inventory, reason string, err error) {
	if !present {
		return nil, ReasonNoInventory, nil
	}
	d, err := DecodeInventory(raw)
	switch {
	case err != nil:
		return nil, ReasonMalformedInventory + err.Error(), err
	case d.Node != node:
		return nil, ReasonMalformedInventory + "inventory.node: \"" + d.Node + "\" is not this node", nil
	}
	return &d, "", nil
}

// LeaseNode returns the node whose node-agent liveness Lease is named name (LeasePrefix + node
// name), or "" when name is not such a Lease.
func LeaseNode(name string) string {
	if !strings.HasPrefix(name, LeasePrefix) {
		return ""
	}
	return strings.TrimPrefix(name, LeasePrefix)
}

// LeaseHeartbeat is a liveness Lease's last heartbeat: spec.renewTime, else spec.acquireTime,
// else the zero time.
func LeaseHeartbeat(l *coordinationv1.Lease) time.Time {
	switch {
	case l.Spec.RenewTime != nil:
		return l.Spec.RenewTime.Time
	case l.Spec.AcquireTime != nil:
		return l.Spec.AcquireTime.Time
	}
	return time.Time{}
}

// LeaseReleased reports whether a liveness Lease was released: spec.holderIdentity is the empty
// string (as client-go's leader election releases a Lease; unset reads as held, as every Lease
// written before this rule or by other tools). A device plugin holds its node's Lease (holder =
// its pod's name) only while the
// kubelet has its devices: it releases the Lease before it stops serving the kubelet (a restart,
// a DaemonSet update) and acquires it once the kubelet has the devices again. In between, a pod
// bound to the node would reach a kubelet that has marked the devices unhealthy, and the kubelet
// fails such a pod at admission (UnexpectedAdmissionError) instead of waiting: so no GPU pod is
// placed there. Device plugins of before this rule never release: they hold the Lease throughout.
func LeaseReleased(l *coordinationv1.Lease) bool {
	return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == ""
}

// NodeLiveness is what the node-usability rule reads of one node.
type NodeLiveness struct {
	// Node is the node's name; it names the Lease in the no-heartbeat reason.
	Node string
	// HasInventory is true when the node's inventory decoded (NodeInventory returned one).
	HasInventory bool
	// InventoryReason is NodeInventory's reason when HasInventory is false ("" reads as
	// ReasonNoInventory).
	InventoryReason string
	// HasLease is true when the node's liveness Lease exists.
	HasLease bool
	// Heartbeat is the Lease's LeaseHeartbeat (read only when HasLease).
	Heartbeat time.Time
	// Released is the Lease's LeaseReleased (read only when HasLease).
	Released bool
	// Unenforced is the inventory's Inventory.Unenforced reason: "" when its enforcement is
	// present (or the agent predates the field).
	Unenforced string
}

// NodeUsability is the node-usability rule: whether node n can take GPU pods at now, and
// otherwise why, in this order: no or malformed inventory (n.InventoryReason), no Lease in
// leaseNamespace ("no heartbeat from device plugin (Lease <ns>/hami-go-<node> not found)"), or a
// heartbeat older than staleAfter ("inventory stale since <RFC 3339 UTC> (device plugin Lease
// not renewed for <staleAfter>)"), a released Lease ("device plugin not serving the kubelet
// (Lease <ns>/hami-go-<node> released: starting or restarting)"), or the node's enforcement missing
// (n.Unenforced: "enforcement <mode> missing on the node: <what>"). The reason is "" exactly
// when the verdict is Usable.
func NodeUsability(n NodeLiveness, leaseNamespace string, staleAfter time.Duration, now time.Time) (Usability, string) {
	if !n.HasInventory {
		if strings.HasPrefix(n.InventoryReason, ReasonMalformedInventory) {
			return UnusableMalformed, n.InventoryReason
		}
		return UnusableNoInventory, ReasonNoInventory
	}
	if !n.HasLease {
		return UnusableNoHeartbeat, "no heartbeat from device plugin (Lease " + leaseNamespace + "/" + LeasePrefix + n.Node + " not found)"
	}
	if now.Sub(n.Heartbeat) > staleAfter {
		return UnusableStale, "inventory stale since " + n.Heartbeat.UTC().Format(time.RFC3339) + " (device plugin Lease not renewed for " + staleAfter.String() + ")"
	}
	if n.Released {
		return UnusableReleased, "device plugin not serving the kubelet (Lease " + leaseNamespace + "/" + LeasePrefix + n.Node + " released: starting or restarting)"
	}
	if n.Unenforced != "" {
		return UnusableUnenforced, n.Unenforced
	}
	return Usable, ""
}

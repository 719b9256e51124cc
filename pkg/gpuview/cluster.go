package gpuview

import (
	"fmt"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// cluster is the device-plugin source read as the extender's cache reads it: per node the
// decoded inventory, its liveness and the usage booked by the pods bound to it.
type cluster struct {
	cfg   Config
	now   time.Time
	nodes map[string]*nodeState
	order []string // node names, sorted
}

// nodeState is one node of a cluster.
type nodeState struct {
	name     string
	inv      *device.Inventory
	invErr   string // device.NodeInventory's reason, when inv is nil
	hasLease bool
	lease    time.Time
	released bool // device.LeaseReleased
	used     allocator.NodeUsage
	slices   map[string][]Slice // by GPU UUID
	errors   []string
	cfg      *Config
	now      time.Time
}

// newCluster reads objs; the pod with UID skip (if any) is left out of the usage, as the
// extender leaves a pod's own booking out when it filters that pod.
func newCluster(objs Objects, cfg Config, now time.Time, skip *types.UID) *cluster {
	c := &cluster{cfg: cfg, now: now, nodes: map[string]*nodeState{}}
	for i := range objs.Nodes {
		c.onNode(&objs.Nodes[i])
	}
	for i := range objs.Leases {
		c.onLease(&objs.Leases[i])
	}
	for i := range objs.Pods {
		p := &objs.Pods[i]
		if skip != nil && p.UID == *skip {
			continue
		}
		c.onPod(p)
	}
	for name := range c.nodes {
		c.order = append(c.order, name)
	}
	sort.Strings(c.order)
	for _, ns := range c.nodes {
		for _, s := range ns.slices {
			sort.Slice(s, func(i, j int) bool {
				a, b := s[i], s[j]
				if a.Namespace != b.Namespace {
					return a.Namespace < b.Namespace
				}
				if a.Pod != b.Pod {
					return a.Pod < b.Pod
				}
				return a.Container < b.Container
			})
		}
		sort.Strings(ns.errors)
	}
	return c
}

func (c *cluster) node(name string) *nodeState {
	ns := c.nodes[name]
	if ns == nil {
		ns = &nodeState{name: name, invErr: device.ReasonNoInventory, used: allocator.NodeUsage{}, slices: map[string][]Slice{}, cfg: &c.cfg, now: c.now}
		c.nodes[name] = ns
	}
	return ns
}

// onNode reads the inventory annotation with device.NodeInventory, as the extender's OnNode.
func (c *cluster) onNode(n *corev1.Node) {
	ns := c.node(n.Name)
	raw, ok := n.Annotations[device.AnnoInventory]
	ns.inv, ns.invErr, _ = device.NodeInventory(n.Name, raw, ok)
}

// onLease records a device plugin's heartbeat (spec.renewTime, else spec.acquireTime).
func (c *cluster) onLease(l *coordinationv1.Lease) {
	node := device.LeaseNode(l.Name)
	if l.Namespace != c.cfg.LeaseNamespace || node == "" {
		return
	}
	ns := c.node(node)
	ns.hasLease, ns.lease, ns.released = true, device.LeaseHeartbeat(l), device.LeaseReleased(l)
}

// podAllocation returns the allocation the extender charges a bound pod with: the claimed
// record wins over the planned one; records for another node or that do not decode are
// skipped (and reported in problems). source is "claimed" or "planned"; a is nil when the pod
// has neither.
func podAllocation(p *corev1.Pod) (a *device.Allocation, source string, problems []string) {
	node := p.Spec.NodeName
	for _, k := range []struct{ anno, source string }{{device.AnnoClaimed, "claimed"}, {device.AnnoPlanned, "planned"}} {
		raw, ok := p.Annotations[k.anno]
		if !ok || node == "" {
			continue
		}
		d, err := device.DecodeAllocation(raw)
		if err != nil {
			problems = append(problems, fmt.Sprintf("pod %s/%s: annotation %s: %v", p.Namespace, p.Name, k.anno, err))
			continue
		}
		if d.Node != node {
			problems = append(problems, fmt.Sprintf("pod %s/%s: annotation %s is for node %q, the pod is on %q", p.Namespace, p.Name, k.anno, d.Node, node))
			continue
		}
		if a == nil {
			a, source = &d, k.source
		}
	}
	return a, source, problems
}

// onPod charges a bound, not ended pod's allocation to its node (allocator.ChargeOf, the
// extender's charge) and lists its containers as slices. A terminating pod still holds its GPUs.
func (c *cluster) onPod(p *corev1.Pod) {
	if p.Spec.NodeName == "" || device.PodFinished(p) { // the extender releases a finished pod's GPUs
		return
	}
	a, source, problems := podAllocation(p)
	if a == nil && len(problems) == 0 {
		return
	}
	ns := c.node(p.Spec.NodeName)
	ns.errors = append(ns.errors, problems...)
	if a == nil {
		return
	}
	ns.used.Add(allocator.ChargeOf(a))
	known := map[string]bool{}
	if ns.inv != nil {
		for _, g := range ns.inv.GPUs {
			known[g.UUID] = true
		}
	}
	for _, ca := range a.Containers {
		for _, d := range ca.Devices {
			if ns.inv != nil && !known[d.UUID] {
				ns.errors = append(ns.errors, fmt.Sprintf("pod %s/%s container %q: GPU %s is not in the node's inventory", p.Namespace, p.Name, ca.Name, d.UUID))
			}
			ns.slices[d.UUID] = append(ns.slices[d.UUID], Slice{
				Namespace: p.Namespace, Pod: p.Name, Container: ca.Name, Kind: string(ca.Kind),
				MemoryMiB: d.MemoryMiB, CoresPercent: d.CoresPercent, Source: source,
			})
		}
	}
}

// statusOf names a verdict of the node-usability rule in the view.
func statusOf(u device.Usability) NodeStatus {
	switch u {
	case device.UnusableNoInventory:
		return StatusNoInventory
	case device.UnusableMalformed:
		return StatusMalformed
	case device.UnusableNoHeartbeat:
		return StatusNoHeartbeat
	case device.UnusableStale:
		return StatusStale
	case device.UnusableUnenforced:
		return StatusUnenforced
	case device.UnusableReleased:
		return StatusReleased
	}
	return StatusReady
}

// unusable returns why the extender places no GPU pod on the node now, or StatusReady and ""
// (device.NodeUsability, the rule the extender's Filter calls).
func (ns *nodeState) unusable() (NodeStatus, string) {
	n := device.NodeLiveness{Node: ns.name, HasInventory: ns.inv != nil, InventoryReason: ns.invErr, HasLease: ns.hasLease, Heartbeat: ns.lease, Released: ns.released}
	if ns.inv != nil {
		n.Unenforced = ns.inv.Unenforced()
	}
	u, why := device.NodeUsability(n, ns.cfg.LeaseNamespace, ns.cfg.StaleAfter, ns.now)
	return statusOf(u), why
}

// row renders the node for the view.
func (ns *nodeState) row() Node {
	st, problem := ns.unusable()
	n := Node{Name: ns.name, Mode: ModeDevicePlugin, Status: st, Problem: problem, GPUs: []GPU{}, Errors: ns.errors}
	if ns.hasLease {
		t := ns.lease.UTC()
		n.LeaseRenewTime = &t
	}
	if ns.inv == nil {
		return n
	}
	n.SplitCount, n.MemoryScaling, n.Enforcement = ns.inv.SplitCount, ns.inv.MemoryScaling, ns.inv.Enforcement
	for i := range ns.inv.GPUs {
		g := &ns.inv.GPUs[i]
		u := ns.used[g.UUID]
		health := "Healthy"
		switch {
		case g.MIGEnabled:
			health = "MIG"
		case !g.Healthy:
			health = "Unhealthy"
		}
		n.GPUs = append(n.GPUs, GPU{
			Index: g.Index, UUID: g.UUID, Model: g.Model, Health: health,
			MemoryMiB: g.MemoryMiB, CapacityMiB: ns.inv.CapacityMiB(g),
			BookedMiB: u.MemoryMiB, BookedCoresPercent: u.CoresPercent, Sharers: u.Sharers, Exclusive: u.Exclusive,
			Slices: ns.slices[g.UUID],
		})
	}
	return n
}

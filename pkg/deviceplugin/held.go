package deviceplugin

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

// heldPlaceholder is the GPU UUID of the devices floorDevices adds where the node's pods hold
// more slices than its GPUs have (a GPU gone, MIG turned on): device IDs
// device.SliceID(heldPlaceholder, k), which name no GPU. checkIDs accepts them like any slice
// ID: the kubelet counts the gone GPU's IDs its running pods hold as allocated but no longer
// listed, so a placeholder is free to it and may be handed to a new pod the extender placed on
// the GPUs that remain, whose plan, not the ID, gives it its GPU.
const heldPlaceholder = "hami-go-held"

// floorDevices returns the ListAndWatch list with at least held Healthy devices, and by how many
// slices (a count) the pods hold more than devs offers healthy (0 when they do not).
//
// The kubelet's allocatable of the count resource is the number of Healthy devices the plugin
// lists, and it admits every pod again at its restart against it (k8s.io/kubernetes
// pkg/kubelet/kubelet.go HandlePodAdditions → canAdmitPod; nodeagent.AtLeastHeld): fewer than
// the running pods hold and it refuses, and kills, the youngest of them. So: unhealthy devices
// are listed Healthy, in list order, until held are, and placeholders (heldPlaceholder) are
// added if the list is still short. The device IDs the kubelet picks name no GPU of a pod's (the
// plan does; Allocate), so a slice of an unhealthy GPU listed Healthy places nothing on it; and
// with held Healthy devices and held slices requested, the kubelet admits no new pod beyond the
// ones running. devs is not modified. It is pure.
func floorDevices(devs []*pluginapi.Device, held int64) ([]*pluginapi.Device, int64) {
	healthy := int64(0)
	for _, d := range devs {
		if d.Health == pluginapi.Healthy {
			healthy++
		}
	}
	over := max(held-healthy, 0)
	if over == 0 {
		return devs, 0
	}
	out := make([]*pluginapi.Device, 0, max(int64(len(devs)), held))
	need := over
	for _, d := range devs {
		if d.Health != pluginapi.Healthy && need > 0 {
			d = &pluginapi.Device{ID: d.ID, Health: pluginapi.Healthy, Topology: d.Topology}
			need--
		}
		out = append(out, d)
	}
	for k := 0; need > 0; k++ {
		out = append(out, &pluginapi.Device{ID: device.SliceID(heldPlaceholder, k), Health: pluginapi.Healthy})
		need--
	}
	return out, over
}

// countResource is the count resource's name, whose figure the kubelet takes from ListAndWatch.
func (p *Plugin) countResource() corev1.ResourceName {
	return corev1.ResourceName(p.cfg.Resources.Count)
}

// heldOf returns what the node's pods hold of names (nodeagent.HeldBy over the pods bound to
// the node; SetHeld), 0 each when nothing tells.
func (p *Plugin) heldOf(names ...corev1.ResourceName) nodeagent.NodeResources {
	if p.held == nil {
		return nodeagent.HeldBy(nil, names...)
	}
	return p.held(names...)
}

// SetHeld sets how the plugin learns what the node's pods hold of its resources (PodSync.Held);
// call it before serving. Without it nothing is held and the figures are the GPUs' own.
func (p *Plugin) SetHeld(held func(names ...corev1.ResourceName) nodeagent.NodeResources) {
	p.held = held
}

// PublishedResources are the figures NodeResourcesPublisher publishes: NodeResources, each
// raised to what the node's running pods hold of it (nodeagent.AtLeastHeld; MiB for the memory
// names, percent for the others), so that the kubelet admits them again at its restart; a
// figure raised is recorded for hami_go_node_resource_overcommitted and logged (Overcommitted).
func (p *Plugin) PublishedResources() nodeagent.NodeResources {
	offered := p.NodeResources()
	pub, over := nodeagent.AtLeastHeld(offered, p.heldOf(slices.Sorted(maps.Keys(offered))...))
	p.over.Update(over)
	return pub
}

// listedDevices is the ListAndWatch list (devices) floored at the slices the node's pods hold
// (floorDevices); the shortfall is recorded as the count resource's overcommitment.
func (p *Plugin) listedDevices() []*pluginapi.Device {
	n := p.countResource()
	devs, over := floorDevices(p.devices(), p.heldOf(n)[n])
	p.over.Update(nodeagent.NodeResources{n: over})
	return devs
}

// Overcommitted returns, per resource the plugin offers (the count resource and NodeResources'
// names), how much more the node's running pods hold than its GPUs offer now (a count of slices
// for the count resource, MiB for the memory names, percent for the others; 0 when they offer
// enough): hami_go_node_resource_overcommitted, computed at each scrape.
func (p *Plugin) Overcommitted() nodeagent.NodeResources {
	p.PublishedResources()
	p.listedDevices()
	return p.over.Snapshot()
}

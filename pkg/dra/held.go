package dra

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/nodeagent"
)

// SetHeld sets how the driver learns what the node's pods hold of its synthetic resources
// (nodeagent.NodePods.Held); call it before publishing. Without it nothing is held and the
// figures are the GPUs' own.
func (d *Driver) SetHeld(held func(names ...corev1.ResourceName) nodeagent.NodeResources) {
	d.hmu.Lock()
	defer d.hmu.Unlock()
	d.held = held
}

// PublishedResources are the figures the driver's NodeResourcesPublisher publishes:
// NodeResources, each raised to what the node's running pods hold of it (nodeagent.AtLeastHeld:
// the webhook's figures on their containers, MiB and percent), so that the kubelet admits them
// again at its restart when the node offers less than they hold (a GPU gone, MIG turned on, more
// memory reserved); a figure raised is recorded for hami_go_node_resource_overcommitted and
// logged (Overcommitted). The device plugin does the same (deviceplugin.Plugin.PublishedResources).
func (d *Driver) PublishedResources() nodeagent.NodeResources {
	offered := d.NodeResources()
	d.hmu.Lock()
	held := d.held
	d.hmu.Unlock()
	h := nodeagent.NodeResources{}
	if held != nil {
		h = held(slices.Sorted(maps.Keys(offered))...)
	}
	pub, over := nodeagent.AtLeastHeld(offered, h)
	d.over.Update(over)
	return pub
}

// Overcommitted returns, per synthetic resource, how much more the node's running pods hold than
// its GPUs offer now (MiB, percent; 0 when they offer enough): hami_go_node_resource_overcommitted,
// computed at each scrape.
func (d *Driver) Overcommitted() nodeagent.NodeResources {
	d.PublishedResources()
	return d.over.Snapshot()
}

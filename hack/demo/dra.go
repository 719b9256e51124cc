package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuview"
)

// Modes the demo runs in: the node's GPUs come from the device plugin (inventory annotation,
// allocations on the pods) or from the DRA driver (ResourceSlices, ResourceClaims). The pods the
// demo creates are the same in both: the webhook turns their limits into claims in DRA mode.
const (
	modeDevicePlugin = "deviceplugin"
	modeDRA          = "dra"
)

// clusterView is the node's GPUs and what is booked on them, as `kubectl hami-go` shows it
// (pkg/gpuview: in DRA mode built from ResourceSlices and ResourceClaims).
func (d *demo) clusterView(ctx context.Context) (*gpuview.Node, error) {
	cfg := gpuview.DefaultConfig()
	objs, err := gpuview.List(ctx, d.kube, cfg)
	if err != nil {
		return nil, err
	}
	v := gpuview.Build(objs, cfg, time.Now())
	for i := range v.Nodes {
		if v.Nodes[i].Name == d.node {
			return &v.Nodes[i], nil
		}
	}
	return nil, fmt.Errorf("node %s is not in the view", d.node)
}

// draInventory is the node's GPUs as the DRA driver publishes them (one device per GPU; memory
// is what may be booked, so the scaling factor is 1), in the device plugin's inventory shape.
func draInventory(n *gpuview.Node) (device.Inventory, error) {
	if n.Mode != gpuview.ModeDRA {
		return device.Inventory{}, fmt.Errorf("node %s is in %s mode, not DRA (is the cluster up with HAMI_GO_MODE=dra?)", n.Name, n.Mode)
	}
	inv := device.Inventory{Node: n.Name, SplitCount: n.SplitCount, MemoryScaling: 1}
	for _, g := range n.GPUs {
		inv.GPUs = append(inv.GPUs, device.GPU{UUID: g.UUID, Index: g.Index, Model: g.Model, MemoryMiB: g.CapacityMiB})
	}
	if len(inv.GPUs) == 0 {
		return inv, fmt.Errorf("node %s: the DRA driver publishes no GPU yet", n.Name)
	}
	return inv, nil
}

// draAllocations fills each pod's allocation from the ResourceClaims reserved for it: one
// container (the pod's first, the Ray container) holding every device its claims were allocated,
// and the claim lines the report prints.
func draAllocations(n *gpuview.Node, pods []rayPod) {
	byPod := map[string]*rayPod{}
	for i := range pods {
		byPod[pods[i].pod.Namespace+"/"+pods[i].pod.Name] = &pods[i]
	}
	for _, g := range n.GPUs {
		for _, s := range g.Slices {
			rp := byPod[s.Namespace+"/"+s.Pod]
			if rp == nil || s.Pod == "" {
				continue
			}
			if rp.alloc == nil {
				rp.alloc = &device.Allocation{Node: n.Name, Containers: []device.ContainerAllocation{{Name: rp.pod.Spec.Containers[0].Name, Kind: device.KindApp}}}
			}
			c := &rp.alloc.Containers[0]
			c.Devices = append(c.Devices, device.DeviceGrant{UUID: g.UUID, MemoryMiB: s.MemoryMiB, CoresPercent: s.CoresPercent})
			rp.claims = append(rp.claims, fmt.Sprintf("ResourceClaim %s (request %s): GPU-%d %s, memory %d MiB, cores %d%%", s.Claim, s.Container, g.Index, g.UUID, s.MemoryMiB, s.CoresPercent))
		}
	}
	for i := range pods {
		sort.Strings(pods[i].claims)
	}
}

// fillAllocations sets each pod's allocation: the device plugin's record on the pod, or the DRA
// claims' allocation results.
func (d *demo) fillAllocations(ctx context.Context, pods []rayPod) error {
	if d.mode != modeDRA {
		for i := range pods {
			pods[i].alloc = allocationOf(pods[i].pod)
		}
		return nil
	}
	n, err := d.clusterView(ctx)
	if err != nil {
		return fmt.Errorf("DRA claims of the Ray pods: %w", err)
	}
	draAllocations(n, pods)
	return nil
}

// claimLines is what the report prints under a pod in DRA mode: its claims' allocations, or why
// it has none.
func claimLines(rp rayPod, mode string) []string {
	if mode != modeDRA {
		return nil
	}
	if len(rp.claims) == 0 {
		names := []string{}
		for _, c := range rp.pod.Spec.ResourceClaims {
			names = append(names, c.Name)
		}
		return []string{"resource claims: " + orDash(strings.Join(names, ","))}
	}
	return rp.claims
}

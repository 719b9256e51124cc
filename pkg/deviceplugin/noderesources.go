package deviceplugin

import (
	"maps"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

// NodeResources are the extended resources the device plugin publishes on its node
// (nodeagent.NodeResourcesPublisher): device.ResourceGPUMemory (GPUMemoryMiB, MiB),
// device.ResourceGPUCores (100 percent per GPU the extender may place slices on), and the per-GPU
// names pods ask for slices by (Config.Resources), which the extender manages and
// kube-scheduler's filter ignores (ignoredByScheduler):
//   - Memory: GPUMemoryMiB too, MiB;
//   - MemoryPercent: 100 percent per GPU the extender may place slices on, times the memory
//     scaling where it is above 1 (percentages are of a GPU's physical memory);
//   - Cores: 100 percent per such GPU.
//
// The slice names are published because NodeResourcesFit's queueing hint, unlike its filter,
// compares every extended resource a pod asks for with the node's allocatable, ignored ones
// included (kube-scheduler v1.37, noderesources/fit.go isSchedulableAfterNodeChange calls Fits
// with no ignored resources): on a node without them, no Node change ever makes kube-scheduler
// retry a GPU pod NodeResourcesFit refused (its nodes full, a mode switch under way, a node an
// autoscaler adds), and the pod waits for the scheduler's 5-minute periodic retry. The figures
// are totals over the node's GPUs, so the kubelet's admission, which now counts these names,
// never refuses a pod the extender placed: a container asks for each name per GPU, at most
// what it books on all its GPUs together, and the extender books no GPU beyond its memory
// capacity or 100 percent cores.
func (p *Plugin) NodeResources() nodeagent.NodeResources {
	inv := p.Inventory()
	gpus := int64(0)
	for i := range inv.GPUs {
		if !inv.GPUs[i].MIGEnabled {
			gpus++
		}
	}
	pct := int64(math.Ceil(100 * max(inv.MemoryScaling, 1)))
	mib := p.GPUMemoryMiB()
	n := p.cfg.Resources
	return nodeagent.NodeResources{
		device.ResourceGPUMemory:             mib,
		device.ResourceGPUCores:              gpus * 100,
		corev1.ResourceName(n.Memory):        mib,
		corev1.ResourceName(n.MemoryPercent): gpus * pct,
		corev1.ResourceName(n.Cores):         gpus * 100,
	}
}

// NodeResourceNames are the names NodeResources publishes, sorted, which the device plugin
// withdraws when it leaves its node for good.
func (p *Plugin) NodeResourceNames() []corev1.ResourceName {
	return slices.Sorted(maps.Keys(p.NodeResources()))
}

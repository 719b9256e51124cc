package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/device"
)

// GPUMemoryInterval is how often a node agent re-asserts its node's device.ResourceGPUMemory
// even when no Node event says it changed.
const GPUMemoryInterval = 10 * time.Second

// NodeGPUMemory reads the node's published device.ResourceGPUMemory, MiB, from capacity and
// allocatable (-1 where absent).
func NodeGPUMemory(n *corev1.Node) (capacity, allocatable int64) {
	capacity, allocatable = -1, -1
	if q, ok := n.Status.Capacity[device.ResourceGPUMemory]; ok {
		capacity = q.Value()
	}
	if q, ok := n.Status.Allocatable[device.ResourceGPUMemory]; ok {
		allocatable = q.Value()
	}
	return capacity, allocatable
}

// gpuMemoryPatch is the merge patch of nodes/status that sets capacity and allocatable of
// device.ResourceGPUMemory to mib (a plain integer quantity, MiB).
func gpuMemoryPatch(mib int64) []byte {
	v := strconv.FormatInt(mib, 10)
	b, _ := json.Marshal(map[string]any{"status": map[string]any{
		"capacity":    map[string]string{device.ResourceGPUMemory: v},
		"allocatable": map[string]string{device.ResourceGPUMemory: v},
	}})
	return b
}

// PublishGPUMemory sets the node's capacity and allocatable of device.ResourceGPUMemory to mib
// (nodes/status, a merge patch), only when either differs. The kubelet keeps an extended
// resource it does not manage across its status updates (it copies capacity to allocatable),
// and zeroes it when it re-registers a node whose device-plugin checkpoint is gone
// (kubelet reconcileExtendedResource, ShouldResetExtendedResourceCapacity): the agent's
// GPUMemoryPublisher re-asserts it then. It reports whether it patched.
func PublishGPUMemory(ctx context.Context, c kubernetes.Interface, node string, mib int64) (bool, error) {
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	if cp, al := NodeGPUMemory(n); cp == mib && al == mib {
		return false, nil
	}
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, gpuMemoryPatch(mib), metav1.PatchOptions{}, "status"); err != nil {
		return false, fmt.Errorf("node %s: status %s: %w", node, device.ResourceGPUMemory, err)
	}
	return true, nil
}

// GPUMemoryPublisher keeps a node's device.ResourceGPUMemory at the figure its GPUs offer: at
// start, on every Node event that shows another figure (a kubelet that re-registered and zeroed
// extended resources, anyone else's write), and every Interval.
type GPUMemoryPublisher struct {
	Client kubernetes.Interface
	Node   string
	// MiB is the node's figure now (device.NodeGPUMemoryMiB of the agent's GPUs).
	MiB func() int64
	// Clock ticks Interval (0: GPUMemoryInterval).
	Clock    clock.WithTicker
	Interval time.Duration
}

// Run publishes until ctx ends. It watches only its own Node (field selector metadata.name).
func (p *GPUMemoryPublisher) Run(ctx context.Context) {
	iv := p.Interval
	if iv <= 0 {
		iv = GPUMemoryInterval
	}
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	f := informers.NewSharedInformerFactoryWithOptions(p.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", p.Node).String()
	}))
	check := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok {
			if cp, al := NodeGPUMemory(n); cp != p.MiB() || al != p.MiB() {
				poke()
			}
		}
	}
	_, _ = f.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: check, UpdateFunc: func(_, n any) { check(n) },
	})
	f.Start(ctx.Done())
	defer f.Shutdown()
	t := p.Clock.NewTicker(iv)
	defer t.Stop()
	for {
		mib := p.MiB()
		if done, err := PublishGPUMemory(ctx, p.Client, p.Node, mib); err != nil {
			klog.ErrorS(err, "Publishing the node's GPU memory failed", "node", p.Node, "resource", device.ResourceGPUMemory, "MiB", mib)
		} else if done {
			klog.InfoS("Published the node's GPU memory", "node", p.Node, "resource", device.ResourceGPUMemory, "MiB", mib)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-wake:
		}
	}
}

// WithdrawGPUMemory removes device.ResourceGPUMemory from the node's capacity and allocatable
// (a merge patch of nodes/status setting both to null), for an agent that leaves the node for
// good (CheckRemoval): the node then offers no GPU memory to NodeResourcesFit, quota or
// autoscalers. A node without it, or gone, is no error; an agent of the other mode that starts
// there publishes its own figure (GPUMemoryPublisher re-asserts it on every change of the Node).
func WithdrawGPUMemory(ctx context.Context, c kubernetes.Interface, node string) error {
	b, err := json.Marshal(map[string]any{"status": map[string]any{
		"capacity":    map[string]any{device.ResourceGPUMemory: nil},
		"allocatable": map[string]any{device.ResourceGPUMemory: nil},
	}})
	if err != nil {
		return err
	}
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{}, "status"); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s: withdraw status %s: %w", node, device.ResourceGPUMemory, err)
	}
	return nil
}

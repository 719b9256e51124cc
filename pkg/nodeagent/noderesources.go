package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
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
)

// NodeResourcesInterval is how often a node agent re-asserts its node's extended resources even
// when no Node event says they changed.
const NodeResourcesInterval = 10 * time.Second

// NodeResources are the extended resources a node agent publishes on its node, in status
// capacity and allocatable alike: name → figure, a plain integer quantity in the name's own unit
// (MiB for device.ResourceGPUMemory and the per-GPU memory name, percent for the percentage and
// cores names). The node agents are their only writers on nodes.
type NodeResources map[corev1.ResourceName]int64

// Published reads the node's figure of name from capacity and allocatable (-1 where absent).
func Published(n *corev1.Node, name corev1.ResourceName) (capacity, allocatable int64) {
	capacity, allocatable = -1, -1
	if q, ok := n.Status.Capacity[name]; ok {
		capacity = q.Value()
	}
	if q, ok := n.Status.Allocatable[name]; ok {
		allocatable = q.Value()
	}
	return capacity, allocatable
}

// differs reports whether node n shows another figure than r for any of r's names.
func (r NodeResources) differs(n *corev1.Node) bool {
	for name, v := range r {
		if cp, al := Published(n, name); cp != v || al != v {
			return true
		}
	}
	return false
}

// String lists r sorted by name ("a=1 b=2"), for logs.
func (r NodeResources) String() string {
	s := ""
	for _, name := range slices.Sorted(maps.Keys(r)) {
		if s != "" {
			s += " "
		}
		s += string(name) + "=" + strconv.FormatInt(r[name], 10)
	}
	return s
}

// statusPatch is the merge patch of nodes/status that sets capacity and allocatable of each
// name in set to its figure, and removes (null) each name in drop.
func statusPatch(set NodeResources, drop []corev1.ResourceName) ([]byte, error) {
	list := map[string]any{}
	for name, v := range set {
		list[string(name)] = strconv.FormatInt(v, 10)
	}
	for _, name := range drop {
		list[string(name)] = nil
	}
	return json.Marshal(map[string]any{"status": map[string]any{"capacity": list, "allocatable": list}})
}

// PublishNodeResources sets the node's capacity and allocatable of each of want's names to its
// figure (nodes/status, one merge patch), only when any differs; other resources are left
// alone. The kubelet keeps an extended resource it does not manage across its status updates
// (it copies capacity to allocatable), and zeroes it when it re-registers a node whose
// device-plugin checkpoint is gone (kubelet reconcileExtendedResource,
// ShouldResetExtendedResourceCapacity): the agent's NodeResourcesPublisher re-asserts them
// then. It reports whether it patched.
func PublishNodeResources(ctx context.Context, c kubernetes.Interface, node string, want NodeResources) (bool, error) {
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	if !want.differs(n) {
		return false, nil
	}
	b, err := statusPatch(want, nil)
	if err != nil {
		return false, err
	}
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{}, "status"); err != nil {
		return false, fmt.Errorf("node %s: status %s: %w", node, want, err)
	}
	return true, nil
}

// NodeResourcesPublisher keeps a node's extended resources at the figures its GPUs offer: at
// start, on every Node event that shows another figure (a kubelet that re-registered and zeroed
// extended resources, anyone else's write), and every Interval.
type NodeResourcesPublisher struct {
	Client kubernetes.Interface
	Node   string
	// Want returns the node's figures now.
	Want func() NodeResources
	// Clock ticks Interval (0: NodeResourcesInterval).
	Clock    clock.WithTicker
	Interval time.Duration
}

// Run publishes until ctx ends. It watches only its own Node (field selector metadata.name).
func (p *NodeResourcesPublisher) Run(ctx context.Context) {
	iv := p.Interval
	if iv <= 0 {
		iv = NodeResourcesInterval
	}
	wake := make(chan struct{}, 1)
	f := informers.NewSharedInformerFactoryWithOptions(p.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", p.Node).String()
	}))
	check := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && p.Want().differs(n) {
			select {
			case wake <- struct{}{}:
			default:
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
		want := p.Want()
		if done, err := PublishNodeResources(ctx, p.Client, p.Node, want); err != nil {
			klog.ErrorS(err, "Publishing the node's extended resources failed", "node", p.Node, "resources", want.String())
		} else if done {
			klog.InfoS("Published the node's extended resources", "node", p.Node, "resources", want.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-wake:
		}
	}
}

// WithdrawNodeResources removes names from the node's capacity and allocatable (a merge patch
// of nodes/status setting each to null), for an agent that leaves the node for good
// (CheckRemoval): the node then offers none of them to NodeResourcesFit, quota or autoscalers.
// A node without them, or gone, is no error; an agent of the other mode that starts there
// publishes its own figures (NodeResourcesPublisher re-asserts them on every change of the
// Node).
func WithdrawNodeResources(ctx context.Context, c kubernetes.Interface, node string, names ...corev1.ResourceName) error {
	if len(names) == 0 {
		return nil
	}
	b, err := statusPatch(nil, names)
	if err != nil {
		return err
	}
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, metav1.PatchOptions{}, "status"); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s: withdraw status %v: %w", node, names, err)
	}
	return nil
}

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/dra"
	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/fake"
	"github.com/hami-go/hami-go/pkg/nvml"
)

// benchLabel marks the Nodes and the DeviceClass this program creates.
const benchLabel = "hami-go.io/drapack"

// simNode is one simulated GPU node: hami-go's real DRA driver (pkg/dra.Driver over the fake
// backend's profile, the device order under test) publishing through the kubeletplugin helper's
// own ResourceSlice controller, and a stand-in for the kubelet that prepares a bound pod's
// claims PrepareLag after it sees the binding and unprepares them when the pod is gone. There is
// no kubelet, container or runtime: nothing runs.
type simNode struct {
	name string
	drv  *dra.Driver
	// bookable is each device's memory capacity by device name, MiB.
	bookable map[string]int64

	mu       sync.Mutex
	prepared map[types.UID][]kubeletplugin.NamespacedObject // pod UID -> its prepared claims
	pending  map[types.UID]bool                             // pod UID -> prepare scheduled
}

// ctrlPublisher publishes through a resourceslice.Controller, as the kubeletplugin helper's
// PublishResources does.
type ctrlPublisher struct{ c *resourceslice.Controller }

func (p ctrlPublisher) PublishResources(_ context.Context, r resourceslice.DriverResources) error {
	p.c.Update(&r)
	return nil
}

// nodeObject returns simulated node name's Node: cpu 128, memory 1Ti, 250 pods, and
// hami-go.io/gpu-memory as the DRA driver publishes it (gpuMiB: the sum of its devices' memory
// capacities, MiB), Ready, labelled benchLabel.
func nodeObject(name string, gpuMiB int64) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:       resource.MustParse("128"),
		corev1.ResourceMemory:    resource.MustParse("1Ti"),
		corev1.ResourcePods:      resource.MustParse("250"),
		device.ResourceGPUMemory: *resource.NewQuantity(gpuMiB, resource.DecimalSI),
	}
	now := metav1.Now()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{benchLabel: "true", corev1.LabelHostname: name, corev1.LabelOSStable: "linux"}},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity, Phase: corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "simulated by hack/bench/drapack", LastHeartbeatTime: now, LastTransitionTime: now}}},
	}
}

// newDriver builds node's DRA driver on the fake backend's profile, with its files under dir.
func newDriver(node, profile, dir string, order dra.DeviceOrder, republish time.Duration) (*dra.Driver, error) {
	p, err := fake.ParseProfile(profile)
	if err != nil {
		return nil, err
	}
	f, err := fake.New(node, p)
	if err != nil {
		return nil, err
	}
	cfg := dra.Defaults()
	cfg.NodeName = node
	cfg.CDIDir = filepath.Join(dir, "cdi")
	cfg.PluginDataDir = filepath.Join(dir, "plugin")
	cfg.HAMiCoreLibrary = ""
	cfg.NRISocket = ""
	cfg.PrepareWait = 0
	cfg.DeviceOrder = order
	cfg.RepublishDelay = republish
	return dra.New(cfg, nvml.NewBackend(f.Library(), nvml.Options{Name: "fake"}), dra.Options{})
}

// startNode creates (or updates) the Node object, builds its driver and starts publishing its
// ResourceSlice and republishing on a change of order, until ctx ends.
func startNode(ctx context.Context, cs kubernetes.Interface, cfg Config, name string, order dra.DeviceOrder, dir string) (*simNode, error) {
	// a fresh driver: no checkpoint of an earlier run's prepared claims
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	drv, err := newDriver(name, cfg.Profile, dir, order, cfg.RepublishDelay)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	n := &simNode{name: name, drv: drv, bookable: map[string]int64{}, prepared: map[types.UID][]kubeletplugin.NamespacedObject{}, pending: map[types.UID]bool{}}
	res := drv.Resources()
	for _, d := range res.Pools[name].Slices[0].Devices {
		if len(d.Taints) > 0 {
			return nil, fmt.Errorf("node %s: device %s is tainted (%s): the bench needs healthy, enforced devices", name, d.Name, d.Taints[0].Key)
		}
		c := d.Capacity[draapi.CapacityMemory]
		n.bookable[d.Name] = c.Value.Value() / dra.MiB
	}
	node, err := ensureNode(ctx, cs, nodeObject(name, drv.GPUMemoryMiB()))
	if err != nil {
		return nil, err
	}
	ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: draapi.DriverName, KubeClient: cs, Resources: &res,
		Owner: &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID},
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: start the ResourceSlice controller: %w", name, err)
	}
	context.AfterFunc(ctx, ctrl.Stop)
	drv.SetPublisher(ctrlPublisher{ctrl})
	go drv.RepublishLoop(ctx)
	return n, nil
}

// ensureNode creates n, or updates the existing Node's status, and removes the not-ready taint
// the API server puts on a new Node (no kubelet will ever clear it).
func ensureNode(ctx context.Context, cs kubernetes.Interface, n *corev1.Node) (*corev1.Node, error) {
	got, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		if got, err = cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create node %s: %w", n.Name, err)
		}
	}
	got.Status = n.Status
	if got, err = cs.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("node %s status: %w", n.Name, err)
	}
	if len(got.Spec.Taints) > 0 {
		got.Spec.Taints = nil
		if got, err = cs.CoreV1().Nodes().Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("node %s taints: %w", n.Name, err)
		}
	}
	return got, nil
}

// bound is the kubelet stand-in's reaction to a pod bound to this node: PrepareLag later it
// reads the pod's claims and prepares them with the driver (once per pod).
func (n *simNode) bound(ctx context.Context, cs kubernetes.Interface, lag time.Duration, p *corev1.Pod) {
	n.mu.Lock()
	if n.pending[p.UID] {
		n.mu.Unlock()
		return
	}
	n.pending[p.UID] = true
	n.mu.Unlock()
	time.AfterFunc(lag, func() {
		if err := n.prepare(ctx, cs, p); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Prepare failed", "node", n.name, "pod", klog.KObj(p))
		}
	})
}

func (n *simNode) prepare(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) error {
	cur, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil || cur.UID != p.UID {
		return nil // gone before the kubelet got to it
	}
	var claims []*resourceapi.ResourceClaim
	for _, st := range cur.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			continue
		}
		c, err := cs.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, *st.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("claim %s: %w", *st.ResourceClaimName, err)
		}
		claims = append(claims, c)
	}
	res, err := n.drv.PrepareResourceClaims(ctx, claims)
	if err != nil {
		return err
	}
	var objs []kubeletplugin.NamespacedObject
	for _, c := range claims {
		if r := res[c.UID]; r.Err != nil {
			return fmt.Errorf("claim %s: %w", c.Name, r.Err)
		}
		o := kubeletplugin.NamespacedObject{UID: c.UID}
		o.Namespace, o.Name = c.Namespace, c.Name
		objs = append(objs, o)
	}
	n.mu.Lock()
	n.prepared[p.UID] = objs
	n.mu.Unlock()
	return nil
}

// gone unprepares the claims of a deleted pod (a pod prepared later is unprepared when the
// next gone or idle finds it).
func (n *simNode) gone(ctx context.Context, uid types.UID) {
	n.mu.Lock()
	objs := n.prepared[uid]
	delete(n.prepared, uid)
	delete(n.pending, uid)
	n.mu.Unlock()
	if len(objs) == 0 {
		return
	}
	if _, err := n.drv.UnprepareResourceClaims(ctx, objs); err != nil {
		klog.ErrorS(err, "Unprepare failed", "node", n.name)
	}
}

// unprepareAll unprepares every claim still prepared (pods deleted before their prepare ran).
func (n *simNode) unprepareAll(ctx context.Context) {
	n.mu.Lock()
	uids := make([]types.UID, 0, len(n.prepared))
	for uid := range n.prepared {
		uids = append(uids, uid)
	}
	n.mu.Unlock()
	for _, uid := range uids {
		n.gone(ctx, uid)
	}
	n.mu.Lock()
	n.pending = map[types.UID]bool{}
	n.mu.Unlock()
}

// idle reports whether the driver has nothing prepared.
func (n *simNode) idle() bool { return len(n.drv.Prepared()) == 0 }

// indexOrder is the device names of n's GPUs in index order (the idle published order).
func (n *simNode) indexOrder() []string {
	names := make([]string, 0, len(n.bookable))
	for _, g := range n.drv.GPUs() {
		names = append(names, dra.DeviceName(g.GPU.Index))
	}
	return names
}

// publishedOrder reads n's published device order from the API.
func publishedOrder(ctx context.Context, cs kubernetes.Interface, node string) ([]string, error) {
	l, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + draapi.DriverName})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range l.Items {
		for _, d := range s.Spec.Devices {
			names = append(names, d.Name)
		}
	}
	return names, nil
}

// waitIdleOrder waits until every node's published order is its index order (the drivers have
// republished after the last unprepare), so each burst starts from the same slices.
func waitIdleOrder(ctx context.Context, cs kubernetes.Interface, nodes []*simNode, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		for _, n := range nodes {
			// a prepare that raced with its pod's deletion (the stand-in prepares by a timer)
			n.unprepareAll(ctx)
			got, err := publishedOrder(ctx, cs, n.name)
			if err != nil {
				return err
			}
			if !slices.Equal(got, n.indexOrder()) || !n.idle() {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the ResourceSlices are not back in index order after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

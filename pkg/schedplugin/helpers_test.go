package schedplugin

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/hami-go/hami-go/pkg/device"
)

// fakeHandle is the framework handle New reads: only ClientSet (the rest panics: nil interface).
type fakeHandle struct {
	fwk.Handle
	client kubernetes.Interface
}

func (h fakeHandle) ClientSet() kubernetes.Interface { return h.client }

// fakeNodeInfo is a NodeInfo of which the plugin reads only Node.
type fakeNodeInfo struct {
	fwk.NodeInfo
	node *corev1.Node
}

func (n fakeNodeInfo) Node() *corev1.Node { return n.node }

// cycleState is a CycleState of which the plugin reads only Read and Write (Clone for dry runs).
type cycleState struct {
	fwk.CycleState
	mu sync.Mutex
	m  map[fwk.StateKey]fwk.StateData
}

func newCycleState() *cycleState { return &cycleState{m: map[fwk.StateKey]fwk.StateData{}} }

func (s *cycleState) Read(k fwk.StateKey) (fwk.StateData, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.m[k]; ok {
		return d, nil
	}
	return nil, fwk.ErrNotFound
}

// Clone copies the state as the framework's CycleState.Clone does: each datum's own Clone.
func (s *cycleState) Clone() fwk.CycleState {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := newCycleState()
	for k, d := range s.m {
		c.m[k] = d.Clone()
	}
	return c
}

func (s *cycleState) Write(k fwk.StateKey, d fwk.StateData) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[k] = d
}

// gpuNode returns a node with n GPUs of memMiB each (split count 10) in its inventory
// annotation, and its device plugin's Lease renewed now.
func gpuNode(t testing.TB, name string, n int, memMiB int64) (*corev1.Node, *coordinationv1.Lease) {
	t.Helper()
	inv := device.Inventory{Node: name, SplitCount: 10, MemoryScaling: 1}
	for i := range n {
		inv.GPUs = append(inv.GPUs, device.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i,
			Model: "NVIDIA H100 80GB HBM3", MemoryMiB: memMiB, Healthy: true})
	}
	s, err := device.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{device.AnnoInventory: s}}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: device.LeasePrefix + name},
			Spec: coordinationv1.LeaseSpec{RenewTime: &now}}
}

// env is a plugin built by New over a fake clientset holding nodes (gpuNode) and pods.
type env struct {
	t      testing.TB
	p      *Plugin
	client *fake.Clientset
	nodes  []fwk.NodeInfo
}

// newEnv builds the plugin with args (nil: defaults) over nodes name→GPU memory (one GPU each,
// in the order given by names) and objs, and waits until the extender is ready and knows every
// node's inventory.
func newEnv(t testing.TB, args runtime.Object, names []string, memMiB map[string]int64, objs ...runtime.Object) *env {
	t.Helper()
	e := &env{t: t}
	for _, n := range names {
		node, lease := gpuNode(t, n, 1, memMiB[n])
		objs = append(objs, node, lease)
		e.nodes = append(e.nodes, fakeNodeInfo{node: node})
	}
	e.client = fake.NewClientset(objs...)
	e.client.PrependReactor("create", "pods", e.bindingReactor)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pl, err := New(ctx, args, fakeHandle{client: e.client})
	if err != nil {
		t.Fatal(err)
	}
	e.p = pl.(*Plugin)
	t.Cleanup(func() { _ = e.p.Close() }) // as kube-scheduler closes its plugins: off legacyregistry
	e.eventually("ready with every node's inventory", func() bool {
		if !e.p.Ready() {
			return false
		}
		for _, n := range names {
			if e.p.cache.NodeGPUUsage(n) == nil {
				return false
			}
		}
		return true
	})
	return e
}

// bindingReactor plays the API server's pods/binding as BindingREST does: spec.nodeName and the
// Binding's annotations land on the pod in one update (the fake tracker would refuse the
// subresource).
func (e *env) bindingReactor(a k8stesting.Action) (bool, runtime.Object, error) {
	if a.GetSubresource() != "binding" {
		return false, nil, nil
	}
	b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	obj, err := e.client.Tracker().Get(gvr, b.Namespace, b.Name)
	if err != nil {
		return true, nil, err
	}
	p := obj.(*corev1.Pod).DeepCopy()
	if p.UID != b.UID || p.Spec.NodeName != "" {
		return true, nil, fmt.Errorf("binding %s/%s refused (uid %s, node %q)", b.Namespace, b.Name, p.UID, p.Spec.NodeName)
	}
	p.Spec.NodeName = b.Target.Name
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	for k, v := range b.Annotations {
		p.Annotations[k] = v
	}
	return true, nil, e.client.Tracker().Update(gvr, p, p.Namespace)
}

// create creates pods through the API (Extender.Bind reads them back from there).
func (e *env) create(pods ...*corev1.Pod) {
	e.t.Helper()
	for _, p := range pods {
		if _, err := e.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// preFilter runs PreFilter over every node with a new CycleState.
func (e *env) preFilter(pod *corev1.Pod) (*cycleState, *fwk.Status) {
	st := newCycleState()
	_, s := e.p.PreFilter(context.Background(), st, pod, e.nodes)
	return st, s
}

// filter runs Filter on every node: node name → status (nil: fits).
func (e *env) filter(st *cycleState, pod *corev1.Pod) map[string]*fwk.Status {
	out := map[string]*fwk.Status{}
	for _, n := range e.nodes {
		out[n.Node().Name] = e.p.Filter(context.Background(), st, pod, n)
	}
	return out
}

// gpuMiB is the GPU memory booked on node's GPU 0.
func (e *env) gpuMiB(node string) int64 {
	for _, g := range e.p.cache.NodeGPUUsage(node) {
		return g.Usage.MemoryMiB
	}
	return -1
}

func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// extenderFilterResult is the extender's Filter answer.
type extenderFilterResult = extenderv1.ExtenderFilterResult

var getOpts = metav1.GetOptions{}

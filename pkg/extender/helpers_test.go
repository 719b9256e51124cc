package extender

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
	hmetrics "github.com/hami-go/hami-go/pkg/metrics"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testInventory builds node's inventory: n GPUs of memMiB each, split count split.
func testInventory(node string, n int, memMiB int64, split int) device.Inventory {
	inv := device.Inventory{Node: node, SplitCount: split, MemoryScaling: 1}
	for i := 0; i < n; i++ {
		inv.GPUs = append(inv.GPUs, device.GPU{
			UUID: fmt.Sprintf("GPU-%s-%d", node, i), Index: i, Model: "NVIDIA H100 80GB HBM3",
			MemoryMiB: memMiB, NUMANode: 0, Healthy: true,
		})
	}
	return inv
}

func testNode(t testing.TB, inv device.Inventory) *corev1.Node {
	t.Helper()
	s, err := device.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: inv.Node, Annotations: map[string]string{device.AnnoInventory: s}}}
}

func testLease(node string, renew time.Time) *coordinationv1.Lease {
	mt := metav1.NewMicroTime(renew)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: device.LeasePrefix + node},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &mt},
	}
}

// env is an extender over a fake clientset (unit tests only) with a fake clock and recorder.
type env struct {
	t      testing.TB
	ext    *Extender
	client *fake.Clientset
	clock  *clocktesting.FakeClock
	rec    *record.FakeRecorder
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
	// bindErr, when set, makes the fake Binding fail with it; bindCommits says whether the
	// failed Binding still binds the pod (a timeout after commit).
	mu          sync.Mutex
	bindErr     error
	bindCommits bool
}

func newEnv(t testing.TB, cfg *Config, objs ...runtime.Object) *env {
	t.Helper()
	return newEnvSetup(t, cfg, nil, objs...)
}

// newEnvSetup is newEnv that calls setup (when not nil) on the fake clientset before the
// extender's informers start (to install watch reactors).
func newEnvSetup(t testing.TB, cfg *Config, setup func(*fake.Clientset), objs ...runtime.Object) *env {
	t.Helper()
	c := DefaultConfig()
	if cfg != nil {
		c = *cfg
	}
	e := &env{t: t, client: fake.NewClientset(objs...), clock: clocktesting.NewFakeClock(t0), rec: record.NewFakeRecorder(1000), reg: hmetrics.NewRegistry()} // as cmd/scheduler-extender: with the Go and process collectors
	e.client.PrependReactor("create", "pods", e.fakeBindingReactor)
	if setup != nil {
		setup(e.client)
	}
	ext, err := New(c, e.client, e.rec, e.clock, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.ext = ext
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan error, 1)
	go func() { e.done <- ext.Run(ctx) }()
	t.Cleanup(e.stop)
	deadline := time.Now().Add(30 * time.Second)
	for !ext.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("extender not ready after 30s")
		}
		time.Sleep(time.Millisecond)
	}
	return e
}

func (e *env) stop() {
	if e.cancel != nil {
		e.cancel()
		<-e.done
		e.cancel = nil
	}
}

// fakeBindingReactor plays the API server's pods/binding (unit tests only): like
// BindingREST.setPodHostAndAnnotations it checks the UID, refuses a pod already assigned, and sets
// spec.nodeName and merges the Binding's annotations into the pod's in one update.
func (e *env) fakeBindingReactor(a k8stesting.Action) (bool, runtime.Object, error) {
	if a.GetSubresource() != "binding" {
		return false, nil, nil
	}
	b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
	e.mu.Lock()
	bindErr, commits := e.bindErr, e.bindCommits
	e.mu.Unlock()
	if bindErr != nil && !commits {
		return true, nil, bindErr
	}
	obj, err := e.client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
	if err != nil {
		return true, nil, err
	}
	p := obj.(*corev1.Pod).DeepCopy()
	if p.UID != b.UID {
		return true, nil, fmt.Errorf("uid precondition failed")
	}
	if p.Spec.NodeName != "" {
		return true, nil, fmt.Errorf("pod %s is already assigned to node %q", p.Name, p.Spec.NodeName)
	}
	p.Spec.NodeName = b.Target.Name
	if len(b.Annotations) > 0 && p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	for k, v := range b.Annotations {
		p.Annotations[k] = v
	}
	if err := e.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, p.Namespace); err != nil {
		return true, nil, err
	}
	return true, nil, bindErr
}

func (e *env) create(objs ...runtime.Object) {
	e.t.Helper()
	for _, o := range objs {
		var err error
		switch v := o.(type) {
		case *corev1.Pod:
			_, err = e.client.CoreV1().Pods(v.Namespace).Create(context.Background(), v, metav1.CreateOptions{})
		case *corev1.Node:
			_, err = e.client.CoreV1().Nodes().Create(context.Background(), v, metav1.CreateOptions{})
		case *coordinationv1.Lease:
			_, err = e.client.CoordinationV1().Leases(v.Namespace).Create(context.Background(), v, metav1.CreateOptions{})
		default:
			err = fmt.Errorf("create %T", o)
		}
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) getPod(ns, name string) *corev1.Pod {
	e.t.Helper()
	p, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) updatePod(p *corev1.Pod) {
	e.t.Helper()
	if _, err := e.client.CoreV1().Pods(p.Namespace).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) deletePod(ns, name string) {
	e.t.Helper()
	if err := e.client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// eventually polls cond (informer delivery is asynchronous) for up to 10 s of real time.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitNodes waits until the cache has each node's inventory and Lease.
func (e *env) waitNodes(names ...string) {
	e.t.Helper()
	for _, n := range names {
		eventually(e.t, "node "+n, func() bool {
			ns := e.ext.cache.node(n)
			if ns == nil {
				return false
			}
			ns.mu.Lock()
			defer ns.mu.Unlock()
			return ns.inv != nil && ns.hasLease
		})
	}
}

// schedule runs Filter then Bind on the first fitting node, as kube-scheduler would.
func (e *env) schedule(p *corev1.Pod, nodes []string) (string, error) {
	res := e.ext.sched.Filter(p, nodes)
	if len(*res.NodeNames) == 0 {
		return "", fmt.Errorf("no node fits: %v %v", res.FailedNodes, res.FailedAndUnresolvableNodes)
	}
	scores := e.ext.sched.Prioritize(p, *res.NodeNames)
	best := scores[0]
	for _, s := range scores {
		if s.Score > best.Score {
			best = s
		}
	}
	return best.Host, e.ext.Bind(context.Background(), device.RefOf(p), best.Host)
}

// checkInvariants asserts that no GPU exceeds its split count, memory × scaling or 100% cores,
// and that every node's usage equals the sum of its members' charges.
func checkInvariants(t testing.TB, c *Cache) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodesMu.RLock()
	defer c.nodesMu.RUnlock()
	for name, ns := range c.nodes {
		ns.mu.Lock()
		sum := allocator.NodeUsage{}
		for _, b := range ns.members {
			if b.charge != nil {
				sum.Add(b.charge)
			}
		}
		if ns.inv != nil {
			for i := range ns.inv.GPUs {
				g := &ns.inv.GPUs[i]
				u := ns.used[g.UUID]
				if u.Sharers > ns.inv.SplitCount || u.MemoryMiB > ns.inv.CapacityMiB(g) || u.CoresPercent > 100 {
					ns.mu.Unlock()
					t.Fatalf("node %s GPU %s over capacity: %+v (split %d, %d MiB)", name, g.UUID, u, ns.inv.SplitCount, ns.inv.CapacityMiB(g))
				}
				if sum[g.UUID] != u {
					ns.mu.Unlock()
					t.Fatalf("node %s GPU %s usage %+v != sum of charges %+v", name, g.UUID, u, sum[g.UUID])
				}
			}
		}
		ns.mu.Unlock()
	}
}

func gpuUse(c *Cache, node string, idx int) allocator.GPUUsage {
	for _, g := range c.NodeGPUUsage(node) {
		if g.GPU.Index == idx {
			return g.Usage
		}
	}
	return allocator.GPUUsage{}
}

func plannedOf(t testing.TB, p *corev1.Pod) device.Allocation {
	t.Helper()
	a, err := device.DecodeAllocation(p.Annotations[device.AnnoPlanned])
	if err != nil {
		t.Fatalf("pod %s planned allocation: %v", p.Name, err)
	}
	return a
}

func setupNodes(t testing.TB, invs ...device.Inventory) (objs []runtime.Object, names []string) {
	for _, inv := range invs {
		objs = append(objs, testNode(t, inv), testLease(inv.Node, t0))
		names = append(names, inv.Node)
	}
	return objs, names
}

func metaUpdate() metav1.UpdateOptions { return metav1.UpdateOptions{} }

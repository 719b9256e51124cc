package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/deviceplugin"
)

const (
	// benchLabel marks every simulated node, Lease, ResourceSlice and DeviceClass this program
	// creates.
	benchLabel = "hami-go.io/bench-node"
	// benchTaint keeps every pod but this program's off the simulated nodes.
	benchTaint  = "hami-go.io/bench"
	leaseNS     = "kube-node-lease"
	gpusPerNode = 8
	splitCount  = 10
	gpuMiB      = 81920
)

func nodeName(i int) string { return fmt.Sprintf("bench-node-%04d", i) }

// simGPUs returns the GPUs of simulated node i: 8 H100-like GPUs of 81920 MiB (UUIDs unique
// per node and index).
func simGPUs(i int) []device.GPU {
	gpus := make([]device.GPU, 0, gpusPerNode)
	for g := 0; g < gpusPerNode; g++ {
		gpus = append(gpus, device.GPU{
			UUID:  fmt.Sprintf("GPU-b0000000-%04x-4000-8000-%012x", i, g),
			Index: g, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: gpuMiB, NUMANode: g / 4, Healthy: true,
		})
	}
	return gpus
}

// simEnforcement is the enforcement a simulated node's agent publishes: HAMi-core, present (a
// real node's inventory carries it; one whose enforcement is missing takes no GPU pods).
var simEnforcement = device.Enforcement{Mode: device.EnforcementHAMiCore, Ready: true, Library: "/usr/local/vgpu/libvgpu.so"}

// simNode returns the Node object of simulated node i, as the device plugin publishes a real
// node: 8 H100-like GPUs of 81920 MiB in its inventory annotation (split count 10, HAMi-core
// enforcement present), the GFD-style labels (deviceplugin.NodeLabels: nvidia.com/gpu.product,
// .count, .memory, .replicas, .sharing-strategy), capacity nvidia.com/gpu 80 and the resources of
// deviceplugin.Plugin.NodeResources; plus the bench label and taint.
func simNode(i int) (*corev1.Node, error) {
	name := nodeName(i)
	enf := simEnforcement
	inv := device.Inventory{Node: name, SplitCount: splitCount, MemoryScaling: 1, GPUs: simGPUs(i), Enforcement: &enf}
	enc, err := device.EncodeInventory(inv)
	if err != nil {
		return nil, err
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
		"nvidia.com/gpu":      *resource.NewQuantity(gpusPerNode*splitCount, resource.DecimalSI),
		// what the device plugin publishes (deviceplugin.Plugin.NodeResources): the GPUs'
		// memory, MiB, and the per-GPU slice names' totals
		device.ResourceGPUMemory:       *resource.NewQuantity(gpusPerNode*gpuMiB, resource.DecimalSI),
		"nvidia.com/gpumem":            *resource.NewQuantity(gpusPerNode*gpuMiB, resource.DecimalSI),
		"nvidia.com/gpumem-percentage": *resource.NewQuantity(gpusPerNode*100, resource.DecimalSI),
		"nvidia.com/gpucores":          *resource.NewQuantity(gpusPerNode*100, resource.DecimalSI),
	}
	now := metav1.Now()
	labels := deviceplugin.NodeLabels(&inv, simEnforcement.Mode)
	for k, v := range map[string]string{benchLabel: "true", corev1.LabelHostname: name, corev1.LabelOSStable: "linux"} {
		labels[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      labels,
			Annotations: map[string]string{device.AnnoInventory: enc}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: benchTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity, Phase: corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "simulated by hack/bench/e2esched", LastHeartbeatTime: now, LastTransitionTime: now}},
		},
	}, nil
}

// simLeases returns the kubelet's node Lease and the device plugin's hami-go-<node> Lease.
func simLeases(n *corev1.Node, now time.Time) []*coordinationv1.Lease {
	t := metav1.NewMicroTime(now)
	owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}
	mk := func(name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: leaseNS, Name: name, Labels: map[string]string{benchLabel: "true"}, OwnerReferences: owner},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.Name), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &t},
		}
	}
	return []*coordinationv1.Lease{mk(n.Name), mk(device.LeasePrefix + n.Name)}
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// createNodes creates the simulated nodes (status Ready through the status subresource, the
// not-ready taint removed if the node controller added one) and their Leases.
func createNodes(ctx context.Context, cs kubernetes.Interface, nodes int) error {
	return parallel(ctx, nodes, 32, func(ctx context.Context, i int) error {
		want, err := simNode(i)
		if err != nil {
			return err
		}
		n, err := cs.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", want.Name, err)
		}
		err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur, err := cs.CoreV1().Nodes().Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status = want.Status
			n, err = cs.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("node %s status: %w", want.Name, err)
		}
		for _, l := range simLeases(n, time.Now()) {
			if _, err := cs.CoordinationV1().Leases(leaseNS).Create(ctx, l, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create lease %s: %w", l.Name, err)
			}
		}
		return nil
	})
}

// untaintNodes removes node.kubernetes.io/not-ready (which the node lifecycle controller may add
// before it sees the Ready status) and reports how many nodes are Ready without it.
func untaintNodes(ctx context.Context, cs kubernetes.Interface) (ready int, err error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: benchLabel + "=true"})
	if err != nil {
		return 0, err
	}
	for i := range list.Items {
		n := &list.Items[i]
		kept := n.Spec.Taints[:0]
		for _, t := range n.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady && t.Key != corev1.TaintNodeUnreachable {
				kept = append(kept, t)
			}
		}
		if len(kept) != len(n.Spec.Taints) {
			n.Spec.Taints = kept
			if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
				return 0, fmt.Errorf("untaint node %s: %w", n.Name, err)
			}
			continue
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	return ready, nil
}

// renewLeases renews every simulated node's two Leases each period until ctx ends.
func renewLeases(ctx context.Context, cs kubernetes.Interface, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		list, err := cs.CoordinationV1().Leases(leaseNS).List(ctx, metav1.ListOptions{LabelSelector: benchLabel + "=true"})
		if err != nil {
			klog.ErrorS(err, "Listing bench Leases")
			continue
		}
		now := metav1.NewMicroTime(time.Now())
		// 32 workers: with 8, a loaded API server took over 60 s for the 2,000 Leases and the
		// extender saw a few nodes as stale (3 binds of 10,000 refused in one run).
		_ = parallel(ctx, len(list.Items), 32, func(ctx context.Context, i int) error {
			l := &list.Items[i]
			l.Spec.RenewTime = &now
			if _, err := cs.CoordinationV1().Leases(leaseNS).Update(ctx, l, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
				klog.V(2).InfoS("Renewing Lease", "lease", l.Name, "err", err)
			}
			return nil
		})
	}
}

// deleteAll deletes the bench pods (grace 0: no kubelet will confirm), namespace (with the
// claim templates and claims), Leases, ResourceSlices, DeviceClasses and nodes, and waits until
// the nodes are gone. It runs on a fresh context so it also cleans up after SIGINT.
func deleteAll(cs kubernetes.Interface, ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var errs []error
	if err := deletePods(ctx, cs, ns); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	sel := metav1.ListOptions{LabelSelector: benchLabel + "=true"}
	if err := cs.CoordinationV1().Leases(leaseNS).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, deleteDRA(ctx, cs)...)
	if err := cs.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		errs = append(errs, err)
	}
	for ctx.Err() == nil {
		l, err := cs.CoreV1().Nodes().List(ctx, sel)
		if err == nil && len(l.Items) == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	if len(errs) > 0 {
		return fmt.Errorf("cleanup: %v", errs)
	}
	return ctx.Err()
}

// deletePods force-deletes every pod of ns (grace 0, one call per pod on 32 workers: a
// DeleteCollection of thousands of pods outlasts the API server's request timeout) and waits
// until none is left.
func deletePods(ctx context.Context, cs kubernetes.Interface, ns string) error {
	for {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return err
		}
		if len(l.Items) == 0 {
			return nil
		}
		err = parallel(ctx, len(l.Items), 32, func(ctx context.Context, i int) error {
			err := cs.CoreV1().Pods(ns).Delete(ctx, l.Items[i].Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("delete pods of %s: %w", ns, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pods of %s still there: %w", ns, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

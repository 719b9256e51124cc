package gpuview

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hami-go/hami-go/pkg/device"
)

var t0 = time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)

// inventory is node's inventory: n healthy GPUs of memMiB, split count split.
func inventory(node string, n int, memMiB int64, split int) device.Inventory {
	inv := device.Inventory{Node: node, SplitCount: split, MemoryScaling: 1}
	for i := 0; i < n; i++ {
		inv.GPUs = append(inv.GPUs, device.GPU{UUID: fmt.Sprintf("GPU-%s-%d", node, i), Index: i, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: memMiB, NUMANode: 0, Healthy: true})
	}
	return inv
}

func nodeObj(t testing.TB, inv device.Inventory) corev1.Node {
	t.Helper()
	s, err := device.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: inv.Node, Annotations: map[string]string{device.AnnoInventory: s}}}
}

func rawNode(name, anno string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if anno != "" {
		n.Annotations = map[string]string{device.AnnoInventory: anno}
	}
	return n
}

func lease(node string, renew time.Time) coordinationv1.Lease {
	mt := metav1.NewMicroTime(renew)
	return coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: device.LeasePrefix + node},
		Spec:       coordinationv1.LeaseSpec{RenewTime: &mt},
	}
}

// grant is one container's devices in an allocation: name, kind, then (uuid, MiB, cores) triples.
type grant struct {
	name string
	kind device.ContainerKind
	devs []device.DeviceGrant
}

func dev(uuid string, mib int64, cores int) device.DeviceGrant {
	return device.DeviceGrant{UUID: uuid, MemoryMiB: mib, CoresPercent: cores}
}

// bound returns p bound to node, Running, with the allocation written under anno.
func bound(t testing.TB, p *corev1.Pod, node, anno string, gs ...grant) *corev1.Pod {
	t.Helper()
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	setAlloc(t, p, anno, node, gs...)
	return p
}

func setAlloc(t testing.TB, p *corev1.Pod, anno, node string, gs ...grant) {
	t.Helper()
	a := device.Allocation{Node: node}
	for _, g := range gs {
		a.Containers = append(a.Containers, device.ContainerAllocation{Name: g.name, Kind: g.kind, Devices: g.devs})
	}
	s, err := device.EncodeAllocation(a)
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[anno] = s
}

func pods(ps ...*corev1.Pod) []corev1.Pod {
	out := make([]corev1.Pod, len(ps))
	for i, p := range ps {
		out[i] = *p
	}
	return out
}

// gpuOf returns the view's GPU index i of node name (fails the test when absent).
func gpuOf(t *testing.T, v *View, name string, i int) GPU {
	t.Helper()
	for _, n := range v.Nodes {
		if n.Name == name {
			if i >= len(n.GPUs) {
				t.Fatalf("node %s has %d GPUs, want index %d", name, len(n.GPUs), i)
			}
			return n.GPUs[i]
		}
	}
	t.Fatalf("node %s not in view", name)
	return GPU{}
}

func nodeOf(t *testing.T, v *View, name string) Node {
	t.Helper()
	for _, n := range v.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("node %s not in view", name)
	return Node{}
}

func leases(ls ...coordinationv1.Lease) []coordinationv1.Lease { return ls }

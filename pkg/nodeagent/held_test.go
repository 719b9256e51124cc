package nodeagent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hami-go/hami-go/pkg/device"
)

func heldPod(name string, phase corev1.PodPhase, req map[corev1.ResourceName]int64) *corev1.Pod {
	rl := corev1.ResourceList{}
	for n, v := range req {
		rl[n] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: "n1",
		Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: rl, Limits: rl}}}},
		Status: corev1.PodStatus{Phase: phase}}
}

// Issue 37 item 7: what the node's pods hold is the sum of their effective requests; ended pods
// hold nothing, terminating ones still do.
func TestHeldBy(t *testing.T) {
	mem := corev1.ResourceName("nvidia.com/gpumem")
	gone := heldPod("gone", corev1.PodRunning, map[corev1.ResourceName]int64{mem: 5000})
	now := metav1.Now()
	gone.DeletionTimestamp = &now
	pods := []*corev1.Pod{
		heldPod("a", corev1.PodRunning, map[corev1.ResourceName]int64{mem: 30000, device.ResourceGPUMemory: 30000}),
		heldPod("b", corev1.PodPending, map[corev1.ResourceName]int64{mem: 10000}),
		heldPod("done", corev1.PodSucceeded, map[corev1.ResourceName]int64{mem: 70000}),
		heldPod("failed", corev1.PodFailed, map[corev1.ResourceName]int64{mem: 70000}),
		gone,
	}
	got := HeldBy(pods, mem, device.ResourceGPUMemory, "nvidia.com/gpucores")
	want := NodeResources{mem: 45000, device.ResourceGPUMemory: 30000, "nvidia.com/gpucores": 0}
	if got.String() != want.String() {
		t.Errorf("HeldBy = %s, want %s", got, want)
	}
}

// Issue 37 item 7: the figures published never drop below what the node's running pods hold
// (the kubelet admits them again at its restart against them), the shortfall is reported, and
// a node that offers enough publishes its own figures unchanged.
func TestAtLeastHeld(t *testing.T) {
	const gpu = 81920 // MiB
	tests := []struct {
		name              string
		offered, held     NodeResources
		wantPub, wantOver NodeResources
	}{
		{name: "normal: offered covers held, unchanged",
			offered:  NodeResources{device.ResourceGPUMemory: 8 * gpu, "nvidia.com/gpucores": 800},
			held:     NodeResources{device.ResourceGPUMemory: 3 * gpu, "nvidia.com/gpucores": 250},
			wantPub:  NodeResources{device.ResourceGPUMemory: 8 * gpu, "nvidia.com/gpucores": 800},
			wantOver: NodeResources{device.ResourceGPUMemory: 0, "nvidia.com/gpucores": 0}},
		{name: "nothing held",
			offered:  NodeResources{device.ResourceGPUMemory: gpu},
			held:     NodeResources{},
			wantPub:  NodeResources{device.ResourceGPUMemory: gpu},
			wantOver: NodeResources{device.ResourceGPUMemory: 0}},
		// 2 GPUs, one gone while a pod holds 60000 MiB of it and the other holds 70000 MiB
		{name: "a GPU gone under a pod",
			offered:  NodeResources{device.ResourceGPUMemory: gpu, "nvidia.com/gpumem-percentage": 100, "nvidia.com/gpucores": 100},
			held:     NodeResources{device.ResourceGPUMemory: 130000, "nvidia.com/gpumem-percentage": 0, "nvidia.com/gpucores": 150},
			wantPub:  NodeResources{device.ResourceGPUMemory: 130000, "nvidia.com/gpumem-percentage": 100, "nvidia.com/gpucores": 150},
			wantOver: NodeResources{device.ResourceGPUMemory: 130000 - gpu, "nvidia.com/gpumem-percentage": 0, "nvidia.com/gpucores": 50}},
		// --reserved-memory raised by 4096 MiB per GPU on a full 2-GPU node
		{name: "more reserved memory",
			offered:  NodeResources{device.ResourceGPUMemory: 2 * (gpu - 4096), "nvidia.com/gpumem": 2 * (gpu - 4096)},
			held:     NodeResources{device.ResourceGPUMemory: 2 * gpu, "nvidia.com/gpumem": 2 * gpu},
			wantPub:  NodeResources{device.ResourceGPUMemory: 2 * gpu, "nvidia.com/gpumem": 2 * gpu},
			wantOver: NodeResources{device.ResourceGPUMemory: 8192, "nvidia.com/gpumem": 8192}},
		// MIG turned on on the node's only GPU: it offers nothing, its pod still runs
		{name: "MIG on",
			offered:  NodeResources{device.ResourceGPUMemory: 0, "nvidia.com/gpucores": 0},
			held:     NodeResources{device.ResourceGPUMemory: 20000, "nvidia.com/gpucores": 30},
			wantPub:  NodeResources{device.ResourceGPUMemory: 20000, "nvidia.com/gpucores": 30},
			wantOver: NodeResources{device.ResourceGPUMemory: 20000, "nvidia.com/gpucores": 30}},
		{name: "a held name not offered is not published",
			offered:  NodeResources{device.ResourceGPUMemory: gpu},
			held:     NodeResources{device.ResourceGPUMemory: 10, "other.io/x": 5},
			wantPub:  NodeResources{device.ResourceGPUMemory: gpu},
			wantOver: NodeResources{device.ResourceGPUMemory: 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pub, over := AtLeastHeld(tc.offered, tc.held)
			if pub.String() != tc.wantPub.String() {
				t.Errorf("published %s\nwant      %s", pub, tc.wantPub)
			}
			if over.String() != tc.wantOver.String() {
				t.Errorf("over %s\nwant %s", over, tc.wantOver)
			}
		})
	}
}

// Overcommit keeps each name's latest figure; names not updated keep theirs.
func TestOvercommit(t *testing.T) {
	var o Overcommit
	o.Update(NodeResources{"a": 5, "b": 0})
	o.Update(NodeResources{"c": 1})
	o.Update(NodeResources{"a": 0})
	if got := o.Snapshot().String(); got != "a=0 b=0 c=1" {
		t.Errorf("Snapshot = %s", got)
	}
}

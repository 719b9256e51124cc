package nodeagent

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// NodePods counts what the pods bound to its node hold, as the kubelet counts them at
// re-admission: running and pending pods of this node, not ended ones, not other nodes'.
func TestNodePodsHeld(t *testing.T) {
	pod := func(name, node string, phase corev1.PodPhase, mib string) *corev1.Pod {
		q := corev1.ResourceList{device.ResourceGPUMemory: resource.MustParse(mib), device.ResourceGPUCores: resource.MustParse("50")}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}, Spec: corev1.PodSpec{NodeName: node,
			Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: q, Limits: q}}}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	client := fake.NewClientset(pod("a", "n1", corev1.PodRunning, "30000"), pod("b", "n1", corev1.PodPending, "20000"),
		pod("done", "n1", corev1.PodSucceeded, "40000"))
	n := NewNodePods(client, "n1")
	if got := n.Held(device.ResourceGPUMemory); got[device.ResourceGPUMemory] != 0 {
		t.Fatalf("before Start: %s, want 0", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n.Start(ctx, 10*time.Second)
	got := n.Held(device.ResourceGPUMemory, device.ResourceGPUCores)
	want := NodeResources{device.ResourceGPUMemory: 50000, device.ResourceGPUCores: 100}
	if got.String() != want.String() {
		t.Errorf("Held = %s, want %s", got, want)
	}
	// The node's pods only: the API server filters by the field selector (the fake does not).
	for _, a := range client.Actions() {
		if l, ok := a.(clienttesting.ListAction); ok && l.GetResource().Resource == "pods" {
			if f := l.GetListRestrictions().Fields.String(); f != "spec.nodeName=n1" {
				t.Errorf("pods listed with field selector %q, want spec.nodeName=n1", f)
			}
			return
		}
	}
	t.Error("the pods were never listed")
}

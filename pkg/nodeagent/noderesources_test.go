package nodeagent

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/pkg/device"
)

func testNode() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")},
	}}
}

// case C44: PublishGPUMemory writes capacity and allocatable once, leaves the other resources alone, and
// patches again only when a figure differs.
func TestPublishGPUMemory(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset(testNode())
	for i, want := range []bool{true, false} {
		done, err := PublishGPUMemory(ctx, c, "n1", 655360)
		if err != nil || done != want {
			t.Fatalf("call %d: patched %v err %v, want %v", i, done, err, want)
		}
	}
	n, _ := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if cp, al := NodeGPUMemory(n); cp != 655360 || al != 655360 {
		t.Fatalf("capacity %d allocatable %d, want 655360", cp, al)
	}
	if q := n.Status.Capacity[corev1.ResourceCPU]; q.Value() != 8 {
		t.Fatalf("cpu capacity %s", q.String())
	}
	// a kubelet that re-registers zeroes extended resources
	n.Status.Capacity[device.ResourceGPUMemory] = resource.MustParse("0")
	n.Status.Allocatable[device.ResourceGPUMemory] = resource.MustParse("0")
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if done, err := PublishGPUMemory(ctx, c, "n1", 655360); err != nil || !done {
		t.Fatalf("after a reset: patched %v err %v", done, err)
	}
}

// The publisher restores the figure after a reset without waiting for its interval (the Node
// watch wakes it).
func TestGPUMemoryPublisherRestoresAfterReset(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := fake.NewClientset(testNode())
	clk := clocktesting.NewFakeClock(time.Now()) // never stepped: only the watch wakes the loop
	p := &GPUMemoryPublisher{Client: c, Node: "n1", MiB: func() int64 { return 81920 }, Clock: clk, Interval: time.Hour}
	go p.Run(ctx)
	waitFor := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			n, _ := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			if cp, al := NodeGPUMemory(n); cp == want && al == want {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("figure never became %d", want)
	}
	waitFor(81920)
	n, _ := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	n.Status.Capacity[device.ResourceGPUMemory] = resource.MustParse("0")
	n.Status.Allocatable[device.ResourceGPUMemory] = resource.MustParse("0")
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	waitFor(81920)
}

// Issue 28: an agent leaving its node for good withdraws the node's GPU memory; the other
// resources stay, and a node without it (or gone) is no error.
func TestWithdrawGPUMemory(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")},
	}}
	c := fake.NewClientset(n)
	ctx := context.Background()
	if _, err := PublishGPUMemory(ctx, c, "node-1", 163840); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := WithdrawGPUMemory(ctx, c, "node-1"); err != nil {
			t.Fatalf("withdrawal %d: %v", i+1, err)
		}
	}
	got, _ := c.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if cp, al := NodeGPUMemory(got); cp != -1 || al != -1 {
		t.Errorf("GPU memory after withdrawal: capacity %d, allocatable %d; want none", cp, al)
	}
	if q := got.Status.Capacity[corev1.ResourceCPU]; q.Value() != 8 {
		t.Errorf("cpu capacity %v, want 8 kept", got.Status.Capacity)
	}
	if err := WithdrawGPUMemory(ctx, c, "gone"); err != nil {
		t.Errorf("node gone: %v", err)
	}
}

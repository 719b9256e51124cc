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

// sliceFigures are the device plugin's figures for an 8 x 80 GiB node: GPU memory and the per-GPU
// slice names.
var sliceFigures = NodeResources{device.ResourceGPUMemory: 655360, "nvidia.com/gpumem": 655360, "nvidia.com/gpumem-percentage": 800, "nvidia.com/gpucores": 800}

// case C44: PublishNodeResources writes capacity and allocatable of every name once, leaves the
// other resources alone, and patches again only when a figure differs.
func TestPublishNodeResources(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset(testNode())
	for i, want := range []bool{true, false} {
		done, err := PublishNodeResources(ctx, c, "n1", sliceFigures)
		if err != nil || done != want {
			t.Fatalf("call %d: patched %v err %v, want %v", i, done, err, want)
		}
	}
	n, _ := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	for name, v := range sliceFigures {
		if cp, al := Published(n, name); cp != v || al != v {
			t.Errorf("%s: capacity %d allocatable %d, want %d", name, cp, al, v)
		}
	}
	if q := n.Status.Capacity[corev1.ResourceCPU]; q.Value() != 8 {
		t.Fatalf("cpu capacity %s", q.String())
	}
	// a kubelet that re-registers zeroes extended resources: one of them is enough to patch
	n.Status.Capacity["nvidia.com/gpucores"] = resource.MustParse("0")
	n.Status.Allocatable["nvidia.com/gpucores"] = resource.MustParse("0")
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if done, err := PublishNodeResources(ctx, c, "n1", sliceFigures); err != nil || !done {
		t.Fatalf("after a reset: patched %v err %v", done, err)
	}
	n, _ = c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if cp, al := Published(n, "nvidia.com/gpucores"); cp != 800 || al != 800 {
		t.Errorf("nvidia.com/gpucores after the reset: capacity %d allocatable %d, want 800", cp, al)
	}
	if got := sliceFigures.String(); got != "hami-go.io/gpu-memory=655360 nvidia.com/gpucores=800 nvidia.com/gpumem=655360 nvidia.com/gpumem-percentage=800" {
		t.Errorf("String() = %q", got)
	}
}

// The publisher restores a figure after a reset without waiting for its interval (the Node
// watch wakes it).
func TestNodeResourcesPublisherRestoresAfterReset(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := fake.NewClientset(testNode())
	clk := clocktesting.NewFakeClock(time.Now()) // never stepped: only the watch wakes the loop
	p := &NodeResourcesPublisher{Client: c, Node: "n1", Want: func() NodeResources { return sliceFigures }, Clock: clk, Interval: time.Hour}
	go p.Run(ctx)
	waitFor := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			n, _ := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			if !sliceFigures.differs(n) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("figures never became %s", sliceFigures)
	}
	waitFor()
	n, _ := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	n.Status.Capacity["nvidia.com/gpumem"] = resource.MustParse("0")
	delete(n.Status.Allocatable, "nvidia.com/gpumem")
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	waitFor()
}

// Issue 28: an agent leaving its node for good withdraws the extended resources it names; the
// other resources stay, and a node without them (or gone) is no error.
func TestWithdrawNodeResources(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")},
	}}
	c := fake.NewClientset(n)
	ctx := context.Background()
	if _, err := PublishNodeResources(ctx, c, "node-1", sliceFigures); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := WithdrawNodeResources(ctx, c, "node-1", device.ResourceGPUMemory, "nvidia.com/gpumem", "nvidia.com/gpucores"); err != nil {
			t.Fatalf("withdrawal %d: %v", i+1, err)
		}
	}
	got, _ := c.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	for _, name := range []corev1.ResourceName{device.ResourceGPUMemory, "nvidia.com/gpumem", "nvidia.com/gpucores"} {
		if cp, al := Published(got, name); cp != -1 || al != -1 {
			t.Errorf("%s after withdrawal: capacity %d, allocatable %d; want none", name, cp, al)
		}
	}
	if cp, al := Published(got, "nvidia.com/gpumem-percentage"); cp != 800 || al != 800 {
		t.Errorf("a name not withdrawn: capacity %d, allocatable %d; want 800 kept", cp, al)
	}
	if q := got.Status.Capacity[corev1.ResourceCPU]; q.Value() != 8 {
		t.Errorf("cpu capacity %v, want 8 kept", got.Status.Capacity)
	}
	if err := WithdrawNodeResources(ctx, c, "gone", device.ResourceGPUMemory); err != nil {
		t.Errorf("node gone: %v", err)
	}
}

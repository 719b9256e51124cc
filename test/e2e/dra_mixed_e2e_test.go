//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/dra"
)

// simNode is a Node without a kubelet that the test creates, and a ResourceSlice of driver
// gpu.hami-go.io for it built by the driver's own slice builder (dra.Devices): kube-scheduler
// and the webhook see a second kind of GPU, pods placed there are bound and never run.
const simNode = "hami-sim-a100"

// addSimA100Node creates simNode with two 40 GiB A100s (split count 10) and removes both when
// the test ends.
func (c *Cluster) addSimA100Node(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: simNode, Labels: map[string]string{corev1.LabelHostname: simNode}}}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", simNode, err)
	}
	t.Cleanup(func() {
		_ = c.Client.ResourceV1().ResourceSlices().Delete(context.Background(), simNode, metav1.DeleteOptions{})
		_ = c.Client.CoreV1().Nodes().Delete(context.Background(), simNode, metav1.DeleteOptions{})
	})
	// hami-go.io/gpu-memory: what the DRA driver would publish for two 40960 MiB GPUs (issue 25).
	room := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("64Gi"),
		device.ResourceGPUMemory: *resource.NewQuantity(2*40960, resource.DecimalSI)}
	// kube-controller-manager's node lifecycle controller writes the new node too: retry on conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := c.Client.CoreV1().Nodes().Get(ctx, simNode, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Capacity, cur.Status.Allocatable = room, room
		cur.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "E2ESimulated", LastHeartbeatTime: metav1.Now()}}
		_, err = c.Client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("node %s status: %v", simNode, err)
	}
	var gpus []dra.GPUInfo
	for i := 0; i < 2; i++ {
		gpus = append(gpus, dra.GPUInfo{GPU: device.GPU{UUID: fmt.Sprintf("GPU-5100a100-0000-0000-0000-00000000000%d", i), Index: i,
			Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, NUMANode: 0, Healthy: true}})
	}
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: simNode},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   draClass,
			NodeName: ptr.To(simNode),
			Pool:     resourceapi.ResourcePool{Name: simNode, Generation: 1, ResourceSliceCount: 1},
			Devices:  dra.Devices(gpus, dra.SliceConfig{SplitCount: 10, MemoryScaling: 1}),
		},
	}
	if _, err := c.Client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ResourceSlice %s: %v", simNode, err)
	}
}

// simTolerations let a pod onto simNode, which no kubelet heartbeats (not-ready and, later,
// unreachable taints).
var simTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists},
}

// TestDRAPodAPIPercentageMixedSizes: with two GPU sizes in the cluster (the node's 80 GiB H100s
// and a simulated node's 40 GiB A100s), `nvidia.com/gpumem-percentage: 50` becomes one claim with
// a firstAvailable alternative per size, and each pod gets 50 % of the GPU it lands on: 20480
// MiB on an A100 (the claim's consumed memory), 40960 MiB on an H100 (the container's limit).
func TestDRAPodAPIPercentageMixedSizes(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	h100 := c.draMemoryMiB(t)
	c.addSimA100Node(t)
	pod := func(name, node string) *corev1.Pod {
		p := gpuPod(ns, name, gpuLimits{count: 1})
		p.Spec.Containers[0].Resources.Limits["nvidia.com/gpumem-percentage"] = resource.MustParse("50")
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
		p.Spec.Tolerations = simTolerations
		return p
	}
	// The webhook learns the new size from its ResourceSlice informer: retry the first pod until
	// its template lists both sizes (a few milliseconds after the slice's creation).
	var alternatives []resourceapi.DeviceSubRequest
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c.CreatePod(t, pod("on-a100", simNode))
		alternatives = c.templateAlternatives(t, ns, "on-a100")
		if len(alternatives) == 2 {
			return true, nil
		}
		c.deleteNow(t, ns, "on-a100")
		return false, nil
	})
	if err != nil {
		t.Fatalf("the webhook's template for a 50%% pod never listed both GPU sizes: %v", alternatives)
	}
	for i, want := range []int64{20480, device.PercentOfMiB(h100, 50)} { // smallest first
		var got resource.Quantity
		if cr := alternatives[i].Capacity; cr != nil {
			got = cr.Requests["memory"]
		}
		if got.Value()>>20 != want {
			t.Errorf("alternative %d (%s) asks %s memory, want %d MiB", i, alternatives[i].Name, got.String(), want)
		}
	}
	c.CreatePod(t, pod("on-h100", c.NodeName))

	p := c.waitBound(t, ns, "on-a100", 2*time.Minute)
	res := c.podAllocation(t, p)
	if res.Pool != simNode || !strings.HasPrefix(res.Request, "gpu") {
		t.Errorf("on-a100 allocated %s/%s (request %s), want a device of pool %s", res.Pool, res.Device, res.Request, simNode)
	}
	t.Logf("on-a100: claim allocated %s/%s for request %s, consumed %v", res.Pool, res.Device, res.Request, res.ConsumedCapacity)
	if m, ok := res.ConsumedCapacity["memory"]; !ok || m.Value()>>20 != 20480 {
		t.Errorf("on-a100 consumes memory %v, want 20480 MiB (50 %% of 40960)", res.ConsumedCapacity)
	}
	c.WaitForRunning(t, ns, "on-h100", 2*time.Minute)
	env := c.containerEnv(t, ns, "on-h100", "main")
	t.Logf("on-h100: %s=%s", envMemLimit0, env[envMemLimit0])
	if want := fmt.Sprintf("%dm", device.PercentOfMiB(h100, 50)); env[envMemLimit0] != want {
		t.Errorf("on-h100: %s = %q, want %s (50 %% of %d MiB)", envMemLimit0, env[envMemLimit0], want, h100)
	}
}

// templateAlternatives returns the firstAvailable list of the webhook's template behind the
// pod's one claim.
func (c *Cluster) templateAlternatives(t *testing.T, ns, pod string) []resourceapi.DeviceSubRequest {
	t.Helper()
	p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	templates, _ := podClaims(t, p)
	if len(templates) != 1 {
		t.Fatalf("pod %s: templates %v, want one", pod, templates)
	}
	for _, name := range templates {
		rt, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if reqs := rt.Spec.Spec.Devices.Requests; len(reqs) == 1 {
			return reqs[0].FirstAvailable
		}
	}
	return nil
}

// podAllocation returns the one device result of the pod's one claim (from its status).
func (c *Cluster) podAllocation(t *testing.T, p *corev1.Pod) resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	var res resourceapi.DeviceRequestAllocationResult
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			return false, nil
		}
		rc, err := c.Client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil || rc.Status.Allocation == nil || len(rc.Status.Allocation.Devices.Results) != 1 {
			return false, nil
		}
		res = rc.Status.Allocation.Devices.Results[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: no allocated claim: %v", p.Namespace, p.Name, err)
	}
	return res
}

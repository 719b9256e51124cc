//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hami-go/hami-go/pkg/device"
)

// TestGPUPodThroughExtender: a pod created with the default scheduler and one slice of
// 8000 MiB is switched to hami-go-scheduler by the webhook, placed by the real kube-scheduler
// through the extender (planned annotation), allocated by the real kubelet through the device
// plugin (claimed annotation, same GPU), and its container sees that one GPU with HAMi-core's
// memory limit 8000m.
func TestGPUPodThroughExtender(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	inv := c.inventory(t)
	ns := e2eNamespace(t, c)

	created := c.CreatePod(t, gpuPod(ns, "one-slice", gpuLimits{count: 1, memMiB: 8000}))
	if created.Spec.SchedulerName != device.SchedulerName {
		t.Errorf("schedulerName after admission = %q, want %q (set by the webhook)", created.Spec.SchedulerName, device.SchedulerName)
	}
	p := c.WaitForRunning(t, ns, "one-slice", 2*time.Minute)
	if p.Spec.NodeName != c.NodeName {
		t.Errorf("node %q, want %q", p.Spec.NodeName, c.NodeName)
	}
	planned, claimed := allocations(t, p)
	if planned == nil || claimed == nil {
		t.Fatalf("annotations: planned present=%v claimed present=%v, want both\n%v", planned != nil, claimed != nil, p.Annotations)
	}
	pu, cu := uuids(planned.Container("main")), uuids(claimed.Container("main"))
	if len(pu) != 1 || strings.Join(pu, ",") != strings.Join(cu, ",") {
		t.Errorf("planned GPUs %v, claimed GPUs %v: want the same single GPU", pu, cu)
	}
	if planned.Node != c.NodeName || claimed.Node != c.NodeName {
		t.Errorf("allocation nodes planned=%q claimed=%q, want %q", planned.Node, claimed.Node, c.NodeName)
	}
	known := false
	for _, g := range inv.GPUs {
		known = known || (len(cu) == 1 && g.UUID == cu[0])
	}
	if !known {
		t.Errorf("claimed GPU %v is not in the node's inventory", cu)
	}
	env := c.containerEnv(t, ns, "one-slice", "main")
	if len(cu) != 1 {
		t.Errorf("claimed GPUs %v, want one", cu)
	} else {
		checkGPUEnv(t, "one-slice", env, cu[0], false)
	}
	if got := env[envMemLimit0]; got != "8000m" {
		t.Errorf("%s=%q, want 8000m", envMemLimit0, got)
	}
	if got := env["HAMI_GO_GPU_MEMORY_MIB"]; got != "8000" {
		t.Errorf("HAMI_GO_GPU_MEMORY_MIB=%q, want 8000", got)
	}
	if _, ok := env["CUDA_DEVICE_MEMORY_LIMIT_1"]; ok {
		t.Errorf("CUDA_DEVICE_MEMORY_LIMIT_1 is set for a one-GPU container: %v", env)
	}
	t.Logf("pod on %s, GPU %v, env %v", p.Spec.NodeName, cu, env)
}

// TestWebhookDeniesBadQuantity: the real kube-apiserver calls the webhook, which denies
// gpumem 3000M (3,000,000,000 MiB) with a message naming field and value (case C07).
func TestWebhookDeniesBadQuantity(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t, "webhook")
	ns := e2eNamespace(t, c)
	p := gpuPod(ns, "bad-quantity", gpuLimits{count: 1})
	p.Spec.Containers[0].Resources.Limits[resMemory] = resource.MustParse("3000M")
	_, err := c.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err == nil {
		t.Fatal("pod with gpumem 3000M was admitted; want it denied")
	}
	msg := err.Error()
	// The API server hands the webhook the canonical form (3000M arrives as 3G, case C07), so
	// the message names the field, the value in MiB and what was probably meant.
	for _, want := range []string{"denied the request", "spec.containers[main].resources.limits[nvidia.com/gpumem]: 3G ", "3000000000 MiB", "did you mean 3000Mi"} {
		if !strings.Contains(msg, want) {
			t.Errorf("denial %q lacks %q", msg, want)
		}
	}
	t.Logf("denied: %s", msg)
}

// TestWebhookDeniesPresetNodeName: case C27, a GPU pod with spec.nodeName preset is denied
// with a reason naming the field and the node.
func TestWebhookDeniesPresetNodeName(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t, "webhook")
	ns := e2eNamespace(t, c)
	p := gpuPod(ns, "preset-node", gpuLimits{count: 1, memMiB: 1000})
	p.Spec.NodeName = c.NodeName
	_, err := c.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err == nil {
		t.Fatal("GPU pod with nodeName preset was admitted; want it denied (case C27)")
	}
	msg := err.Error()
	for _, want := range []string{"denied the request", "spec.nodeName", c.NodeName} {
		if !strings.Contains(msg, want) {
			t.Errorf("denial %q lacks %q", msg, want)
		}
	}
	t.Logf("denied: %s", msg)
}

// TestWebhookLeavesNonGPUPod: case C27, a pod without GPU requests keeps default-scheduler,
// its resources and annotations (no patch), and runs.
func TestWebhookLeavesNonGPUPod(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t, "webhook")
	ns := e2eNamespace(t, c)
	p := gpuPod(ns, "plain", gpuLimits{})
	p.Annotations = map[string]string{"e2e/marker": "kept"}
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	got := c.CreatePod(t, p)
	if got.Spec.SchedulerName != corev1.DefaultSchedulerName {
		t.Errorf("schedulerName %q, want %q (no patch)", got.Spec.SchedulerName, corev1.DefaultSchedulerName)
	}
	if len(got.Annotations) != 1 || got.Annotations["e2e/marker"] != "kept" {
		t.Errorf("annotations %v, want only e2e/marker=kept", got.Annotations)
	}
	lim := got.Spec.Containers[0].Resources.Limits
	if len(lim) != 1 || lim.Cpu().String() != "100m" {
		t.Errorf("limits %v, want only cpu=100m", lim)
	}
	run := c.WaitForRunning(t, ns, "plain", 2*time.Minute)
	if planned, claimed := allocations(t, run); planned != nil || claimed != nil {
		t.Errorf("non-GPU pod got allocations: %v", run.Annotations)
	}
	env := c.containerEnv(t, ns, "plain", "main")
	if v, ok := env[envVisible]; ok || env[envCUDAVisible] != "<unset>" {
		t.Errorf("non-GPU pod: %s=%q (set %v), %s=%q; want both unset", envVisible, v, ok, envCUDAVisible, env[envCUDAVisible])
	}
}

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// nodeGPUMemoryWant is the figure the node should carry: in device-plugin mode the sum over the
// inventory's non-MIG GPUs of what each offers (after reserve and scaling); in DRA mode the sum
// of the published devices' memory capacities.
func (c *Cluster) nodeGPUMemoryWant(t *testing.T, dra bool) int64 {
	t.Helper()
	var per []int64
	if !dra {
		inv := c.inventory(t)
		for i := range inv.GPUs {
			if !inv.GPUs[i].MIGEnabled {
				per = append(per, inv.CapacityMiB(&inv.GPUs[i]))
			}
		}
		return device.NodeGPUMemoryMiB(per)
	}
	l, err := c.Client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Items {
		if s.Spec.Driver != draClass || s.Spec.NodeName == nil || *s.Spec.NodeName != c.NodeName {
			continue
		}
		for _, d := range s.Spec.Devices {
			if m, ok := d.Capacity[draapi.CapacityMemory]; ok {
				per = append(per, m.Value.Value()/(1<<20))
			}
		}
	}
	return device.NodeGPUMemoryMiB(per)
}

// waitNodeGPUMemory waits until the node's capacity and allocatable of hami-go.io/gpu-memory are
// both want.
func (c *Cluster) waitNodeGPUMemory(t *testing.T, want int64, timeout time.Duration) {
	t.Helper()
	var cp, al string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		q1, ok1 := n.Status.Capacity[device.ResourceGPUMemory]
		q2, ok2 := n.Status.Allocatable[device.ResourceGPUMemory]
		cp, al = fmt.Sprint(ok1, " ", q1.Value()), fmt.Sprint(ok2, " ", q2.Value())
		return ok1 && ok2 && q1.Value() == want && q2.Value() == want, nil
	})
	if err != nil {
		t.Fatalf("node %s: %s capacity (present, MiB) %s, allocatable %s; want %d MiB in both", c.NodeName, device.ResourceGPUMemory, cp, al, want)
	}
}

// sliceResourceNames are the extended resources the device plugin publishes on its node:
// hami-go.io/gpu-memory and the chart's default per-GPU slice names.
var sliceResourceNames = []corev1.ResourceName{device.ResourceGPUMemory, "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"}

// checkSliceResources checks the per-GPU slice names' totals the device plugin publishes (case
// C49: NodeResourcesFit's queueing hint needs them to retry a GPU pod on a node change):
// nvidia.com/gpumem = the node's GPU memory (mib), -percentage and gpucores = 100 per GPU.
func (c *Cluster) checkSliceResources(t *testing.T, mib int64) {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gpus := int64(len(c.inventory(t).GPUs))
	want := map[corev1.ResourceName]int64{"nvidia.com/gpumem": mib, "nvidia.com/gpumem-percentage": 100 * gpus, "nvidia.com/gpucores": 100 * gpus}
	for name, v := range want {
		cp, al := n.Status.Capacity[name], n.Status.Allocatable[name]
		if cp.Value() != v || al.Value() != v {
			t.Errorf("node %s: %s capacity %s allocatable %s; want %d", c.NodeName, name, cp.String(), al.String(), v)
		}
	}
}

// quotaUsed waits until the quota's status.used of requests.hami-go.io/gpu-memory is want MiB.
func (c *Cluster) waitQuotaUsed(t *testing.T, ns, name string, want int64, timeout time.Duration) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		q, err := c.Client.CoreV1().ResourceQuotas(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if _, ok := q.Status.Hard[device.QuotaResourceGPUMemory]; !ok {
			last = "status.hard not yet set"
			return false, nil
		}
		u := q.Status.Used[device.QuotaResourceGPUMemory]
		last = u.String()
		return u.Value() == want, nil
	})
	if err != nil {
		t.Fatalf("quota %s/%s: used %s = %s, want %d", ns, name, device.QuotaResourceGPUMemory, last, want)
	}
}

// case C44. TestQuotaGPUMemory (issue 25, items 2 and 3), in whichever mode the cluster runs: the node
// carries hami-go.io/gpu-memory = the sum of its GPUs' offered memory; a namespace with a
// ResourceQuota of requests.hami-go.io/gpu-memory: 40000 refuses a pod of 2 GPUs x 30000 MiB
// with the API server's own "exceeded quota" words (the webhook wrote 60000), refuses a
// percentage with the webhook's words, admits 1 x 30000 (a pod that also preset the resource to
// 1 gets 30000), and the quota's used figure returns to 0 when that pod ends.
func TestQuotaGPUMemory(t *testing.T) {
	c := NewCluster(t)
	dra := c.isDRAMode(t)
	var ns string
	if dra {
		c.driverPod(t)
		ns = draNamespace(t, c)
	} else {
		ns = e2eNamespace(t, c)
	}
	want := c.nodeGPUMemoryWant(t, dra)
	if want <= 0 {
		t.Fatalf("node %s offers no GPU memory", c.NodeName)
	}
	c.waitNodeGPUMemory(t, want, time.Minute)
	t.Logf("node %s: %s = %d MiB (dra=%v)", c.NodeName, device.ResourceGPUMemory, want, dra)
	if !dra {
		c.checkSliceResources(t, want)
	}

	ctx := context.Background()
	const quota = "gpu-memory"
	if _, err := c.Client.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: quota, Namespace: ns},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{device.QuotaResourceGPUMemory: resource.MustParse("40000")}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitQuotaUsed(t, ns, quota, 0, time.Minute)
	// the webhook's quota cache sees the new quota (informer): give it a moment
	time.Sleep(2 * time.Second)

	ends := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "sleep 3"}
		return p
	}
	_, err := c.Client.CoreV1().Pods(ns).Create(ctx, ends(gpuPod(ns, "two-x-30000", gpuLimits{count: 2, memMiB: 30000})), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "exceeded quota: "+quota) || !strings.Contains(err.Error(), "requested: "+device.QuotaResourceGPUMemory+"=60k") {
		t.Fatalf("2 x 30000 MiB: err %v, want the API server's \"exceeded quota: %s, requested: %s=60k ...\"", err, quota, device.QuotaResourceGPUMemory)
	}
	t.Logf("2 x 30000 MiB refused: %v", err)

	pct := gpuPod(ns, "half", gpuLimits{count: 1})
	pct.Spec.Containers[0].Resources.Limits["nvidia.com/gpumem-percentage"] = resource.MustParse("50")
	_, err = c.Client.CoreV1().Pods(ns).Create(ctx, pct, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec.containers[main].resources.limits[nvidia.com/gpumem-percentage]: 50: namespace "+ns+" caps GPU memory in MiB (ResourceQuota "+quota) {
		t.Fatalf("50%% under a quota: err %v, want the webhook's refusal naming the field", err)
	}

	one := ends(gpuPod(ns, "one-x-30000", gpuLimits{count: 1, memMiB: 30000}))
	one.Spec.Containers[0].Resources.Limits[device.ResourceGPUMemory] = resource.MustParse("1") // hostile: overwritten
	got := c.CreatePod(t, one)
	if q := got.Spec.Containers[0].Resources.Requests[device.ResourceGPUMemory]; q.Value() != 30000 {
		t.Fatalf("1 x 30000 MiB: request %s = %s, want 30000", device.ResourceGPUMemory, q.String())
	}
	c.waitQuotaUsed(t, ns, quota, 30000, time.Minute)
	c.WaitForPhase(t, ns, "one-x-30000", corev1.PodSucceeded, 2*time.Minute)
	c.waitQuotaUsed(t, ns, quota, 0, time.Minute)
}

// TestQuotaGPUMemoryKubeletRestartMidBurst: GPU pods carry hami-go.io/gpu-memory in their
// requests, which the kubelet's admission counts against the node's allocatable, also when it
// re-admits running pods after a restart. The kubelet zeroes node-status extended resources when
// it re-registers a node whose device-plugin checkpoint is gone (ShouldResetExtendedResourceCapacity);
// this test restarts the kubelet in the middle of a burst of GPU pods and checks that no pod fails
// admission (OutOfhami-go.io/gpu-memory), that the running ones keep running, and that the node
// carries its figure again. It logs whether this kubelet zeroed the figure.
func TestQuotaGPUMemoryKubeletRestartMidBurst(t *testing.T) {
	c := NewCluster(t)
	dra := c.isDRAMode(t)
	var ns string
	if dra {
		c.driverPod(t)
		ns = draNamespace(t, c)
	} else {
		ns = e2eNamespace(t, c)
	}
	want := c.nodeGPUMemoryWant(t, dra)
	c.waitNodeGPUMemory(t, want, time.Minute)
	long := func(name string) *corev1.Pod {
		p := gpuPod(ns, name, gpuLimits{count: 1, memMiB: 2000})
		p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "sleep 3600"}
		return p
	}
	for i := 0; i < 3; i++ {
		c.CreatePod(t, long(fmt.Sprintf("before-%d", i)))
	}
	for i := 0; i < 3; i++ {
		c.WaitForRunning(t, ns, fmt.Sprintf("before-%d", i), 2*time.Minute)
	}
	off := c.kubeletLogSize(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 6; i++ {
			c.CreatePod(t, long(fmt.Sprintf("burst-%d", i)))
			time.Sleep(300 * time.Millisecond)
		}
	}()
	time.Sleep(500 * time.Millisecond)
	c.clusterScript(t, "restart.sh", "restart", "kubelet")
	t.Cleanup(func() { c.waitNodeReady(t, 2*time.Minute) })
	<-done
	c.waitNodeReady(t, time.Minute)
	c.waitNodeGPUMemory(t, want, time.Minute)
	names := []string{"before-0", "before-1", "before-2"}
	for i := 0; i < 6; i++ {
		names = append(names, fmt.Sprintf("burst-%d", i))
	}
	for _, n := range names {
		p := c.WaitForRunning(t, ns, n, 3*time.Minute)
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s: phase %s reason %q message %q", n, p.Status.Phase, p.Status.Reason, p.Status.Message)
		}
	}
	b, err := os.ReadFile(filepath.Join(c.State, "logs", "kubelet.log"))
	if err == nil && int64(len(b)) > off {
		zeroed := strings.Contains(string(b[off:]), "Zero out resource capacity in existing node")
		t.Logf("kubelet restart zeroed extended resources: %v (dra=%v)", zeroed, dra)
	}
}

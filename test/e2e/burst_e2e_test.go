//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// burstSize is the number of pods of the burst tests.
const burstSize = 50

// burstPods returns n pods named <prefix>-<i> with the given GPU limits.
func burstPods(ns, prefix string, n int, g gpuLimits) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = gpuPod(ns, fmt.Sprintf("%s-%02d", prefix, i), g)
	}
	return out
}

// timedBurst creates the pods at once and returns the time until all are Running.
func (c *Cluster) timedBurst(t *testing.T, ns string, pods []*corev1.Pod) ([]corev1.Pod, time.Duration) {
	t.Helper()
	start := time.Now()
	c.createPods(t, pods)
	running := c.waitAllRunning(t, ns, len(pods), 5*time.Minute)
	return running, time.Since(start)
}

// TestBurstOneSlicePods is case C04 end to end: 50 identical one-slice pods (1 GPU, 1000 MiB)
// created at once all run; no GPU holds more MiB than it has or more sharers than the split
// count; every container sees its claimed GPU and its own 1000m limit. The same burst without
// GPU requests is timed too and the ratio logged (target <= 1.3, issue 7).
func TestBurstOneSlicePods(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	inv := c.inventory(t)

	var plain time.Duration
	t.Run("without-gpu", func(t *testing.T) {
		ns := e2eNamespace(t, c)
		_, plain = c.timedBurst(t, ns, burstPods(ns, "plain", burstSize, gpuLimits{}))
		t.Logf("%d pods without GPU requests Running in %v", burstSize, plain.Round(time.Millisecond))
	})

	ns := e2eNamespace(t, c)
	pods, gpu := c.timedBurst(t, ns, burstPods(ns, "slice", burstSize, gpuLimits{count: 1, memMiB: 1000}))
	t.Logf("%d one-slice pods Running in %v", burstSize, gpu.Round(time.Millisecond))
	if plain > 0 {
		t.Logf("burst time ratio GPU/plain = %.2f (target <= 1.3; %v vs %v)", gpu.Seconds()/plain.Seconds(), gpu.Round(time.Millisecond), plain.Round(time.Millisecond))
	}

	use := c.nodeUsage(t)
	checkNotOvercommitted(t, inv, use)
	perGPU := map[string]int{}
	for i := range pods {
		for _, u := range c.checkOwnLimit(t, &pods[i], 1000) {
			perGPU[u]++
		}
	}
	total := 0
	for u, n := range perGPU {
		total += n
		if n > inv.SplitCount {
			t.Errorf("GPU %s: %d of this burst's pods, more than split count %d", u, n, inv.SplitCount)
		}
	}
	if total != burstSize {
		t.Errorf("%d pods with a claimed GPU, want %d", total, burstSize)
	}
	t.Logf("pods per GPU: %v", perGPU)
}

// TestExtenderRestartMidBurst: the scheduler pod (kube-scheduler + extender) is deleted while a
// burst of 30 one-slice pods is being bound; its Deployment starts a new one, whose extender
// rebuilds from the API. Nothing is over-committed and nothing lost: every pod ends Running
// with its own claimed GPU and limit.
func TestExtenderRestartMidBurst(t *testing.T) {
	const n = 30
	c := NewCluster(t)
	c.requireChart(t)
	inv := c.inventory(t)
	ns := e2eNamespace(t, c)
	ctx := context.Background()

	old, err := c.Client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: labelComponent + "=scheduler"})
	if err != nil || len(old.Items) == 0 {
		t.Fatalf("scheduler pods in %s: %v (%d found)", chartNamespace, err, len(old.Items))
	}
	oldUIDs := map[string]bool{}
	for _, p := range old.Items {
		oldUIDs[string(p.UID)] = true
	}

	start := time.Now()
	created := make(chan error, 1)
	go func() { created <- c.createPodsErr(burstPods(ns, "mid", n, gpuLimits{count: 1, memMiB: 1000})) }()
	// Delete the scheduler once some of the burst, but not all, is bound.
	var bound int
	_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		bound = 0
		for _, p := range l.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound >= 5, nil
	})
	zero := int64(0)
	for _, p := range old.Items {
		if err := c.Client.CoreV1().Pods(chartNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatalf("delete scheduler pod %s: %v", p.Name, err)
		}
	}
	t.Logf("deleted the scheduler pod(s) after %v with %d of %d pods bound", time.Since(start).Round(time.Millisecond), bound, n)
	if err := <-created; err != nil {
		t.Fatal(err)
	}

	pods := c.waitAllRunning(t, ns, n, 5*time.Minute)
	t.Logf("all %d pods Running %v after the burst began", n, time.Since(start).Round(time.Millisecond))
	now, err := c.Client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: labelComponent + "=scheduler"})
	if err == nil {
		for _, p := range now.Items {
			if oldUIDs[string(p.UID)] {
				t.Errorf("scheduler pod %s was not replaced", p.Name)
			}
		}
	}
	checkNotOvercommitted(t, inv, c.nodeUsage(t))
	for i := range pods {
		c.checkOwnLimit(t, &pods[i], 1000)
	}
}

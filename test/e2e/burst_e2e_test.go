//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

// timedBurst waits for the node to be quiet (waitNodeQuiet), creates the pods at once and
// returns the time until all are Running.
func (c *Cluster) timedBurst(t *testing.T, ns string, pods []*corev1.Pod) ([]corev1.Pod, time.Duration) {
	t.Helper()
	c.waitNodeQuiet(t, 3*time.Minute)
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

// TestExtenderRestartMidBurst: the extender process (the extender container of the scheduler
// pod, found by its container ID in /proc/<pid>/cgroup) is killed with SIGKILL while a burst of
// 30 one-slice pods is being bound; the kubelet restarts the container and the new extender
// rebuilds its state from the API while kube-scheduler keeps calling it. Nothing is
// over-committed and nothing lost: every pod ends Running with its own claimed GPU and limit.
func TestExtenderRestartMidBurst(t *testing.T) {
	const n = 30
	c := NewCluster(t)
	c.requireChart(t)
	inv := c.inventory(t)
	ns := e2eNamespace(t, c)
	ctx := context.Background()

	sched, ctrID, restarts := c.extenderContainer(t)
	pid := containerPid(t, ctrID, "scheduler-extender")

	// The burst spans the kill: the first half is created at once and the extender is killed
	// once a few of it are bound; the second half is created right after the kill, so it can
	// only be bound by the restarted extender (ignorable: false; the extender is the binder).
	// Killing at a bound count alone raced the burst: 30 pods bind in about half a second.
	all := burstPods(ns, "mid", n, gpuLimits{count: 1, memMiB: 1000})
	start := time.Now()
	created := make(chan error, 1)
	go func() { created <- c.createPodsErr(all[:n/2]) }()
	var bound int
	_ = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
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
		return bound >= 3, nil
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill extender (pid %d): %v", pid, err)
	}
	killed := time.Now()
	t.Logf("killed the extender (pid %d, pod %s) %v after the burst began, with %d of %d pods bound", pid, sched, killed.Sub(start).Round(time.Millisecond), bound, n)
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if err := c.createPodsErr(all[n/2:]); err != nil {
		t.Fatal(err)
	}

	pods := c.waitAllRunning(t, ns, n, 5*time.Minute)
	t.Logf("all %d pods Running %v after the burst began", n, time.Since(start).Round(time.Millisecond))
	p, err := c.Client.CoreV1().Pods(chartNamespace).Get(ctx, sched, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("scheduler pod %s: %v", sched, err)
	}
	var newStart time.Time
	for _, s := range p.Status.InitContainerStatuses { // the extender is a native sidecar
		if s.Name == "extender" {
			if s.RestartCount <= restarts {
				t.Errorf("extender container restart count %d, want more than %d (was it killed?)", s.RestartCount, restarts)
			}
			if s.State.Running != nil {
				newStart = s.State.Running.StartedAt.Time
			}
		}
	}
	// Condition times have a resolution of one second.
	after := 0
	for i := range pods {
		for _, cond := range pods[i].Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionTrue && !cond.LastTransitionTime.Time.Before(newStart.Truncate(time.Second)) {
				after++
			}
		}
	}
	t.Logf("%d of %d pods were bound after the new extender started (%v)", after, n, newStart.Format(time.TimeOnly))
	if after == 0 {
		t.Errorf("no pod was bound by the restarted extender: the restart did not happen mid-burst")
	}
	checkNotOvercommitted(t, inv, c.nodeUsage(t))
	for i := range pods {
		c.checkOwnLimit(t, &pods[i], 1000)
	}
}

// extenderContainer returns the running scheduler pod's name, its extender container's ID
// (without the runtime prefix) and restart count.
func (c *Cluster) extenderContainer(t testing.TB) (pod, id string, restarts int32) {
	t.Helper()
	l, err := c.Client.CoreV1().Pods(chartNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: labelComponent + "=scheduler"})
	if err != nil {
		t.Fatalf("scheduler pods: %v", err)
	}
	for _, p := range l.Items {
		for _, s := range p.Status.InitContainerStatuses { // the extender is a native sidecar
			if s.Name == "extender" && s.State.Running != nil && s.ContainerID != "" {
				_, cid, _ := strings.Cut(s.ContainerID, "://")
				return p.Name, cid, s.RestartCount
			}
		}
	}
	t.Fatalf("no running extender container in %s", chartNamespace)
	return "", "", 0
}

// containerPid finds the process of container ctrID whose argv[0] ends in prog: its
// /proc/<pid>/cgroup names the container ID (containerd's cgroup path).
func containerPid(t testing.TB, ctrID, prog string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(cg), ctrID) {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv0, _, _ := strings.Cut(string(cmd), "\x00")
		if filepath.Base(argv0) == prog {
			return pid
		}
	}
	t.Fatalf("no %s process in container %s (does this test run as root on the cluster's host?)", prog, ctrID)
	return 0
}

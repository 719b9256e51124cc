//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/device"
)

// freeWithin is how soon a pod waiting for capacity must be bound once the pod holding it is
// deleted (case C13: "at once", no multi-minute wait; kube-scheduler's backoff is at most 10 s).
const freeWithin = 30 * time.Second

// TestC20ConfusablePodsBothOrders is case C20 end to end: two pods with the same first
// Allocate call (1 GPU) but different memory (24576 and 600 MiB) created together, in both
// orders; each container's CUDA_DEVICE_MEMORY_LIMIT_0 is its own request.
func TestC20ConfusablePodsBothOrders(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	for _, order := range []struct {
		name  string
		first gpuLimits
		then  gpuLimits
	}{
		{"big-first", gpuLimits{count: 1, memMiB: 24576}, gpuLimits{count: 1, memMiB: 600}},
		{"small-first", gpuLimits{count: 1, memMiB: 600}, gpuLimits{count: 1, memMiB: 24576}},
	} {
		t.Run(order.name, func(t *testing.T) {
			ns := e2eNamespace(t, c)
			a, b := gpuPod(ns, "first", order.first), gpuPod(ns, "then", order.then)
			c.CreatePod(t, a)
			c.CreatePod(t, b)
			pa := c.WaitForRunning(t, ns, "first", 2*time.Minute)
			pb := c.WaitForRunning(t, ns, "then", 2*time.Minute)
			c.checkOwnLimit(t, pa, order.first.memMiB)
			c.checkOwnLimit(t, pb, order.then.memMiB)
		})
	}
}

// fillPlan sizes two pods against the node's free memory: a holder asking every GPU that has
// free memory and a free slot, holdMiB each (the least free among them), and a waiter that
// fits on no GPU while the holder exists and on one once it is gone. GPUs that other pods
// fill completely are left out.
func fillPlan(t *testing.T, c *Cluster, inv device.Inventory) (holder, waiter gpuLimits) {
	t.Helper()
	use := c.nodeUsage(t)
	free := freeMiB(inv, use)
	var usable []int64
	for i, g := range inv.GPUs {
		if u := use[g.UUID]; free[i] > 0 && (u == nil || u.sharers < inv.SplitCount) {
			usable = append(usable, free[i])
		}
	}
	if len(usable) == 0 {
		t.Fatalf("node %s has no GPU with free memory and a free slot: free MiB per GPU %v (other pods hold them)", c.NodeName, free)
	}
	minFree, maxRest := usable[0], int64(0)
	for _, f := range usable {
		minFree = min(minFree, f)
	}
	for _, f := range usable {
		maxRest = max(maxRest, f-minFree)
	}
	if minFree < 2000 {
		t.Fatalf("node %s is too busy for this test: free MiB per GPU %v (other pods hold GPUs)", c.NodeName, free)
	}
	if len(usable) < len(inv.GPUs) {
		t.Logf("other pods fill %d of %d GPUs; the holder takes the other %d", len(inv.GPUs)-len(usable), len(inv.GPUs), len(usable))
	}
	return gpuLimits{count: len(usable), memMiB: minFree}, gpuLimits{count: 1, memMiB: maxRest + minFree/2}
}

// waitUnschedulable waits until kube-scheduler has reported the pod FailedScheduling.
func (c *Cluster) waitUnschedulable(t *testing.T, ns, name string) string {
	t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
		})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedScheduling" {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		p, _ := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		t.Fatalf("pod %s/%s: no FailedScheduling event within a minute\n%s", ns, name, c.describe(ns, name, p))
	}
	return msg
}

// holdAndRelease creates the holder and (once the holder is bound, and running when running
// is true) the waiter, checks the waiter cannot be placed, deletes the holder and returns how
// long the waiter then took to be bound.
func (c *Cluster) holdAndRelease(t *testing.T, ns string, holder, waiter gpuLimits, running bool) time.Duration {
	t.Helper()
	c.CreatePod(t, gpuPod(ns, "holder", holder))
	var h *corev1.Pod
	if running {
		h = c.WaitForRunning(t, ns, "holder", 2*time.Minute)
		if _, claimed := allocations(t, h); claimed == nil {
			t.Fatalf("holder is Running without a claimed allocation: %v", h.Annotations)
		}
	} else {
		h = c.waitBound(t, ns, "holder", time.Minute)
		if planned, claimed := allocations(t, h); planned == nil || claimed != nil {
			t.Fatalf("holder bound with planned=%v claimed=%v; want planned only (the kubelet is stopped)", planned != nil, claimed != nil)
		}
	}
	c.CreatePod(t, gpuPod(ns, "waiter", waiter))
	msg := c.waitUnschedulable(t, ns, "waiter")
	t.Logf("waiter (%d MiB) unschedulable while the holder (%d GPUs x %d MiB) exists: %s", waiter.memMiB, holder.count, holder.memMiB, msg)
	if p, _ := c.Client.CoreV1().Pods(ns).Get(context.Background(), "waiter", metav1.GetOptions{}); p != nil && p.Spec.NodeName != "" {
		t.Fatalf("waiter was bound to %s while the holder still holds the memory", p.Spec.NodeName)
	}
	start := time.Now()
	c.deleteNow(t, ns, "holder")
	c.waitBound(t, ns, "waiter", freeWithin)
	took := time.Since(start)
	for u, x := range c.nodeUsage(t) {
		for _, p := range x.pods {
			if strings.HasPrefix(p, ns+"/holder[") {
				t.Errorf("GPU %s still charged to the deleted holder: %v", u, x.pods)
			}
		}
	}
	return took
}

// TestDeletedPodFreesSlice is case C13 after Allocate: a Running pod holding memory on every
// GPU is deleted; the pod that needs that memory is bound within seconds and runs with its
// own limit.
func TestDeletedPodFreesSlice(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	inv := c.inventory(t)
	ns := e2eNamespace(t, c)
	holder, waiter := fillPlan(t, c, inv)
	took := c.holdAndRelease(t, ns, holder, waiter, true)
	t.Logf("waiter bound %v after the running holder was deleted", took.Round(time.Millisecond))
	p := c.WaitForRunning(t, ns, "waiter", 2*time.Minute)
	c.checkOwnLimit(t, p, waiter.memMiB)
	checkNotOvercommitted(t, inv, c.nodeUsage(t))
}

// stopKubelet stops the node's kubelet (hack/cluster/restart.sh stop kubelet) and makes sure
// it is started again when the test ends. It returns the function that starts it.
func stopKubelet(t *testing.T, c *Cluster) (start func()) {
	t.Helper()
	c.clusterScript(t, "restart.sh", "stop", "kubelet")
	var once sync.Once
	start = func() { once.Do(func() { c.clusterScript(t, "restart.sh", "start", "kubelet") }) }
	t.Cleanup(func() {
		start()
		c.waitNodeReady(t, 2*time.Minute)
	})
	return start
}

// pauseKubelet freezes the node's kubelet (SIGSTOP to the pid hack/cluster recorded) so that it
// calls back late, as a slow kubelet does, while it stays registered with the device plugin;
// the returned function (also run when the test ends) resumes it with SIGCONT. Keep pauses well
// under the node monitor grace period (50 s), or the node turns NotReady.
func pauseKubelet(t *testing.T, c *Cluster) (resume func()) {
	t.Helper()
	pid := c.componentPid(t, "kubelet")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP kubelet (pid %d): %v", pid, err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT kubelet (pid %d): %v", pid, err)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// componentPid returns the pid hack/cluster recorded for a component ($STATE/pids/<name>.pid),
// after checking, as lib.sh's pid_of does, that the process's command line still holds the
// recorded marker ($STATE/pids/<name>.match).
func (c *Cluster) componentPid(t testing.TB, name string) int {
	t.Helper()
	dir := filepath.Join(c.State, "pids")
	b, err := os.ReadFile(filepath.Join(dir, name+".pid"))
	if err != nil {
		t.Fatalf("pid of %s: %v", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file of %s: %q: %v", name, b, err)
	}
	marker, err := os.ReadFile(filepath.Join(dir, name+".match"))
	if err != nil {
		t.Fatalf("marker of %s: %v", name, err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(strings.ReplaceAll(string(cmdline), "\x00", " "), strings.TrimSpace(string(marker))) {
		t.Fatalf("%s: pid %d does not run it any more (cmdline %q, marker %q); is the cluster up?", name, pid, cmdline, marker)
	}
	return pid
}

// waitNodeReady waits for the node's Ready condition.
func (c *Cluster) waitNodeReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		return err == nil && nodeReady(n), nil
	})
	if err != nil {
		t.Fatalf("node %s not Ready after %v (%s/logs/kubelet.log)", c.NodeName, timeout, c.State)
	}
}

// TestC13DeletedBeforeAllocate: the kubelet is frozen, so a bound pod holding memory on every
// GPU is not allocated; it is deleted, and the pod that needs its memory is bound within
// seconds (the extender released the unallocated booking at the delete, not on a timer); once
// the kubelet resumes the waiter runs with its own limit.
func TestC13DeletedBeforeAllocate(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	inv := c.inventory(t)
	ns := e2eNamespace(t, c)
	holder, waiter := fillPlan(t, c, inv)
	resume := pauseKubelet(t, c)
	took := c.holdAndRelease(t, ns, holder, waiter, false)
	t.Logf("waiter bound %v after the unallocated holder was deleted", took.Round(time.Millisecond))
	resume()
	p := c.WaitForRunning(t, ns, "waiter", 2*time.Minute)
	c.checkOwnLimit(t, p, waiter.memMiB)
	checkNotOvercommitted(t, inv, c.nodeUsage(t))
}

// TestC13AdmissionRejectedFreesSlice: a pod bound while the kubelet is down is admitted right
// after the kubelet restarts; when the device plugin has not registered again by then, the
// kubelet rejects it (phase Failed, UnexpectedAdmissionError; kubelet v1.37 does not wait for
// device plugins). Case C13: the next pod, which needs that pod's memory on every GPU, then
// proceeds at once. When the plugin won the race the pod runs instead, and the test checks its
// limit and says that the rejection branch was not exercised.
func TestC13AdmissionRejectedFreesSlice(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	inv := c.inventory(t)
	ns := e2eNamespace(t, c)
	holder, _ := fillPlan(t, c, inv)
	start := stopKubelet(t, c)
	c.CreatePod(t, gpuPod(ns, "early", holder))
	c.waitBound(t, ns, "early", time.Minute)
	start()
	p := c.WaitForPod(t, ns, "early", 2*time.Minute, "Running or Failed", func(p *corev1.Pod) bool {
		return allStarted(p) || p.Status.Phase == corev1.PodFailed
	})
	if p.Status.Phase != corev1.PodFailed {
		c.checkOwnLimit(t, p, holder.memMiB)
		t.Skip("the device plugin registered before the kubelet admitted the pod: it runs with its own limit; the admission-rejection branch of C13 was not exercised")
	}
	if p.Status.Reason != "UnexpectedAdmissionError" {
		t.Fatalf("early: phase Failed with reason %q, want UnexpectedAdmissionError\n%s", p.Status.Reason, c.describe(ns, "early", p))
	}
	t.Logf("early rejected by the kubelet: %s", p.Status.Message)
	// After its restart the kubelet reports 0 devices until the plugin registers and corrects
	// the Node only at its next status sync; a pod tried meanwhile waits in kube-scheduler's
	// queue (bugs.md). C13 is about the extender's booking, so start once allocatable is back.
	c.waitAllocatable(t, int64(len(inv.GPUs)*inv.SplitCount), time.Minute)
	begin := time.Now()
	c.CreatePod(t, gpuPod(ns, "next", holder))
	c.waitBound(t, ns, "next", freeWithin)
	t.Logf("next (%d GPUs x %d MiB) bound %v after it was created", holder.count, holder.memMiB, time.Since(begin).Round(time.Millisecond))
	n := c.WaitForRunning(t, ns, "next", 2*time.Minute)
	c.checkOwnLimit(t, n, holder.memMiB)
	checkNotOvercommitted(t, inv, c.nodeUsage(t))
}

// TestC14SlowAllocateKeepsOwnLimits: the kubelet is frozen, so pod big (1 GPU, 24576 MiB) is
// bound but its Allocate comes late (after more than the extender's bind wait and the device
// plugin's allocate wait). Pod small (1 GPU, 600 MiB) has the same first Allocate call: the
// extender must not let it be in flight on the node meanwhile (no timer frees big's place).
// Once the kubelet is back, both run, each with its own limit.
func TestC14SlowAllocateKeepsOwnLimits(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	ns := e2eNamespace(t, c)
	resume := pauseKubelet(t, c)
	big, small := gpuLimits{count: 1, memMiB: 24576}, gpuLimits{count: 1, memMiB: 600}
	c.CreatePod(t, gpuPod(ns, "big", big))
	b := c.waitBound(t, ns, "big", time.Minute)
	plannedBefore := b.Annotations[device.AnnoPlanned]
	c.CreatePod(t, gpuPod(ns, "small", small))
	held := 12 * time.Second
	deadline := time.Now().Add(held)
	for time.Now().Before(deadline) {
		s, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), "small", metav1.GetOptions{})
		if err == nil && s.Spec.NodeName != "" {
			t.Errorf("small was bound to %s while big, with the same first Allocate call, was still waiting for the kubelet (case C20/C14: the two could be confused)", s.Spec.NodeName)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	b, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), "big", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Annotations[device.AnnoPlanned] != plannedBefore {
		t.Errorf("big's planned allocation changed while it waited:\nbefore %s\nafter  %s", plannedBefore, b.Annotations[device.AnnoPlanned])
	}
	resume()
	pb := c.WaitForRunning(t, ns, "big", 2*time.Minute)
	ps := c.WaitForRunning(t, ns, "small", 2*time.Minute)
	c.checkOwnLimit(t, pb, big.memMiB)
	c.checkOwnLimit(t, ps, small.memMiB)
}

//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
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

// TestC13AdmissionRejectedFreesSlice is case C13 at kubelet admission: pod "early" (holding
// memory on every usable GPU) is bound while the kubelet is frozen, which is then killed; then the node's device
// plugin is kept away (its DaemonSet no longer selects the node, its process is stopped), so
// when the kubelet starts it has no device plugin registered, reports 0 devices and rejects
// early (phase Failed, reason UnexpectedAdmissionError; kubelet v1.37 does not wait for device
// plugins at admission). Waiting for the plugin to win a race with the kubelet's restart never
// happened: it registers again within milliseconds. Once the plugin is back, pod "next" with
// early's request must be bound at once and run with its own limit (the extender freed the
// booking of the rejected pod).
func TestC13AdmissionRejectedFreesSlice(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	inv := c.inventory(t)
	want := int64(len(inv.GPUs) * inv.SplitCount)
	c.waitAllocatable(t, want, time.Minute)
	ns := e2eNamespace(t, c)
	holder, _ := fillPlan(t, c, inv)
	// The kubelet frozen keeps its ListAndWatch stream with the device plugin open, so the plugin
	// holds its Lease and the extender binds early (a stopped kubelet would end the stream, and
	// the plugin, released, would be refused: case C45's hand-over); then the kubelet is killed.
	pid := c.componentPid(t, "kubelet")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP kubelet (pid %d): %v", pid, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) // gone by then unless the test failed early
	c.CreatePod(t, gpuPod(ns, "early", holder))
	c.waitBound(t, ns, "early", time.Minute)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL kubelet (pid %d): %v", pid, err)
	}
	start := stopKubelet(t, c) // the process is gone: restart.sh forgets it
	restore := keepDevicePluginAway(t, c, start, want)

	logPath := filepath.Join(c.State, "logs", "kubelet.log")
	fi, err := os.Stat(logPath)
	if err != nil {
		t.Fatalf("kubelet log: %v", err)
	}
	offset := fi.Size()
	start()
	p := c.WaitForPod(t, ns, "early", 2*time.Minute, "admitted or rejected by the kubelet", func(p *corev1.Pod) bool {
		return p.Status.Phase != corev1.PodPending || allStarted(p)
	})
	registered := kubeletLoggedSince(t, logPath, offset, registrationLine)
	if p.Status.Phase != corev1.PodFailed {
		t.Fatalf("early: phase %s, want Failed with UnexpectedAdmissionError: the kubelet admitted it although no device plugin should have been registered (device plugin registered since the kubelet start: %v; %s)\n%s",
			p.Status.Phase, registered, logPath, c.describe(ns, "early", p))
	}
	if p.Status.Reason != "UnexpectedAdmissionError" {
		t.Fatalf("early: phase Failed with reason %q, want UnexpectedAdmissionError\n%s", p.Status.Reason, c.describe(ns, "early", p))
	}
	if registered {
		t.Errorf("the kubelet logged %s before it rejected early: the device plugin was not kept away (%s)", registrationLine, logPath)
	}
	t.Logf("early rejected by the kubelet: reason %s: %s", p.Status.Reason, p.Status.Message)

	restore()
	// restore waited until allocatable was back: after its restart the kubelet reports 0
	// devices until the plugin registers and corrects the Node only at its next status sync;
	// a pod tried meanwhile waits in kube-scheduler's queue (bugs.md). C13 is about the
	// extender's booking, so "next" starts once allocatable is back.
	begin := time.Now()
	c.CreatePod(t, gpuPod(ns, "next", holder))
	c.waitBound(t, ns, "next", freeWithin)
	t.Logf("next (%d GPUs x %d MiB) bound %v after it was created", holder.count, holder.memMiB, time.Since(begin).Round(time.Millisecond))
	n := c.WaitForRunning(t, ns, "next", 2*time.Minute)
	c.checkOwnLimit(t, n, holder.memMiB)
	checkNotOvercommitted(t, inv, c.nodeUsage(t))
}

// noNodeLabel is a node label no node carries: with it in the device-plugin DaemonSet's
// nodeSelector the DaemonSet selects no node.
const noNodeLabel = "hami-go.io/e2e-no-node"

// keepDevicePluginAway, called while the kubelet is stopped (stopKubelet), keeps the node's
// device plugin from registering with the kubelet when it starts: it adds noNodeLabel to the
// chart's device-plugin DaemonSet's nodeSelector, waits until the DaemonSet controller has
// marked the node's plugin pod for deletion (the started kubelet then kills it rather than
// restarting its container), and stops the plugin's process on this host (SIGTERM, SIGKILL
// after 10 s), which the stopped kubelet cannot do. The returned function (also run when the
// test ends, then after starting the kubelet with startKubelet) removes the key again, checks
// that the nodeSelector is the original one, and waits for a new plugin pod Running on the
// node and the node's allocatable count resource back at want.
func keepDevicePluginAway(t *testing.T, c *Cluster, startKubelet func(), want int64) (restore func()) {
	t.Helper()
	ctx := context.Background()
	dsc := c.Client.AppsV1().DaemonSets(chartNamespace)
	ds := c.devicePluginDaemonSet(t)
	original := maps.Clone(ds.Spec.Template.Spec.NodeSelector)
	if _, ok := original[noNodeLabel]; ok {
		t.Fatalf("daemonset %s/%s already has nodeSelector %s (an earlier run did not restore it): kubectl -n %s patch ds %s --type=merge -p '{\"spec\":{\"template\":{\"spec\":{\"nodeSelector\":{\"%s\":null}}}}}'",
			chartNamespace, ds.Name, noNodeLabel, chartNamespace, ds.Name, noNodeLabel)
	}
	old := c.devicePluginPods(t)
	patch := func(value any) error {
		b, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"nodeSelector": map[string]any{noNodeLabel: value}}}}})
		if err != nil {
			return err
		}
		_, err = dsc.Patch(ctx, ds.Name, types.MergePatchType, b, metav1.PatchOptions{})
		return err
	}
	var once sync.Once
	restore = func() {
		once.Do(func() {
			startKubelet()
			if err := patch(nil); err != nil {
				t.Errorf("restore daemonset %s/%s (remove nodeSelector %s): %v", chartNamespace, ds.Name, noNodeLabel, err)
				return
			}
			if got := c.devicePluginDaemonSet(t).Spec.Template.Spec.NodeSelector; !maps.Equal(got, original) {
				t.Errorf("daemonset %s/%s: nodeSelector %v after the restore, want the original %v", chartNamespace, ds.Name, got, original)
			}
			c.waitNewDevicePlugin(t, old, 2*time.Minute)
			c.waitAllocatable(t, want, 2*time.Minute)
		})
	}
	t.Cleanup(restore)
	if err := patch("c13"); err != nil {
		t.Fatalf("patch daemonset %s/%s nodeSelector %s: %v", chartNamespace, ds.Name, noNodeLabel, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, p := range c.devicePluginPods(t) {
			if p.DeletionTimestamp == nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the DaemonSet controller did not mark the device-plugin pod on %s for deletion within a minute of nodeSelector %s (kube-controller-manager log: %s/logs)", c.NodeName, noNodeLabel, c.State)
	}
	pids := devicePluginPids(t, c.NodeName)
	if len(pids) == 0 {
		t.Fatalf("no device-plugin process for node %s on this host (want /usr/local/bin/device-plugin --node-name=%s)", c.NodeName, c.NodeName)
	}
	for _, pid := range pids {
		stopProcess(t, pid, 10*time.Second)
	}
	t.Logf("device plugin kept away: daemonset %s/%s nodeSelector %s, pod(s) %v marked for deletion, process(es) %v stopped", chartNamespace, ds.Name, noNodeLabel, podNames(old), pids)
	return restore
}

// devicePluginDaemonSet returns the chart's one device-plugin DaemonSet (label
// app.kubernetes.io/component=device-plugin in chartNamespace).
func (c *Cluster) devicePluginDaemonSet(t testing.TB) *appsv1.DaemonSet {
	t.Helper()
	l, err := c.Client.AppsV1().DaemonSets(chartNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: labelComponent + "=device-plugin"})
	if err != nil {
		t.Fatalf("list device-plugin daemonsets: %v", err)
	}
	if len(l.Items) != 1 {
		t.Fatalf("%d device-plugin daemonsets in %s (label %s=device-plugin), want 1", len(l.Items), chartNamespace, labelComponent)
	}
	return &l.Items[0]
}

// devicePluginPods lists the chart's device-plugin pods on the node.
func (c *Cluster) devicePluginPods(t testing.TB) []corev1.Pod {
	t.Helper()
	l, err := c.Client.CoreV1().Pods(chartNamespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: labelComponent + "=device-plugin",
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", c.NodeName).String(),
	})
	if err != nil {
		t.Fatalf("list device-plugin pods: %v", err)
	}
	return l.Items
}

// waitNewDevicePlugin waits until a device-plugin pod on the node other than old (by UID), not
// being deleted, is Running with its container started.
func (c *Cluster) waitNewDevicePlugin(t testing.TB, old []corev1.Pod, timeout time.Duration) {
	t.Helper()
	oldUIDs := map[types.UID]bool{}
	for _, p := range old {
		oldUIDs[p.UID] = true
	}
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		seen = nil
		for _, p := range c.devicePluginPods(t) {
			seen = append(seen, fmt.Sprintf("%s(%s deleting=%v)", p.Name, p.Status.Phase, p.DeletionTimestamp != nil))
			if !oldUIDs[p.UID] && p.DeletionTimestamp == nil && allStarted(&p) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no new device-plugin pod Running on %s after %v (pods: %v; kubectl -n %s get ds,pods)", c.NodeName, timeout, seen, chartNamespace)
	}
}

func podNames(pods []corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name
	}
	return out
}

// devicePluginPids returns the pids of this host's device-plugin processes for node (a
// command line of /usr/local/bin/device-plugin, as the chart's image runs it, with
// --node-name=<node>), read from /proc.
func devicePluginPids(t testing.TB, node string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) == "device-plugin" && slices.Contains(args[1:], "--node-name="+node) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// stopProcess sends SIGTERM to pid and waits until it has exited (gone, or a zombie its parent,
// the container shim, has not reaped yet); after grace it sends SIGKILL and waits as long again.
func stopProcess(t testing.TB, pid int, grace time.Duration) {
	t.Helper()
	exited := func(context.Context) (bool, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true, nil
		}
		// /proc/<pid>/stat: "pid (comm) state ..."; comm may hold spaces, state follows the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		return i >= 0 && i+2 < len(s) && s[i+2] == 'Z', nil
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if err := syscall.Kill(pid, sig); err != nil && err != syscall.ESRCH {
			t.Fatalf("%v to device plugin (pid %d): %v", sig, pid, err)
		}
		if wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, grace, true, exited) == nil {
			return
		}
	}
	t.Fatalf("device plugin (pid %d) still running %v after SIGKILL", pid, grace)
}

// kubeletLoggedSince reports whether the kubelet log at path holds line after byte offset.
func kubeletLoggedSince(t testing.TB, path string, offset int64, line string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("kubelet log: %v", err)
	}
	if int64(len(b)) < offset {
		offset = 0 // rotated or truncated: read it all
	}
	return strings.Contains(string(b[offset:]), line)
}

// TestC14SlowAllocateKeepsOwnLimits: the kubelet is frozen, so pod big (1 GPU, 24576 MiB) is
// bound but its Allocate comes late (after more than the device plugin's allocate wait). Pod
// small (1 GPU, 600 MiB) has the same first Allocate call: it is bound at once (the device plugin
// applies each pod's own plan at container creation, so nothing can be confused), no timer frees
// big's place, and big's plan stays as it was. Once the kubelet is back, both run, each with its
// own limit.
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
	s := c.waitBound(t, ns, "small", time.Minute)
	t.Logf("small was bound to %s while big waited for the kubelet", s.Spec.NodeName)
	time.Sleep(12 * time.Second) // big waits longer than the device plugin's allocate wait (5 s); its place and plan must hold
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

//go:build e2e && daytwo

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/preflight"
)

// modeSwitchWait bounds each step of the switch (an agent's start, a pod's start or end).
const modeSwitchWait = 3 * time.Minute

// modeSwitchRun bounds the time from the old pod's deletion to the start of the new mode's pod
// that waited for it: the old pod's end, the leaving agent's exit, the arriving agent's
// publication and a scheduling cycle (3–8 s on the local cluster), far below kube-scheduler's
// 5-minute periodic retry, which a missed retry event would show as.
const modeSwitchRun = 90 * time.Second

// TestDayTwoModeSwitch (case C45, issue 28, item 1): the node switched in place to the other mode and back
// (node label hami-go.io/mode and the chart's mode, as an operator does), each time with a sliced
// pod of the leaving mode running across the switch. At each switch:
//   - the pod keeps running in its container, and the leaving agent stays (draining) while it
//     runs: in DRA mode the kubelet needs the driver to unprepare its claim at its end;
//   - the arriving agent serves nothing while it runs: the node's preflight condition says
//     OldModeInUse naming the pod, no GPU pod of the new mode starts there (no ResourceSlice
//     devices, no device-plugin Lease), so the two modes' charges never meet on one GPU;
//   - once the pod is deleted it goes (no Terminating for good), the leaving agent withdraws and
//     exits, and the arriving agent serves: the new mode's pod that waited runs, within
//     modeSwitchRun of the old pod's deletion.
func TestDayTwoModeSwitch(t *testing.T) {
	c := NewCluster(t)
	from := c.nodeMode(t)
	to := otherMode(from)
	h := c.switchCleanups(t, from)
	ns := e2eNamespace(t, c)
	c.switchStep(t, h, ns, from, to, "a")
	c.switchStep(t, h, ns, to, from, "b")
}

// switchCleanups registers a test's cleanups (run last first): on failure the agents' and the
// scheduler's logs, then the cluster back in mode from where a failed step left it elsewhere.
func (c *Cluster) switchCleanups(t *testing.T, from string) helmCLI {
	t.Helper()
	h := c.helm(t)
	t.Cleanup(func() {
		if c.nodeMode(t) != from {
			c.setNodeMode(t, from)
			c.installMode(t, h, from)
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, comp := range []string{"device-plugin", "dra-driver"} {
				for _, p := range c.componentPods(t, comp) {
					t.Logf("%s %s log (tail):\n%s", comp, p.Name, c.logTail(chartNamespace, p.Name, comp, 60))
				}
			}
			for _, p := range c.componentPods(t, "scheduler") {
				for _, ctr := range []string{"kube-scheduler", "extender"} {
					t.Logf("%s[%s] log (tail):\n%s", p.Name, ctr, c.logTail(chartNamespace, p.Name, ctr, 30))
				}
			}
		}
	})
	return h
}

// TestDayTwoModeSwitchUndone (case C45, issue 28, item 1): a switch undone while the leaving
// agent drains for a sliced pod of its mode. The DaemonSet starts no agent on a node whose agent
// pod is still terminating, so the draining agent stops draining as soon as its DaemonSet selects
// the node again, and stops as for a restart (withdrawing nothing); the next agent of the mode
// serves the node at once: the old pod keeps its container, and a new pod of the mode runs
// beside it. Before, the node served no new GPU pod until the old pod ended.
func TestDayTwoModeSwitchUndone(t *testing.T) {
	c := NewCluster(t)
	from := c.nodeMode(t)
	to := otherMode(from)
	h := c.switchCleanups(t, from)
	ns := e2eNamespace(t, c)
	g := gpuLimits{count: 1, memMiB: 2000}
	old := c.WaitForRunning(t, ns, c.CreatePod(t, gpuPod(ns, "u-old", g)).Name, modeSwitchWait)
	containerID := old.Status.ContainerStatuses[0].ContainerID
	leaving := agentComponent(from)
	leavingPods := c.componentPods(t, leaving)
	if len(leavingPods) != 1 {
		t.Fatalf("%d %s pods before the switch, want 1", len(leavingPods), leaving)
	}
	settled := c.preflightSettled(t)
	c.setNodeMode(t, to)
	c.installMode(t, h, to)
	c.waitPreflightReason(t, preflight.FindingOldModeInUse, modeSwitchWait)
	if !c.agentPodPresent(t, leavingPods[0].Name) {
		t.Fatalf("the leaving %s %s is gone while %s still holds its GPUs", leaving, leavingPods[0].Name, old.Name)
	}

	undo := time.Now()
	c.setNodeMode(t, from)
	c.installMode(t, h, from)
	if err := wait.PollUntilContextTimeout(context.Background(), time.Second, modeSwitchWait, true, func(context.Context) (bool, error) {
		return !c.agentPodPresent(t, leavingPods[0].Name), nil
	}); err != nil {
		t.Fatalf("switch undone: the draining %s %s still runs %v later, while %s runs; its log (tail):\n%s", leaving, leavingPods[0].Name, modeSwitchWait, old.Name,
			c.logTail(chartNamespace, leavingPods[0].Name, leaving, 60))
	}
	stopped := time.Since(undo)
	c.waitDeploymentReady(t, "hami-go-webhook", 1, modeSwitchWait)
	if from == "deviceplugin" {
		c.waitDeploymentReady(t, schedulerName, 1, modeSwitchWait)
	}
	next := c.WaitForRunning(t, ns, c.CreatePod(t, gpuPod(ns, "u-next", g)).Name, modeSwitchWait)
	p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), old.Name, metav1.GetOptions{})
	if err != nil || p.Status.Phase != corev1.PodRunning || p.Status.ContainerStatuses[0].ContainerID != containerID {
		t.Fatalf("the %s-mode pod %s lost its container across the undone switch (%v)", from, old.Name, err)
	}
	c.waitPreflightReason(t, settled, modeSwitchWait)
	if from == "deviceplugin" { // the old pod's plan and the new one's, charged by one extender
		checkNotOvercommitted(t, c.inventory(t), c.nodeUsage(t))
	}
	t.Logf("%s → %s undone: the draining %s stopped %v after the undo, and %s ran %v after it beside %s",
		from, to, leaving, stopped.Round(time.Second), next.Name, time.Since(undo).Round(time.Second), old.Name)
}

// switchStep runs one switch from → to with a pod of mode from running across it (names
// "<tag>-old", "<tag>-new").
func (c *Cluster) switchStep(t *testing.T, h helmCLI, ns, from, to, tag string) {
	t.Helper()
	ctx := context.Background()
	g := gpuLimits{count: 1, memMiB: 2000}
	old := c.CreatePod(t, gpuPod(ns, tag+"-old", g))
	old = c.WaitForRunning(t, ns, old.Name, modeSwitchWait)
	containerID := old.Status.ContainerStatuses[0].ContainerID
	leaving := agentComponent(from)
	arriving := agentComponent(to)
	leavingPods := c.componentPods(t, leaving)
	if len(leavingPods) != 1 {
		t.Fatalf("%d %s pods before the switch, want 1", len(leavingPods), leaving)
	}

	start := time.Now()
	settled := c.preflightSettled(t)
	c.setNodeMode(t, to)
	c.installMode(t, h, to)
	t.Logf("%s → %s: node relabelled and helm upgrade --set mode=%s done in %v", from, to, to, time.Since(start).Round(time.Second))

	// The arriving agent runs and waits, saying what for.
	cond := c.waitPreflightReason(t, preflight.FindingOldModeInUse, modeSwitchWait)
	if !strings.Contains(cond.Message, ns+"/"+old.Name) {
		t.Errorf("the preflight condition names what it waits for, but not %s/%s: %q", ns, old.Name, cond.Message)
	}
	t.Logf("%s → %s: %s waits (%v after the switch): %s", from, to, arriving, time.Since(start).Round(time.Second), cond.Message)

	// A new-mode pod waits meanwhile (created once the webhook, and in device-plugin mode the
	// scheduler, rolled to the new mode); the old pod keeps its container; the leaving agent stays.
	c.waitDeploymentReady(t, "hami-go-webhook", 1, modeSwitchWait)
	if to == "deviceplugin" {
		c.waitDeploymentReady(t, schedulerName, 1, modeSwitchWait)
	}
	newPod := c.CreatePod(t, gpuPod(ns, tag+"-new", g))
	time.Sleep(10 * time.Second)
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, newPod.Name, metav1.GetOptions{}); err != nil || p.Status.Phase == corev1.PodRunning {
		t.Errorf("the %s-mode pod %s runs (or is gone: %v) while the %s mode's pod still holds a slice on the node", to, newPod.Name, err, from)
	}
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, old.Name, metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning ||
		p.Status.ContainerStatuses[0].ContainerID != containerID {
		t.Fatalf("the %s-mode pod %s lost its container across the switch (%v)", from, old.Name, err)
	}
	if !c.agentPodPresent(t, leavingPods[0].Name) {
		t.Errorf("the leaving %s %s is gone while %s still holds its GPUs", leaving, leavingPods[0].Name, old.Name)
	}
	if to == "deviceplugin" {
		if holder := c.leaseHolder(t); holder != "" {
			t.Errorf("the arriving device plugin holds the node Lease (%q) while a DRA pod still holds a GPU", holder)
		}
	} else if n := c.nodeDRADevices(t); n != 0 {
		t.Errorf("the arriving DRA driver publishes %d devices while a device-plugin pod still holds a slice", n)
	}

	// The old pod ends: it goes for good (its claim unprepared by the draining driver in DRA
	// mode), the leaving agent exits, and the new pod runs.
	end := time.Now()
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitPodGone(t, ns, old.Name, modeSwitchWait)
	gone := time.Since(end)
	if err := wait.PollUntilContextTimeout(ctx, time.Second, modeSwitchWait, true, func(context.Context) (bool, error) {
		return !c.agentPodPresent(t, leavingPods[0].Name), nil
	}); err != nil {
		t.Fatalf("the leaving %s %s still runs %v after the last pod of its mode ended; its log (tail):\n%s", leaving, leavingPods[0].Name, modeSwitchWait,
			c.logTail(chartNamespace, leavingPods[0].Name, leaving, 60))
	}
	left := time.Since(end)
	// The pod that waited runs well before kube-scheduler's periodic retry of unschedulable
	// pods (podMaxInUnschedulablePodsDuration, 5 minutes): the arriving agent's last
	// publication is a Node change NodeResourcesFit's queueing hint retries it on (case C49:
	// from a DRA-mode cluster it waited 5m20s while the node lacked the per-GPU slice names).
	c.WaitForRunning(t, ns, newPod.Name, max(modeSwitchRun-time.Since(end), time.Second))
	t.Logf("%s → %s: old pod gone %v after its deletion, the leaving %s %v, the %s-mode pod ran %v after", from, to,
		gone.Round(time.Second), leaving, left.Round(time.Second), to, time.Since(end).Round(time.Second))
	c.waitPreflightReason(t, settled, modeSwitchWait)

	// What the leaving agent published is gone (the device plugin's inventory annotation).
	n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Annotations[device.AnnoInventory]; ok && to == "dra" {
		t.Errorf("the device plugin's inventory annotation is still on node %s after it left", c.NodeName)
	}
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, newPod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitPodGone(t, ns, newPod.Name, modeSwitchWait)
}

// installMode upgrades the release to mode with the values up.sh installs it with
// (hack/cluster/components.sh): not --reuse-values, which loses values-local.yaml's null that
// removes the chart's default nodeSelector. sets are further --set expressions.
func (c *Cluster) installMode(t testing.TB, h helmCLI, mode string, sets ...string) {
	t.Helper()
	chart := filepath.Join(repoRoot(), "charts", "hami-go")
	args := []string{"upgrade", releaseName, chart, "-f", filepath.Join(chart, "values-local.yaml")}
	// The node's GPU values up.sh gave the chart (hack/cluster/gpunode.sh: the nvml backend over
	// the simulated driver), so a mode switch keeps them.
	if nodeValues := filepath.Join(c.State, "values-node.yaml"); fileExists(nodeValues) {
		args = append(args, "-f", nodeValues)
	}
	args = append(args, "--set", "mode="+mode, "--set", "hamiCore.hostDir="+filepath.Join(c.State, "vgpu"))
	for _, e := range sets {
		args = append(args, "--set", e)
	}
	h.run(t, args...)
}

// otherMode is the mode a node of mode switches to: "deviceplugin" ↔ "dra".
func otherMode(mode string) string {
	if mode == "dra" {
		return "deviceplugin"
	}
	return "dra"
}

func agentComponent(mode string) string {
	if mode == "dra" {
		return "dra-driver"
	}
	return "device-plugin"
}

// preflightSettled is the node's preflight condition's reason before a mode switch, which it
// returns to once the switch is over: PreflightPassed on a node where every check holds; on the
// simulated GPU node, whose toolkit keeps its default (the fail-open window open), the window's
// finding (TestSimGPUPreflightReadsTheToolkitConfig).
func (c *Cluster) preflightSettled(t testing.TB) string {
	t.Helper()
	r := c.preflightCondition(t).Reason
	if r == "" || r == preflight.FindingOldModeInUse {
		t.Fatalf("node %s: preflight condition %q before the mode switch, want a settled one", c.NodeName, r)
	}
	return r
}

// waitPreflightReason waits until the node's preflight condition has reason and returns it.
func (c *Cluster) waitPreflightReason(t testing.TB, reason string, timeout time.Duration) corev1.NodeCondition {
	t.Helper()
	var got corev1.NodeCondition
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if string(cond.Type) == preflight.ConditionType {
				got = cond
				return cond.Reason == reason, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("node %s: preflight condition %s not %s within %v (last: %s %q)", c.NodeName, preflight.ConditionType, reason, timeout, got.Reason, got.Message)
	}
	return got
}

// agentPodPresent reports whether the chart's pod name still exists (running or terminating).
func (c *Cluster) agentPodPresent(t testing.TB, name string) bool {
	t.Helper()
	_, err := c.Client.CoreV1().Pods(chartNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("get pod %s/%s: %v", chartNamespace, name, err)
	}
	return err == nil
}

// leaseHolder is the holder of the node's device-plugin Lease ("" when none or released).
func (c *Cluster) leaseHolder(t testing.TB) string {
	t.Helper()
	l, err := c.Client.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), "hami-go-"+c.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatalf("get the node Lease: %v", err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// nodeDRADevices counts the devices hami-go's ResourceSlices publish for the node.
func (c *Cluster) nodeDRADevices(t testing.TB) int {
	t.Helper()
	l, err := c.Client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list ResourceSlices: %v", err)
	}
	n := 0
	for _, s := range l.Items {
		if s.Spec.Driver == draClass && s.Spec.NodeName != nil && *s.Spec.NodeName == c.NodeName {
			n += len(s.Spec.Devices)
		}
	}
	return n
}

// waitPodGone waits until pod ns/name is deleted from the API (its containers stopped, its
// claims unprepared).
func (c *Cluster) waitPodGone(t testing.TB, ns, name string, timeout time.Duration) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if p != nil {
			last = fmt.Sprintf("phase %s, deleting %v", p.Status.Phase, p.DeletionTimestamp != nil)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not gone within %v (%s): stuck Terminating", ns, name, timeout, last)
	}
}

// fileExists reports whether path names an existing file.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// applyPlanAtFlag is the device plugin's flag that picks the slot protocol's design (issue 15).
const applyPlanAtFlag = "--apply-plan-at="

// setApplyPlanAt rewrites the device-plugin DaemonSet's --apply-plan-at to want, waits for the
// new plugin pod and its devices, and returns the value it had.
func (c *Cluster) setApplyPlanAt(t testing.TB, want string) string {
	t.Helper()
	ds := c.devicePluginDaemonSet(t)
	args := ds.Spec.Template.Spec.Containers[0].Args
	had := ""
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, applyPlanAtFlag); ok {
			had = v
			args[i] = applyPlanAtFlag + want
		}
	}
	if had == "" {
		t.Fatalf("the device-plugin DaemonSet has no %s argument: %v", applyPlanAtFlag, args)
	}
	if had == want {
		return had
	}
	old := c.devicePluginPods(t)
	if _, err := c.Client.AppsV1().DaemonSets(chartNamespace).Update(context.Background(), ds, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set %s%s on the device-plugin DaemonSet: %v", applyPlanAtFlag, want, err)
	}
	c.waitNewDevicePlugin(t, old, 2*time.Minute)
	inv := c.inventory(t)
	c.waitAllocatableSettled(t, int64(len(inv.GPUs)*inv.SplitCount), 2*time.Minute)
	t.Logf("device plugin now runs with %s%s (was %s)", applyPlanAtFlag, want, had)
	return had
}

// nodeStatusPeriod is how often the kubelet computes the node status (its
// nodeStatusUpdateFrequency default, 10 s), with a margin.
const nodeStatusPeriod = 12 * time.Second

// waitAllocatableSettled waits until the node has offered want of the count resource, as the API
// shows it, for nodeStatusPeriod without a break. A plugin restart can post a transient 0 (the
// old endpoint gone, the new one not yet registered) up to one status period after the new
// plugin runs; a pod kube-scheduler finds Insufficient then is not retried when the count comes
// back (the local cluster's kube-scheduler 1.37 waits for its 5-minute flush), so a test starts
// only once no such transient can come any more.
func (c *Cluster) waitAllocatableSettled(t testing.TB, want int64, timeout time.Duration) {
	t.Helper()
	var since time.Time
	var last int64
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		v, err := c.allocatableCount(ctx)
		if err != nil || v != want {
			last, since = v, time.Time{}
			return false, nil
		}
		if since.IsZero() {
			since = time.Now()
		}
		return time.Since(since) >= nodeStatusPeriod, nil
	})
	if err != nil {
		t.Fatalf("node %s: allocatable %s not %d for %v in a row within %v (last %d)", c.NodeName, resCount, want, nodeStatusPeriod, timeout, last)
	}
}

// TestC04BurstOtherApplyPlanAt is TestBurstOneSlicePods's check under the design the chart does
// not default to, so that both designs of the slot protocol run end to end (issue 15): with
// --apply-plan-at=allocate (design (c): Allocate matched to a pod, records swapped by
// Reconcile) when the chart says create-container (design (b): the NRI guard applies each pod's
// own plan), and the other way round. 50 identical one-slice pods created at once all run, no
// GPU is over-committed, and every container sees its claimed GPU and its own 1000m limit.
func TestC04BurstOtherApplyPlanAt(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	inv := c.inventory(t)
	other := map[string]string{"allocate": "create-container", "create-container": "allocate"}
	ds := c.devicePluginDaemonSet(t)
	chart := ""
	for _, a := range ds.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, applyPlanAtFlag); ok {
			chart = v
		}
	}
	if other[chart] == "" {
		t.Fatalf("the device-plugin DaemonSet's %s is %q, want allocate or create-container", applyPlanAtFlag, chart)
	}
	c.setApplyPlanAt(t, other[chart])
	t.Cleanup(func() { c.setApplyPlanAt(t, chart) })

	ns := e2eNamespace(t, c)
	pods, took := c.timedBurst(t, ns, burstPods(ns, "slice", burstSize, gpuLimits{count: 1, memMiB: 1000}))
	t.Logf("%s%s: %d one-slice pods Running in %v", applyPlanAtFlag, other[chart], burstSize, took.Round(time.Millisecond))
	checkNotOvercommitted(t, inv, c.nodeUsage(t))
	perGPU := map[string]int{}
	for i := range pods {
		for _, u := range c.checkOwnLimit(t, &pods[i], 1000) {
			perGPU[u]++
		}
	}
	for u, n := range perGPU {
		if n > inv.SplitCount {
			t.Errorf("GPU %s: %d of this burst's pods, more than split count %d", u, n, inv.SplitCount)
		}
	}
	t.Logf("pods per GPU: %v", perGPU)
}

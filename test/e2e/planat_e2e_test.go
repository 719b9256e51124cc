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

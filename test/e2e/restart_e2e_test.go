//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// registrationLine is what the kubelet (v1.37 pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go)
// logs when a device plugin registers for the count resource.
const registrationLine = `"Got registration request from device plugin with resource" resourceName="` + resCount + `"`

// TestKubeletRestartReregisters: the kubelet is restarted (hack/cluster/restart.sh kubelet);
// the device plugin registers again (the kubelet's log says so), the node's allocatable
// count resource returns to GPUs x split count (80 on the local node) within seconds, and a
// new GPU pod is allocated and runs with its own limit.
func TestKubeletRestartReregisters(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	inv := c.inventory(t)
	want := int64(len(inv.GPUs) * inv.SplitCount)
	if want != 80 {
		t.Errorf("node offers %d GPUs x split count %d = %d, want 80 (8 fake H100 x 10)", len(inv.GPUs), inv.SplitCount, want)
	}
	c.waitAllocatable(t, want, 30*time.Second)

	logPath := filepath.Join(c.State, "logs", "kubelet.log")
	fi, err := os.Stat(logPath)
	if err != nil {
		t.Fatalf("kubelet log: %v", err)
	}
	offset := fi.Size()
	start := time.Now()
	c.clusterScript(t, "restart.sh", "restart", "kubelet")
	t.Cleanup(func() { c.waitNodeReady(t, 2*time.Minute) })

	var registeredAfter time.Duration
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(logPath)
		if err != nil || int64(len(b)) < offset {
			return false, nil
		}
		if strings.Contains(string(b[offset:]), registrationLine) {
			registeredAfter = time.Since(start)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the kubelet logged no %s within a minute of its restart (%s)", registrationLine, logPath)
	}
	c.waitNodeReady(t, time.Minute)
	back := c.waitAllocatable(t, want, time.Minute)
	total := time.Since(start)
	t.Logf("device plugin registered %v after the kubelet restart began; allocatable %s = %d %v after the restart began (last wait %v)",
		registeredAfter.Round(time.Millisecond), resCount, want, total.Round(time.Millisecond), back.Round(time.Millisecond))
	if total > 30*time.Second {
		t.Errorf("allocatable took %v to return after the kubelet restart (want seconds)", total.Round(time.Millisecond))
	}

	ns := e2eNamespace(t, c)
	c.CreatePod(t, gpuPod(ns, "after-restart", gpuLimits{count: 1, memMiB: 2000}))
	p := c.WaitForRunning(t, ns, "after-restart", 2*time.Minute)
	c.checkOwnLimit(t, p, 2000)
}

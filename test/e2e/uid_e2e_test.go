//go:build e2e

package e2e

import (
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/device"
)

// freeze stops pids with SIGSTOP; the returned function (also run when the test ends) resumes
// them with SIGCONT, in the order given.
func freeze(t *testing.T, what string, pids ...int) (resume func()) {
	t.Helper()
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP %s (pid %d): %v", what, pid, err)
		}
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			for _, pid := range pids {
				if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
					t.Errorf("SIGCONT %s (pid %d): %v", what, pid, err)
				}
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// TestC34RecreatedPodAcrossRelist: pod "same" holds 3/4 of one GPU (nvidia.com/use-gpuuuid) and
// runs. The extender and the device plugin are frozen (SIGSTOP); the pod is deleted and created
// again under its name asking 1/2 of that GPU; kube-apiserver is restarted, so the watches the
// frozen components resume from their last resourceVersion cannot be served from the new
// server's watch cache and end with 410 Gone. Resumed (SIGCONT), each relists and its informer
// delivers one update from the old UID to the new one, and no delete. The new pod must run with
// its own limit (the old booking released: 3/4 + 1/2 do not fit one GPU; the device plugin
// serves the new pod's plan, not the old pod's claim), and the 1/2 left must be usable by
// another pod. Before: the extender kept the old pod's 3/4 booked and the new pod stayed
// Pending.
func TestC34RecreatedPodAcrossRelist(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	inv := c.inventory(t)
	// The device plugin registered: a pod refused for a count of 0 may wait for the scheduler's
	// 5-minute flush.
	c.waitAllocatable(t, int64(len(inv.GPUs)*inv.SplitCount), time.Minute)
	ns := e2eNamespace(t, c)
	g := inv.GPUs[len(inv.GPUs)-1]
	if u := c.nodeUsage(t)[g.UUID]; u != nil {
		t.Fatalf("GPU %s is not free at the start: %v", g.UUID, u.pods)
	}
	capMiB := int64(float64(g.MemoryMiB) * inv.MemoryScaling)
	oldMiB, newMiB := capMiB*3/4, capMiB/2
	onG := func(name string, mib int64) *corev1.Pod {
		p := gpuPod(ns, name, gpuLimits{count: 1, memMiB: mib})
		p.Annotations = map[string]string{device.AnnoUseGPUUUID: g.UUID}
		return p
	}

	c.CreatePod(t, onG("same", oldMiB))
	old := c.WaitForRunning(t, ns, "same", 2*time.Minute)
	c.checkOwnLimit(t, old, oldMiB)

	_, extID, _ := c.extenderContainer(t)
	extPid := containerPid(t, extID, "scheduler-extender")
	dpPids := devicePluginPids(t, c.NodeName)
	if len(dpPids) != 1 {
		t.Fatalf("device-plugin processes for %s: %v, want one", c.NodeName, dpPids)
	}
	resumeExt := freeze(t, "scheduler-extender", extPid)
	resumeDP := freeze(t, "device-plugin", dpPids...)
	frozen := time.Now()
	c.deleteNow(t, ns, "same")
	c.clusterScript(t, "restart.sh", "restart", "kube-apiserver")
	c.CreatePod(t, onG("same", newMiB))
	t.Logf("frozen %v: old pod deleted, kube-apiserver restarted, pod created again", time.Since(frozen).Round(time.Millisecond))
	resumeDP()
	resumeExt()

	p := c.WaitForRunning(t, ns, "same", 2*time.Minute)
	if p.UID == old.UID {
		t.Fatalf("pod same kept its UID %s", p.UID)
	}
	if got := c.checkOwnLimit(t, p, newMiB); len(got) != 1 || got[0] != g.UUID {
		t.Errorf("the re-created pod got GPUs %v, want [%s]", got, g.UUID)
	}
	// The memory the old pod held is free: the rest of the GPU serves another pod.
	c.CreatePod(t, onG("rest", capMiB-newMiB))
	rest := c.WaitForRunning(t, ns, "rest", 2*time.Minute)
	c.checkOwnLimit(t, rest, capMiB-newMiB)
	checkNotOvercommitted(t, inv, c.nodeUsage(t))
}

//go:build e2e && daytwo

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestDayTwoHAMiCoreBroughtLater (issue 36 item 4; device-plugin mode on the simulated GPU node
// with HAMi-core): with a "bring your own" library (hamiCore.install=false,
// devicePlugin.hamiCoreLibrary) that is not on the host yet, a GPU pod waits unscheduled with the
// reason in its condition; once the library is put there, the pod runs with it loaded and its
// limit (its mounts are decided at each container's creation by the NRI plugin, not cached from
// Allocate). With the library taken away again, the container the kubelet creates next is refused
// with the reason (never started with the limits but no library), and runs with the library once
// it is back. The release is put back at the end.
func TestDayTwoHAMiCoreBroughtLater(t *testing.T) {
	requireSimGPU(t)
	c := NewCluster(t)
	if ok, why := c.hamiCoreOnNode(t); !ok {
		t.Skipf("no HAMi-core on the node (%s)", why)
	}
	mode := c.nodeMode(t)
	if mode != "deviceplugin" {
		t.Skip("device-plugin mode: the NRI plugin decides a planned container's mounts at its creation")
	}
	installed, _ := filepath.Glob(filepath.Join(c.State, "vgpu", "libvgpu.so.*"))
	if len(installed) != 1 {
		t.Fatalf("the chart's installed HAMi-core in %s: %v, want one libvgpu.so.<version>", filepath.Join(c.State, "vgpu"), installed)
	}
	lib := filepath.Join(c.State, "byo-hamicore", "libvgpu.so")
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(lib)) })
	put := func() {
		t.Helper()
		b, err := os.ReadFile(installed[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(lib+".tmp", b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(lib+".tmp", lib); err != nil {
			t.Fatal(err)
		}
	}

	h := c.switchCleanups(t, mode)
	before := c.agentPod(t).UID
	current := before
	t.Cleanup(func() {
		if current == before {
			return
		}
		c.installMode(t, h, mode)
		c.waitAgentRolled(t, "device-plugin", current, func(*corev1.Pod) error { return nil }, 3*time.Minute)
	})
	c.installMode(t, h, mode, "hamiCore.install=false", "devicePlugin.hamiCoreLibrary="+lib)
	current = types.UID("upgraded")
	agent := c.waitAgentRolled(t, "device-plugin", before, func(*corev1.Pod) error { return nil }, 3*time.Minute)
	current = agent.UID

	ns := e2eNamespace(t, c)
	c.CreatePod(t, probePod(ns, "late", gpuLimits{count: 1, memMiB: 1000}))
	p := c.WaitForPod(t, ns, "late", 2*time.Minute, "unschedulable for the missing library", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && strings.Contains(cond.Message, lib) {
				return true
			}
		}
		return false
	})
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled {
			t.Logf("library absent: %s", cond.Message)
		}
	}

	put()
	start := time.Now()
	c.WaitForRunning(t, ns, "late", 3*time.Minute)
	probe, _ := c.probeOf(t, ns, "late")
	t.Logf("library put there: Running %v later; cudaprobe %+v", time.Since(start).Round(time.Second), probe)
	if !probe.LibVGPU || len(probe.Devices) != 1 || probe.Devices[0].TotalMiB != 1000 {
		t.Fatalf("with the library put there: HAMi-core loaded %v, devices %+v; want it loaded and one GPU of 1000 MiB", probe.LibVGPU, probe.Devices)
	}

	// Take it away and end the container: the kubelet's next creation is refused.
	if err := os.Remove(lib); err != nil {
		t.Fatal(err)
	}
	p = c.WaitForRunning(t, ns, "late", time.Minute)
	_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	restarts := p.Status.ContainerStatuses[0].RestartCount
	if err := syscall.Kill(containerPid(t, id, "sleep"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p = c.WaitForPod(t, ns, "late", 2*time.Minute, "its next container refused", func(p *corev1.Pod) bool {
		w := p.Status.ContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "CreateContainerError" && strings.Contains(w.Message, "HAMi-core")
	})
	t.Logf("library taken away: %s", p.Status.ContainerStatuses[0].State.Waiting.Message)

	put()
	p = c.WaitForPod(t, ns, "late", 3*time.Minute, "running again", func(p *corev1.Pod) bool {
		s := p.Status.ContainerStatuses[0]
		return s.State.Running != nil && s.RestartCount > restarts
	})
	probe, _ = c.probeOf(t, ns, "late")
	if !probe.LibVGPU || len(probe.Devices) != 1 || probe.Devices[0].TotalMiB != 1000 {
		t.Errorf("with the library back: HAMi-core loaded %v, devices %+v; want it loaded and one GPU of 1000 MiB", probe.LibVGPU, probe.Devices)
	}
}

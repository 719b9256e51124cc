//go:build e2e && daytwo

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/device"
)

// TestDayTwoNvidiaDevicesCDIAnnotation (issue 36 item 7; either mode, on the simulated GPU node
// with the nvml backend): the fail-open window closed (the node's toolkit config set to
// accept-nvidia-visible-devices-envvar-when-unprivileged = false, docs/runtimes.md option 1) and
// the release upgraded to devicePlugin.nvidiaDevices=cdi-annotation, the node agent comes up
// unprivileged with NVIDIA_VISIBLE_DEVICES=void and gets its GPUs and NVML through its pod
// annotation cdi.k8s.io/hami-go-agent (the node passes it to NVIDIA's runtime), and a GPU pod
// runs with its own GPU and slice. The release and the config are put back at the end.
func TestDayTwoNvidiaDevicesCDIAnnotation(t *testing.T) {
	nvidiaDevicesWay(t, "cdi-annotation", func(c *Cluster, p *corev1.Pod) error {
		if v := p.Annotations["cdi.k8s.io/hami-go-agent"]; v != "nvidia.com/gpu=all" {
			return fmt.Errorf("annotation cdi.k8s.io/hami-go-agent = %q, want nvidia.com/gpu=all", v)
		}
		for _, ct := range p.Spec.Containers {
			if ct.SecurityContext != nil && ct.SecurityContext.Privileged != nil && *ct.SecurityContext.Privileged {
				return fmt.Errorf("container %s is privileged", ct.Name)
			}
		}
		return nil
	})
}

// TestDayTwoNvidiaDevicesDriverRoot (issue 36 item 7; either mode, on the simulated GPU node with
// the nvml backend): as above with devicePlugin.nvidiaDevices=driver-root, the way for nodes
// without NVIDIA's runtime: the agent, privileged, with NVIDIA_VISIBLE_DEVICES=void and no CDI
// annotation, loads NVML from the driver root the chart mounts at /host<driverRoot> (its process
// maps <State>/driver's libnvidia-ml there, not one the toolkit put into the container), and a
// GPU pod runs with its own GPU and slice.
func TestDayTwoNvidiaDevicesDriverRoot(t *testing.T) {
	nvidiaDevicesWay(t, "driver-root", func(c *Cluster, p *corev1.Pod) error {
		if v, ok := p.Annotations["cdi.k8s.io/hami-go-agent"]; ok {
			return fmt.Errorf("annotation cdi.k8s.io/hami-go-agent = %q, want none", v)
		}
		want := filepath.Join("/host", c.State, "driver/usr/lib/x86_64-linux-gnu") + "/"
		for _, ct := range p.Spec.Containers {
			if ct.SecurityContext == nil || ct.SecurityContext.Privileged == nil || !*ct.SecurityContext.Privileged {
				return fmt.Errorf("container %s is not privileged", ct.Name)
			}
		}
		for _, s := range p.Status.ContainerStatuses {
			_, id, _ := strings.Cut(s.ContainerID, "://")
			if got := mappedNVML(id); !strings.HasPrefix(got, want) {
				return fmt.Errorf("container %s maps libnvidia-ml from %q, want it under %s", s.Name, got, want)
			}
		}
		return nil
	})
}

// nvidiaDevicesWay closes the node's fail-open window, upgrades the release to
// devicePlugin.nvidiaDevices=way, waits for the agent that check accepts (beside
// NVIDIA_VISIBLE_DEVICES=void in every container), and runs a GPU pod that must see its one GPU
// with its 2000 MiB (HAMi-core on the node) or the GPU's whole memory. The release and the
// toolkit config are put back at the end.
func nvidiaDevicesWay(t *testing.T, way string, check func(*Cluster, *corev1.Pod) error) {
	requireSimGPU(t)
	c := NewCluster(t)
	if b := c.agentBackend(t); b != "nvml" {
		t.Skipf("the node agent runs --backend=%s: without the nvml backend it needs no NVML of its own", b)
	}
	mode := c.nodeMode(t)
	comp := agentComponent(mode)
	h := c.switchCleanups(t, mode)
	before := c.agentPod(t).UID
	current := before
	t.Cleanup(func() {
		if current == before {
			return // never upgraded
		}
		c.installMode(t, h, mode)
		c.waitAgentRolled(t, comp, current, func(p *corev1.Pod) error {
			if _, ok := p.Annotations["cdi.k8s.io/hami-go-agent"]; ok {
				return fmt.Errorf("still annotated cdi.k8s.io/hami-go-agent")
			}
			for _, ct := range p.Spec.Containers {
				if ct.SecurityContext != nil && ct.SecurityContext.Privileged != nil && *ct.SecurityContext.Privileged {
					return fmt.Errorf("container %s still privileged", ct.Name)
				}
			}
			return nil
		}, 3*time.Minute)
	})

	cfg := filepath.Join(c.State, "toolkit/.config/nvidia-container-runtime/config.toml")
	orig, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatalf("the local node's toolkit config: %v", err)
	}
	const key = "accept-nvidia-visible-devices-envvar-when-unprivileged"
	if !strings.Contains(string(orig), key+" = true") {
		t.Fatalf("%s does not set %s = true", cfg, key)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(orig), key+" = true", key+" = false", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(cfg, orig, 0o644); err != nil {
			t.Errorf("restore %s: %v", cfg, err)
		}
	})

	start := time.Now()
	c.installMode(t, h, mode, "devicePlugin.nvidiaDevices="+way)
	current = types.UID("upgraded") // from here on the cleanup puts the release back
	agent := c.waitAgentRolled(t, comp, before, func(p *corev1.Pod) error {
		for _, ct := range p.Spec.Containers {
			for _, e := range ct.Env {
				if e.Name == "NVIDIA_VISIBLE_DEVICES" && e.Value != "void" {
					return fmt.Errorf("container %s: NVIDIA_VISIBLE_DEVICES=%s, want void", ct.Name, e.Value)
				}
			}
		}
		return check(c, p)
	}, 3*time.Minute)
	current = agent.UID
	t.Logf("agent %s ready with nvidiaDevices=%s and the window closed, %v after the upgrade", agent.Name, way, time.Since(start).Round(time.Second))

	ns := e2eNamespace(t, c)
	c.CreatePod(t, probePod(ns, "gpu", gpuLimits{count: 1, memMiB: 2000}))
	c.WaitForRunning(t, ns, "gpu", 3*time.Minute)
	probe, env := c.probeOf(t, ns, "gpu")
	t.Logf("GPU pod: cudaprobe %+v", probe)
	total := int64(81920)
	if ok, _ := c.hamiCoreOnNode(t); ok {
		total = 2000
	}
	if len(probe.Devices) != 1 || probe.Devices[0].UUID != env[device.EnvGPUUUIDs] || probe.Devices[0].TotalMiB != total {
		t.Errorf("GPU pod sees %+v (error %q), want its one GPU %s with total %d MiB", probe.Devices, probe.Error, env[device.EnvGPUUUIDs], total)
	}
}

// mappedNVML returns the path of the libnvidia-ml a process of container ctrID has mapped (from
// /proc/<pid>/maps of the processes whose cgroup names the container), or "" when none has.
func mappedNVML(ctrID string) string {
	ents, err := os.ReadDir("/proc")
	if err != nil || ctrID == "" {
		return ""
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup")); err != nil || !strings.Contains(string(cg), ctrID) {
			continue
		}
		maps, err := os.ReadFile(filepath.Join("/proc", e.Name(), "maps"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(maps), "\n") {
			if i := strings.Index(line, " /"); i >= 0 && strings.Contains(line, "libnvidia-ml.so") {
				return strings.TrimSpace(line[i:])
			}
		}
	}
	return ""
}

// waitAgentRolled waits until the node's agent pod of component comp is another than old, Running
// with every container ready, and check accepts it; it returns that pod.
func (c *Cluster) waitAgentRolled(t testing.TB, comp string, old types.UID, check func(*corev1.Pod) error, timeout time.Duration) corev1.Pod {
	t.Helper()
	var got corev1.Pod
	last := "no pod"
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		for _, p := range c.componentPods(t, comp) {
			if p.UID == old {
				last = "the old pod " + p.Name + " is still there"
				continue
			}
			if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
				last = fmt.Sprintf("pod %s is %s", p.Name, p.Status.Phase)
				continue
			}
			for _, s := range p.Status.ContainerStatuses {
				if !s.Ready {
					last = fmt.Sprintf("pod %s: container %s not ready (restarts %d)", p.Name, s.Name, s.RestartCount)
					return false, nil
				}
			}
			if err := check(&p); err != nil {
				last = fmt.Sprintf("pod %s: %v", p.Name, err)
				return false, nil
			}
			got = p
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		for _, p := range c.componentPods(t, comp) {
			t.Logf("%s %s log (tail):\n%s", comp, p.Name, c.logTail(chartNamespace, p.Name, comp, 40))
		}
		t.Fatalf("%s agent not rolled within %v: %s", comp, timeout, last)
	}
	return got
}

//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/device"
)

// toolkitCDISpec is the CDI spec NVIDIA's nvidia-ctk generates over the local node's simulated
// driver root (hack/cluster/gpunode.sh): its presence says the node is a simulated GPU node.
const toolkitCDISpec = "/var/run/cdi/nvidia.yaml"

// cudaProbe is cudaprobe's JSON (hack/simgpu/c/cudaprobe.c): what the CUDA driver API shows a
// process inside the container.
type cudaProbe struct {
	Devices []struct {
		UUID       string `json:"uuid"`
		Name       string `json:"name"`
		TotalMiB   int64  `json:"total_mib"`
		FreeMiB    int64  `json:"free_mib"`
		AllocMiB   int64  `json:"alloc_mib"`
		AllocError string `json:"alloc_error"`
	} `json:"devices"`
	LibVGPU bool              `json:"libvgpu"`
	Env     map[string]string `json:"env"`
	Error   string            `json:"error"`
}

// hamiCoreOnNode reports whether the local cluster's node agents install HAMi-core (built from
// its source by hack/cluster/gpunode.sh where the source and a cuda.h are on the machine), and
// why not.
func (c *Cluster) hamiCoreOnNode(t *testing.T) (bool, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.State, "hamicore.env"))
	if err != nil {
		return false, err.Error()
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "HAMICORE_SKIP="); ok && v != "" && v != "''" {
			return false, v
		}
	}
	return true, ""
}

// allocSteps is what cudaprobe --max-mib max allocates in 256 MiB steps under a limit of
// limit MiB (0: none): the most whole steps that fit, and the error of the first refusal.
func allocSteps(limit, max int64) (int64, string) {
	if limit == 0 || limit >= max {
		return max, ""
	}
	return limit / 256 * 256, "CUDA_ERROR_OUT_OF_MEMORY"
}

// requireSimGPU skips a test on a node without the simulated driver (HAMI_GO_GPU_NODE=none).
func requireSimGPU(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(toolkitCDISpec); err != nil {
		t.Skipf("the node has no simulated GPU driver (%v): hack/cluster/up.sh with HAMI_GO_GPU_NODE=sim (the default) makes one", err)
	}
}

// probePod is a pod whose container prints its env (envdump) and then cudaprobe's JSON, and
// stays up; g.count = 0 gives a pod without GPU requests.
func probePod(ns, name string, g gpuLimits) *corev1.Pod {
	p := gpuPod(ns, name, g)
	p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "envdump; cudaprobe --max-mib 4096; exec sleep 3600"}
	return p
}

// probeOf waits for the pod's cudaprobe line and returns it with the container's env.
func (c *Cluster) probeOf(t *testing.T, ns, name string) (cudaProbe, map[string]string) {
	t.Helper()
	log := c.WaitForLog(t, ns, name, "main", `{"devices"`, 2*time.Minute)
	env, _ := parseEnvdump(log)
	for _, l := range strings.Split(log, "\n") {
		if !strings.HasPrefix(l, `{"devices"`) {
			continue
		}
		var p cudaProbe
		if err := json.Unmarshal([]byte(l), &p); err != nil {
			t.Fatalf("pod %s: cudaprobe printed %q: %v", name, l, err)
		}
		return p, env
	}
	t.Fatalf("pod %s: no cudaprobe line in\n%s", name, log)
	return cudaProbe{}, nil
}

// On the simulated GPU node (NVIDIA's toolkit over hack/simgpu's driver; issue 35), in either
// mode, each GPU container sees through the CUDA driver API exactly the GPUs hami-go gave it
// (the UUIDs of HAMI_GO_GPU_UUIDS, and in device-plugin mode those of the pod's claimed
// allocation). With HAMi-core on the node (preloaded through /etc/ld.so.preload, as the chart
// installs it) each GPU shows the slice's MiB as its total, an allocation inside the limit
// succeeds and the first past it fails with CUDA_ERROR_OUT_OF_MEMORY, also for two pods on one
// GPU and for each GPU of a two-GPU container; without it each GPU shows the card's 81920 MiB
// and nothing limits. A pod without GPUs sees none, also when its env says
// NVIDIA_VISIBLE_DEVICES=all (case C37 through the real runtime).
func TestSimGPUContainersSeeTheirGPUs(t *testing.T) {
	requireSimGPU(t)
	c := NewCluster(t)
	hamiCore, why := c.hamiCoreOnNode(t)
	if !hamiCore {
		t.Logf("no HAMi-core on the node (%s): checking visibility without limits", why)
	}
	ns := e2eNamespace(t, c)
	createEnvFromConfigMaps(t, c, ns)
	pods := map[string]gpuLimits{
		"two":   {count: 2, memMiB: 3000},
		"one":   {count: 1, memMiB: 2000, cores: 30},
		"plain": {},
	}
	for name, g := range pods {
		c.CreatePod(t, probePod(ns, name, g))
	}
	visible := probePod(ns, "plain-visible", gpuLimits{})
	visible.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "visible"}}}}
	c.CreatePod(t, visible)

	for _, name := range []string{"two", "one"} {
		p := c.WaitForRunning(t, ns, name, 2*time.Minute)
		probe, env := c.probeOf(t, ns, name)
		t.Logf("pod %s: cudaprobe %+v", name, probe)
		want := strings.Split(env[device.EnvGPUUUIDs], ",")
		if !c.isDRAMode(t) {
			_, claimed := allocations(t, p)
			if claimed == nil {
				t.Fatalf("pod %s: no claimed allocation", name)
			}
			var uuids []string
			for _, ct := range claimed.Containers {
				for _, d := range ct.Devices {
					uuids = append(uuids, d.UUID)
				}
			}
			if sorted(uuids) != sorted(want) {
				t.Errorf("pod %s: %s = %v, claimed allocation %v", name, device.EnvGPUUUIDs, want, uuids)
			}
		}
		if probe.LibVGPU != hamiCore {
			t.Errorf("pod %s: HAMi-core loaded %v, want %v", name, probe.LibVGPU, hamiCore)
		}
		total, limit := int64(81920), int64(0)
		if hamiCore {
			total, limit = pods[name].memMiB, pods[name].memMiB
		}
		wantAlloc, wantErr := allocSteps(limit, 4096)
		var got []string
		for _, d := range probe.Devices {
			got = append(got, d.UUID)
			if d.TotalMiB != total || d.FreeMiB <= 0 || d.FreeMiB > d.TotalMiB {
				t.Errorf("pod %s: device %s total %d MiB free %d MiB, want %d and 0 < free <= total", name, d.UUID, d.TotalMiB, d.FreeMiB, total)
			}
			if d.AllocMiB != wantAlloc || d.AllocError != wantErr {
				t.Errorf("pod %s: device %s allocated %d MiB (%q), want %d (%q)", name, d.UUID, d.AllocMiB, d.AllocError, wantAlloc, wantErr)
			}
		}
		if probe.Error != "" || len(got) != pods[name].count || sorted(got) != sorted(want) {
			t.Errorf("pod %s sees GPUs %v (error %q), want exactly %v", name, got, probe.Error, want)
		}
	}
	for _, name := range []string{"plain", "plain-visible"} {
		c.WaitForRunning(t, ns, name, 2*time.Minute)
		probe, _ := c.probeOf(t, ns, name)
		if len(probe.Devices) != 0 {
			t.Errorf("pod %s without GPUs sees %d GPUs through CUDA: %+v", name, len(probe.Devices), probe.Devices)
		}
	}
}

// sorted is the comma-joined sorted copy of s (for comparing sets).
func sorted(s []string) string {
	c := append([]string(nil), s...)
	sort.Strings(c)
	return strings.Join(c, ",")
}

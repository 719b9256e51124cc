//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/device"
)

// planBurst is the burst of the no-container-without-its-plan tests (issue 29): n pods of
// memMiB each, created together.
const (
	planBurstPods  = 20
	planBurstMiB   = 16000
	planBurstFault = 2 * time.Second // how long after the burst's start the fault is injected
)

// burstThroughFault creates the burst, injects fault planBurstFault after its start (while the
// pods are being bound and their containers created), then waits until every pod runs and checks
// that each one runs with exactly its own plan: HAMI_GO_GPU_UUIDS names its claimed GPUs (and no
// CUDA_VISIBLE_DEVICES is set), which are its planned ones, with its own memory limit; no GPU is over
// committed; and no pod was lost (a container created without its plan would have been stopped
// by deleting its pod, which fails waitAllRunning's count). It logs how long the burst took.
func (c *Cluster) burstThroughFault(t *testing.T, what string, fault func()) {
	inv := c.inventory(t)
	ns := e2eNamespace(t, c)
	pods := c.burstWithFault(t, ns, burstPods(ns, "fault", planBurstPods, gpuLimits{count: 1, memMiB: planBurstMiB}), what, fault)
	checkNotOvercommitted(t, inv, c.nodeUsage(t))
	waited := 0
	for i := range pods {
		p := &pods[i]
		got := c.checkOwnLimit(t, p, planBurstMiB)
		env := c.containerEnv(t, p.Namespace, p.Name, "main")
		if env[device.EnvGPUUUIDs] == "" || env[device.EnvGPUUUIDs] != strings.Join(got, ",") {
			t.Errorf("pod %s: %s=%q; want its claimed GPUs %q (a container without its plan)", p.Name, device.EnvGPUUUIDs, env[device.EnvGPUUUIDs], got)
		}
		if c.podWasRefusedAtCreation(t, p) {
			waited++
		}
	}
	t.Logf("%d of %d pods had a container creation refused until the plan could be applied", waited, planBurstPods)
}

// burstWithFault waits for the node to be quiet, creates pods (all in ns) at once, calls fault
// planBurstFault later, waits until every pod runs and returns them, logging the times.
func (c *Cluster) burstWithFault(t *testing.T, ns string, pods []*corev1.Pod, what string, fault func()) []corev1.Pod {
	t.Helper()
	c.waitNodeQuiet(t, 3*time.Minute)
	start := time.Now()
	created := make(chan error, 1)
	go func() { created <- c.createPodsErr(pods) }()
	time.Sleep(planBurstFault)
	fault()
	t.Logf("%s %v after the burst began", what, time.Since(start).Round(time.Millisecond))
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	running := c.waitAllRunning(t, ns, len(pods), 6*time.Minute)
	t.Logf("all %d pods Running %v after the burst began (%s)", len(pods), time.Since(start).Round(time.Millisecond), what)
	return running
}

// podWasRefusedAtCreation says whether p has a Failed Event from the kubelet (a container
// creation refused, then retried).
func (c *Cluster) podWasRefusedAtCreation(t testing.TB, p *corev1.Pod) bool {
	t.Helper()
	l, err := c.Client.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(p.UID) + ",reason=Failed",
	})
	return err == nil && len(l.Items) > 0
}

// TestNoPlanlessContainerAgentDeletedMidBurst (case C42, issue 29, device-plugin mode): the node agent's
// pod is deleted 2 s into a burst of 20 pods of 16000 MiB (what a DaemonSet rolling update or a
// crash does). Containers whose creation falls while the agent is away are refused by the
// kubelet (PreStartContainer on a stopped endpoint) and retried once the new agent's NRI plugin
// can apply their plan: every pod ends Running with exactly its own plan.
func TestNoPlanlessContainerAgentDeletedMidBurst(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	c.burstThroughFault(t, "deleted the device-plugin pod", func() {
		old := c.devicePluginPods(t)
		for _, p := range old {
			if err := c.Client.CoreV1().Pods(chartNamespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete device-plugin pod %s: %v", p.Name, err)
			}
		}
		t.Cleanup(func() { c.waitNewDevicePlugin(t, old, 2*time.Minute) })
	})
}

// TestNoPlanlessContainerContainerdRestartMidBurst (case C42, issue 29, device-plugin mode): containerd is
// restarted (hack/cluster/restart.sh) 2 s into the same burst; the NRI plugin reconnects within
// a second of containerd's return and PreStartContainer holds each creation until it has: every
// pod ends Running with exactly its own plan.
func TestNoPlanlessContainerContainerdRestartMidBurst(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	c.burstThroughFault(t, "restarted containerd", func() {
		c.clusterScript(t, "restart.sh", "restart", "containerd")
		c.waitNodeReady(t, 2*time.Minute)
	})
}

// draBurstThroughFault is burstThroughFault in DRA mode: n claim pods of planBurstMiB each (one
// ResourceClaimTemplate), fault injected planBurstFault after the start; every pod ends Running
// with its own slice (HAMI_GO_GPU_UUIDS names one GPU, its memory limit its own), and no
// device holds more claims than its memory allows.
func (c *Cluster) draBurstThroughFault(t *testing.T, what string, fault func()) {
	ns := draNamespace(t, c)
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "slice", Namespace: ns},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: gpuClaim{memory: fmt.Sprintf("%dMi", planBurstMiB), index: -1}.spec()},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := make([]*corev1.Pod, planBurstPods)
	for i := range pods {
		pods[i] = claimPod(ns, fmt.Sprintf("fault-%02d", i), "slice", true)
	}
	running := c.burstWithFault(t, ns, pods, what, fault)
	perGPU := map[string]int{}
	for i := range running {
		p := &running[i]
		env := c.containerEnv(t, ns, p.Name, "main")
		if want := fmt.Sprintf("%dm", planBurstMiB); env[envMemLimit0] != want {
			t.Errorf("pod %s: %s = %q, want %s", p.Name, envMemLimit0, env[envMemLimit0], want)
		}
		if u := env[device.EnvGPUUUIDs]; u == "" || strings.Contains(u, ",") || env[envCUDAVisible] != "<unset>" {
			t.Errorf("pod %s: %s=%q %s=%q; want one GPU and %s unset", p.Name, device.EnvGPUUUIDs, u, envCUDAVisible, env[envCUDAVisible], envCUDAVisible)
		}
		perGPU[env[device.EnvGPUUUIDs]]++
	}
	for u, n := range perGPU {
		if mib := int64(n) * planBurstMiB; mib > c.draGPUMemoryMiB(t, u) {
			t.Errorf("GPU %s holds %d claims of %d MiB (%d MiB), more than it has", u, n, planBurstMiB, mib)
		}
	}
	t.Logf("claims per GPU: %v", perGPU)
}

// draGPUMemoryMiB is the memory capacity, MiB, that the node's ResourceSlice publishes for the
// GPU uuid (0 when not found).
func (c *Cluster) draGPUMemoryMiB(t testing.TB, uuid string) int64 {
	t.Helper()
	l, err := c.Client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list ResourceSlices: %v", err)
	}
	for _, s := range l.Items {
		for _, d := range s.Spec.Devices {
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil && *a.StringValue == uuid {
				q := d.Capacity["memory"].Value
				return q.Value() / (1 << 20)
			}
		}
	}
	return 0
}

// TestNoPlanlessContainerDRADriverDeletedMidBurst (case C42, issue 29, DRA mode): the DRA driver's pod is
// deleted 2 s into a burst of 20 claim pods of 16000 MiB; the kubelet waits for the new driver to
// prepare their claims: every pod ends Running with its own slice.
func TestNoPlanlessContainerDRADriverDeletedMidBurst(t *testing.T) {
	c := draCluster(t)
	c.draBurstThroughFault(t, "deleted the DRA driver pod", func() {
		old := c.driverPod(t)
		if err := c.Client.CoreV1().Pods(chartNamespace).Delete(context.Background(), old.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete driver pod %s: %v", old.Name, err)
		}
	})
}

// TestNoPlanlessContainerDRAContainerdRestartMidBurst (case C42, issue 29, DRA mode): containerd restarted
// 2 s into the same burst: every pod ends Running with its own slice.
func TestNoPlanlessContainerDRAContainerdRestartMidBurst(t *testing.T) {
	c := draCluster(t)
	c.draBurstThroughFault(t, "restarted containerd", func() {
		c.clusterScript(t, "restart.sh", "restart", "containerd")
		c.waitNodeReady(t, 2*time.Minute)
	})
}

// readOnlyRootPod is a GPU pod of 1000 MiB whose container has a read-only root filesystem and
// NVIDIA_DRIVER_CAPABILITIES=video, and creates HAMi-core's shared cache file where CUDA_DEVICE_MEMORY_SHARED_CACHE says, as
// HAMi-core does in every CUDA process (it exits when it cannot), then runs envdump.
func readOnlyRootPod(ns, name string) *corev1.Pod {
	p := gpuPod(ns, name, gpuLimits{count: 1, memMiB: 1000})
	ro := true
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{ReadOnlyRootFilesystem: &ro}
	p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "video"})
	p.Spec.Containers[0].Command = []string{"/bin/bash", "-c",
		`: > "$CUDA_DEVICE_MEMORY_SHARED_CACHE" && echo "cache created: $CUDA_DEVICE_MEMORY_SHARED_CACHE" || echo "cache not created"; exec envdump`}
	return p
}

// checkReadOnlyRoot runs readOnlyRootPod and checks that its cache file was created in the
// container's own cache directory (issue 29: a readOnlyRootFilesystem GPU pod runs), and that HAMi-core's
// driver capabilities were added to the pod's own.
func (c *Cluster) checkReadOnlyRoot(t *testing.T, ns string) {
	c.CreatePod(t, readOnlyRootPod(ns, "ro"))
	c.WaitForRunning(t, ns, "ro", 2*time.Minute)
	log := c.WaitForLog(t, ns, "ro", "main", "envdump: done", time.Minute)
	env := c.containerEnv(t, ns, "ro", "main")
	cache := env["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
	if !strings.HasPrefix(cache, "/usr/local/vgpu/cache/") || !strings.Contains(log, "cache created: "+cache) {
		t.Fatalf("CUDA_DEVICE_MEMORY_SHARED_CACHE=%q; log:\n%s\nwant the file created in /usr/local/vgpu/cache/", cache, log)
	}
	// HAMi-core needs compute and utility (libcuda.so.1, libnvidia-ml.so.1); the pod's own
	// capability is kept.
	if got := env["NVIDIA_DRIVER_CAPABILITIES"]; got != "video,compute,utility" {
		t.Errorf("NVIDIA_DRIVER_CAPABILITIES=%q, want the pod's video with HAMi-core's compute,utility added", got)
	}
	t.Logf("readOnlyRootFilesystem GPU container created its cache file %s", cache)

	// The container's cache directory on the host (hamiCore.hostDir/containers, named like the
	// file) is removed once the pod is gone: device plugin at the pod's deletion, DRA driver at
	// the claim's unprepare.
	host := filepath.Join(c.State, "vgpu", "containers", strings.TrimSuffix(path.Base(cache), ".cache"))
	if _, err := os.Stat(host); err != nil {
		t.Fatalf("the running container's cache directory on the host: %v", err)
	}
	c.deleteNow(t, ns, "ro")
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, err := os.Stat(host)
		return os.IsNotExist(err), nil
	})
	if err != nil {
		t.Fatalf("cache directory %s still there 2 minutes after its pod was deleted", host)
	}
}

// TestReadOnlyRootFilesystemGPUPod (issue 29, device-plugin mode): the NRI plugin mounts the
// container's own writable cache directory with its plan, so a readOnlyRootFilesystem GPU
// container can create HAMi-core's cache file.
func TestReadOnlyRootFilesystemGPUPod(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	c.checkReadOnlyRoot(t, e2eNamespace(t, c))
}

// TestDRAReadOnlyRootFilesystemGPUPod (issue 29, DRA mode): the claim's CDI spec mounts its
// writable cache directory, created at prepare.
func TestDRAReadOnlyRootFilesystemGPUPod(t *testing.T) {
	c := draCluster(t)
	c.checkReadOnlyRoot(t, draNamespace(t, c))
}

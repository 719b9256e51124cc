//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Issue 35 (cases C52, C58): a GPU container that reaches the runtime without its plan reaches no
// GPU, even where its env says NVIDIA_VISIBLE_DEVICES=all. The window is the NRI call timing
// out: containerd waits plugin_request_timeout (2 s) for the plugin, then closes it and creates
// the container unadjusted (NRI v0.12.3 pkg/adaptation plugin.createContainer). The test opens
// it for real: it freezes the node's device-plugin agent (SIGSTOP), so that the NRI call times
// out, and creates containers through containerd's CRI with the env the kubelet gives a GPU
// container from the device plugin's Allocate answer (no kubelet: it would first call the
// frozen agent's PreStartContainer, and is frozen as well, or its housekeeping would stop a
// sandbox it did not make). Each runs cudaprobe under the node's default runtime,
// NVIDIA's in cdi mode over the simulated driver, and prints what CUDA shows it.
//
//   - this release's pending answer (HAMI_GO_GPU_UUIDS empty, NVIDIA_VISIBLE_DEVICES=void) after
//     an image's NVIDIA_VISIBLE_DEVICES=all: no GPU (the toolkit reads the last value);
//   - c76a8e6's pending answer (the empty marker alone) after the same image value: every GPU
//     of the node, the defect C52 fixed;
//   - a pod env or envFrom value NVIDIA_VISIBLE_DEVICES=all, which the kubelet lists after the
//     device plugin's answer (kubelet_pods.go GenerateRunContainerOptions appends the pod's env
//     to the device plugin's): every GPU. This gap is pinned, not closed: with the NRI plugin
//     there the container is refused at creation (PlanEnv: a late value of an answered name),
//     and refused at StartContainer or deleted at the plugin's next Synchronize where it comes
//     back in time; docs/threat-model.md says so;
//   - the same with the toolkit's accept-nvidia-visible-devices-envvar-when-unprivileged = false
//     (docs/runtimes.md, option 1; written into the node's toolkit config for that one container,
//     while the agent is frozen, so its preflight never reads it): no GPU. Closing the window
//     closes the gap.
func TestSimGPUPlanlessContainerReachesNoGPU(t *testing.T) {
	requireSimGPU(t)
	c := NewCluster(t)
	if c.isDRAMode(t) {
		t.Skip("device-plugin mode only: a DRA claim's devices come from its CDI spec, there is no pending answer")
	}
	agent := c.agentPod(t)
	pid := agentPID(t, agent.Status.ContainerStatuses)
	rt := criClient(t, filepath.Join(c.State, "containerd", "containerd.sock"))
	gpus := len(c.inventory(t).GPUs)

	// The kubelet would stop a sandbox it did not make at once (an orphan to its housekeeping):
	// it is frozen too, for the few seconds the containers take.
	resumeKubelet := pauseKubelet(t, c)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("freeze the device plugin (pid %d): %v", pid, err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("thaw the device plugin (pid %d): %v", pid, err)
			}
		}
	}
	t.Cleanup(thaw)

	const all, void, marker = "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=void", "HAMI_GO_GPU_UUIDS="
	cases := []struct {
		name   string
		env    []string
		closed bool // the toolkit's envvar window closed
		want   int  // GPUs cudaprobe sees
	}{
		{"pending-answer-after-image-all", []string{all, marker, void}, false, 0},
		{"c76a8e6-pending-answer-after-image-all", []string{all, marker}, false, gpus},
		{"pod-envFrom-all-after-pending-answer-known-gap", []string{marker, void, all}, false, gpus},
		{"pod-envFrom-all-after-pending-answer-window-closed", []string{marker, void, all}, true, 0},
	}
	cfg := filepath.Join(c.State, "toolkit/.config/nvidia-container-runtime/config.toml")
	orig, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatalf("the local node's toolkit config: %v", err)
	}
	const key = "accept-nvidia-visible-devices-envvar-when-unprivileged"
	if !strings.Contains(string(orig), key+" = true") {
		t.Fatalf("%s does not set %s = true", cfg, key)
	}
	got := map[string]cudaProbe{}
	for i, tc := range cases {
		if tc.closed {
			if err := os.WriteFile(cfg, []byte(strings.Replace(string(orig), key+" = true", key+" = false", 1)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got[tc.name] = runPlanless(t, rt, c.State, fmt.Sprintf("planless-%d-%d", time.Now().UnixNano(), i), tc.env)
		if err := os.WriteFile(cfg, orig, 0o644); err != nil {
			t.Fatalf("restore %s: %v", cfg, err)
		}
	}
	thaw()
	resumeKubelet()
	for _, tc := range cases {
		p := got[tc.name]
		t.Logf("%s: %d GPUs, error %q", tc.name, len(p.Devices), p.Error)
		if len(p.Devices) != tc.want {
			t.Errorf("%s (env %v): cudaprobe sees %d GPUs %+v (error %q); want %d", tc.name, tc.env, len(p.Devices), p.Devices, p.Error, tc.want)
		}
		// No GPU means no device node and no driver library either: the toolkit injected
		// nothing, so libcuda.so.1 is not in the container.
		if tc.want == 0 && !strings.Contains(p.Error, "dlopen libcuda.so.1") {
			t.Errorf("%s: cudaprobe error %q; want libcuda.so.1 absent (nothing injected)", tc.name, p.Error)
		}
	}
	// The agent is back: its NRI plugin reconnects and the node runs GPU pods with their plan.
	ns := c.Namespace(t)
	pod := c.CreatePod(t, probePod(ns, "after-thaw", gpuLimits{count: 1, memMiB: 1000}))
	c.WaitForRunning(t, ns, pod.Name, 2*time.Minute)
}

// agentPID is the host PID of the device-plugin agent's process: the "device-plugin" process
// whose cgroup names the container's ID.
func agentPID(t *testing.T, statuses []corev1.ContainerStatus) int {
	t.Helper()
	var ids []string
	for _, s := range statuses {
		if _, id, ok := strings.Cut(s.ContainerID, "://"); ok {
			ids = append(ids, id)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, f := range procs {
		comm, err := os.ReadFile(f)
		if err != nil || strings.TrimSpace(string(comm)) != "device-plugin" {
			continue
		}
		cg, err := os.ReadFile(filepath.Join(filepath.Dir(f), "cgroup"))
		if err != nil {
			continue
		}
		for _, id := range ids {
			if strings.Contains(string(cg), id) {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
				return pid
			}
		}
	}
	t.Fatalf("no device-plugin process of containers %v on this host", ids)
	return 0
}

// criClient is a CRI runtime client over containerd's socket.
func criClient(t *testing.T, sock string) runtimeapi.RuntimeServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("CRI client on %s: %v", sock, err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

// runPlanless runs cudaprobe in a new sandbox (host network, so no hostname: runc sets none
// without a UTS namespace of its own) through the CRI with env, as the
// kubelet would create a container of a pod whose plan was never applied, and returns what it
// printed. The sandbox is removed before it returns.
func runPlanless(t *testing.T, rt runtimeapi.RuntimeServiceClient, state, name string, env []string) cudaProbe {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	logDir := filepath.Join(state, "e2e-planless", name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "e2e-planless", Uid: name},
		LogDirectory: logDir,
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}},
	}
	sb, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sbCfg})
	if err != nil {
		t.Fatalf("%s: RunPodSandbox: %v", name, err)
	}
	// Removed before the kubelet is resumed (and on a failure): nothing is left for it to find.
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId})
		_, _ = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId})
		os.RemoveAll(logDir)
	}()
	cc := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
		Image:    &runtimeapi.ImageSpec{Image: WorkloadImage},
		Command:  []string{"/bin/cudaprobe", "--max-mib", "0"},
		LogPath:  "main.log",
	}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		cc.Envs = append(cc.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
	}
	start := time.Now()
	ctr, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: cc, SandboxConfig: sbCfg})
	if err != nil {
		t.Fatalf("%s: CreateContainer: %v", name, err)
	}
	t.Logf("%s: created in %v (a first creation waits for the frozen NRI plugin's timeout)", name, time.Since(start).Round(10*time.Millisecond))
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatalf("%s: StartContainer: %v", name, err)
	}
	for {
		st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr.ContainerId})
		if err != nil {
			t.Fatalf("%s: ContainerStatus: %v", name, err)
		}
		if st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: cudaprobe did not exit: %v", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	b, err := os.ReadFile(filepath.Join(logDir, "main.log"))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	// CRI log lines: "<time> stdout|stderr F|P <text>".
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, " ", 4)
		if len(f) == 4 && f[1] == "stdout" && strings.HasPrefix(f[3], "{") {
			var p cudaProbe
			if err := json.Unmarshal([]byte(f[3]), &p); err != nil {
				t.Fatalf("%s: cudaprobe's JSON: %v\n%s", name, err, b)
			}
			return p
		}
	}
	t.Fatalf("%s: no cudaprobe JSON in the container's log:\n%s", name, b)
	return cudaProbe{}
}

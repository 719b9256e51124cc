//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The DRA-mode suite (issue 13, "End to end"): ResourceClaims written by hand as a DRA user
// would (resource.k8s.io/v1, DeviceClass gpu.hami-go.io, capacity requests memory and cores),
// allocated by stock kube-scheduler and prepared by the driver through CDI on containerd 2.
// Each test pins its claims to its own fake H100 (a CEL selector on the index) where it fills
// one, so the tests do not see each other's shares. They skip on a device-plugin-mode cluster.

// TestDRAClaimsShareOneGPU: three claims with their own memory/cores share gpu-0; every
// container sees its own limits (CUDA_DEVICE_MEMORY_LIMIT_0, CUDA_DEVICE_SM_LIMIT_0) and the
// GPU's UUID (HAMI_GO_GPU_UUIDS; no CUDA_VISIBLE_DEVICES) through the claim's CDI spec; the webhook leaves claim pods on the default
// scheduler (no hami-go limits: the C38 matchConditions skip them).
func TestDRAClaimsShareOneGPU(t *testing.T) {
	c := draCluster(t)
	gpu0 := c.draGPUs(t)["gpu-0"]
	ns := draNamespace(t, c)
	cases := []struct {
		name          string
		memory, cores string
		wantMem       string
	}{
		{"a", "4000Mi", "25", "4000m"},
		{"b", "6000Mi", "30", "6000m"},
		{"c", "2000Mi", "10", "2000m"},
	}
	for _, tc := range cases {
		c.claimAndPod(t, ns, tc.name, gpuClaim{memory: tc.memory, cores: tc.cores, index: 0})
	}
	for _, tc := range cases {
		p := c.WaitForRunning(t, ns, tc.name, 2*time.Minute)
		if p.Spec.SchedulerName != corev1.DefaultSchedulerName {
			t.Errorf("pod %s: schedulerName %q, want %q (claim pods are kube-scheduler's)", tc.name, p.Spec.SchedulerName, corev1.DefaultSchedulerName)
		}
		devs, uid := c.allocatedDevices(t, ns, tc.name)
		if len(devs) != 1 || devs[0] != "gpu-0" {
			t.Errorf("claim %s allocated %v, want [gpu-0]", tc.name, devs)
		}
		waitCDISpec(t, uid, true, 10*time.Second)
		env := c.containerEnv(t, ns, tc.name, "main")
		if tc.name == "a" {
			t.Logf("pod %s (claim memory %s, cores %s) env:\n%s", tc.name, tc.memory, tc.cores, envLines(env, "CUDA_", "NVIDIA_", "HAMI_GO_", "LD_PRELOAD"))
		}
		checkGPUEnv(t, "pod "+tc.name, env, gpu0.uuid, true)
		want := map[string]string{envMemLimit0: tc.wantMem, envSMLimitPrefix + "0": tc.cores}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("pod %s: %s = %q, want %q", tc.name, k, env[k], v)
			}
		}
		if v, ok := env["CUDA_DEVICE_SM_LIMIT"]; ok {
			t.Errorf("pod %s: CUDA_DEVICE_SM_LIMIT = %q; hami-go sets the per-GPU limits only", tc.name, v)
		}
		if _, ok := env["CUDA_DEVICE_MEMORY_LIMIT_1"]; ok {
			t.Errorf("pod %s: CUDA_DEVICE_MEMORY_LIMIT_1 set for a one-GPU claim", tc.name)
		}
	}
}

// TestDRAClaimLargerThanAnyGPU: a claim for more memory than any GPU offers (81921 MiB on
// 80 GiB H100s) stays Pending with kube-scheduler's "cannot allocate all claims", and
// `kubectl hami-go why` says why, device by device (issue 13: kube-scheduler does not).
func TestDRAClaimLargerThanAnyGPU(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	c.claimAndPod(t, ns, "huge", gpuClaim{memory: "81921Mi", index: -1})
	msg := c.waitPodUnschedulable(t, ns, "huge", time.Minute)
	if !strings.Contains(msg, draUnschedulable) {
		t.Errorf("PodScheduled message %q, want it to contain %q", msg, draUnschedulable)
	}
	t.Logf("scheduler: %s", msg)
	c.stillPending(t, ns, "huge", 3*time.Second)
	if devs, _ := c.allocatedDevices(t, ns, "huge"); devs != nil {
		t.Errorf("claim huge allocated %v, want no allocation", devs)
	}
	why := c.plugin(t, buildPlugin(t), "why", "huge", "-n", ns)
	t.Logf("kubectl hami-go why huge:\n%s", why)
	for _, s := range []string{"Pod " + ns + "/huge: Pending", "claim huge request", "81921 MiB", "gpu-0 ", " MiB free of 81920 (too small)", "(even with the node's devices free)", draUnschedulable} {
		if !strings.Contains(why, s) {
			t.Errorf("kubectl hami-go why huge lacks %q", s)
		}
	}
}

// TestDRASplitCountOneGPU: split count 10 (the sharers capacity): ten 100 MiB claims on gpu-1
// run; the eleventh, which would fit in memory, stays Pending.
//
// The claims are created one after another, each pod bound before the next is created. In a
// burst, kube-scheduler v1.37.2 can refuse the last share of a device: between a claim's
// allocation write and the end of its PreBind, GatherAllocatedState counts that claim's consumed
// capacity twice (informer cache and in-flight map), and no later event requeues the refused
// pod until the unschedulable-pods flush, 5 minutes later (docs/dra.md "Limits and notes").
// With nothing in flight when the tenth claim is scheduled, what is measured here is the split
// count alone; TestDRABurstOneSlicePods covers the burst.
func TestDRASplitCountOneGPU(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	const split = 10
	for i := 0; i < split; i++ {
		name := fmt.Sprintf("s-%02d", i)
		c.claimAndPod(t, ns, name, gpuClaim{memory: "100Mi", index: 1})
		c.waitBound(t, ns, name, time.Minute)
	}
	pods := c.waitAllRunning(t, ns, split, 3*time.Minute)
	for _, p := range pods {
		if devs, _ := c.allocatedDevices(t, ns, p.Name); len(devs) != 1 || devs[0] != "gpu-1" {
			t.Errorf("claim %s allocated %v, want [gpu-1]", p.Name, devs)
		}
	}
	c.claimAndPod(t, ns, "eleventh", gpuClaim{memory: "100Mi", index: 1})
	msg := c.waitPodUnschedulable(t, ns, "eleventh", time.Minute)
	if !strings.Contains(msg, draUnschedulable) {
		t.Errorf("PodScheduled message %q, want it to contain %q", msg, draUnschedulable)
	}
	c.stillPending(t, ns, "eleventh", 3*time.Second)
}

// TestDRATwoGPUClaim: a claim with count 2 gets two distinct GPUs; the container sees both
// UUIDs in PCI bus order and a memory and compute limit for each position.
func TestDRATwoGPUClaim(t *testing.T) {
	c := draCluster(t)
	gpus := c.draGPUs(t)
	ns := draNamespace(t, c)
	c.claimAndPod(t, ns, "two", gpuClaim{count: 2, memory: "1000Mi", cores: "10", index: -1})
	c.WaitForRunning(t, ns, "two", 2*time.Minute)
	devs, _ := c.allocatedDevices(t, ns, "two")
	if len(devs) != 2 || devs[0] == devs[1] {
		t.Fatalf("claim two allocated %v, want two distinct devices", devs)
	}
	env := c.containerEnv(t, ns, "two", "main")
	checkGPUEnv(t, "pod two", env, pciOrdered([]string{gpus[devs[0]].uuid, gpus[devs[1]].uuid}, draBusIDs(gpus)), true)
	for k, want := range map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "1000m", "CUDA_DEVICE_MEMORY_LIMIT_1": "1000m",
		envSMLimitPrefix + "0": "10", envSMLimitPrefix + "1": "10"} {
		if env[k] != want {
			t.Errorf("%s = %q, want %s", k, env[k], want)
		}
	}
}

// TestDRAXIDTaintsGPU: an injected fatal XID (79) on gpu-2 puts the driver's NoSchedule taint
// on it in the ResourceSlice; a claim pinned to it stays Pending and an unpinned one runs
// elsewhere; after the fake GPU recovers (probes succeed) the taint goes and the pinned claim's
// pod runs.
func TestDRAXIDTaintsGPU(t *testing.T) {
	c := draCluster(t)
	g := c.draGPUs(t)["gpu-2"]
	if len(g.taints) != 0 {
		t.Fatalf("gpu-2 already tainted: %+v", g.taints)
	}
	ns := draNamespace(t, c)
	c.fakeFault(t, "xid", g.uuid, 79)
	t.Cleanup(func() { c.fakeFault(t, "recover", g.uuid, 0); c.waitTaint(t, "gpu-2", false, 90*time.Second) })
	tainted := c.waitTaint(t, "gpu-2", true, 30*time.Second)
	for _, tn := range tainted.taints {
		if tn.Key == draTaintKey && (tn.Value != "xid-79" || tn.Effect != resourcev1.DeviceTaintEffectNoSchedule) {
			t.Errorf("taint %+v, want %s=xid-79:NoSchedule", tn, draTaintKey)
		}
	}
	c.claimAndPod(t, ns, "pinned", gpuClaim{memory: "1000Mi", index: 2})
	msg := c.waitPodUnschedulable(t, ns, "pinned", time.Minute)
	if !strings.Contains(msg, draUnschedulable) {
		t.Errorf("PodScheduled message %q, want it to contain %q", msg, draUnschedulable)
	}
	c.claimAndPod(t, ns, "anywhere", gpuClaim{memory: "1000Mi", index: -1})
	c.WaitForRunning(t, ns, "anywhere", 2*time.Minute)
	if devs, _ := c.allocatedDevices(t, ns, "anywhere"); len(devs) != 1 || devs[0] == "gpu-2" {
		t.Errorf("claim anywhere allocated %v, want one device other than the tainted gpu-2", devs)
	}
	c.stillPending(t, ns, "pinned", time.Second)

	start := time.Now()
	c.fakeFault(t, "recover", g.uuid, 0)
	c.waitTaint(t, "gpu-2", false, 90*time.Second)
	t.Logf("taint removed %v after recovery began", time.Since(start).Round(time.Millisecond))
	c.WaitForRunning(t, ns, "pinned", 2*time.Minute)
	if devs, _ := c.allocatedDevices(t, ns, "pinned"); len(devs) != 1 || devs[0] != "gpu-2" {
		t.Errorf("claim pinned allocated %v, want [gpu-2]", devs)
	}
}

// TestDRADeletedPodFreesShare: a pod whose claim (from a ResourceClaimTemplate) holds 60000 MiB
// of gpu-3 keeps a 30000 MiB claim on gpu-3 Pending; force-deleting the pod frees the share and
// the waiting pod runs within 45 s (its prepare waits in the driver for big's Unprepare rather
// than being refused into the kubelet's minute-long resync).
func TestDRADeletedPodFreesShare(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: gpuClaim{memory: "60000Mi", index: 3}.spec()},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	big := claimPod(ns, "big", "big", true)
	// A preStop hook that outlasts the kubelet's minimum grace period (2 s) holds the force
	// deletion's container stop, and so big's Unprepare, about 2 s: waiting's prepare comes
	// first (it ran 1 s after the deletion without the hook).
	big.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sleep", "30"}}}}
	c.CreatePod(t, big)
	c.WaitForRunning(t, ns, "big", 2*time.Minute)
	c.claimAndPod(t, ns, "waiting", gpuClaim{memory: "30000Mi", index: 3})
	c.waitPodUnschedulable(t, ns, "waiting", time.Minute)
	c.stillPending(t, ns, "waiting", 2*time.Second)
	deleted := time.Now()
	c.deleteNow(t, ns, "big")
	c.WaitForRunning(t, ns, "waiting", 2*time.Minute)
	// The force delete frees big's capacity in the API before the kubelet has unprepared it; a
	// prepare of waiting's claim in between waits in the driver (--prepare-wait) for that
	// Unprepare. Refused instead, the kubelet would retry it only at its next pod sync (60-90 s).
	took := time.Since(deleted)
	drv := c.driverPod(t)
	waited := strings.Contains(c.Logs(t, chartNamespace, drv.Name, drv.Spec.Containers[0].Name), `"Waiting for prepared claims to be unprepared"`)
	t.Logf("waiting ran %v after big's deletion (the driver waited for big's Unprepare: %v)", took.Round(100*time.Millisecond), waited)
	if took > 45*time.Second {
		t.Errorf("waiting ran %v after big was deleted, want under 45s (no refused prepare left to the kubelet's resync)", took.Round(time.Second))
	}
	if env := c.containerEnv(t, ns, "waiting", "main"); env[envMemLimit0] != "30000m" {
		t.Errorf("waiting: %s = %q, want 30000m", envMemLimit0, env[envMemLimit0])
	}
}

// TestDRAHealthInPodStatus: the driver's health stream (WatchHealthStatus) reaches the pod. A
// running pod whose claim holds gpu-5 shows the device Healthy in its container's
// allocatedResourcesStatus (kubelet feature ResourceHealthStatus, beta and on by default since
// 1.36; the message needs ResourceHealthStatusMessage, the same); an injected XID 79 turns it
// Unhealthy with the driver's message, and recovery turns it Healthy again.
func TestDRAHealthInPodStatus(t *testing.T) {
	c := draCluster(t)
	g := c.draGPUs(t)["gpu-5"]
	if len(g.taints) != 0 {
		t.Fatalf("gpu-5 already tainted: %+v", g.taints)
	}
	ns := draNamespace(t, c)
	c.claimAndPod(t, ns, "watched", gpuClaim{memory: "1000Mi", index: 5})
	c.WaitForRunning(t, ns, "watched", 2*time.Minute)
	_, uid := c.allocatedDevices(t, ns, "watched")
	wantID := corev1.ResourceID(draClass + "/claim=" + string(uid))

	c.waitDeviceHealth(t, ns, "watched", wantID, corev1.ResourceHealthStatusHealthy, "", time.Minute)
	c.fakeFault(t, "xid", g.uuid, 79)
	t.Cleanup(func() { c.fakeFault(t, "recover", g.uuid, 0); c.waitTaint(t, "gpu-5", false, 90*time.Second) })
	start := time.Now()
	c.waitDeviceHealth(t, ns, "watched", wantID, corev1.ResourceHealthStatusUnhealthy, "fatal XID 79 since ", time.Minute)
	t.Logf("pod status Unhealthy %v after the XID", time.Since(start).Round(100*time.Millisecond))
	start = time.Now()
	c.fakeFault(t, "recover", g.uuid, 0)
	c.waitDeviceHealth(t, ns, "watched", wantID, corev1.ResourceHealthStatusHealthy, "", 90*time.Second)
	t.Logf("pod status Healthy again %v after recovery began", time.Since(start).Round(100*time.Millisecond))
}

// waitDeviceHealth waits until container "main" of ns/name lists, under claim:gpu, exactly one
// device: id with health want and (when msg is not "") a message starting with msg.
func (c *Cluster) waitDeviceHealth(t testing.TB, ns, name string, id corev1.ResourceID, want corev1.ResourceHealthStatus, msg string, timeout time.Duration) {
	t.Helper()
	var got []corev1.ResourceStatus
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		got = p.Status.ContainerStatuses[0].AllocatedResourcesStatus
		for _, rs := range got {
			if rs.Name != "claim:gpu" || len(rs.Resources) != 1 {
				continue
			}
			r := rs.Resources[0]
			m := ""
			if r.Message != nil {
				m = *r.Message
			}
			return r.ResourceID == id && r.Health == want && strings.HasPrefix(m, msg), nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: allocatedResourcesStatus %+v after %v, want claim:gpu with %s %s (message %q...)", ns, name, got, timeout, id, want, msg)
	}
}

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// containerID is the running container "main" of ns/name (fails when it is not running).
func (c *Cluster) containerID(t testing.TB, ns, name string) string {
	t.Helper()
	p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	if !allStarted(p) {
		t.Fatalf("pod %s/%s is not running:\n%s", ns, name, c.describe(ns, name, p))
	}
	return p.Status.ContainerStatuses[0].ContainerID
}

// keptRunning asserts ns/name still runs the same container (id) with no restarts.
func (c *Cluster) keptRunning(t testing.TB, ns, name, id, after string) {
	t.Helper()
	p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	if !allStarted(p) || p.Status.ContainerStatuses[0].ContainerID != id || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("after %s pod %s: want container %s running without restarts:\n%s", after, name, id, c.describe(ns, name, p))
	}
}

// prepared runs a claim pod and checks its limit and its CDI spec; it returns the claim's UID.
func (c *Cluster) prepared(t testing.TB, ns, name, memory, wantLimit string) string {
	t.Helper()
	c.claimAndPod(t, ns, name, gpuClaim{memory: memory, index: 4})
	c.WaitForRunning(t, ns, name, 2*time.Minute)
	if env := c.containerEnv(t, ns, name, "main"); env[envMemLimit0] != wantLimit {
		t.Errorf("pod %s: %s = %q, want %s", name, envMemLimit0, env[envMemLimit0], wantLimit)
	}
	_, uid := c.allocatedDevices(t, ns, name)
	waitCDISpec(t, uid, true, 10*time.Second)
	return string(uid)
}

// TestDRAKubeletAndDriverRestart: neither a kubelet restart (hack/cluster/restart.sh) nor a
// driver restart (its pod deleted; the DaemonSet makes a new one, which reads its checkpoint)
// loses anything: prepared claims' pods keep their containers, new claims prepare, and
// claims prepared before the restart are unprepared (their CDI spec removed) when their pod
// goes. Claims use gpu-4. After the driver restart the test waits for the new driver pod to be
// Ready (its /readyz: registered with the kubelet), not for a kubelet log line.
func TestDRAKubeletAndDriverRestart(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	uidA := c.prepared(t, ns, "a", "1000Mi", "1000m")
	idA := c.containerID(t, ns, "a")

	off := c.kubeletLogSize(t)
	c.clusterScript(t, "restart.sh", "restart", "kubelet")
	t.Cleanup(func() { c.waitNodeReady(t, 2*time.Minute) })
	c.waitNodeReady(t, time.Minute)
	c.waitDRARegistered(t, off, time.Minute)
	c.keptRunning(t, ns, "a", idA, "the kubelet restart")
	uidB := c.prepared(t, ns, "b", "2000Mi", "2000m")
	idB := c.containerID(t, ns, "b")
	c.deleteNow(t, ns, "a")
	waitCDISpec(t, typesUID(uidA), false, time.Minute)

	old := c.driverPod(t)
	if err := c.Client.CoreV1().Pods(chartNamespace).Delete(context.Background(), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete driver pod %s: %v", old.Name, err)
	}
	var fresh corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: labelComponent + "=dra-driver"})
		if err != nil {
			return false, nil
		}
		for _, p := range l.Items {
			if p.Name != old.Name && podReady(&p) {
				fresh = p
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no new dra-driver pod Ready 2m after deleting %s", old.Name)
	}
	// Ready is the driver's /readyz: the kubelet has registered it (so the next prepare is not
	// refused with "not registered").
	t.Logf("driver pod %s replaced by %s (Ready: registered with the kubelet)", old.Name, fresh.Name)
	c.keptRunning(t, ns, "b", idB, "the driver restart")
	c.prepared(t, ns, "c", "3000Mi", "3000m")
	c.deleteNow(t, ns, "b")
	waitCDISpec(t, typesUID(uidB), false, time.Minute)
}

// TestDRABurstOneSlicePods times 50 identical one-slice pods (each with its own claim of
// 1000 MiB from one ResourceClaimTemplate) from creation to all Running, against the same 50
// pods without GPUs, and logs the ratio (issue 13 "Speed": target <= 1.1; a benchmark figure,
// not asserted). Every container sees its 1000m limit; no GPU has more than 10 claims.
func TestDRABurstOneSlicePods(t *testing.T) {
	c := draCluster(t)
	var plain time.Duration
	t.Run("without-gpu", func(t *testing.T) {
		ns := draNamespace(t, c)
		_, plain = c.timedBurstTimeline(t, ns, burstPods(ns, "plain", burstSize, gpuLimits{}), false)
		t.Logf("%d pods without GPUs Running in %v", burstSize, plain.Round(time.Millisecond))
	})
	ns := draNamespace(t, c)
	if _, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "slice", Namespace: ns},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: gpuClaim{memory: "1000Mi", index: -1}.spec()},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := make([]*corev1.Pod, burstSize)
	for i := range pods {
		pods[i] = claimPod(ns, fmt.Sprintf("slice-%02d", i), "slice", true)
	}
	running, dra := c.timedBurstTimeline(t, ns, pods, true)
	t.Logf("%d one-slice claim pods Running in %v", burstSize, dra.Round(time.Millisecond))
	if plain > 0 {
		t.Logf("burst time ratio DRA/plain = %.2f (target <= 1.1; %v vs %v)", dra.Seconds()/plain.Seconds(), dra.Round(time.Millisecond), plain.Round(time.Millisecond))
	}
	perGPU := map[string]int{}
	for i := range running {
		p := &running[i]
		if env := c.containerEnv(t, ns, p.Name, "main"); env[envMemLimit0] != "1000m" {
			t.Errorf("pod %s: %s = %q, want 1000m", p.Name, envMemLimit0, env[envMemLimit0])
		}
		if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			t.Errorf("pod %s: claim statuses %+v", p.Name, p.Status.ResourceClaimStatuses)
			continue
		}
		devs, _ := c.allocatedDevices(t, ns, *p.Status.ResourceClaimStatuses[0].ResourceClaimName)
		for _, d := range devs {
			perGPU[d]++
		}
	}
	for d, n := range perGPU {
		if n > 10 {
			t.Errorf("%s holds %d claims of this burst, above the split count 10", d, n)
		}
	}
	t.Logf("claims per GPU: %v", perGPU)
}

func typesUID(s string) types.UID { return types.UID(s) }

// podReady reports whether the pod's Ready condition is True.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

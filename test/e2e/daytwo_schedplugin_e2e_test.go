//go:build e2e && daytwo

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/device"
)

// pluginImageRepo is the repository of kube-scheduler built with hami-go's plugin HamiGo (the
// chart's scheduler.plugin.image; hack/images component kube-scheduler-hami-go, imported by
// hack/cluster/up.sh).
const pluginImageRepo = "docker.io/hami-go/kube-scheduler-hami-go"

// schedPluginWait bounds the scheduler Deployment's rollout after each helm upgrade: the old pod's
// end (one replica on the node's network: replaced in place), the new one's start and, for the
// extender, its cache rebuilt before kube-scheduler starts.
const schedPluginWait = 3 * time.Minute

// schedPluginBurst is the number of one-slice pods the plugin places at once.
const schedPluginBurst = 20

// TestDayTwoSchedulerPlugin (device-plugin mode): the release upgraded to
// scheduler.placement=plugin, the scheduler Deployment's pods run one container of the plugin
// image (no extender sidecar) and are ready; a burst of 20 one-slice pods (1 GPU, 1000 MiB) all
// run, placed by the plugin: each carries the planned allocation (hami-go.io/allocation-planned,
// the extender's one-write bind), no GPU is over-committed, each container sees its own GPU
// and 1000 MiB limit; a pod that fits on no GPU (more MiB than any GPU has) stays Pending with
// a FailedScheduling event giving hami-go's reason, and one asking more GPUs than the node
// advertises with NodeResourcesFit's (checkPluginFitRefusal); kube-scheduler's /metrics serves
// the plugin's GPU bookings to a token allowed to read it, and refuses one that is not
// (checkPluginMetrics); on a fragmented node the own preemption evicts nothing for a pod whose
// nodeSelector no node matches and one pod for a pod that may run there (checkPluginPreemption);
// The release is put back (placement
// extender) at the end and the extender's pods waited for.
func TestDayTwoSchedulerPlugin(t *testing.T) {
	c := NewCluster(t)
	if c.isDRAMode(t) {
		t.Skipf("device-plugin-mode test: the cluster is in DRA mode (DeviceClass %s exists), where stock kube-scheduler allocates the GPU claims and the chart installs no hami-go scheduler to place by plugin", draClass)
	}
	c.requireChart(t)
	c.requirePluginImage(t)
	h := c.helm(t)
	t.Cleanup(func() {
		c.installMode(t, h, "deviceplugin")
		c.waitSchedulerPods(t, "the extender's", extenderSchedulerPod)
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.componentPods(t, "scheduler") {
				t.Logf("%s[kube-scheduler] log (tail):\n%s", p.Name, c.logTail(chartNamespace, p.Name, "kube-scheduler", 60))
			}
		}
	})
	c.installMode(t, h, "deviceplugin", "scheduler.placement=plugin")
	c.waitSchedulerPods(t, "the plugin's", pluginSchedulerPod)
	c.waitDeploymentReady(t, schedulerName, 1, schedPluginWait)

	ns := e2eNamespace(t, c)
	inv := c.inventory(t)
	pods, took := c.timedBurst(t, ns, burstPods(ns, "plugin", schedPluginBurst, gpuLimits{count: 1, memMiB: 1000}))
	t.Logf("%d one-slice pods Running in %v, placed by the HamiGo plugin", len(pods), took.Round(time.Millisecond))
	checkNotOvercommitted(t, inv, c.nodeUsage(t))
	for i := range pods {
		p := &pods[i]
		if planned, _ := allocations(t, p); planned == nil || planned.Node != c.NodeName || p.Spec.NodeName != c.NodeName {
			t.Errorf("pod %s on node %q: planned allocation %+v, want one for %s (the plugin's bind writes it)", p.Name, p.Spec.NodeName, planned, c.NodeName)
		}
		c.checkOwnLimit(t, p, 1000)
	}
	c.checkPluginMetrics(t, ns, len(pods), 1000)
	c.checkPluginRefusal(t, ns, maxGPUMiB(inv)+1000)
	c.checkPluginFitRefusal(t, ns)
	c.checkPluginPreemption(t, ns, "the extender's own loop (preemption own)")
}

// checkPluginFitRefusal: a pod asking one more GPU count (nvidia.com/gpu) than the node
// advertises stays Pending with NodeResourcesFit's reason, which the chart's profile has from
// the build's HamiGoNodeResourcesFit (cmd/kube-scheduler-hami-go/nodefit): "Insufficient
// nvidia.com/gpu", as upstream's plugin words it.
func (c *Cluster) checkPluginFitRefusal(t *testing.T, ns string) {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", c.NodeName, err)
	}
	alloc := n.Status.Allocatable[resCount]
	const name = "too-many"
	c.CreatePod(t, gpuPod(ns, name, gpuLimits{count: int(alloc.Value()) + 1, memMiB: 100}))
	msg := c.waitUnschedulable(t, ns, name)
	t.Logf("FailedScheduling of %s: %s", name, msg)
	if !strings.Contains(msg, "Insufficient "+resCount) {
		t.Errorf("FailedScheduling of %s (%d of the node's %s %s): %q, want NodeResourcesFit's \"Insufficient %s\"", name, alloc.Value()+1, alloc.String(), resCount, msg, resCount)
	}
}

// requirePluginImage fails the test before any upgrade when the node has no image of
// pluginImageRepo (the kubelet's list of the node's images): a cluster brought up by an older
// tree, whose hack/images did not build it.
func (c *Cluster) requirePluginImage(t testing.TB) {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", c.NodeName, err)
	}
	for _, img := range n.Status.Images {
		for _, name := range img.Names {
			if strings.HasPrefix(name, pluginImageRepo+":") {
				return
			}
		}
	}
	t.Fatalf("node %s has no %s image: run this tree's hack/cluster/up.sh (hack/images builds it, components.sh imports it)", c.NodeName, pluginImageRepo)
}

// pluginSchedulerPod accepts a scheduler pod of placement plugin: one container, kube-scheduler
// from the plugin image, no extender sidecar.
func pluginSchedulerPod(p *corev1.Pod) error {
	if len(p.Spec.Containers) != 1 || len(p.Spec.InitContainers) != 0 {
		return fmt.Errorf("containers %d, init containers %d: want kube-scheduler alone", len(p.Spec.Containers), len(p.Spec.InitContainers))
	}
	if img := p.Spec.Containers[0].Image; !strings.HasPrefix(img, pluginImageRepo+":") {
		return fmt.Errorf("image %s, want %s", img, pluginImageRepo)
	}
	return nil
}

// extenderSchedulerPod accepts a scheduler pod of placement extender: stock kube-scheduler and
// the extender sidecar.
func extenderSchedulerPod(p *corev1.Pod) error {
	if len(p.Spec.InitContainers) != 1 || p.Spec.InitContainers[0].Name != "extender" {
		return fmt.Errorf("no extender sidecar")
	}
	if img := p.Spec.Containers[0].Image; strings.HasPrefix(img, pluginImageRepo+":") {
		return fmt.Errorf("kube-scheduler image %s is the plugin's", img)
	}
	return nil
}

// waitSchedulerPods waits until the scheduler Deployment has pods, all of them Ready (every
// container and sidecar) and accepted by check; what names them in the failure.
func (c *Cluster) waitSchedulerPods(t testing.TB, what string, check func(*corev1.Pod) error) {
	t.Helper()
	last := "no scheduler pod"
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, schedPluginWait, true, func(context.Context) (bool, error) {
		pods := c.componentPods(t, "scheduler")
		if len(pods) == 0 {
			last = "no scheduler pod"
			return false, nil
		}
		for i := range pods {
			p := &pods[i]
			if err := check(p); err != nil {
				last = fmt.Sprintf("pod %s: %v", p.Name, err)
				return false, nil
			}
			if !podReady(p) {
				last = fmt.Sprintf("pod %s is %s, not Ready: %s", p.Name, p.Status.Phase, waitingReasons(p))
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s scheduler pods not ready within %v: %s", what, schedPluginWait, last)
	}
}

// waitingReasons lists the pod's waiting containers as name=reason (ErrImageNeverPull: the node
// lacks the image).
func waitingReasons(p *corev1.Pod) string {
	var out []string
	for _, s := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if s.State.Waiting != nil {
			out = append(out, s.Name+"="+s.State.Waiting.Reason)
		}
	}
	return strings.Join(out, ", ")
}

// maxGPUMiB is the most MiB one GPU of inv offers (its memory times the inventory's scaling).
func maxGPUMiB(inv device.Inventory) int64 {
	var m int64
	for _, g := range inv.GPUs {
		m = max(m, int64(float64(g.MemoryMiB)*inv.MemoryScaling))
	}
	return m
}

// checkPluginRefusal creates a one-GPU pod of mib MiB, more than any GPU has: the plugin's
// Filter refuses every GPU, so kube-scheduler reports FailedScheduling with hami-go's reason
// (the container, its request and why, even with the node empty) and the pod stays Pending.
func (c *Cluster) checkPluginRefusal(t *testing.T, ns string, mib int64) {
	t.Helper()
	const name = "too-big"
	c.CreatePod(t, gpuPod(ns, name, gpuLimits{count: 1, memMiB: mib}))
	msg := c.waitUnschedulable(t, ns, name)
	for _, want := range []string{fmt.Sprintf(`container "main" (1 GPU, %d MiB)`, mib), "MiB free", "(even with the node empty)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("FailedScheduling of %s: %q, want hami-go's reason with %q", name, msg, want)
		}
	}
	p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
		t.Errorf("%s: phase %s on node %q, want Pending and unbound", name, p.Status.Phase, p.Spec.NodeName)
	}
}

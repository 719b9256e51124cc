//go:build e2e && daytwo

package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// checkPluginPreemption (cases C65, C66): GPU preemption through the plugin, by, as how says,
// the extender's own loop (the chart's preemption own) or kube-scheduler's DefaultPreemption
// (preemption verb: its dry run removes the node's lower-priority pods and adds back those the
// pod can live with, and HamiGo's Filter follows through PreFilterExtensions), on a fragmented
// node, after the pods of ns that hold GPUs are deleted. Every GPU holds one pod of 50000 MiB
// (half low priority, half mid: preemptionFill). A high-priority pod of 40000 MiB whose
// nodeSelector matches no node evicts nobody: NodeAffinity refuses the node before HamiGo's
// Filter runs there, so HamiGo's PostFilter offers the pod for preemption nowhere (before, the
// weighing at PreFilter offered every node, and a victim was evicted for a pod that could never
// run there), and DefaultPreemption does not try a node refused as unresolvable. The same pod
// without the selector evicts exactly one pod of the lowest priority and runs on the GPU that
// pod held (before C66's fix, DefaultPreemption found no victim for a GPU pod). It returns the
// namespace of its pods.
func (c *Cluster) checkPluginPreemption(t *testing.T, ns, how string) string {
	t.Helper()
	l, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Items {
		if p.Spec.NodeName != "" {
			c.deleteNow(t, ns, p.Name)
		}
	}
	pns := e2eNamespace(t, c)
	low, mid, high := c.e2ePriorityClasses(t)
	byGPU := c.preemptionFill(t, pns, 50000, low, mid)

	nowhere := gpuPod(pns, "nowhere", gpuLimits{count: 1, memMiB: 40000})
	nowhere.Spec.PriorityClassName = high
	nowhere.Spec.NodeSelector = map[string]string{"hami-go.io/e2e-no-such-node": "true"}
	c.CreatePod(t, nowhere)
	t.Logf("FailedScheduling of nowhere: %s", c.waitUnschedulable(t, pns, "nowhere"))
	time.Sleep(6 * time.Second) // the own loop preempts 1 s after an offer, DefaultPreemption at once: several cycles
	if l, err = c.Client.CoreV1().Pods(pns).List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	alive := 0
	for _, p := range l.Items {
		if strings.HasPrefix(p.Name, "fill-") && p.DeletionTimestamp == nil {
			alive++
		}
	}
	if alive != len(byGPU) {
		t.Fatalf("%d of %d fill pods left after a pod no node's labels admit waited: GPUs preempted for it\n%s", alive, len(byGPU), c.describe(pns, "", nil))
	}
	c.deleteNow(t, pns, "nowhere")

	pre := gpuPod(pns, "preemptor", gpuLimits{count: 1, memMiB: 40000})
	pre.Spec.PriorityClassName = high
	c.CreatePod(t, pre)
	victim, gpu := c.waitOneVictim(t, pns, byGPU, 90*time.Second)
	got := c.WaitForRunning(t, pns, "preemptor", 2*time.Minute)
	if n, _ := strconv.Atoi(strings.TrimPrefix(victim, "fill-")); n >= len(byGPU)/2 {
		t.Errorf("victim %s is of priority class %s; want one of %s (lowest priority first)", victim, mid, low)
	}
	if planned, _ := allocations(t, got); planned == nil || planned.Containers[0].Devices[0].UUID != gpu {
		t.Errorf("preemptor planned %+v; want the victim's GPU %s", planned, gpu)
	}
	t.Logf("through the plugin, by %s: the pod no node admits evicted none of %d; the preemptor evicted %s and runs on its GPU %s", how, len(byGPU), victim, gpu)
	checkNotOvercommitted(t, c.inventory(t), c.nodeUsage(t))
	return pns
}

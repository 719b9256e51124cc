//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hami-go/hami-go/pkg/drapreempt"
)

// Issue 37 item 11: preemption in DRA mode (docs/dra.md, "Preemption in DRA mode").
// kube-scheduler 1.37 does not preempt for pods with claims; the webhook's DRA preemption
// controller (--dra-preemption, chart webhook.draPreemption) does.

// draNodeDevices is the number of devices the driver publishes for the test node.
func (c *Cluster) draNodeDevices(t *testing.T) int {
	t.Helper()
	l, err := c.Client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range l.Items {
		if s.Spec.Driver == draClass && s.Spec.NodeName != nil && *s.Spec.NodeName == c.NodeName {
			n += len(s.Spec.Devices)
		}
	}
	if n == 0 {
		t.Fatalf("no device of %s published for node %s", draClass, c.NodeName)
	}
	return n
}

// TestDRAPreemptionOneVictim: every GPU of the node is full with one low-priority pod asking
// all of its memory (nvidia.com/gpumem through the webhook: 81920 MiB on the 80 GiB cards); a
// high-priority pod asking 40000 MiB preempts exactly one of them, is nominated to the node
// first, and then runs; the victim carries the "Preempted" Event naming the preemptor.
func TestDRAPreemptionOneVictim(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	low, _, high := c.e2ePriorityClasses(t)
	mem := c.draMemoryMiB(t)
	gpus := c.draNodeDevices(t)
	byGPU := map[string]string{}
	for i := range gpus {
		name := fmt.Sprintf("fill-%d", i)
		p := gpuPod(ns, name, gpuLimits{count: 1, memMiB: mem})
		p.Spec.PriorityClassName = low
		c.CreatePod(t, p)
		byGPU[name] = name
	}
	c.waitAllRunning(t, ns, gpus, 3*time.Minute)

	pre := min(int64(40000), mem/2)
	p := gpuPod(ns, "high", gpuLimits{count: 1, memMiB: pre})
	p.Spec.PriorityClassName = high
	c.CreatePod(t, p)

	victim, _ := c.waitOneVictim(t, ns, byGPU, 3*time.Minute)
	msg := c.eventWith(t, ns, victim, drapreempt.ReasonPreempted, time.Minute)
	if !strings.Contains(msg, "on node "+c.NodeName) {
		t.Errorf("victim %s: Preempted Event %q does not name node %s", victim, msg, c.NodeName)
	}
	c.eventWith(t, ns, "high", drapreempt.ReasonPreempting, time.Minute)
	run := c.WaitForRunning(t, ns, "high", 3*time.Minute)
	if run.Spec.NodeName != c.NodeName {
		t.Errorf("preemptor runs on %q, want %s", run.Spec.NodeName, c.NodeName)
	}
	// Exactly one victim, still: the others keep running.
	l, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alive := 0
	for _, q := range l.Items {
		if strings.HasPrefix(q.Name, "fill-") && q.DeletionTimestamp == nil {
			alive++
		}
	}
	if alive != gpus-1 {
		t.Errorf("%d fill pods alive, want %d (exactly one victim)", alive, gpus-1)
	}
}

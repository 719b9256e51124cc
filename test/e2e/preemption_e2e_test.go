//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/extender"
)

// Case C43: preemption by GPU memory, exact per GPU, in device-plugin mode.

// e2ePriorityClasses creates the PriorityClasses the preemption tests use (low 100, mid 500,
// high 1000, and hami-e2e-high-never: 1000 with preemptionPolicy Never, which the Priority
// admission plugin copies onto the pod; kept when they exist) and deletes them at the end.
func (c *Cluster) e2ePriorityClasses(t *testing.T) (low, mid, high string) {
	t.Helper()
	names := map[string]int32{"hami-e2e-low": 100, "hami-e2e-mid": 500, "hami-e2e-high": 1000, "hami-e2e-high-never": 1000}
	for n, v := range names {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: n}, Value: v}
		if n == "hami-e2e-high-never" {
			never := corev1.PreemptNever
			pc.PreemptionPolicy = &never
		}
		_, err := c.Client.SchedulingV1().PriorityClasses().Create(context.Background(), pc, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create PriorityClass %s: %v", n, err)
		}
		t.Cleanup(func() {
			_ = c.Client.SchedulingV1().PriorityClasses().Delete(context.Background(), n, metav1.DeleteOptions{})
		})
	}
	return "hami-e2e-low", "hami-e2e-mid", "hami-e2e-high"
}

// preemptionFill fills every GPU of the node with one pod of perGPU MiB, the first half of them
// at priority class lowPC and the rest at midPC, waits until all run, and returns the pods'
// names by the UUID of the GPU each holds. It fails the test when the node's GPUs are not all
// free at the start (another test's pods).
func (c *Cluster) preemptionFill(t *testing.T, ns string, perGPU int64, lowPC, midPC string) map[string]string {
	t.Helper()
	inv := c.inventory(t)
	for i, free := range freeMiB(inv, c.nodeUsage(t)) {
		if cap := inv.CapacityMiB(&inv.GPUs[i]); free != cap {
			t.Fatalf("GPU %d has %d of %d MiB free at the start: the node must be empty of GPU pods", i, free, cap)
		}
	}
	var pods []*corev1.Pod
	for i := range inv.GPUs {
		p := gpuPod(ns, fmt.Sprintf("fill-%d", i), gpuLimits{count: 1, memMiB: perGPU})
		p.Spec.PriorityClassName = lowPC
		if i >= len(inv.GPUs)/2 {
			p.Spec.PriorityClassName = midPC
		}
		pods = append(pods, p)
	}
	c.createPods(t, pods)
	byGPU := map[string]string{}
	for _, p := range c.waitAllRunning(t, ns, len(pods), 3*time.Minute) {
		planned, _ := allocations(t, &p)
		if planned == nil || len(planned.Containers) != 1 || len(planned.Containers[0].Devices) != 1 {
			t.Fatalf("pod %s: planned allocation %+v, want one GPU", p.Name, planned)
		}
		u := planned.Containers[0].Devices[0].UUID
		if other, dup := byGPU[u]; dup {
			t.Fatalf("pods %s and %s share GPU %s although %d MiB each cannot", other, p.Name, u, perGPU)
		}
		byGPU[u] = p.Name
	}
	return byGPU
}

// waitOneVictim waits until exactly one of the fill pods (byGPU: GPU UUID → pod name) is deleted
// or terminating, and returns its name and GPU; two or more fail the test.
func (c *Cluster) waitOneVictim(t *testing.T, ns string, byGPU map[string]string, timeout time.Duration) (victim, gpu string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		alive := map[string]bool{}
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil {
				alive[p.Name] = true
			}
		}
		var gone []string
		for u, n := range byGPU {
			if !alive[n] {
				gone = append(gone, n)
				victim, gpu = n, u
			}
		}
		if len(gone) > 1 {
			return false, fmt.Errorf("%d pods evicted (%v), want 1", len(gone), gone)
		}
		return len(gone) == 1, nil
	})
	if err != nil {
		t.Fatalf("waiting for one victim: %v\n%s", err, c.describe(ns, "", nil))
	}
	return victim, gpu
}

// eventWith returns the message of the first Event of reason on object name in ns (polling up to
// timeout), or fails the test.
func (c *Cluster) eventWith(t *testing.T, ns, name, reason string, timeout time.Duration) string {
	t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": name, "reason": reason}.String()})
		if err != nil || len(l.Items) == 0 {
			return false, nil
		}
		msg = l.Items[0].Message
		return true, nil
	})
	if err != nil {
		t.Fatalf("no %s Event on %s/%s within %s", reason, ns, name, timeout)
	}
	return msg
}

// TestGPUPreemptionFragmentedNode: every GPU holds one pod of 50000 MiB (half of them at low
// priority, half at mid), so every GPU has about 31920 MiB free and the node's totals (its
// hami-go.io/gpu-memory) still have room: kube-scheduler's own preemption finds no victim there.
// A high-priority pod asking 40000 MiB gets one GPU by the extender's own preemption: exactly one
// victim, of the lowest priority, with kube-scheduler's DisruptionTarget condition and
// "Preempted" Event; the pod runs on the GPU its victim held; a low-priority pod created
// meanwhile never takes that GPU (the hold); a pod with preemptionPolicy Never (from its
// PriorityClass) evicts nothing.
func TestGPUPreemptionFragmentedNode(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	ns := e2eNamespace(t, c)
	low, mid, high := c.e2ePriorityClasses(t)
	byGPU := c.preemptionFill(t, ns, 50000, low, mid)

	pre := gpuPod(ns, "preemptor", gpuLimits{count: 1, memMiB: 40000})
	pre.Spec.PriorityClassName = high
	start := time.Now()
	c.CreatePod(t, pre)
	victim, gpu := c.waitOneVictim(t, ns, byGPU, 90*time.Second)
	// 45000 MiB: more than any GPU offers but the victim's (31920 free elsewhere), and more than
	// it keeps once the preemptor's 40000 are there: it fits only if it takes the freed share.
	sneak := gpuPod(ns, "sneak", gpuLimits{count: 1, memMiB: 45000})
	sneak.Spec.PriorityClassName = low
	c.CreatePod(t, sneak)
	got := c.WaitForRunning(t, ns, "preemptor", 2*time.Minute)
	t.Logf("preemptor Running %.1fs after creation; victim %s on GPU %s", time.Since(start).Seconds(), victim, gpu)

	if n, _ := strconv.Atoi(strings.TrimPrefix(victim, "fill-")); n >= len(byGPU)/2 {
		t.Errorf("victim %s is of priority class %s; want one of %s (lowest priority first)", victim, mid, low)
	}
	planned, _ := allocations(t, got)
	if planned == nil || planned.Containers[0].Devices[0].UUID != gpu {
		t.Errorf("preemptor planned %+v; want the victim's GPU %s", planned, gpu)
	}
	if msg := c.eventWith(t, ns, victim, extender.EventReasonPreempted, 30*time.Second); !strings.Contains(msg, "Preempted by pod "+string(got.UID)+" on node "+c.NodeName) {
		t.Errorf("victim's Event %q; want kube-scheduler's words naming the preemptor's UID and node", msg)
	}
	msg := c.eventWith(t, ns, "preemptor", extender.EventReasonPreempting, 30*time.Second)
	if !strings.Contains(msg, "Preempting 1 pod(s)") || !strings.Contains(msg, ns+"/"+victim) {
		t.Errorf("preemptor's Event %q; want it to name its one victim %s/%s", msg, ns, victim)
	}
	t.Logf("events: preemptor %q", msg)

	// The sneak fits nowhere: the freed GPU went to the preemptor.
	time.Sleep(3 * time.Second)
	if p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), "sneak", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("low-priority pod created during the preemption: node %q err %v; want Pending", p.Spec.NodeName, err)
	}
	checkNotOvercommitted(t, c.inventory(t), c.nodeUsage(t))

	// preemptionPolicy: Never evicts nobody.
	never := gpuPod(ns, "never", gpuLimits{count: 1, memMiB: 45000}) // fits nowhere, like the sneak
	never.Spec.PriorityClassName = "hami-e2e-high-never"
	if got := c.CreatePod(t, never); got.Spec.PreemptionPolicy == nil || *got.Spec.PreemptionPolicy != corev1.PreemptNever {
		t.Fatalf("pod never: preemptionPolicy %v; want Never from its PriorityClass", got.Spec.PreemptionPolicy)
	}
	time.Sleep(8 * time.Second)
	l, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Items {
		if strings.HasPrefix(p.Name, "fill-") && p.Name != victim && p.DeletionTimestamp != nil {
			t.Errorf("pod %s evicted for a pod with preemptionPolicy Never", p.Name)
		}
		if p.Name == "never" && p.Spec.NodeName != "" {
			t.Errorf("pod with preemptionPolicy Never bound to %s; want Pending", p.Spec.NodeName)
		}
	}
	checkNotOvercommitted(t, c.inventory(t), c.nodeUsage(t))
}

// TestGPUPreemptionNodeTotalsFull: every GPU is full (one pod of the GPU's whole memory each), so
// the node's hami-go.io/gpu-memory has no room and kube-scheduler's own preemption dry run finds
// candidates and asks the extender's preempt verb, which names the exact victim (lowest priority).
// The pod is nominated by kube-scheduler and runs on its victim's GPU; nothing is over-committed.
func TestGPUPreemptionNodeTotalsFull(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	ns := e2eNamespace(t, c)
	low, mid, high := c.e2ePriorityClasses(t)
	inv := c.inventory(t)
	byGPU := c.preemptionFill(t, ns, inv.CapacityMiB(&inv.GPUs[0]), low, mid)

	pre := gpuPod(ns, "preemptor", gpuLimits{count: 1, memMiB: 40000})
	pre.Spec.PriorityClassName = high
	start := time.Now()
	c.CreatePod(t, pre)
	victim, gpu := c.waitOneVictim(t, ns, byGPU, 90*time.Second)
	got := c.WaitForRunning(t, ns, "preemptor", 2*time.Minute)
	t.Logf("preemptor Running %.1fs after creation; victim %s on GPU %s", time.Since(start).Seconds(), victim, gpu)
	if n, _ := strconv.Atoi(strings.TrimPrefix(victim, "fill-")); n >= len(byGPU)/2 {
		t.Errorf("victim %s is of priority class %s; want one of %s (lowest priority first)", victim, mid, low)
	}
	planned, _ := allocations(t, got)
	if planned == nil || planned.Containers[0].Devices[0].UUID != gpu {
		t.Errorf("preemptor planned %+v; want the victim's GPU %s", planned, gpu)
	}
	c.eventWith(t, ns, victim, "Preempted", 30*time.Second)
	checkNotOvercommitted(t, c.inventory(t), c.nodeUsage(t))
}

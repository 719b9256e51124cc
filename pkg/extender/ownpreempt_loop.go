package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// preemptSettle is how long the preemption loop waits after an offer before it acts: kube-
// scheduler's PostFilter runs right after Filter in the same scheduling cycle and, where its dry
// run finds candidates, calls Preempt (which withdraws the offer) and nominates the pod. A second
// covers that on a loaded API server; it is also the least time a preemptor waits.
const preemptSettle = time.Second

const (
	// EventReasonPreempting is the reason of the Normal Event recorded on a pod for which the
	// extender evicts others (its own preemption, ownpreempt.go).
	EventReasonPreempting = "GPUPreemption"
	// EventReasonPreempted is the reason of the Event recorded on each victim: kube-scheduler's
	// own reason and words (pkg/scheduler/framework/preemption), so that tools that read
	// preemptions see the extender's too.
	EventReasonPreempted = "Preempted"
)

// preemptLoop runs the extender's own preemption for the pods Filter offered, until ctx ends
// (only with Config.Preemption own). Each pod settles on its own: it is taken preemptSettle
// after Filter first offered it, whatever other pods were offered meanwhile. It preempts only
// while the verbs serve (refusal nil): with Config.LeaderLease only while its kube-scheduler
// holds the Lease and the hand-over is over (leader.go); offers that settle meanwhile are
// dropped (the leader's kube-scheduler filters the pod again and offers it anew). Run stops it
// at SIGTERM before it closes the verbs.
func (e *Extender) preemptLoop(ctx context.Context) {
	if e.cfg.Preemption != PreemptionOwn {
		return
	}
	var wake <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.cache.PreemptionOffered():
		case <-wake:
		}
		due, next := e.cache.offers.takeSettled(e.clock.Now(), preemptSettle)
		for k, nodes := range due {
			if why := e.refusal(); why != nil {
				klog.V(2).InfoS("Not preempting: the extender does not serve", "pod", klog.KRef(k.Namespace, k.Name), "reason", why.Error())
				continue
			}
			if err := e.preempt(ctx, k, nodes); err != nil {
				klog.ErrorS(err, "Preemption for GPUs failed; kube-scheduler retries the pod", "pod", klog.KRef(k.Namespace, k.Name))
			}
		}
		wake = nil
		if next > 0 {
			wake = e.clock.After(next)
		}
	}
}

// preempt preempts for pending pod k among nodes (those that refused it for GPUs), once per
// pod: it claims the pod (preempt_once.go; a pod kube-scheduler preempts for through the verb
// is left alone), plans (Cache.PlanPreemption), nominates the pod to the node first (the hold in
// the cache at once, Cache.Nominate, then status.nominatedNodeName), and only then evicts each
// victim as kube-scheduler does (the DisruptionTarget condition with reason
// PreemptionByScheduler; a "Preempted" Event; a delete with the victim's UID as precondition).
// Nominating first is kube-scheduler 1.37's async preemption order: a victim that exits at once
// frees a share the pod already holds, and kube-scheduler keeps the nominated pod from
// preempting again while its victims go. A pod that was bound, nominated, deleted or changed
// meanwhile is left alone; a nomination that cannot be written evicts nobody.
func (e *Extender) preempt(ctx context.Context, k device.PodRef, nodes []string) error {
	p, err := e.lookupPod(ctx, k)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || !mayPreempt(p) {
		return nil
	}
	req, ours, err := e.cache.ParseRequest(p)
	if err != nil || !ours {
		return nil
	}
	token, holder, ok := e.cache.claims.claim(k, byOwn, e.clock.Now())
	if !ok {
		klog.V(3).InfoS("Another preemption holds the pod; not preempting again", "pod", klog.KObj(p), "by", holder)
		return nil
	}
	prio := podPriority(p)
	plan, ok := e.cache.PlanPreemption(k, req, prio, nodes, e.sched.disruptions())
	if !ok {
		e.cache.claims.release(k, token)
		klog.V(3).InfoS("No GPU preemption helps the pod", "pod", klog.KObj(p), "nodes", len(nodes))
		return nil
	}
	if !e.cache.Nominate(k, plan.Node, req, prio, plan.Victims) {
		e.cache.claims.release(k, token)
		return nil // bound, being bound or gone meanwhile
	}
	if err := e.patchStatus(ctx, k, types.MergePatchType, map[string]any{"nominatedNodeName": plan.Node}); err != nil {
		e.cache.Unnominate(k)
		e.cache.claims.release(k, token)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) || e.boundMeanwhile(ctx, k) {
			// Deleted, replaced, or placed by kube-scheduler meanwhile (the API server refuses
			// nominatedNodeName on a bound pod): nobody needs evicting.
			klog.V(2).InfoS("Pod bound or gone before its nomination was written; nobody evicted", "pod", klog.KObj(p), "node", plan.Node)
			return nil
		}
		return fmt.Errorf("nominating the pod to node %s: %w", plan.Node, err)
	}
	names := make([]string, 0, len(plan.Victims))
	for _, v := range plan.Victims {
		if err := e.evict(ctx, v, p, plan.Node); err != nil {
			return fmt.Errorf("evicting %s (pod nominated to node %s): %w", v, plan.Node, err)
		}
		names = append(names, v.String())
	}
	klog.InfoS("Preempting for GPUs", "pod", klog.KObj(p), "node", plan.Node, "victims", names, "pdbViolations", plan.Choice.PDBViolations)
	if e.recorder != nil {
		e.recorder.Eventf(podRef(k), corev1.EventTypeNormal, EventReasonPreempting,
			"Preempting %d pod(s) of lower priority on node %s to free its GPUs: %s", len(names), plan.Node, strings.Join(names, ", "))
	}
	return nil
}

// boundMeanwhile reports whether pod k is bound now (read from the API server, not the
// informer, which may lag behind the binding).
func (e *Extender) boundMeanwhile(ctx context.Context, k device.PodRef) bool {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.APITimeout)
	defer cancel()
	p, err := e.client.CoreV1().Pods(k.Namespace).Get(ctx, k.Name, metav1.GetOptions{})
	return err == nil && p.UID == k.UID && p.Spec.NodeName != ""
}

// evict marks victim v as preempted for preemptor on node and deletes it (UID precondition). A
// victim already gone is not an error.
func (e *Extender) evict(ctx context.Context, v device.PodRef, preemptor *corev1.Pod, node string) error {
	cond := map[string]any{
		"type":               corev1.DisruptionTarget,
		"status":             corev1.ConditionTrue,
		"reason":             corev1.PodReasonPreemptionByScheduler,
		"message":            e.cfg.SchedulerName + ": preempting to accommodate a higher priority pod",
		"lastTransitionTime": metav1.NewTime(e.clock.Now()).Rfc3339Copy(),
	}
	err := e.patchStatus(ctx, v, types.StrategicMergePatchType, map[string]any{"conditions": []any{cond}})
	if err == nil {
		dctx, cancel := context.WithTimeout(ctx, e.cfg.APITimeout)
		err = e.client.CoreV1().Pods(v.Namespace).Delete(dctx, v.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &v.UID}})
		cancel()
	}
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // gone or replaced meanwhile
	case err != nil:
		return err
	}
	if e.recorder != nil {
		e.recorder.Eventf(podRef(v), corev1.EventTypeNormal, EventReasonPreempted, "Preempted by pod %s on node %s", preemptor.UID, node)
	}
	return nil
}

// patchStatus patches pod k's status subresource with status (patch type pt), with the pod's
// UID as precondition.
func (e *Extender) patchStatus(ctx context.Context, k device.PodRef, pt types.PatchType, status map[string]any) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": k.UID}, "status": status})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.APITimeout)
	defer cancel()
	_, err = e.client.CoreV1().Pods(k.Namespace).Patch(ctx, k.Name, pt, body, metav1.PatchOptions{}, "status")
	return err
}

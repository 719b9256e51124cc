package drapreempt

// This file is the controller's preemption in flight: PDB accounting, nominate, evict, advance
// and forget, and the Events it records.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// disruptions is kube-scheduler's count of PDB violations over victims in order (the
// extender's rule, pkg/extender pdb.go): each budget selecting a victim not yet in its
// disruptedPods is decremented from disruptionsAllowed; below zero, the victim violates.
func (c *Controller) disruptions(victims []*corev1.Pod) []bool {
	out := make([]bool, len(victims))
	allowed := map[types.UID]int32{}
	for i, p := range victims {
		if len(p.Labels) == 0 {
			continue
		}
		list, _ := c.pdbs.PodDisruptionBudgets(p.Namespace).List(labels.Everything())
		for _, b := range list {
			sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			if _, ok := b.Status.DisruptedPods[p.Name]; ok {
				continue
			}
			left, seen := allowed[b.UID]
			if !seen {
				left = b.Status.DisruptionsAllowed
			}
			left--
			allowed[b.UID] = left
			if left < 0 {
				out[i] = true
			}
		}
	}
	return out
}

func (c *Controller) notHelpful(p *corev1.Pod, why string) {
	c.mu.Lock()
	same := c.lastWhy[p.UID] == why
	c.lastWhy[p.UID] = why
	c.mu.Unlock()
	if same {
		return
	}
	klog.V(2).InfoS("DRA preemption: not helpful", "pod", klog.KObj(p), "reason", why)
	if c.recorder != nil {
		c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonNotHelpful, "GPU preemption (hami-go, DRA mode) is not helpful: %s", why)
	}
}

// start records the preemption in flight, nominates the pod, then evicts.
func (c *Controller) start(ctx context.Context, p *corev1.Pod, plan Plan) error {
	f := &inflight{node: plan.Node, started: c.clock.Now(), pending: plan.Victims}
	c.mu.Lock()
	if c.flights[p.UID] != nil {
		c.mu.Unlock()
		return nil
	}
	c.flights[p.UID] = f
	c.mu.Unlock()
	if err := c.nominate(ctx, p, plan.Node); err != nil {
		c.mu.Lock()
		delete(c.flights, p.UID)
		c.mu.Unlock()
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone or replaced meanwhile: nobody evicted
		}
		return fmt.Errorf("nominating the pod to node %s: %w", plan.Node, err)
	}
	c.mu.Lock()
	c.ourNomin[p.UID] = plan.Node
	delete(c.lastWhy, p.UID)
	c.mu.Unlock()
	names := make([]string, 0, len(plan.Victims))
	for _, v := range plan.Victims {
		names = append(names, v.Namespace+"/"+v.Name)
	}
	klog.InfoS("DRA preemption: nominated; evicting", "pod", klog.KObj(p), "node", plan.Node, "victims", names, "pdbViolations", plan.Choice.PDBViolations)
	if c.recorder != nil {
		c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonPreempting, "Preempting %d pod(s) of lower priority on node %s to free GPU capacity for its claims: %s", len(names), plan.Node, strings.Join(names, ", "))
	}
	return c.evictPending(ctx, p, f)
}

// nominate writes status.nominatedNodeName (UID precondition).
func (c *Controller) nominate(ctx context.Context, p *corev1.Pod, node string) error {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": p.UID}, "status": map[string]any{"nominatedNodeName": node}})
	ctx, cancel := context.WithTimeout(ctx, c.cfg.APITimeout)
	defer cancel()
	_, err := c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	return err
}

// evictPending evicts the flight's pending victims in order; a 429 stops and schedules a retry.
func (c *Controller) evictPending(ctx context.Context, p *corev1.Pod, f *inflight) error {
	for {
		c.mu.Lock()
		if len(f.pending) == 0 {
			c.mu.Unlock()
			break
		}
		v := f.pending[0]
		c.mu.Unlock()
		ectx, cancel := context.WithTimeout(ctx, c.cfg.APITimeout)
		err := c.client.PolicyV1().Evictions(v.Namespace).Evict(ectx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &v.UID}},
		})
		cancel()
		switch {
		case err == nil:
			klog.InfoS("DRA preemption: evicted", "victim", klog.KObj(v), "preemptor", klog.KObj(p), "node", f.node)
			if c.recorder != nil {
				c.recorder.Eventf(v, corev1.EventTypeNormal, ReasonPreempted, "Preempted by pod %s on node %s", p.UID, f.node)
			}
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// gone or replaced meanwhile
		case apierrors.IsTooManyRequests(err):
			c.mu.Lock()
			f.retryAt = c.clock.Now().Add(c.cfg.RetryAfter)
			c.mu.Unlock()
			klog.InfoS("DRA preemption: eviction refused (disruption budget); retrying later", "victim", klog.KObj(v), "preemptor", klog.KObj(p), "after", c.cfg.RetryAfter)
			key, _ := cache.MetaNamespaceKeyFunc(p)
			c.queue.AddAfter(key, c.cfg.RetryAfter)
			return nil
		default:
			key, _ := cache.MetaNamespaceKeyFunc(p)
			c.queue.AddAfter(key, c.cfg.RetryAfter)
			return fmt.Errorf("evicting %s/%s for %s/%s: %w", v.Namespace, v.Name, p.Namespace, p.Name, err)
		}
		c.mu.Lock()
		f.pending = f.pending[1:]
		c.mu.Unlock()
	}
	return nil
}

// advance finishes a preemption in flight (pod bound, terminating, or timed out) or retries its
// pending evictions when due; otherwise it looks again later.
func (c *Controller) advance(ctx context.Context, p *corev1.Pod, f *inflight) error {
	now := c.clock.Now()
	key, _ := cache.MetaNamespaceKeyFunc(p)
	switch {
	case p.Spec.NodeName != "" || p.DeletionTimestamp != nil:
		klog.V(2).InfoS("DRA preemption: done", "pod", klog.KObj(p), "node", p.Spec.NodeName, "after", now.Sub(f.started))
		c.forget(p.UID)
		return nil
	case now.Sub(f.started) >= c.cfg.Timeout:
		klog.InfoS("DRA preemption: the pod was not bound in time; it may preempt again", "pod", klog.KObj(p), "node", f.node, "timeout", c.cfg.Timeout)
		c.forget(p.UID)
		c.queue.Add(key)
		return nil
	}
	c.mu.Lock()
	due := len(f.pending) > 0 && !now.Before(f.retryAt)
	c.mu.Unlock()
	if due {
		return c.evictPending(ctx, p, f)
	}
	c.queue.AddAfter(key, c.cfg.Resync)
	return nil
}

func (c *Controller) forget(uid types.UID) {
	c.mu.Lock()
	delete(c.flights, uid)
	delete(c.lastWhy, uid)
	c.mu.Unlock()
}

// forgetByKey drops the state of deleted pods (known only by key when Sync runs).
func (c *Controller) forgetByKey() {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Flights of pods no longer listed are dropped.
	for uid := range c.flights {
		if !c.listed(uid) {
			delete(c.flights, uid)
			delete(c.lastWhy, uid)
			delete(c.ourNomin, uid)
		}
	}
}

// listed reports whether a pod of that UID is in the informer (caller holds mu).
func (c *Controller) listed(uid types.UID) bool {
	ps, _ := c.pods.List(labels.Everything())
	for _, p := range ps {
		if p.UID == uid {
			return true
		}
	}
	return false
}

// InFlight reports whether a preemption for pod uid is in flight, and its node.
func (c *Controller) InFlight(uid types.UID) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.flights[uid]
	if !ok {
		return "", false
	}
	return f.node, true
}

package extender

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/hami-go/hami-go/pkg/device"
)

// Preempt answers kube-scheduler's preempt verb: for each candidate node and its proposed
// victims (by UID: NodeNameToMetaVictims, as kube-scheduler sends with nodeCacheCapable; or full
// pods: NodeNameToVictims), it keeps kube-scheduler's proposal whole (it chose those pods for the
// node's CPU, memory, pod slots and the like, GPU pods among them) and adds only the victims the
// GPUs still need once the proposal and the node's terminating pods of lower priority are gone:
// the cheapest set, exact per GPU, of bound GPU pods of lower priority that are not terminating
// (victimsOnLocked, as the extender's own preemption chooses). A node where even that does not
// make room is dropped. NumPDBViolations is counted over the union, budgets decremented across
// it (DisruptionCheck), and is never below kube-scheduler's count for its proposal.
//
// One preemption per pod (preempt_once.go): for a pod the extender's own preemption claimed,
// the verb answers no node; a pod the verb answers for is claimed, so the own loop leaves it
// alone. With Config.Preemption none the verb answers no node for the extender's GPU pods. Pods
// that are not the extender's keep kube-scheduler's proposal.
func (s *Scheduler) Preempt(args *extenderv1.ExtenderPreemptionArgs) extenderv1.ExtenderPreemptionResult {
	c := s.c
	proposal := proposalOf(args)
	res := extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}}
	if args.Pod == nil {
		return res
	}
	req, ours, err := c.ParseRequest(args.Pod)
	if err != nil {
		return res
	}
	if !ours {
		res.NodeNameToMetaVictims = proposal
		return res
	}
	if c.cfg.Preemption == PreemptionNone {
		return res
	}
	k := device.RefOf(args.Pod)
	now := c.clock.Now()
	token, holder, ok := c.claims.claim(k, byVerb, now)
	if !ok {
		klog.V(3).InfoS("Preempt verb: another preemption holds the pod; no node", "pod", klog.KObj(args.Pod), "by", holder)
		return res
	}
	prio := podPriority(args.Pod)
	own := c.ownBooking(k)
	check := s.disruptions()
	for n, mv := range proposal {
		if mv == nil {
			continue
		}
		ns := c.node(n)
		if ns == nil {
			continue
		}
		if out := c.verbVictimsOn(ns, mv, own, prio, req, check, now); out != nil {
			res.NodeNameToMetaVictims[n] = out
		}
	}
	if len(res.NodeNameToMetaVictims) > 0 {
		c.offers.withdraw(k)
	} else {
		c.claims.release(k, token)
	}
	return res
}

// proposalOf returns kube-scheduler's proposal as victims by UID, node name to victims:
// NodeNameToMetaVictims as sent, and each node only in NodeNameToVictims (full pods, without
// nodeCacheCapable) converted to UIDs with its NumPDBViolations. A node in both keeps its
// MetaVictims; nil pods are skipped.
func proposalOf(args *extenderv1.ExtenderPreemptionArgs) map[string]*extenderv1.MetaVictims {
	proposal := map[string]*extenderv1.MetaVictims{}
	for n, v := range args.NodeNameToMetaVictims {
		proposal[n] = v
	}
	for n, v := range args.NodeNameToVictims {
		if _, ok := proposal[n]; ok || v == nil {
			continue
		}
		mv := &extenderv1.MetaVictims{NumPDBViolations: v.NumPDBViolations}
		for _, p := range v.Pods {
			if p != nil {
				mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: string(p.UID)})
			}
		}
		proposal[n] = mv
	}
	return proposal
}

// verbVictimsOn answers the preempt verb for one candidate node ns and kube-scheduler's proposal
// mv for it: the proposal whole plus the GPU victims still needed (victimsOnLocked, for the
// preemptor's booking own, priority prio and request req), with NumPDBViolations counted over
// the union by check and never below mv's. It returns nil to drop the node: unusable at now,
// no room even so, or no victim at all (kube-scheduler needs at least one per candidate).
// It takes c.mu, then ns.mu.
func (c *Cache) verbVictimsOn(ns *nodeState, mv *extenderv1.MetaVictims, own *booking, prio int32, req *device.PodRequest, check DisruptionCheck, now time.Time) *extenderv1.MetaVictims {
	going := make(map[string]bool, len(mv.Pods))
	for _, v := range mv.Pods {
		if v != nil {
			going[v.UID] = true
		}
	}
	c.mu.Lock() // victims' bookings are read under mu
	ns.mu.Lock()
	if c.unusableLocked(ns, now) != "" {
		ns.mu.Unlock()
		c.mu.Unlock()
		return nil
	}
	added, _, fits := victimsOnLocked(ns, own, prio, req, check, going)
	// The union, for the PDB count: the proposal's GPU pods by key, the others by UID.
	known := map[string]device.PodRef{}
	for _, m := range ns.members {
		if going[string(m.key.UID)] {
			known[string(m.key.UID)] = m.key
		}
	}
	ns.mu.Unlock()
	c.mu.Unlock()
	if !fits {
		return nil
	}
	out := &extenderv1.MetaVictims{}
	union := make([]device.PodRef, 0, len(mv.Pods)+len(added))
	for _, v := range mv.Pods {
		if v == nil {
			continue
		}
		out.Pods = append(out.Pods, v)
		r, ok := known[v.UID]
		if !ok {
			r = device.PodRef{UID: types.UID(v.UID)}
		}
		union = append(union, r)
	}
	for _, r := range added {
		out.Pods = append(out.Pods, &extenderv1.MetaPod{UID: string(r.UID)})
		union = append(union, r)
	}
	if len(out.Pods) == 0 {
		return nil // kube-scheduler needs at least one victim per candidate
	}
	out.NumPDBViolations = max(mv.NumPDBViolations, int64(countViolations(check, union)))
	return out
}

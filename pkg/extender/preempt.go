package extender

import (
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// Preempt answers kube-scheduler's preempt verb: for each candidate node and its proposed
// victims (by UID: NodeNameToMetaVictims, as kube-scheduler sends with nodeCacheCapable; or full
// pods: NodeNameToVictims), it keeps the node only when evicting GPU pods of lower priority there
// really lets the pod fit, and then names the cheapest such set, exact per GPU
// (allocator.ChooseVictims over every bound GPU pod of lower priority on the node that is not
// terminating, not only kube-scheduler's proposal, which it chose by node totals). Proposed
// victims that hold no GPU were chosen for other resources and are kept. Other nodes are dropped.
// NumPDBViolations is the larger of kube-scheduler's count and the GPU victims'. A pod kube-
// scheduler preempts for is no longer offered to the extender's own preemption (preemption.go).
// Pods that are not the extender's keep kube-scheduler's proposal.
func (s *Scheduler) Preempt(args *extenderv1.ExtenderPreemptionArgs) extenderv1.ExtenderPreemptionResult {
	c := s.c
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
			mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: string(p.UID)})
		}
		proposal[n] = mv
	}
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
	k := device.RefOf(args.Pod)
	prio := podPriority(args.Pod)
	own := c.ownBooking(k)
	now := c.clock.Now()
	for n, mv := range proposal {
		if mv == nil {
			continue
		}
		ns := c.node(n)
		if ns == nil {
			continue
		}
		c.mu.Lock() // victims' bookings are read under mu
		ns.mu.Lock()
		if c.unusableLocked(ns, now) != "" {
			ns.mu.Unlock()
			c.mu.Unlock()
			continue
		}
		gpuPod := map[string]bool{}
		for _, b := range ns.members {
			if b.charge != nil {
				gpuPod[string(b.key.UID)] = true
			}
		}
		refs, cands := victimCandidatesLocked(ns, prio, s.violatesPDB)
		choice, ok := allocator.ChooseVictims(ns.inv, usageExcluding(ns, own), cands, req)
		ns.mu.Unlock()
		c.mu.Unlock()
		if !ok {
			continue
		}
		out := &extenderv1.MetaVictims{NumPDBViolations: max(mv.NumPDBViolations, int64(choice.PDBViolations))}
		for _, v := range mv.Pods {
			if v != nil && !gpuPod[v.UID] {
				out.Pods = append(out.Pods, v)
			}
		}
		for _, i := range choice.Victims {
			out.Pods = append(out.Pods, &extenderv1.MetaPod{UID: string(refs[i].UID)})
		}
		if len(out.Pods) == 0 {
			continue // kube-scheduler needs at least one victim per candidate
		}
		res.NodeNameToMetaVictims[n] = out
	}
	if len(res.NodeNameToMetaVictims) > 0 {
		c.offers.withdraw(k)
	}
	return res
}

package extender

import (
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// Preempt answers kube-scheduler's preempt verb: for each candidate node and its proposed
// victims (by UID: NodeNameToMetaVictims, as kube-scheduler sends with nodeCacheCapable; or full
// pods: NodeNameToVictims), it keeps the node only when removing those victims' GPU usage really
// lets the pod fit, with the fewest GPU victims that suffice (victims that hold no GPU were chosen
// for other resources and are kept). Other nodes are dropped. Pods that are not the extender's
// keep kube-scheduler's proposal.
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
	own := c.ownBooking(device.RefOf(args.Pod))
	now := c.clock.Now()
	for n, mv := range proposal {
		if mv == nil {
			continue
		}
		ns := c.node(n)
		if ns == nil {
			continue
		}
		c.mu.Lock() // victims' charges are read under mu
		ns.mu.Lock()
		if c.unusableLocked(ns, now) != "" {
			ns.mu.Unlock()
			c.mu.Unlock()
			continue
		}
		byUID := map[types.UID]*booking{}
		for _, b := range ns.members {
			byUID[b.key.UID] = b
		}
		var keep []*extenderv1.MetaPod
		var gpu []*extenderv1.MetaPod
		var charges []allocator.Charge
		for _, v := range mv.Pods {
			if v == nil {
				continue
			}
			if b := byUID[types.UID(v.UID)]; b != nil && b.charge != nil {
				gpu = append(gpu, v)
				charges = append(charges, b.charge)
			} else {
				keep = append(keep, v)
			}
		}
		base := copyUsage(usageExcluding(ns, own))
		chosen, ok := fewestVictims(ns, base, charges, req)
		ns.mu.Unlock()
		c.mu.Unlock()
		if !ok {
			continue
		}
		out := &extenderv1.MetaVictims{NumPDBViolations: mv.NumPDBViolations}
		out.Pods = append(out.Pods, keep...)
		for _, i := range chosen {
			out.Pods = append(out.Pods, gpu[i])
		}
		res.NodeNameToMetaVictims[n] = out
	}
	return res
}

func copyUsage(u allocator.NodeUsage) allocator.NodeUsage {
	out := make(allocator.NodeUsage, len(u))
	for k, v := range u {
		out[k] = v
	}
	return out
}

// fewestVictims removes victims in kube-scheduler's order until req fits, then gives back every
// removed victim whose return still lets it fit. It returns the indexes of the victims that must
// go, or ok=false when even removing all of them is not enough. Caller holds ns.mu.
func fewestVictims(ns *nodeState, base allocator.NodeUsage, charges []allocator.Charge, req *device.PodRequest) ([]int, bool) {
	if allocator.Fit(ns.inv, base, req) == nil {
		return nil, true
	}
	removed := make([]bool, len(charges))
	fits := false
	for i, ch := range charges {
		base.Sub(ch)
		removed[i] = true
		if allocator.Fit(ns.inv, base, req) == nil {
			fits = true
			break
		}
	}
	if !fits {
		return nil, false
	}
	for i := len(charges) - 1; i >= 0; i-- {
		if !removed[i] {
			continue
		}
		base.Add(charges[i])
		if allocator.Fit(ns.inv, base, req) == nil {
			removed[i] = false
		} else {
			base.Sub(charges[i])
		}
	}
	var out []int
	for i, r := range removed {
		if r {
			out = append(out, i)
		}
	}
	return out, true
}

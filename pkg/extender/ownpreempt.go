package extender

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// The extender's own preemption, for the nodes kube-scheduler's cannot see.
//
// kube-scheduler's preemption dry run runs its in-tree filters only. A node whose GPUs are
// fragmented (every GPU partly used: room in the node's totals, hami-go.io/gpu-memory included,
// but no GPU with enough) passes them with every pod still there, so the dry run finds no victim
// ("expected at least one victim pod") and never calls the extender's preempt verb. Those nodes
// are exactly the ones that reached the extender's Filter and were refused for GPUs. For a pod
// refused everywhere, Filter offers them here; after kube-scheduler's own PostFilter of the same
// cycle had its turn (preemptSettle: if it found candidates it called Preempt, which withdraws
// the offer, and nominated the pod), the extender chooses the node and victims exactly per GPU
// (allocator.ChooseVictims), nominates the pod there (status.nominatedNodeName, which holds the
// share: nominated.go) and evicts the victims as kube-scheduler does (DisruptionTarget condition,
// reason PreemptionByScheduler, delete, a "Preempted" Event). Only the leading kube-scheduler
// calls the extender, so only one replica preempts.

// mayPreempt reports whether pod p may preempt others: preemptionPolicy not Never and no
// nomination yet (kube-scheduler's PodEligibleToPreemptOthers: a nominated pod waits for its
// victims). Victims of lower priority are PlanPreemption's concern.
func mayPreempt(p *corev1.Pod) bool {
	if p.Spec.PreemptionPolicy != nil && *p.Spec.PreemptionPolicy == corev1.PreemptNever {
		return false
	}
	return p.Status.NominatedNodeName == ""
}

// Preemption is one preemption decision: evict Victims on Node so that the pod fits there.
type Preemption struct {
	// Node is the node the pod is nominated to.
	Node string
	// Victims are the pods to evict, lowest priority first.
	Victims []device.PodRef
	// Choice is the victims' cost as allocator.ChooseVictims computed it.
	Choice allocator.VictimChoice
}

// PlanPreemption chooses where pod k (request req, priority prio) preempts among nodes: on each
// usable node, the cheapest set of bound GPU pods of lower priority that are not terminating
// whose eviction lets the pod fit, exact per GPU (victimsOnLocked, with check telling which
// evictions a PodDisruptionBudget forbids, budgets decremented across the victims; nil: none);
// then the node whose set is best (allocator.VictimChoice.Better; on a tie, the first in nodes).
// Like kube-scheduler's dry run (DefaultPreemption minCandidateNodesPercentage 10,
// minCandidateNodesAbsolute 100) it stops after max(100, 10% of nodes) nodes with a set. Pods
// terminating on a node are counted as gone (they free their share for the pod; choosing more
// victims for it would evict twice), as the verb counts them. ok is false when no node has such a
// set, the pod fits somewhere already (or will once those pods are gone), or it holds a
// nomination or a bind meanwhile. It changes nothing: the hold comes with the nomination
// (nominated.go). Locks are taken node by node.
func (c *Cache) PlanPreemption(k device.PodRef, req *device.PodRequest, prio int32, nodes []string, check DisruptionCheck) (Preemption, bool) {
	own := c.ownBooking(k)
	now := c.clock.Now()
	enough := max(minPreemptionCandidates, len(nodes)/10)
	var best Preemption
	found := 0
	for _, n := range nodes {
		ns := c.node(n)
		if ns == nil {
			continue
		}
		c.mu.Lock()
		if own != nil && (own.stage != stageReserved || c.pods[k] != own) {
			c.mu.Unlock()
			return Preemption{}, false // nominated, or being bound or bound meanwhile
		}
		ns.mu.Lock()
		if c.unusableLocked(ns, now) != "" {
			ns.mu.Unlock()
			c.mu.Unlock()
			continue
		}
		victims, choice, ok := victimsOnLocked(ns, own, prio, req, check, nil)
		ns.mu.Unlock()
		c.mu.Unlock()
		if !ok {
			continue
		}
		if len(victims) == 0 {
			// It fits here now, or will once the node's terminating pods of lower priority are
			// gone (earlier victims): no more evictions (kube-scheduler's
			// PodEligibleToPreemptOthers waits for them the same way).
			return Preemption{}, false
		}
		found++
		if found == 1 || choice.Better(best.Choice) {
			best = Preemption{Node: n, Victims: victims, Choice: choice}
		}
		if found >= enough {
			break
		}
	}
	return best, found > 0
}

// victimsOnLocked chooses on ns the cheapest set of victims for a pod of priority prio and
// request req (its own booking own left out), beyond the pods going already: the node's
// terminating pods of lower priority, and going (kube-scheduler's proposal, in the verb). It
// returns the victims (lowest priority first) and their cost, whose PDBViolations is counted over
// the victims with budgets decremented across them (check). ok is false when even evicting every
// candidate does not make room; with room already it returns no victim and ok. Caller holds mu
// and ns.mu.
func victimsOnLocked(ns *nodeState, own *booking, prio int32, req *device.PodRequest, check DisruptionCheck, going map[string]bool) ([]device.PodRef, allocator.VictimChoice, bool) {
	u := withoutLeaving(ns, own, prio)
	var refs []device.PodRef
	var cands []allocator.Victim
	if len(going) > 0 {
		for _, m := range ns.members {
			if m.charge != nil && going[string(m.key.UID)] && m != own && !(m.terminating && m.priority < prio) {
				u.Sub(m.charge)
			}
		}
		all, allCands := victimCandidatesLocked(ns, prio, check)
		for i, r := range all {
			if !going[string(r.UID)] {
				refs, cands = append(refs, r), append(cands, allCands[i])
			}
		}
	} else {
		refs, cands = victimCandidatesLocked(ns, prio, check)
	}
	choice, ok := allocator.ChooseVictims(ns.inv, u, cands, req)
	if !ok {
		return nil, choice, false
	}
	victims := make([]device.PodRef, 0, len(choice.Victims))
	for _, i := range choice.Victims {
		victims = append(victims, refs[i])
	}
	choice.PDBViolations = countViolations(check, victims)
	return victims, choice, true
}

// minPreemptionCandidates is kube-scheduler's DefaultPreemption minCandidateNodesAbsolute: the
// least number of nodes with a victim set PlanPreemption compares.
const minPreemptionCandidates = 100

// withoutLeaving is the node's usage without own's charge and without the charges of its
// terminating pods of priority below prio: what the node offers once the pods already leaving
// for it (earlier victims) are gone. Caller holds mu and ns.mu.
func withoutLeaving(ns *nodeState, own *booking, prio int32) allocator.NodeUsage {
	u := copyUsage(ns.used)
	for _, m := range ns.members {
		if m.charge != nil && (m == own || (m.terminating && m.priority < prio)) {
			u.Sub(m.charge)
		}
	}
	return u
}

// victimCandidatesLocked returns the pods on ns that preemption may evict for a pod of priority
// prio, and their allocator.Victim: bound GPU pods (planned or claimed, and seen bound by the
// informer, so that their priority is known) of lower priority that are not terminating, lowest
// priority first (then by key, for a stable order). ViolatesPDB is check over the candidates in
// that order, budgets decremented across them: a budget's allowance goes to the least important
// candidates, those a cheapest set takes first (ChooseVictims's cost is per victim; the chosen
// set is counted again on its own). Caller holds mu and ns.mu.
func victimCandidatesLocked(ns *nodeState, prio int32, check DisruptionCheck) ([]device.PodRef, []allocator.Victim) {
	var bs []*booking
	for _, b := range ns.members {
		if b.charge != nil && b.informed && !b.terminating && b.priority < prio && (b.stage == stagePlanned || b.stage == stageClaimed) {
			bs = append(bs, b)
		}
	}
	slices.SortFunc(bs, func(a, b *booking) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(a.key.Namespace, b.key.Namespace),
			cmp.Compare(a.key.Name, b.key.Name), cmp.Compare(a.key.UID, b.key.UID))
	})
	refs := make([]device.PodRef, len(bs))
	cands := make([]allocator.Victim, len(bs))
	for i, b := range bs {
		refs[i] = b.key
		cands[i] = allocator.Victim{Charge: b.charge, Priority: b.priority}
	}
	if check != nil && len(refs) > 0 {
		for i, v := range check(refs) {
			cands[i].ViolatesPDB = v
		}
	}
	return refs, cands
}

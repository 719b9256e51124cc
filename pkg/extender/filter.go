package extender

import (
	"errors"
	"iter"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// ParseRequest parses the pod's GPU request with the configured resource names and policy
// defaults. ours is false for pods of another scheduler profile and pods that use no GPU: the
// extender lets those through untouched.
func (c *Cache) ParseRequest(p *corev1.Pod) (req *device.PodRequest, ours bool, err error) {
	if p.Spec.SchedulerName != c.cfg.SchedulerName {
		return nil, false, nil
	}
	r, err := device.ParsePodRequest(p, c.cfg.Resources)
	if err != nil {
		return nil, true, err
	}
	if !r.UsesGPU() {
		return &r, false, nil
	}
	r.GPUPolicy, r.NodePolicy = c.policies(p, r)
	return &r, true, nil
}

// emptyUsage is never written to.
var emptyUsage = allocator.NodeUsage{}

// Filter answers kube-scheduler's filter verb for pod over the candidate node names: every
// node that fits, every other node with a reason a user can act on. Nodes that cannot take the
// pod even when empty (no inventory, stale, request impossible there) are unresolvable:
// preemption would not help. Then the pod is reserved on the best-scoring fitting node, so the
// next Filter sees it while this pod's Bind is in flight; a new Filter of the same pod replaces
// its reservation. The outcome is noted for the requeue and the extender's own preemption
// (noteFiltered): kube-scheduler calls the verb with the nodes that passed its own filters.
func (s *Scheduler) Filter(p *corev1.Pod, names []string) extenderv1.ExtenderFilterResult {
	res, note := s.weigh(p, names)
	if note != nil {
		s.c.noteFiltered(p, note.key, len(*res.NodeNames) > 0, res.FailedNodes, note.released, note.at)
	}
	return res
}

// Weigh is Filter without its note (that the pod fits nowhere, and on which nodes it may
// preempt), for a caller that weighs every node before the other filters had their say: the
// HamiGo framework plugin (pkg/schedplugin) weighs at PreFilter and notes the outcome once every
// Filter ran (NoteUnschedulable at PostFilter, NoteScheduled at Reserve). released reports a
// node refused because its device plugin released its Lease; at is when the nodes were weighed
// (the cache's clock), for NoteUnschedulable.
func (s *Scheduler) Weigh(p *corev1.Pod, names []string) (res extenderv1.ExtenderFilterResult, released bool, at time.Time) {
	res, note := s.weigh(p, names)
	if note == nil {
		return res, false, s.c.clock.Now()
	}
	return res, note.released, note.at
}

// NoteUnschedulable notes that pod p fits no node after every filter: failed are the nodes that
// passed every other filter and refused it for the GPUs in use (there it may preempt), released
// as Weigh reported. With neither, any refusal or offer of p is dropped (as Filter's note). at
// is when the verdicts were made (Weigh's): GPUs released after it requeue the pod (requeue.go),
// since its verdicts did not see them; a zero at is now, for a caller that has just dropped the
// pod's own reservation, a release that changes nothing for the pod itself (its verdicts counted
// that booking as its own) and must not requeue it every cycle.
func (s *Scheduler) NoteUnschedulable(p *corev1.Pod, failed extenderv1.FailedNodesMap, released bool, at time.Time) {
	if at.IsZero() {
		at = s.c.clock.Now()
	}
	s.c.noteFiltered(p, device.RefOf(p), false, failed, released, at)
}

// NoteScheduled notes that pod p got a node: any refusal or preemption offer of it is dropped.
func (s *Scheduler) NoteScheduled(p *corev1.Pod) {
	s.c.noteFiltered(p, device.RefOf(p), true, nil, false, s.c.clock.Now())
}

// filterNote is what Filter notes of a GPU pod of ours after weighing it (noteFiltered).
type filterNote struct {
	key      device.PodRef
	released bool
	at       time.Time
}

// weigh is Filter's verdicts and reservation; note is nil for a pod that is not a GPU pod of
// ours or whose request does not parse (nothing to note).
func (s *Scheduler) weigh(p *corev1.Pod, names []string) (extenderv1.ExtenderFilterResult, *filterNote) {
	c := s.c
	req, ours, err := c.ParseRequest(p)
	if err != nil {
		return unresolvableEverywhere(names, err), nil
	}
	if !ours {
		all := append([]string(nil), names...)
		return extenderv1.ExtenderFilterResult{NodeNames: &all}, nil
	}
	k := device.RefOf(p)
	own, pinned := c.ownBookingPinned(k)
	ownNS := c.bookedNode(own)
	now := c.clock.Now()
	prio, holds := podPriority(p), c.holds.Load() > 0
	fit := make([]string, 0, len(names))
	var failed, unres extenderv1.FailedNodesMap
	fail := func(m *extenderv1.FailedNodesMap, n, why string) {
		if *m == nil {
			*m = extenderv1.FailedNodesMap{}
		}
		(*m)[n] = why
	}
	var perScore [maxScore + 1]int
	states, nodes := c.nodesOf(names)
	scores := make([]int8, len(names)) // the score of each fitting node; -1 elsewhere
	memo := c.memos.fresh(p.UID, p.ResourceVersion, nodes)
	fp := &filterPod{req: req, prio: prio, own: own, ownNS: ownNS, pinned: pinned, holds: holds, now: now, memo: memo}
	released := false // a node refused because its device plugin released its Lease
	for i, n := range names {
		scores[i] = -1
		v := c.filterNode(states[i], fp)
		released = released || v.released
		if !v.fits {
			if v.unresolvable {
				fail(&unres, n, v.why)
			} else {
				fail(&failed, n, v.why)
			}
			continue
		}
		fit = append(fit, n)
		score := min(max(v.score, 0), maxScore)
		perScore[score]++
		scores[i] = int8(score)
	}
	// Best score first; among equals, kube-scheduler's order. With no fitting node, the pod's
	// previous reservation is dropped all the same.
	c.reserve(k, req, prio, byScore(states, scores, &perScore), memo)
	c.memos.publish(memo)
	res := extenderv1.ExtenderFilterResult{NodeNames: &fit}
	if len(failed) > 0 {
		res.FailedNodes = failed
	}
	if len(unres) > 0 {
		res.FailedAndUnresolvableNodes = unres
	}
	return res, &filterNote{key: k, released: released, at: now}
}

// noteFiltered records Filter's outcome for pod p (key k) at now for the requeue and the
// extender's own preemption: with no fitting node (fits false) while some node failed only for
// the GPUs in use (failed) or a device plugin released its Lease (released), the pod is refused,
// and offered for preemption on the failed nodes where it may preempt; otherwise (a node fits,
// or every refusal is unresolvable) any refusal or offer of it is dropped.
func (c *Cache) noteFiltered(p *corev1.Pod, k device.PodRef, fits bool, failed extenderv1.FailedNodesMap, released bool, now time.Time) {
	if !fits && (len(failed) > 0 || released) {
		// GPUs in use somewhere, or a device plugin restarting: a release, or its Lease held
		// again, may make it fit.
		c.refusals.refused(k, now)
		// Only the own preemption's loop takes offers: with verb or none they would stay behind.
		if len(failed) > 0 && mayPreempt(p) && c.cfg.Preemption == PreemptionOwn {
			c.offers.offer(k, slices.Collect(maps.Keys(failed)), now) // ownpreempt_offers.go
		}
	} else {
		c.refusals.fits(k)
		c.offers.withdraw(k)
	}
}

// unresolvableEverywhere is Filter's answer for a pod whose GPU request does not parse: no node
// fits, and every candidate node is unresolvable with the parse error's text (preemption would
// not help).
func unresolvableEverywhere(names []string, err error) extenderv1.ExtenderFilterResult {
	res := extenderv1.ExtenderFilterResult{NodeNames: &[]string{}, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{}}
	for _, n := range names {
		res.FailedAndUnresolvableNodes[n] = err.Error()
	}
	return res
}

// filterPod is what Filter weighs every candidate node against for one pod: its GPU request and
// priority, its own booking (own, on node ownNS; both nil when it has none) and whether a bind
// that timed out pins it to ownNS (pinned), whether any hold is in force (holds), the time of
// the call, and the score memo the nodes' scores go to.
type filterPod struct {
	req    *device.PodRequest
	prio   int32
	own    *booking
	ownNS  *nodeState
	pinned bool
	holds  bool
	now    time.Time
	memo   *scoreMemo
}

// nodeVerdict is Filter's answer for one candidate node: it fits with score (the allocator's,
// not yet clamped to 0..maxScore), or it is refused with why, unresolvable when preemption would
// not help. released: refused because its device plugin released its Lease.
type nodeVerdict struct {
	fits         bool
	score        int
	why          string
	unresolvable bool
	released     bool
}

// filterNode weighs one candidate node, ns (nil: no inventory), for the pod fp: pinned
// elsewhere, unusable at fp.now, or the fit and score of fp.req there, which it records in
// fp.memo. A request that would not fit even on the empty node is unresolvable. It takes ns.mu.
func (c *Cache) filterNode(ns *nodeState, fp *filterPod) nodeVerdict {
	if ns == nil {
		return nodeVerdict{why: errNoInventory, unresolvable: true}
	}
	if fp.pinned && ns != fp.ownNS {
		return nodeVerdict{why: "the pod's bind to node " + fp.own.node + " timed out and may still be committed there; no other node until the API shows its outcome (at most " + c.cfg.ReservationTTL.String() + ")", unresolvable: true}
	}
	ns.mu.Lock()
	if why := c.unusableLocked(ns, fp.now); why != "" {
		released := ns.released
		ns.mu.Unlock()
		return nodeVerdict{why: why, unresolvable: true, released: released}
	}
	score, ferr := fitScoreFor(ns, fp.own, fp.ownNS, fp.req, fp.prio, fp.holds)
	impossible := false
	if ferr != nil {
		impossible = allocator.Fit(ns.inv, emptyUsage, fp.req) != nil
	}
	fp.memo.set(ns, score)
	ns.mu.Unlock()
	if ferr != nil {
		var u *allocator.Unfit
		switch {
		case !errors.As(ferr, &u):
			return nodeVerdict{why: ferr.Error()}
		case impossible:
			return nodeVerdict{why: u.Reason + " (even with the node empty)", unresolvable: true}
		default:
			return nodeVerdict{why: u.Reason}
		}
	}
	return nodeVerdict{fits: true, score: score}
}

// fitScoreOn is allocator.FitScoreAt of req on ns with the pod's own booking (own, on node
// ownNS; both nil when it has none) left out of the usage. Where own is not on ns it reads the
// node's packed view first (allocator.FitScoreView) and the inventory only where that declines.
// Caller holds ns.mu.
func fitScoreOn(ns *nodeState, own *booking, ownNS *nodeState, req *device.PodRequest) (int, error) {
	if own == nil || ns != ownNS {
		if s, ok := allocator.FitScoreView(&ns.view, req); ok {
			return s, nil
		}
		return allocator.FitScoreAt(ns.inv, ns.at, ns.used, req)
	}
	return allocator.FitScoreAt(ns.inv, usageAtExcluding(ns, own), usageExcluding(ns, own), req)
}

// fitScoreFor is fitScoreOn for a pod of priority prio: where holds is true (some pod holds a
// nomination) and ns has holds of lower priority, they are left out of the usage (nominated.go).
// Caller holds ns.mu.
func fitScoreFor(ns *nodeState, own *booking, ownNS *nodeState, req *device.PodRequest, prio int32, holds bool) (int, error) {
	if holds {
		if u, ok := lowerHoldsUsage(ns, own, prio); ok {
			return allocator.FitScoreAt(ns.inv, nil, u, req)
		}
	}
	return fitScoreOn(ns, own, ownNS, req)
}

// bookedNode is the state of the node own is booked on (nil for no booking).
func (c *Cache) bookedNode(own *booking) *nodeState {
	if own == nil {
		return nil
	}
	return c.node(own.node)
}

// maxScore is extenderv1.MaxExtenderPriority as an int (the highest score of a node).
const maxScore = int(extenderv1.MaxExtenderPriority)

// byScore yields the nodes with a score (scores[i] ≥ 0 for states[i]), best score first and in
// the given order among equals, without sorting: count[s] is how many have score s, so each
// pass over the nodes is skipped unless some node has that score. The caller usually stops at
// the first node, so this is one pass in the common case.
func byScore(states []*nodeState, scores []int8, count *[maxScore + 1]int) iter.Seq[*nodeState] {
	return func(yield func(*nodeState) bool) {
		for s := maxScore; s >= 0; s-- {
			left := count[s]
			for i := 0; left > 0 && i < len(states); i++ {
				if int(scores[i]) != s {
					continue
				}
				left--
				if !yield(states[i]) {
					return
				}
			}
		}
	}
}

// reserve books the pod (priority prio) speculatively on the first node of ranked where it still
// fits (others may have filled the best one since Fit), replacing its previous reservation.
// Holds of lower priority do not keep it out; those it overlaps lose their placement. A pod that is
// already being bound or is bound keeps its booking, and so does one whose last bind may yet
// be committed (booking.maybeBound); a pod known to be gone is not booked.
func (c *Cache) reserve(k device.PodRef, req *device.PodRequest, prio int32, ranked iter.Seq[*nodeState], memo *scoreMemo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, gone := c.gone[k]; gone {
		return
	}
	old := c.pods[k]
	if old != nil && old.stage == stageNominated && !anyNode(ranked) {
		return // a preemptor keeps its hold until a node fits (nominated.go)
	}
	if old != nil && ((old.stage != stageReserved && old.stage != stageNominated) || old.maybeBound) {
		return
	}
	if old != nil {
		ons := c.nodeOrNew(old.node)
		before := ons.lockedGen()
		c.removeLocked(old)
		ons.mu.Lock()
		memo.followOwnChange(ons, before)
		ons.mu.Unlock()
	}
	tried := 0
	for ns := range ranked {
		tried++
		ns.mu.Lock()
		if ns.inv == nil {
			ns.mu.Unlock()
			continue
		}
		used := ns.used
		if c.holds.Load() > 0 {
			if u, ok := lowerHoldsUsage(ns, nil, prio); ok {
				used = u
			}
		}
		a, err := allocator.Pick(ns.inv, used, req)
		before := ns.gen
		ns.mu.Unlock()
		if err != nil {
			continue
		}
		b := c.newBooking(k, ns.name, stageReserved, req)
		b.planned, b.priority = &a, prio
		c.putLocked(b)
		ns.mu.Lock()
		memo.followOwnChange(ns, before)
		ns.mu.Unlock()
		c.outrankHoldsLocked(ns, b, prio)
		klog.V(5).InfoS("Reserved speculatively", "pod", k.Exact(), "node", ns.name)
		return
	}
	if tried > 0 {
		klog.V(4).InfoS("No speculative reservation: the fitting nodes filled up meanwhile", "pod", k.Exact())
	}
}

// anyNode reports whether seq yields a node.
func anyNode(seq iter.Seq[*nodeState]) bool {
	for range seq {
		return true
	}
	return false
}

// Prioritize scores every candidate node 0..10 for pod by its node policy (the pod's own
// reservation is left out of the node's usage). The node holding the pod's speculative
// reservation, which Filter chose as the best, scores 10 and every other node at most 9, so that
// kube-scheduler binds where the capacity is already booked. Pods that are not the extender's
// score 0.
func (s *Scheduler) Prioritize(p *corev1.Pod, names []string) extenderv1.HostPriorityList {
	return s.PrioritizeInto(nil, p, names)
}

// PrioritizeInto is Prioritize writing into dst's array when it holds len(names) entries (a
// new one otherwise), so that a caller can reuse one list across calls.
func (s *Scheduler) PrioritizeInto(dst extenderv1.HostPriorityList, p *corev1.Pod, names []string) extenderv1.HostPriorityList {
	c := s.c
	out := dst[:0]
	if cap(out) < len(names) {
		out = make(extenderv1.HostPriorityList, len(names))
	}
	out = out[:len(names)]
	req, ours, err := c.ParseRequest(p)
	for i, n := range names {
		out[i] = extenderv1.HostPriority{Host: n}
	}
	if err != nil || !ours {
		return out
	}
	own := c.ownBooking(device.RefOf(p))
	ownNS := c.bookedNode(own)
	prio, holds := podPriority(p), c.holds.Load() > 0
	ownNode := ""
	c.mu.Lock()
	if own != nil && own.stage == stageReserved {
		ownNode = own.node
	}
	c.mu.Unlock()
	now := c.clock.Now()
	states, _ := c.nodesOf(names)
	// Filter's scores for this pod, where the node has not changed since (the reservation Filter
	// made is the pod's own and left out, so it changes no score).
	memo := c.memos.take(p.UID, p.ResourceVersion)
	for i, n := range names {
		ns := states[i]
		if ns == nil {
			continue
		}
		ns.mu.Lock()
		usable := c.unusableLocked(ns, now) == ""
		if usable {
			s, ok := memo.score(ns)
			if !ok {
				s, _ = fitScoreFor(ns, own, ownNS, req, prio, holds)
			}
			out[i].Score = int64(s)
		}
		ns.mu.Unlock()
		top := extenderv1.MaxExtenderPriority - 1
		// The reserved node tops the list even where the policy scores it 0 (an empty node under
		// binpack): Filter chose it, and the booking is there.
		if n == ownNode && usable {
			top, out[i].Score = extenderv1.MaxExtenderPriority, extenderv1.MaxExtenderPriority
		}
		out[i].Score = min(out[i].Score, top)
	}
	if memo != nil {
		c.memos.publish(memo)
	}
	return out
}

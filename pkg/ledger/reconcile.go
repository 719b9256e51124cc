package ledger

import (
	"sort"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// ObservedContainer is what the kubelet's PodResources API reports for one container: the device
// IDs of our count resource that it holds.
type ObservedContainer struct {
	Namespace string
	Pod       string
	Container string
	// IDs are the kubelet device IDs ("<UUID>::<n>") of the count resource.
	IDs []string
}

// Reconcile rewrites the claimed records to the kubelet's truth (PodResources List). Because
// interchangeable pods (equal signatures) may take each other's slots at Allocate, a container
// the kubelet reports under pod Q whose IDs were claimed under pod P moves to Q, and P and Q
// swap their effective plans, so P's later Allocate takes the slot Q left. Claims the kubelet
// does not report yet (admission in flight) are kept. After a restart, first: a restored claim
// of slices the kubelet reports under another pod that claims them is dropped (dropStaleLocked),
// and the unclaimed members of each signature group get the slots the group leaves free
// (rebalanceLocked). A container the kubelet reports that has no claim (plugin restarted before
// its record was written) is then claimed from the pod's plan, a guess until the runtime
// reports the container's answer (Ledger.Answered). It returns the pods whose records changed.
func (l *Ledger) Reconcile(obs []ObservedContainer) []device.PodRef {
	l.mu.Lock()
	// PodResources names pods by namespace/name only (no UID). A name that stands for two pods
	// (a pod force-deleted and re-created under its name while the kubelet still runs the old
	// one: the kubelet lists both) cannot be told apart: its records are left as they are (C34).
	byName := map[string]*podEntry{}
	ambiguous := map[string]bool{}
	for _, e := range l.pods {
		if _, dup := byName[e.ref.String()]; dup {
			ambiguous[e.ref.String()] = true
		}
		byName[e.ref.String()] = e
	}
	seen := map[string]bool{}
	for _, o := range obs {
		k := o.Namespace + "/" + o.Pod + "/" + o.Container
		if seen[k] {
			ambiguous[o.Namespace+"/"+o.Pod] = true
		}
		seen[k] = true
	}
	changed := map[device.PodRef]bool{}
	l.dropStaleLocked(obs, byName, ambiguous, changed)
	sigs := map[device.Signature]bool{}
	for _, e := range l.pods {
		sigs[e.sig] = true
	}
	// The GPUs the kubelet's IDs name, by container, for pods whose IDs no claim covers (a claim
	// that does is the answer those IDs got, which the swap below moves to the pod).
	reported := map[*podEntry]map[string][]string{}
	for _, o := range obs {
		if owner, _ := l.findClaim(o.IDs); owner != nil {
			continue
		}
		if e := byName[o.Namespace+"/"+o.Pod]; e != nil && len(o.IDs) > 0 && !ambiguous[o.Namespace+"/"+o.Pod] {
			if reported[e] == nil {
				reported[e] = map[string][]string{}
			}
			reported[e][o.Container] = SliceGPUs(o.IDs)
		}
	}
	for sig := range sigs {
		l.rebalanceLocked(sig, reported)
	}
	sort.Slice(obs, func(i, j int) bool {
		if obs[i].Namespace+"/"+obs[i].Pod != obs[j].Namespace+"/"+obs[j].Pod {
			return obs[i].Namespace+"/"+obs[i].Pod < obs[j].Namespace+"/"+obs[j].Pod
		}
		return obs[i].Container < obs[j].Container
	})
	for _, o := range obs {
		if len(o.IDs) == 0 {
			continue
		}
		if ambiguous[o.Namespace+"/"+o.Pod] {
			klog.V(2).InfoS("The kubelet reports two pods under one name; leaving their claimed records as they are", "pod", klog.KRef(o.Namespace, o.Pod), "container", o.Container)
			continue
		}
		e := byName[o.Namespace+"/"+o.Pod]
		if e == nil {
			continue
		}
		if cl, ok := e.claimed[o.Container]; ok && (sameSet(cl.SliceIDs, o.IDs) || len(cl.SliceIDs) == 0) {
			continue // already the truth; or claimed at container creation, where IDs name no GPU of the pod's
		}
		owner, oc := l.findClaim(o.IDs)
		switch {
		case owner != nil && owner != e && owner.sig == e.sig && oc == o.Container:
			klog.V(2).InfoS("Interchangeable pods took each other's slots; swapping their records", "pod", e.ref.String(), "slotOf", owner.ref.String())
			e.plan, owner.plan = owner.plan, e.plan
			e.claimed, owner.claimed = owner.claimed, e.claimed
			e.guessed, owner.guessed = owner.guessed, e.guessed
			e.lastClaim, owner.lastClaim = owner.lastClaim, e.lastClaim
			changed[e.ref], changed[owner.ref] = true, true
		case owner == nil:
			for i := range e.plan.Containers {
				c := &e.plan.Containers[i]
				if c.Name != o.Container || len(c.Devices) != len(o.IDs) {
					continue
				}
				c.SliceIDs = append([]string(nil), o.IDs...)
				sort.Strings(c.SliceIDs)
				e.claimed[c.Name] = c
				if e.guessed == nil {
					e.guessed = map[string]bool{}
				}
				e.guessed[c.Name] = true
				changed[e.ref] = true
			}
		case owner == e && oc != o.Container:
			klog.InfoS("The kubelet reports a container's devices under another container of the same pod; keeping the claimed record", "pod", e.ref.String(), "container", o.Container, "claimedBy", oc)
		default:
			klog.InfoS("The kubelet reports devices claimed by a pod with a different request; keeping the claimed record", "pod", e.ref.String(), "container", o.Container, "claimedBy", owner.ref.String())
		}
	}
	var out []device.PodRef
	for r := range changed {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	if len(out) > 0 {
		l.notifyLocked()
	}
	l.mu.Unlock()
	if l.dirty != nil {
		for _, r := range out {
			l.dirty(r)
		}
	}
	return out
}

// dropStaleLocked drops the claims that overlap slices the kubelet reports under another pod
// whose own claim covers them: a slice is held by one container at a time, so such a claim is a
// stale duplicate (the second record write of a swap lost to a restart restores a record that
// still names the slot the other pod took). The pod is unclaimed again; rebalanceLocked then
// gives it the slot its group publishes and nobody holds. Caller holds mu.
func (l *Ledger) dropStaleLocked(obs []ObservedContainer, byName map[string]*podEntry, ambiguous map[string]bool, changed map[device.PodRef]bool) {
	for _, o := range obs {
		q := byName[o.Namespace+"/"+o.Pod]
		if q == nil || ambiguous[o.Namespace+"/"+o.Pod] {
			continue
		}
		if cl, ok := q.claimed[o.Container]; !ok || !sameSet(cl.SliceIDs, o.IDs) {
			continue
		}
		for _, e := range l.pods {
			if e == q {
				continue
			}
			for name, cl := range e.claimed {
				if !overlaps(cl.SliceIDs, o.IDs) {
					continue
				}
				klog.V(2).InfoS("Dropping a stale claim: the kubelet reports its slices under another pod", "pod", e.ref.String(), "container", name, "heldBy", q.ref.String())
				cl.SliceIDs = nil
				delete(e.claimed, name)
				delete(e.guessed, name)
				changed[e.ref] = true
			}
		}
	}
}

// rebalanceLocked gives the unclaimed members of signature group sig the slots that the group's
// planned annotations leave once the claimed and terminating members' plans are taken out, as
// the extender charges them (pkg/extender normalizeLocked, with Slots): a member whose plan is
// among those slots keeps it, the others take the rest, first seen first, lowest first; but a
// member the kubelet reports slices for (reported: the GPUs they name, by container) first takes
// the slot on those GPUs when one is left (its call was answered that slot when the kubelet
// followed GetPreferredAllocation). Unclaimed members' plans are a permutation of those slots,
// so this changes nothing the extender charges.
// While the plugin runs, a member's plan only changes here when the kubelet reports slices for
// it that no claim covers (a restart lost its claim). After a restart it gives
// back what a swap had given the unclaimed member of a swapped pair (the swap lived in memory;
// only the claimed member's record was written), and a member whose stale claim was dropped
// (dropStaleLocked) the slot nobody holds. Caller holds mu.
func (l *Ledger) rebalanceLocked(sig device.Signature, reported map[*podEntry]map[string][]string) {
	var published, held Slots
	var unclaimed []*podEntry
	for i, m := range []map[types.UID]*podEntry{l.pods, l.leaving} {
		for _, e := range m {
			if e.sig != sig {
				continue
			}
			published.Add(e.published())
			if i == 1 || len(e.claimed) > 0 {
				held.Add(&e.plan)
			} else {
				unclaimed = append(unclaimed, e)
			}
		}
	}
	var free Slots
	for _, k := range published.Minus(&held) {
		free.Add(published.Peek(k))
	}
	sort.Slice(unclaimed, func(i, j int) bool { return unclaimed[i].seen < unclaimed[j].seen })
	var rest, moved []*podEntry
	for _, e := range unclaimed {
		if k := slotOn(&free, reported[e]); k != "" {
			l.giveSlot(e, free.Take(k))
		} else {
			rest = append(rest, e)
		}
	}
	for _, e := range rest {
		if free.Take(device.SlotKey(&e.plan)) == nil {
			moved = append(moved, e)
		}
	}
	for _, e := range moved {
		if slot := free.TakeLowest(); slot != nil {
			l.giveSlot(e, slot)
		}
	}
}

// giveSlot makes slot the plan of unclaimed pod e (a no-op when it is e's plan already).
func (l *Ledger) giveSlot(e *podEntry, slot *device.Allocation) {
	if device.SlotKey(slot) == device.SlotKey(&e.plan) {
		return
	}
	klog.V(2).InfoS("Giving an unclaimed pod the slot its signature group leaves free", "pod", e.ref.String())
	e.plan = *device.Renamed(slot, &e.plan)
}

// slotOn returns the key of a slot in free that puts each container named in gpus on exactly
// those GPUs; "" when gpus is empty or no slot does.
func slotOn(free *Slots, gpus map[string][]string) string {
	if len(gpus) == 0 {
		return ""
	}
	for _, k := range free.Keys() {
		if onGPUs(free.Peek(k), gpus) {
			return k
		}
	}
	return ""
}

// onGPUs reports whether slot puts each container named in gpus on exactly those GPUs.
func onGPUs(slot *device.Allocation, gpus map[string][]string) bool {
	for name, want := range gpus {
		c := slot.Container(name)
		if c == nil || !sameSet(planGPUs(c), want) {
			return false
		}
	}
	return true
}

// findClaim returns the pod and container whose claim overlaps ids.
func (l *Ledger) findClaim(ids []string) (*podEntry, string) {
	for _, e := range l.pods {
		for _, c := range e.plan.Containers {
			if cl, ok := e.claimed[c.Name]; ok && overlaps(cl.SliceIDs, ids) {
				return e, c.Name
			}
		}
	}
	return nil, ""
}

// SliceView is one claimed slice (container × GPU) for metrics.
type SliceView struct {
	Pod       device.PodRef
	Container string
	Grant     device.DeviceGrant
}

// Snapshot returns every claimed slice and, per pod, the container-ID → name map (for metrics).
func (l *Ledger) Snapshot() ([]SliceView, map[string]SliceOwner) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []SliceView
	owners := map[string]SliceOwner{}
	for _, e := range l.pods {
		for _, c := range e.plan.Containers {
			cl, ok := e.claimed[c.Name]
			if !ok {
				continue
			}
			for _, d := range cl.Devices {
				out = append(out, SliceView{Pod: e.ref, Container: c.Name, Grant: d})
			}
		}
		for id, name := range e.containerIDs {
			owners[id] = SliceOwner{Pod: e.ref, Container: name}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Pod.String() != b.Pod.String() {
			return a.Pod.String() < b.Pod.String()
		}
		if a.Container != b.Container {
			return a.Container < b.Container
		}
		return a.Grant.UUID < b.Grant.UUID
	})
	return out, owners
}

// Charged returns, per GPU UUID, what the claimed containers of the pods on this node book:
// the sum over pods of allocator.ChargeOf of each pod's claimed containers (in the pod's
// order), the extender's own charge (case C40). Terminating pods are left out, as in Snapshot.
func (l *Ledger) Charged() allocator.NodeUsage {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := allocator.NodeUsage{}
	for _, e := range l.pods {
		a := device.Allocation{Node: l.node}
		for _, c := range e.plan.Containers {
			if cl, ok := e.claimed[c.Name]; ok {
				a.Containers = append(a.Containers, *cl)
			}
		}
		u.Add(allocator.ChargeOf(&a))
	}
	return u
}

// SliceOwner is the pod and container a runtime container ID belongs to.
type SliceOwner struct {
	Pod       device.PodRef
	Container string
}

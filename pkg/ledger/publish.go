package ledger

import (
	"sort"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// Keeping the planned annotations of a signature group true.
//
// Reconcile swaps the effective plans of interchangeable pods (equal signatures) when the kubelet
// gave one pod the slot planned for another; their AnnoPlanned values stay as the extender wrote
// them. While both pods live, the group's planned annotations still add up to its effective
// plans (the same slots, held by other members), and that sum is all the extender charges
// unclaimed members from. When a pod goes whose effective plan is not its AnnoPlanned, the group
// loses a slot it no longer holds (the pod's effective plan) and keeps one nobody planned (its
// AnnoPlanned). A restarted extender rebuilds from the annotations alone, so the plugin then
// rewrites remaining members' AnnoPlanned until the annotations add up again (republishLocked):
// each slot planned more often than held moves to a slot held more often than planned, on the
// member that will run there when there is one.
//
// A pod counts until the extender releases it: when it is gone or has finished. A terminating
// pod is matched no more, but stays in the sums (Ledger.leaving), so that the plugin does not
// rewrite an annotation before the extender has seen the release the rewrite makes up for.

// leaveLocked takes a terminating pod out of matching and keeps it in its group's sums until
// forgetLocked. Caller holds mu.
func (l *Ledger) leaveLocked(uid types.UID) {
	if e, ok := l.pods[uid]; ok {
		delete(l.pods, uid)
		l.leaving[uid] = e
	}
}

// forgetLocked removes a pod from the ledger and republishes its group. Caller holds mu.
func (l *Ledger) forgetLocked(uid types.UID) {
	m, ok := l.pods[uid]
	if !ok {
		m, ok = l.leaving[uid]
	}
	if !ok {
		return
	}
	delete(l.pods, uid)
	delete(l.leaving, uid)
	l.republishLocked(m.sig)
}

// republishLocked makes the planned annotations of the signature group sig add up to the plans
// its members hold (above): for each slot held more often than published, one member published
// on a slot published more often than held gets that slot as its AnnoPlanned, preferring the
// member whose plan it is, then the first seen. Terminating members count but are not rewritten.
// Caller holds mu.
func (l *Ledger) republishLocked(sig device.Signature) {
	held, published := l.groupSlots(sig, nil)
	var live []*podEntry
	for _, e := range l.pods {
		if e.sig == sig {
			live = append(live, e)
		}
	}
	short := held.Minus(&published)
	if len(short) == 0 {
		return
	}
	sort.Slice(live, func(i, j int) bool { return live[i].seen < live[j].seen })
	for _, want := range short {
		var pick *podEntry
		for _, e := range live {
			k := device.SlotKey(e.published())
			if published.Count(k) <= held.Count(k) {
				continue // its published slot is not one too many
			}
			if pick == nil || device.SlotKey(&e.plan) == want && device.SlotKey(&pick.plan) != want {
				pick = e
			}
		}
		if pick == nil {
			klog.InfoS("A signature group's planned annotations do not add up to its plans and no running member can carry the difference", "slot", want)
			continue
		}
		published.Drop(device.SlotKey(pick.published()))
		slot := held.Peek(want)
		published.Add(slot)
		if r := device.Renamed(slot, &pick.anno); device.SlotKey(r) == device.SlotKey(&pick.anno) {
			pick.republish = nil
		} else {
			pick.republish = r
		}
		klog.V(2).InfoS("Republishing a planned allocation so that its signature group adds up", "pod", pick.ref.String())
		l.toWrite = append(l.toWrite, pick.ref)
	}
}

// groupSlots returns the slots the members of signature group sig hold (their effective plans)
// and publish (their planned annotations once pending writes land), terminating members
// included; skip, when not nil, is left out of held. Caller holds mu.
func (l *Ledger) groupSlots(sig device.Signature, skip *podEntry) (held, published Slots) {
	for _, m := range []map[types.UID]*podEntry{l.pods, l.leaving} {
		for _, e := range m {
			if e.sig != sig {
				continue
			}
			published.Add(e.published())
			if e != skip {
				held.Add(&e.plan)
			}
		}
	}
	return held, published
}

// published is the planned annotation the extender sees for e once pending writes land.
func (e *podEntry) published() *device.Allocation {
	if e.republish != nil {
		return e.republish
	}
	return &e.anno
}

// PlannedRewrite returns the AnnoPlanned the plugin must write on the pod (forgetLocked), or
// nil when the pod's annotation stands.
func (l *Ledger) PlannedRewrite(uid types.UID) *device.Allocation {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.pods[uid]
	if !ok || e.republish == nil {
		return nil
	}
	return device.Renamed(e.republish, nil)
}

// update runs f under mu, then queues the pods f collected in toWrite, outside mu.
func (l *Ledger) update(f func()) {
	refs := func() []device.PodRef {
		l.mu.Lock()
		defer l.mu.Unlock()
		f()
		out := l.toWrite
		l.toWrite = nil
		return out
	}()
	if l.dirty == nil {
		return
	}
	for _, r := range refs {
		l.dirty(r)
	}
}

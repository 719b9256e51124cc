package deviceplugin

import (
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
// AnnoPlanned). The extender's cache makes up for that in memory (its slotAdjust), but a
// restarted extender rebuilds from the annotations alone. So the plugin rewrites one remaining
// member's AnnoPlanned from the lost slot to the kept one, preferring the member whose effective
// plan is the kept one (its annotation then says where it will run), and the annotations add up
// again.

// forgetLocked removes a pod from the ledger and, when its effective plan differs from its
// planned annotation, republishes one member of its group (above). Caller holds mu.
func (l *Ledger) forgetLocked(uid types.UID) {
	m, ok := l.pods[uid]
	if !ok {
		return
	}
	delete(l.pods, uid)
	published := m.published()
	lost, kept := device.SlotKey(&m.plan), device.SlotKey(published)
	if lost == kept {
		return
	}
	// rank 0: a member planned on the lost slot that runs (or will) on the kept one; 1: any
	// other member planned on the lost slot. Among equals the first seen, for a stable choice.
	rank := func(e *podEntry) int {
		if device.SlotKey(&e.plan) == kept {
			return 0
		}
		return 1
	}
	var pick *podEntry
	for _, e := range l.pods {
		if e.sig != m.sig || device.SlotKey(e.published()) != lost {
			continue
		}
		if pick == nil || rank(e) < rank(pick) || rank(e) == rank(pick) && e.seen < pick.seen {
			pick = e
		}
	}
	if pick == nil {
		klog.InfoS("A pod left with a swapped plan and no member of its group holds its planned slot; the extender's cache keeps the difference in memory only", "pod", m.ref.String())
		return
	}
	pick.republish = device.Renamed(published, &pick.anno)
	klog.V(2).InfoS("Republishing a planned allocation so that its group adds up after a swapped pod left", "pod", pick.ref.String(), "left", m.ref.String())
	l.toWrite = append(l.toWrite, pick.ref)
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
	refs := func() []PodRef {
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

package ledger

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// AnsweredError refuses a container whose Allocate answer, as the runtime holds it, names GPUs
// that the pod's signature group has no free slot on: the plugin restarted before it recorded
// the answer, and another pod holds that slot now. Running the container would put one more
// sharer on those GPUs than the extender placed there, so it must not run.
type AnsweredError struct {
	Pod       string // namespace/name
	Container string
	// Answered are the GPU UUIDs of the answer; Claimed those of the pod's claimed record.
	Answered, Claimed []string
}

func (e *AnsweredError) Error() string {
	return fmt.Sprintf("container %s of pod %s was answered GPUs %s before the device plugin restarted, but its recorded "+
		"claim names %s and no other pod of the same request leaves a slot on %s: running it would over-commit those GPUs "+
		"(delete the pod so that it is scheduled again)", e.Container, e.Pod, strings.Join(e.Answered, ","), strings.Join(e.Claimed, ","),
		strings.Join(e.Answered, ","))
}

// Answered brings the claim of container name of pod uid in line with the Allocate answer the
// kubelet keeps for it (in its device-manager checkpoint, and passes to the runtime at every
// container creation), which the runtime reports through NRI: gpus are the GPU UUIDs of that
// answer (device.EnvGPUUUIDs). While the plugin runs, a claim is the answer, so nothing changes.
// They differ only when the plugin restarted after answering and before the claimed record was
// written: Reconcile then claimed the container from the pod's own plan (a guessed claim), while
// the answer had taken the slot of an interchangeable pod (Allocate cannot tell such pods
// apart). Only guessed claims move: a claim this plugin made at Allocate is the answer, and a
// different report (a forged env) is the guard's to refuse. The answers the plugin gave before
// the restart hand out each slot of a signature group once, so the claim moves to the slot the
// answer took: a slot of the group on gpus that its planned annotations publish and no member
// holds, when there is one; else, as Reconcile's swap moves a claim, the plan of a member whose
// plan puts this container on gpus and that is unclaimed, else whose claim of this container is
// guessed too (its own answer, reported later, moves it on in turn), and that member takes the
// pod's plan, keeping its own slice IDs. The pod's claim is then the answer.
//
// It returns whether the claim changed (the pod's record, and the member's when it is claimed,
// are then queued, Config.Dirty); an *AnsweredError when no member can give the slot (another
// pod holds it by an answer) or the pod has other claimed containers to move with it; nil and
// false for a container that is not claimed or whose claim is not a guess (the caller's usual
// path decides).
func (l *Ledger) Answered(uid types.UID, name string, gpus []string) (changed bool, err error) {
	want := append([]string(nil), gpus...)
	sort.Strings(want)
	l.update(func() {
		e, ok := l.pods[uid]
		if !ok {
			return
		}
		cl, ok := e.claimed[name]
		if !ok || !e.guessed[name] {
			return // a claim made here is the answer: the guard's env check decides
		}
		if sameSet(planGPUs(cl), want) {
			delete(e.guessed, name)
			return
		}
		refuse := &AnsweredError{Pod: e.ref.String(), Container: name, Answered: want, Claimed: planGPUs(cl)}
		if len(e.claimed) > 1 {
			err = refuse
			return
		}
		if slot := l.freeSlotOn(e, name, want); slot != nil {
			klog.V(2).InfoS("The runtime reports an Allocate answer on a slot of the pod's signature group that nobody holds; taking it", "pod", e.ref.String(), "container", name, "gpus", want)
			ids := cl.SliceIDs
			e.plan = *device.Renamed(slot, &e.plan)
			c := e.plan.Container(name)
			c.SliceIDs = append([]string(nil), ids...)
			e.claimed = map[string]*device.ContainerAllocation{name: c}
			delete(e.guessed, name)
			l.toWrite = append(l.toWrite, e.ref)
			l.notifyLocked()
			changed = true
			return
		}
		from := l.slotGiver(e, name, want, len(cl.Devices))
		if from == nil {
			err = refuse
			return
		}
		klog.V(2).InfoS("The runtime reports an Allocate answer that the claimed record lost to a restart; taking the slot it answered", "pod", e.ref.String(), "container", name, "slotOf", from.ref.String(), "gpus", want)
		ids := cl.SliceIDs
		var fromIDs []string
		if fc := from.claimed[name]; fc != nil {
			fromIDs = fc.SliceIDs
		}
		e.plan, from.plan = cloneAllocation(&from.plan), cloneAllocation(&e.plan)
		c := e.plan.Container(name)
		c.SliceIDs = append([]string(nil), ids...)
		e.claimed = map[string]*device.ContainerAllocation{name: c}
		delete(e.guessed, name)
		l.toWrite = append(l.toWrite, e.ref)
		fc := from.plan.Container(name)
		fc.SliceIDs = fromIDs // nil for an unclaimed member: e's IDs are not its
		if fromIDs != nil {
			from.claimed = map[string]*device.ContainerAllocation{name: fc}
			l.toWrite = append(l.toWrite, from.ref)
		}
		l.notifyLocked()
		changed = true
	})
	return changed, err
}

// freeSlotOn returns a slot of e's signature group that its planned annotations publish more
// often than its members hold it (e left out), with container name on gpus; nil when none.
// Caller holds mu.
func (l *Ledger) freeSlotOn(e *podEntry, name string, gpus []string) *device.Allocation {
	held, published := l.groupSlots(e.sig, e)
	for _, k := range published.Minus(&held) {
		if slot := published.Peek(k); onGPUs(slot, map[string][]string{name: gpus}) {
			return slot
		}
	}
	return nil
}

// slotGiver returns the member of e's signature group whose plan puts container name (n
// devices) on gpus and that can give that slot up: unclaimed, else claiming only that container
// by a guess; the first seen of each kind, unclaimed first. nil when none. Caller holds mu.
func (l *Ledger) slotGiver(e *podEntry, name string, gpus []string, n int) *podEntry {
	var unclaimed, guessed *podEntry
	for _, f := range l.pods {
		if f == e || f.sig != e.sig {
			continue
		}
		fc := f.plan.Container(name)
		if fc == nil || len(fc.Devices) != n || !sameSet(planGPUs(fc), gpus) {
			continue
		}
		switch {
		case len(f.claimed) == 0:
			if unclaimed == nil || f.seen < unclaimed.seen {
				unclaimed = f
			}
		case len(f.claimed) == 1 && f.guessed[name] && f.claimed[name] != nil:
			if guessed == nil || f.seen < guessed.seen {
				guessed = f
			}
		}
	}
	if unclaimed != nil {
		return unclaimed
	}
	return guessed
}

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
// written: Reconcile then claimed the container from the pod's own plan, while the answer had
// taken the slot of an interchangeable pod (Allocate cannot tell such pods apart). The claim then
// moves as Reconcile's swap moves it: the pod takes the plan of the unclaimed member of its
// signature group whose plan puts this container on gpus, and that member takes the pod's.
//
// It returns whether the claim changed (the pod's record is then queued, Config.Dirty); an
// *AnsweredError when no unclaimed member has such a plan (another pod holds the slot), or the
// pod has other claimed containers to move with it; nil and false for a container that is not
// claimed (the caller's usual path decides).
func (l *Ledger) Answered(uid types.UID, name string, gpus []string) (changed bool, err error) {
	want := append([]string(nil), gpus...)
	sort.Strings(want)
	l.update(func() {
		e, ok := l.pods[uid]
		if !ok {
			return
		}
		cl, ok := e.claimed[name]
		if !ok || sameSet(planGPUs(cl), want) {
			return
		}
		refuse := &AnsweredError{Pod: e.ref.String(), Container: name, Answered: want, Claimed: planGPUs(cl)}
		if len(e.claimed) > 1 {
			err = refuse
			return
		}
		var from *podEntry
		for _, f := range l.pods {
			if f == e || f.sig != e.sig || len(f.claimed) > 0 || (from != nil && from.seen < f.seen) {
				continue
			}
			if fc := f.plan.Container(name); fc != nil && len(fc.Devices) == len(cl.Devices) && sameSet(planGPUs(fc), want) {
				from = f
			}
		}
		if from == nil {
			err = refuse
			return
		}
		klog.V(2).InfoS("The runtime reports an Allocate answer that the claimed record lost to a restart; taking the slot it answered", "pod", e.ref.String(), "container", name, "slotOf", from.ref.String(), "gpus", want)
		ids := cl.SliceIDs
		e.plan, from.plan = cloneAllocation(&from.plan), cloneAllocation(&e.plan)
		c := e.plan.Container(name)
		c.SliceIDs = append([]string(nil), ids...)
		e.claimed = map[string]*device.ContainerAllocation{name: c}
		l.toWrite = append(l.toWrite, e.ref)
		l.notifyLocked()
		changed = true
	})
	return changed, err
}

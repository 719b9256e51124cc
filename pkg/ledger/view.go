package ledger

import (
	"sort"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// SliceView is one claimed slice (container × GPU) for metrics.
type SliceView struct {
	Pod       device.PodRef
	Container string
	Grant     device.DeviceGrant
}

// Snapshot returns every claimed slice and, per pod, the container-ID → name map (for metrics),
// terminating pods included: their slices are held until they finish or are gone.
func (l *Ledger) Snapshot() ([]SliceView, map[string]SliceOwner) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []SliceView
	owners := map[string]SliceOwner{}
	for _, e := range l.allLocked() {
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

// Charged returns, per GPU UUID, what the pods placed on this node book, as the extender charges
// them (case C40): the sum over pods of allocator.ChargeOf of each pod's plan, a claimed
// container counted as claimed. A pod counts from its placement (planned, its containers not
// yet created) until it finishes or is gone, terminating included, as the extender holds it
// (device.PodFinished); so the metrics agree with the scheduler at every moment of a pod's life.
func (l *Ledger) Charged() allocator.NodeUsage {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := allocator.NodeUsage{}
	for _, e := range l.allLocked() {
		a := device.Allocation{Node: l.node}
		for _, c := range e.plan.Containers {
			if cl, ok := e.claimed[c.Name]; ok {
				a.Containers = append(a.Containers, *cl)
			} else {
				a.Containers = append(a.Containers, c)
			}
		}
		u.Add(allocator.ChargeOf(&a))
	}
	return u
}

// allLocked returns the entries of the pods the node holds GPUs for: served and terminating
// (leaving). Caller holds mu.
func (l *Ledger) allLocked() []*podEntry {
	out := make([]*podEntry, 0, len(l.pods)+len(l.leaving))
	for _, e := range l.pods {
		out = append(out, e)
	}
	for _, e := range l.leaving {
		out = append(out, e)
	}
	return out
}

// SliceOwner is the pod and container a runtime container ID belongs to.
type SliceOwner struct {
	Pod       device.PodRef
	Container string
}

// Holders returns the pods that hold GPUs of this node, as Charged counts them (placed, running
// or terminating, until they finish or are gone), as "namespace/name", sorted: what a device
// plugin leaving the node for a mode switch serves until they end (nodeagent.ModeSwitchWait).
func (l *Ledger) Holders() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.allLocked() {
		out = append(out, e.ref.String())
	}
	sort.Strings(out)
	return out
}

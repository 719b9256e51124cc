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

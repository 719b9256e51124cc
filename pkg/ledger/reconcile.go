package ledger

import (
	"sort"

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
// does not report yet (admission in flight) are kept. A container the kubelet reports that has
// no claim (plugin restarted before its record was written) is claimed from the pod's plan.
// It returns the pods whose records changed.
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
		if cl, ok := e.claimed[o.Container]; ok && sameSet(cl.SliceIDs, o.IDs) {
			continue // already the truth
		}
		owner, oc := l.findClaim(o.IDs)
		switch {
		case owner != nil && owner != e && owner.sig == e.sig && oc == o.Container:
			klog.V(2).InfoS("Interchangeable pods took each other's slots; swapping their records", "pod", e.ref.String(), "slotOf", owner.ref.String())
			e.plan, owner.plan = owner.plan, e.plan
			e.claimed, owner.claimed = owner.claimed, e.claimed
			e.lastClaim, owner.lastClaim = owner.lastClaim, e.lastClaim
			changed[e.ref], changed[owner.ref] = true, true
		case owner == nil:
			if slot := l.freeSlotFor(e, o.Container, o.IDs); slot != nil {
				// The pod's own plan is held by another member already (a restored record that a
				// swap had replaced, its rewrite lost to a restart): the call was answered with the
				// group's slot that nobody holds.
				klog.V(2).InfoS("The kubelet reports a container whose slot another pod holds; giving it the group's free slot", "pod", e.ref.String(), "container", o.Container)
				e.plan = *slot
				e.claimed = map[string]*device.ContainerAllocation{}
			}
			for i := range e.plan.Containers {
				c := &e.plan.Containers[i]
				if c.Name != o.Container || len(c.Devices) != len(o.IDs) {
					continue
				}
				c.SliceIDs = append([]string(nil), o.IDs...)
				sort.Strings(c.SliceIDs)
				e.claimed[c.Name] = c
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

// freeSlotFor returns the slot pod e's container must be claimed from when the kubelet reports
// ids for it that no claim covers, or nil when that is e's own plan (the usual case). e's own
// plan is not free when other members of its signature group hold it already, at least as often
// as the group's planned annotations publish it: a half-applied swap (Reconcile's two record writes, a
// plugin restart between them) restores e with the record the swap replaced, a slot another
// member already holds. Then the container was answered with the slot the group publishes and
// nobody holds: the one on the ids' GPUs when there is one, else the lowest. Only a pod with no
// other claimed container is moved. Caller holds mu.
func (l *Ledger) freeSlotFor(e *podEntry, container string, ids []string) *device.Allocation {
	for name := range e.claimed {
		if name != container {
			return nil
		}
	}
	held, published := l.groupSlots(e.sig, e)
	own := device.SlotKey(&e.plan)
	if held.Count(own) == 0 || published.Count(own) > held.Count(own) {
		return nil
	}
	free := published.Minus(&held)
	if len(free) == 0 {
		return nil
	}
	want, pick := SliceGPUs(ids), free[0]
	for _, k := range free {
		if c := published.Peek(k).Container(container); c != nil && sameSet(planGPUs(c), want) {
			pick = k
			break
		}
	}
	return device.Renamed(published.Peek(pick), &e.plan)
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

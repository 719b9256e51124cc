package drapreempt

// This file maps the DRA view (ResourceSlices, allocated claims) onto pkg/allocator's device
// model, per node: devices, what each allocated claim consumes, and the victim candidates.

import (
	"cmp"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// devInfo is one published device.
type devInfo struct {
	key     string // pool/device: the GPU's UUID in the allocator's inventory
	dev     *resourceapi.Device
	sharers int64
}

// nodeModel is one node in the allocator's terms.
type nodeModel struct {
	name string
	inv  device.Inventory
	used allocator.NodeUsage
	devs []*devInfo
	// claims holds the allocated claims on the node, with their charge by device key.
	claims []heldClaim
}

type heldClaim struct {
	claim  *resourceapi.ResourceClaim
	charge allocator.Charge
}

// buildNodes maps the slices and allocated claims onto the allocator's model, node by node.
func buildNodes(snap *Snapshot) map[string]*nodeModel {
	gen := map[string]int64{} // newest generation per pool
	for _, s := range snap.Slices {
		if s.Spec.Driver == draapi.DriverName && s.Spec.NodeName != nil {
			gen[s.Spec.Pool.Name] = max(gen[s.Spec.Pool.Name], s.Spec.Pool.Generation)
		}
	}
	nodes := map[string]*nodeModel{}
	where := map[string]*nodeModel{} // device key -> node
	for _, s := range snap.Slices {
		if s.Spec.Driver != draapi.DriverName || s.Spec.NodeName == nil || s.Spec.Pool.Generation != gen[s.Spec.Pool.Name] {
			continue
		}
		name := *s.Spec.NodeName
		nm := nodes[name]
		if nm == nil {
			nm = &nodeModel{name: name, inv: device.Inventory{Node: name, MemoryScaling: 1, SplitCount: 1}, used: allocator.NodeUsage{}}
			nodes[name] = nm
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			key := s.Spec.Pool.Name + "/" + d.Name
			mem := d.Capacity[draapi.CapacityMemory]
			sh := d.Capacity[draapi.CapacitySharers]
			di := &devInfo{key: key, dev: d, sharers: max(sh.Value.Value(), 1)}
			g := device.GPU{UUID: key, MemoryMiB: mem.Value.Value() / mib, NUMANode: -1, Healthy: true}
			for _, t := range d.Taints {
				if t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute {
					g.Healthy = false
				}
			}
			if a, ok := d.Attributes[deviceattribute.StandardDeviceAttributeNUMANode]; ok && a.IntValue != nil {
				g.NUMANode = int(*a.IntValue)
			}
			if a, ok := d.Attributes[draapi.AttrProductName]; ok && a.StringValue != nil {
				g.Model = *a.StringValue
			}
			nm.inv.GPUs = append(nm.inv.GPUs, g)
			nm.devs = append(nm.devs, di)
			nm.inv.SplitCount = max(nm.inv.SplitCount, int(di.sharers))
			where[key] = nm
		}
	}
	// A device with fewer sharers than the node's split count holds the difference as used.
	for _, nm := range nodes {
		for _, d := range nm.devs {
			if pad := int64(nm.inv.SplitCount) - d.sharers; pad > 0 {
				u := nm.used[d.key]
				u.Sharers += int(pad)
				nm.used[d.key] = u
			}
		}
	}
	for _, c := range snap.Claims {
		if c.Status.Allocation == nil {
			continue
		}
		var nm *nodeModel
		charge := allocator.Charge{}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != draapi.DriverName || (r.AdminAccess != nil && *r.AdminAccess) {
				continue
			}
			key := r.Pool + "/" + r.Device
			n := where[key]
			if n == nil {
				continue
			}
			nm = n
			charge[key] = plus(charge[key], consumed(r, n, key))
		}
		if nm != nil {
			nm.claims = append(nm.claims, heldClaim{claim: c, charge: charge})
		}
	}
	return nodes
}

// consumed is what result r holds of device key: its consumedCapacity (memory rounded up to
// MiB), or the whole device when it records none.
func consumed(r resourceapi.DeviceRequestAllocationResult, nm *nodeModel, key string) allocator.GPUUsage {
	if r.ConsumedCapacity == nil {
		for i, d := range nm.devs {
			if d.key == key {
				return allocator.GPUUsage{MemoryMiB: nm.inv.GPUs[i].MemoryMiB, CoresPercent: 100, Sharers: int(d.sharers)}
			}
		}
	}
	var u allocator.GPUUsage
	if q, ok := r.ConsumedCapacity[draapi.CapacityMemory]; ok {
		u.MemoryMiB = (q.Value() + mib - 1) / mib
	}
	if q, ok := r.ConsumedCapacity[draapi.CapacityCores]; ok {
		u.CoresPercent = int(q.Value())
	}
	if q, ok := r.ConsumedCapacity[draapi.CapacitySharers]; ok {
		u.Sharers = int(q.Value())
	} else {
		u.Sharers = 1
	}
	return u
}

// candidates books the node's claims into nm.used and returns the victim candidates: groups of
// pods (linked by claims they share) of priority below prio, lowest priority first, with the
// charge of the claims only they hold, and the pods of each group. Claims whose reserving pods
// are all gone (missing, terminating) or that nobody reserves book nothing; claims reserved by a
// pod that may not be evicted (priority ≥ prio, or not a pod) book their charge and free
// nothing.
func (nm *nodeModel) candidates(snap *Snapshot, prio int32) ([][]*corev1.Pod, []allocator.Victim) {
	sets := podSets{}
	fs := nm.book(snap, prio, sets)
	pods, cands := group(snap, fs, sets)
	sp, sc := sortCandidates(pods, cands)
	markPDB(snap, sp, sc)
	return sp, sc
}

// freeable is a claim that only evictable pods hold: its charge and its live reserving pods.
type freeable struct {
	charge allocator.Charge
	pods   []types.UID
}

// podSets joins the pods that share claims (union-find): each pod's parent, a root its own.
type podSets map[types.UID]types.UID

// find returns the root of u's set, halving the path on the way.
func (parent podSets) find(u types.UID) types.UID {
	for parent[u] != u {
		parent[u] = parent[parent[u]]
		u = parent[u]
	}
	return u
}

// book books the node's claims into nm.used (those with a live or unevictable reserver) and
// returns the claims that only evictable pods hold, joining in sets the pods of each.
func (nm *nodeModel) book(snap *Snapshot, prio int32, sets podSets) []freeable {
	var fs []freeable
	for _, h := range nm.claims {
		live, fixed := reservers(h, snap, prio)
		if !fixed && len(live) == 0 {
			continue // freed soon: books nothing
		}
		for k, u := range h.charge {
			nm.used[k] = plus(nm.used[k], u)
		}
		if fixed {
			continue
		}
		for _, u := range live {
			if _, ok := sets[u]; !ok {
				sets[u] = u
			}
		}
		for _, u := range live[1:] {
			sets[sets.find(u)] = sets.find(live[0])
		}
		fs = append(fs, freeable{h.charge, live})
	}
	return fs
}

// reservers returns the live pods (neither missing nor terminating) that reserve the claim h;
// fixed is true when a reserver may not be evicted (not a pod, or of priority ≥ prio).
func reservers(h heldClaim, snap *Snapshot, prio int32) (live []types.UID, fixed bool) {
	for _, r := range h.claim.Status.ReservedFor {
		if r.Resource != "pods" || r.APIGroup != "" {
			fixed = true
			continue
		}
		p := snap.Pods[r.UID]
		if p == nil || p.DeletionTimestamp != nil {
			continue // gone, or going
		}
		if Priority(p) >= prio {
			fixed = true
		}
		live = append(live, r.UID)
	}
	return live, fixed
}

// group sums the freeable claims into one candidate per set of pods, in order of first
// appearance: the charge of its claims, its pods and their highest priority.
func group(snap *Snapshot, fs []freeable, sets podSets) ([][]*corev1.Pod, []allocator.Victim) {
	groups := map[types.UID]int{}
	var pods [][]*corev1.Pod
	var cands []allocator.Victim
	for _, f := range fs {
		root := sets.find(f.pods[0])
		i, ok := groups[root]
		if !ok {
			i = len(cands)
			groups[root] = i
			pods = append(pods, nil)
			cands = append(cands, allocator.Victim{Charge: allocator.Charge{}, Priority: math.MinInt32})
		}
		for k, u := range f.charge {
			cands[i].Charge[k] = plus(cands[i].Charge[k], u)
		}
		for _, u := range f.pods {
			p := snap.Pods[u]
			if !slices.Contains(pods[i], p) {
				pods[i] = append(pods[i], p)
				cands[i].Priority = max(cands[i].Priority, Priority(p))
			}
		}
	}
	return pods, cands
}

// sortCandidates sorts each candidate's pods by namespace and name and returns the candidates
// lowest priority first (then by the first pod's name), as the extender orders candidates.
func sortCandidates(pods [][]*corev1.Pod, cands []allocator.Victim) ([][]*corev1.Pod, []allocator.Victim) {
	order := make([]int, len(cands))
	for i := range order {
		order[i] = i
		slices.SortFunc(pods[i], func(a, b *corev1.Pod) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(cands[a].Priority, cands[b].Priority),
			strings.Compare(pods[a][0].Namespace+"/"+pods[a][0].Name, pods[b][0].Namespace+"/"+pods[b][0].Name))
	})
	sp, sc := make([][]*corev1.Pod, len(order)), make([]allocator.Victim, len(order))
	for j, i := range order {
		sp[j], sc[j] = pods[i], cands[i]
	}
	return sp, sc
}

// markPDB marks the candidates (sp's pods, sc's victims) that would violate a
// PodDisruptionBudget, as snap.Disruptions tells; without it, none.
func markPDB(snap *Snapshot, sp [][]*corev1.Pod, sc []allocator.Victim) {
	if snap.Disruptions != nil && len(sc) > 0 {
		var flat []*corev1.Pod
		var owner []int
		for j, ps := range sp {
			for _, p := range ps {
				flat = append(flat, p)
				owner = append(owner, j)
			}
		}
		for k, v := range snap.Disruptions(flat) {
			if v {
				sc[owner[k]].ViolatesPDB = true
			}
		}
	}
}

// plus is the sum of two usages of one device (DRA has no exclusive holder: exclusivity is
// every sharer taken).
func plus(a, b allocator.GPUUsage) allocator.GPUUsage {
	return allocator.GPUUsage{MemoryMiB: a.MemoryMiB + b.MemoryMiB, CoresPercent: a.CoresPercent + b.CoresPercent, Sharers: a.Sharers + b.Sharers}
}

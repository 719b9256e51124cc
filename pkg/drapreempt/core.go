// Package drapreempt is hami-go's preemption for GPU pods in DRA mode (docs/dra.md,
// "Preemption in DRA mode"). kube-scheduler 1.37 does not preempt for pods with ResourceClaims
// (KEP-5690 missed the release): a high-priority pod whose claims of gpu.hami-go.io fit no node
// stays Pending. This package chooses, from outside kube-scheduler, the node and the fewest
// lowest-priority pods whose claims, once deallocated, let the pod's claims fit (Choose, pure),
// and a controller nominates the pod there and evicts them (Controller).
//
// Choose maps the DRA view onto pkg/allocator's device model, so the victims are exactly the
// ones the extender's preemption in device-plugin mode would choose (allocator.ChooseVictims,
// exact per GPU): one published device is one GPU (its key pool/device is the GPU's UUID there),
// its `memory` capacity in MiB the GPU's bookable memory (memory scaling 1), its `sharers`
// capacity the split count, and each allocated claim's consumedCapacity on it the booked usage.
// Each of the preemptor's requests becomes one GPU container of the allocator's request (all in
// one phase: a pod holds its claims at the same time), with count, memory (MiB, rounded up as
// the capacity's 1 MiB step does; no memory request: the whole device, the capacity's default)
// and cores; a request that takes every sharer of a device (the webhook's exclusive GPU) becomes
// a container with cores 100, which the allocator places only on an empty GPU, as DRA does.
//
// What Choose evaluates: the request's CEL selectors on each device (k8s.io/dynamic-resource-
// allocation/cel, kube-scheduler's own evaluator; a selector that fails to compile or evaluate
// leaves the device out), device class gpu.hami-go.io only, ExactCount requests,
// firstAvailable (every combination of subrequests, at most maxCombos), the matchAttribute
// constraint on the standard NUMA node attribute (the webhook's), adminAccess (consumes
// nothing). What it does not evaluate, and refuses (no preemption, the reason says why) or
// approximates conservatively: claims of other drivers or classes, allocationMode All, other
// constraints, a request's tolerations (a tainted device NoSchedule/NoExecute counts as
// unusable), the DeviceClass's own selectors, sharers requests other than 1 or a device's full
// count, cores 100 without every sharer. Where requests of one pod select different devices,
// every request is limited to the devices all of them select (conservative: a fit found is a
// fit, some fits are missed). Node-level scheduling (node selectors, taints, CPU, memory) is not
// evaluated: kube-scheduler may still refuse the nominated node; the controller then gives up
// after its timeout.
package drapreempt

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// maxCombos bounds the combinations of firstAvailable subrequests Choose tries per node.
const maxCombos = 64

const mib = 1 << 20

// Snapshot is the cluster as Choose sees it. Nothing in it is modified.
type Snapshot struct {
	// Slices are ResourceSlices; those of other drivers or without a node are ignored, and of
	// each pool only the slices of its newest generation count.
	Slices []*resourceapi.ResourceSlice
	// Claims are the allocated ResourceClaims (others are ignored): what the devices hold.
	Claims []*resourceapi.ResourceClaim
	// Pods are the pods by UID, for the claims' status.reservedFor. A reserving pod that is
	// missing or terminating counts as gone: its claims are about to be freed.
	Pods map[types.UID]*corev1.Pod
	// Disruptions tells, for victims in the order given, which evictions violate a
	// PodDisruptionBudget, budgets decremented across them (nil: none violates).
	Disruptions func(victims []*corev1.Pod) []bool
	// Busy are nodes Choose leaves alone (another preemption is in flight there).
	Busy map[string]bool
	// Nodes are the cluster's nodes by name; a node the pod can never go to (nodeFit.refusal:
	// cordoned, node affinity, an untolerated taint) is left alone. Nil: every node is
	// considered (tests of the GPU choice alone).
	Nodes map[string]*corev1.Node
}

// Plan is one preemption: nominate the pod to Node and evict Victims.
type Plan struct {
	Node string
	// Victims, sorted by namespace and name.
	Victims []*corev1.Pod
	// Choice is the allocator's cost of the victims (PDB violations, priorities).
	Choice allocator.VictimChoice
}

// Priority is the pod's spec.priority (0 when unset).
func Priority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// NoPreemption is Choose's answer when no preemption helps: Reason says why.
type NoPreemption struct{ Reason string }

func (n *NoPreemption) Error() string { return n.Reason }

// Chooser evaluates CEL selectors through a cache; its zero value is not usable: NewChooser.
type Chooser struct{ cel *cel.Cache }

// NewChooser returns a Chooser with a CEL cache of a few hundred expressions.
func NewChooser() *Chooser { return &Chooser{cel: cel.NewCache(256, cel.Features{})} }

// Choose returns the preemption for pod, whose claims (not yet allocated) are needs: the node
// and victim set that allocator.VictimChoice.Better ranks first over every node of snap (ties:
// the first node by name), or a *NoPreemption saying why none helps, including when the claims
// already fit somewhere once the pods that are going are gone (nothing to evict: wait).
// Victims are pods of strictly lower priority holding allocated claims on the node's devices,
// not terminating; a claim reserved by several pods is freed only with all of them, so pods
// that share claims go together (one candidate).
func (ch *Chooser) Choose(pod *corev1.Pod, needs []*resourceapi.ResourceClaim, snap *Snapshot) (Plan, error) {
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == corev1.PreemptNever {
		return Plan{}, &NoPreemption{"the pod's preemptionPolicy is Never"}
	}
	reqs, err := ch.requests(needs)
	if err != nil {
		return Plan{}, &NoPreemption{err.Error()}
	}
	if len(reqs) == 0 {
		return Plan{}, &NoPreemption{"the pod asks no device of " + draapi.DriverName}
	}
	nodes := buildNodes(snap)
	prio := Priority(pod)
	fit := newNodeFit(pod)
	var (
		best     Plan
		found    bool
		fitsFree string
	)
	names := make([]string, 0, len(nodes))
	for n := range nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if snap.Busy[name] {
			continue
		}
		if snap.Nodes != nil {
			if n, ok := snap.Nodes[name]; !ok || fit.refusal(n) != "" {
				continue
			}
		}
		nm := nodes[name]
		pods, cands := nm.candidates(snap, prio)
		for _, combo := range combos(reqs) {
			req, ok := ch.podRequest(nm, combo)
			if !ok {
				continue
			}
			c, ok := allocator.ChooseVictims(&nm.inv, nm.used, cands, req)
			if !ok {
				continue
			}
			if len(c.Victims) == 0 {
				fitsFree = name
				continue
			}
			if found && !c.Better(best.Choice) {
				continue
			}
			var vs []*corev1.Pod
			for _, i := range c.Victims {
				vs = append(vs, pods[i]...)
			}
			slices.SortFunc(vs, func(a, b *corev1.Pod) int {
				return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
			})
			best, found = Plan{Node: name, Victims: vs, Choice: c}, true
		}
	}
	switch {
	case fitsFree != "":
		return Plan{}, &NoPreemption{fmt.Sprintf("the claims fit on node %s once the pods already going are gone; nothing to evict", fitsFree)}
	case !found:
		return Plan{}, &NoPreemption{fmt.Sprintf("no node's %s devices fit the claims even without every pod of lower priority than %d", draapi.DriverName, prio)}
	}
	return best, nil
}

// alt is one way to serve one request: a container of the allocator's request and the devices
// it may use, by CEL.
type alt struct {
	name     string
	count    int
	memMiB   int64 // 0: the whole device
	cores    int
	sharers  int64 // 1, or the device's full count
	numa     bool
	sel      []resourceapi.DeviceSelector
	selExprs []string
}

// requests turns the claims into alternatives per request (firstAvailable: several).
func (ch *Chooser) requests(needs []*resourceapi.ResourceClaim) ([][]alt, error) {
	var out [][]alt
	for _, c := range needs {
		numa := false
		for _, k := range c.Spec.Devices.Constraints {
			if k.MatchAttribute != nil && *k.MatchAttribute == resourceapi.FullyQualifiedName(deviceattribute.StandardDeviceAttributeNUMANode) {
				numa = true
				continue
			}
			return nil, fmt.Errorf("claim %s has a constraint hami-go's preemption does not evaluate", c.Name)
		}
		for _, r := range c.Spec.Devices.Requests {
			var as []alt
			mk := func(name, class string, mode resourceapi.DeviceAllocationMode, count int64, admin *bool, sel []resourceapi.DeviceSelector, capReq *resourceapi.CapacityRequirements) error {
				if class != draapi.DriverName {
					return fmt.Errorf("claim %s request %s asks DeviceClass %q, which hami-go's preemption does not evaluate", c.Name, name, class)
				}
				if admin != nil && *admin {
					return nil // consumes nothing
				}
				if mode != "" && mode != resourceapi.DeviceAllocationModeExactCount {
					return fmt.Errorf("claim %s request %s: allocationMode %s is not evaluated", c.Name, name, mode)
				}
				a := alt{name: c.Name + "/" + name, count: int(max(count, 1)), sharers: 1, numa: numa, sel: sel}
				if capReq != nil {
					if q, ok := capReq.Requests[draapi.CapacityMemory]; ok {
						a.memMiB = max((q.Value()+mib-1)/mib, 1)
					}
					if q, ok := capReq.Requests[draapi.CapacityCores]; ok {
						a.cores = int(min(max(q.Value(), 0), 100))
					}
					if q, ok := capReq.Requests[draapi.CapacitySharers]; ok {
						a.sharers = max(q.Value(), 1)
					}
				}
				as = append(as, a)
				return nil
			}
			var err error
			if e := r.Exactly; e != nil {
				err = mk(r.Name, e.DeviceClassName, e.AllocationMode, e.Count, e.AdminAccess, e.Selectors, e.Capacity)
			} else {
				for _, s := range r.FirstAvailable {
					if err = mk(r.Name+"/"+s.Name, s.DeviceClassName, s.AllocationMode, s.Count, nil, s.Selectors, s.Capacity); err != nil {
						break
					}
				}
			}
			if err != nil {
				return nil, err
			}
			if len(as) > 0 {
				out = append(out, as)
			}
		}
	}
	return out, nil
}

// combos lists the combinations of alternatives, one per request, at most maxCombos.
func combos(reqs [][]alt) [][]alt {
	out := [][]alt{nil}
	for _, as := range reqs {
		var next [][]alt
		for _, prefix := range out {
			for _, a := range as {
				if len(next) == maxCombos {
					break
				}
				next = append(next, append(slices.Clone(prefix), a))
			}
		}
		out = next
	}
	return out
}

// podRequest is the allocator's request for one combination on node nm: false when a request
// is of a shape the mapping does not take, or no device is selected by every request.
func (ch *Chooser) podRequest(nm *nodeModel, combo []alt) (*device.PodRequest, bool) {
	req := &device.PodRequest{}
	allowed := map[string]int{}
	for _, a := range combo {
		excl := false
		for _, d := range nm.devs {
			if !ch.matches(d, a) {
				continue
			}
			switch {
			case a.sharers == 1 && a.cores < 100:
			case a.sharers > 1 && a.sharers == d.sharers:
				excl = true
			default:
				continue // a shape the allocator's model would get wrong on this device
			}
			allowed[d.key]++
		}
		c := device.ContainerRequest{Name: a.name, Kind: device.KindApp, Count: a.count, MemoryMiB: a.memMiB, CoresPercent: a.cores}
		if a.memMiB == 0 {
			c.MemoryPercent = 100
		}
		if excl {
			c.CoresPercent = 100
		}
		req.Containers = append(req.Containers, c)
		req.NUMABind = req.NUMABind || (a.numa && a.count > 1)
	}
	for k, n := range allowed {
		if n == len(combo) {
			req.UseUUIDs = append(req.UseUUIDs, k)
		}
	}
	if len(req.UseUUIDs) == 0 {
		return nil, false
	}
	slices.Sort(req.UseUUIDs)
	return req, true
}

// matches reports whether every selector of a selects d.
func (ch *Chooser) matches(d *devInfo, a alt) bool {
	for _, s := range a.sel {
		if s.CEL == nil {
			return false
		}
		r := ch.cel.GetOrCompile(s.CEL.Expression)
		if r.Error != nil {
			return false
		}
		ok, _, err := r.DeviceMatches(context.Background(), cel.Device{
			Driver: draapi.DriverName, AllowMultipleAllocations: d.dev.AllowMultipleAllocations,
			Attributes: d.dev.Attributes, Capacity: d.dev.Capacity,
		})
		if err != nil || !ok {
			return false
		}
	}
	return true
}

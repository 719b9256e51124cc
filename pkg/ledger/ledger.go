// Package ledger is the device plugin's side of the slot protocol, kept apart from the gRPC
// server and the API clients (as NVIDIA's k8s-device-plugin keeps device state, internal/rm,
// apart from its server, internal/plugin): the pods the extender placed on one node (from their
// planned annotation), the claims (a pod's own plan claimed at container creation, ClaimPlanned,
// under the default --apply-plan-at=create-container; or under allocate the matching of an
// Allocate call to a pod), Reconcile against the kubelet's PodResources report, and the planned
// annotations a signature group must republish (docs/design.md "Matching Allocate to a pod",
// "Slot protocol: the decision"). It is pure: no client, no I/O; the caller feeds it pods, calls
// and reports, and writes what it says must be written (Config.Dirty). Time comes from an
// injected clock.
package ledger

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/device"
)

// podEntry is one pod the extender placed on this node and that has not ended.
type podEntry struct {
	ref device.PodRef
	// seen orders pods by when the ledger first saw them placed here: the order in which the
	// pod watch delivered their binding to this node, which is the order in which the kubelet,
	// watching the same pods, receives and admits them.
	seen uint64
	sig  device.Signature
	// plan is the pod's effective allocation: the planned one, with claimed containers replaced
	// by what was claimed. Interchangeable pods may swap plans (see Ledger.Reconcile).
	plan device.Allocation
	// claimed maps container name -> claimed allocation (SliceIDs set).
	claimed map[string]*device.ContainerAllocation
	// guessed names the claimed containers whose claim this plugin did not make at Allocate: a
	// claim restored from the pod's claimed record (which may itself have been a guess, or have
	// lost the second write of a swap), or made by Reconcile from the pod's plan for slices the
	// kubelet reports and no claim covered. The Allocate answer is not known until the runtime
	// reports it (Ledger.Answered).
	guessed map[string]bool
	// lastClaim is when the latest container of this pod was claimed (the pod the kubelet is
	// admitting now has the most recent one).
	lastClaim time.Time
	// containerIDs maps a container's runtime ID ("containerd://…" stripped) to its name, for
	// per-slice metrics.
	containerIDs map[string]string
	// anno is the pod's AnnoPlanned as last seen. republish, when not nil, is the AnnoPlanned to
	// write instead, so that the planned annotations of the pod's signature group add up to the
	// group's effective plans again (publish.go).
	anno      device.Allocation
	republish *device.Allocation
}

// nextUnclaimed returns the first container of the plan (kubelet order) that has no claim.
func (e *podEntry) nextUnclaimed() *device.ContainerAllocation {
	for i := range e.plan.Containers {
		if _, ok := e.claimed[e.plan.Containers[i].Name]; !ok {
			return &e.plan.Containers[i]
		}
	}
	return nil
}

// Ledger is the device plugin's in-memory record of the pods the extender placed on this node
// (from AnnoPlanned) and of the containers Allocate has claimed. Every Allocate match and claim
// happens under one mutex, without API calls. It is safe for concurrent use.
type Ledger struct {
	node  string
	names device.ResourceNames
	clock clock.PassiveClock

	mu       sync.Mutex
	seen     uint64 // last podEntry.seen handed out
	pods     map[types.UID]*podEntry
	leaving  map[types.UID]*podEntry   // terminating pods: matched no more, still charged by the extender until gone (publish.go)
	unplaced map[types.UID]unplacedPod // pods on this node that use the count resource but cannot be served
	changed  chan struct{}             // closed and replaced on every change
	dirty    func(device.PodRef)       // called (outside mu) when a pod's claimed record must be written
	// gpuMiB gives the memory of each GPU of this node as its published inventory says (the base
	// of a percentage request): a plan or claimed record is served only if it grants exactly what
	// the pod asks (device.CheckAllocation, case C36). nil: no GPU is known, nothing is served.
	gpuMiB  device.GPUMemory
	toWrite []device.PodRef // pods to pass to dirty once mu is released (update)
}

// Config is what a Ledger is built with.
type Config struct {
	// Node is the node the ledger serves: pods planned on other nodes are not its own.
	Node string
	// Names are the extended-resource names pods ask for slices with.
	Names device.ResourceNames
	// Clock orders claims (the most recently claimed pod is the one being admitted); the real
	// clock when nil.
	Clock clock.PassiveClock
	// Dirty, when not nil, is called (outside the ledger's lock) with every pod whose claimed
	// record or planned annotation must be written: the annotation writer's queue.
	Dirty func(device.PodRef)
	// GPUMemory gives the memory, MiB, of each GPU of the node as its published inventory says
	// (the base of a percentage request): a plan or claimed record is served only if it grants
	// exactly what the pod asks (device.CheckAllocation, case C36). nil: no GPU is known,
	// nothing is served.
	GPUMemory device.GPUMemory
}

// New returns an empty ledger.
func New(cfg Config) *Ledger {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Ledger{
		node: cfg.Node, names: cfg.Names, clock: cfg.Clock,
		pods:     map[types.UID]*podEntry{},
		leaving:  map[types.UID]*podEntry{},
		unplaced: map[types.UID]unplacedPod{},
		changed:  make(chan struct{}),
		dirty:    cfg.Dirty,
		gpuMiB:   cfg.GPUMemory,
	}
}

func (l *Ledger) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Changed returns a channel closed at the next change of the ledger.
func (l *Ledger) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// UpsertPod records or updates a pod from the informer. A pod is a candidate when its
// AnnoPlanned decodes with Node == this node and it has not ended. A pod seen for the first time
// with a valid AnnoClaimed gets its claims back from it (plugin restart: the claimed record
// wins). Pods on this node that ask for the count resource but have no usable plan are kept
// aside so Allocate can say why they get no slice.
func (l *Ledger) UpsertPod(p *corev1.Pod) {
	l.update(func() {
		l.upsertPodLocked(p)
		l.notifyLocked()
	})
}

// upsertPodLocked is UpsertPod under mu.
func (l *Ledger) upsertPodLocked(p *corev1.Pod) {
	ref := device.RefOf(p)
	// No Allocate call can be for a pod that finished or terminates. A finished pod is released
	// by the extender and forgotten here; a terminating one is matched no more but still counts
	// in its group's sums until it finishes or is gone (publish.go).
	switch {
	case device.PodFinished(p):
		l.forgetLocked(p.UID)
		delete(l.unplaced, p.UID)
		return
	case p.DeletionTimestamp != nil:
		l.leaveLocked(p.UID)
		delete(l.unplaced, p.UID)
		return
	}
	req, err := device.ParsePodRequest(p, l.names)
	if err != nil {
		if p.Spec.NodeName == l.node {
			l.unplaced[p.UID] = unplacedPod{ref, fmt.Sprintf("%s: %v", ref, err)}
		}
		l.forgetLocked(p.UID)
		return
	}
	if !req.UsesGPU() {
		l.forgetLocked(p.UID)
		delete(l.unplaced, p.UID)
		return
	}
	raw, ok := p.Annotations[device.AnnoPlanned]
	if !ok {
		if e, had := l.pods[p.UID]; had && len(e.claimed) > 0 {
			return // keep what was claimed; the annotation vanishing changes nothing handed out
		}
		l.forgetLocked(p.UID)
		if p.Spec.NodeName == l.node {
			l.unplaced[p.UID] = unplacedPod{ref, fmt.Sprintf("%s has no %s annotation (not scheduled by %s)", ref, device.AnnoPlanned, device.SchedulerName)}
		}
		return
	}
	plan, err := device.DecodeAllocation(raw)
	if err != nil {
		l.forgetLocked(p.UID)
		if p.Spec.NodeName == l.node || p.Spec.NodeName == "" {
			l.unplaced[p.UID] = unplacedPod{ref, fmt.Sprintf("%s: annotation %s is malformed: %v", ref, device.AnnoPlanned, err)}
		}
		return
	}
	if plan.Node != l.node {
		l.forgetLocked(p.UID)
		delete(l.unplaced, p.UID)
		return
	}
	if err := device.CheckAllocation(&plan, &req, l.gpuMiBOrNone()); err != nil {
		// case C36: a plan is served only if it grants exactly what the pod's own limits ask on
		// this node's GPUs; a record written or changed by anyone else is refused, never trimmed.
		if e, had := l.pods[p.UID]; had && len(e.claimed) > 0 {
			return // what was handed out stays as claimed; the record is re-asserted (PodSync)
		}
		l.forgetLocked(p.UID)
		l.unplaced[p.UID] = unplacedPod{ref, fmt.Sprintf("%s: annotation %s does not match the pod's own request, so it is not served: %v", ref, device.AnnoPlanned, err)}
		return
	}
	delete(l.unplaced, p.UID)
	e, had := l.pods[p.UID]
	if !had {
		l.seen++
		e = &podEntry{ref: ref, seen: l.seen, plan: plan, claimed: map[string]*device.ContainerAllocation{}}
		if raw, ok := p.Annotations[device.AnnoClaimed]; ok {
			// restoreClaims replaces containers of e.plan in place: a copy, so that e.anno keeps
			// the planned slot (TestC04ReconcileAfterRestartMidSwap).
			e.plan = cloneAllocation(&plan)
			if c, err := device.DecodeAllocation(raw); err != nil {
				klog.ErrorS(err, "Ignoring malformed claimed allocation", "pod", klog.KObj(p), "annotation", device.AnnoClaimed)
			} else {
				e.restoreClaims(&c, &req, l.gpuMiBOrNone())
			}
		}
		l.pods[p.UID] = e
	}
	e.sig = device.SignatureOf(&req)
	e.containerIDs = containerIDs(p)
	e.anno = plan
	if e.republish != nil && device.SlotKey(e.republish) == device.SlotKey(&plan) {
		e.republish = nil // written
	}
}

// gpuMiBOrNone returns l.gpuMiB, or a lookup that knows no GPU when it is nil.
func (l *Ledger) gpuMiBOrNone() device.GPUMemory {
	if l.gpuMiB != nil {
		return l.gpuMiB
	}
	return func(string) (int64, bool) { return 0, false }
}

// restoreClaims takes back the claims of a pod's AnnoClaimed record (plugin restart). A
// container whose record does not grant exactly what the pod asks (device.CheckContainer, case
// C36) is not restored: the record was written by someone else, and Reconcile claims the
// container again from what the kubelet reports. A claim Allocate made (slice IDs set) comes
// back as a guess (Ledger.Answered); one made at container creation (ClaimPlanned: no slice
// IDs) is the pod's own plan, which its container runs with, and comes back as the truth.
func (e *podEntry) restoreClaims(c *device.Allocation, req *device.PodRequest, gpuMiB device.GPUMemory) {
	for i := range c.Containers {
		cc := c.Containers[i]
		if err := device.CheckContainer(&cc, req, gpuMiB); err != nil {
			klog.InfoS("Not restoring a claimed allocation that does not match the pod's request", "pod", e.ref.String(), "container", cc.Name, "err", err)
			continue
		}
		for j := range e.plan.Containers {
			if e.plan.Containers[j].Name == cc.Name && len(e.plan.Containers[j].Devices) == len(cc.Devices) {
				e.plan.Containers[j] = cc
				e.claimed[cc.Name] = &e.plan.Containers[j]
				if len(cc.SliceIDs) == 0 {
					continue
				}
				if e.guessed == nil {
					e.guessed = map[string]bool{}
				}
				e.guessed[cc.Name] = true
			}
		}
	}
}

func containerIDs(p *corev1.Pod) map[string]string {
	m := map[string]string{}
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, s := range list {
			if id := s.ContainerID; id != "" {
				if i := strings.Index(id, "://"); i >= 0 {
					id = id[i+3:]
				}
				m[id] = s.Name
			}
		}
	}
	return m
}

// DeletePod forgets a pod (informer delete).
func (l *Ledger) DeletePod(uid types.UID) {
	l.update(func() {
		l.forgetLocked(uid)
		delete(l.unplaced, uid)
		l.notifyLocked()
	})
}

// ClaimedRecord returns the allocation to write as AnnoClaimed on the pod: ok is false when the
// pod is unknown; a zero-container allocation means the annotation must be absent.
func (l *Ledger) ClaimedRecord(uid types.UID) (device.Allocation, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.pods[uid]
	if !ok {
		return device.Allocation{}, false
	}
	out := device.Allocation{Node: l.node}
	for _, c := range e.plan.Containers {
		if cl, ok := e.claimed[c.Name]; ok {
			out.Containers = append(out.Containers, cloneContainer(cl))
		}
	}
	return out, true
}

// Plan returns the pod's effective plan: its planned allocation with the claimed containers as
// claimed (SliceIDs set) and the swaps Reconcile made; ok is false when the ledger does not
// serve the pod (unknown, terminating or gone).
func (l *Ledger) Plan(uid types.UID) (device.Allocation, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.pods[uid]
	if !ok {
		return device.Allocation{}, false
	}
	out := device.Allocation{Node: e.plan.Node}
	for i := range e.plan.Containers {
		out.Containers = append(out.Containers, cloneContainer(&e.plan.Containers[i]))
	}
	return out, true
}

func cloneAllocation(a *device.Allocation) device.Allocation {
	out := device.Allocation{Node: a.Node, Containers: make([]device.ContainerAllocation, len(a.Containers))}
	for i := range a.Containers {
		out.Containers[i] = cloneContainer(&a.Containers[i])
	}
	return out
}

func cloneContainer(c *device.ContainerAllocation) device.ContainerAllocation {
	out := *c
	out.Devices = append([]device.DeviceGrant(nil), c.Devices...)
	out.SliceIDs = append([]string(nil), c.SliceIDs...)
	return out
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := make(map[string]int, len(a))
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		if m[s] == 0 {
			return false
		}
		m[s]--
	}
	return true
}

func overlaps(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// SliceGPUs returns the distinct GPU UUIDs of well-formed slice IDs, sorted.
func SliceGPUs(ids []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range ids {
		u, _, err := device.ParseSliceID(id)
		if err == nil && !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	sort.Strings(out)
	return out
}

func planGPUs(c *device.ContainerAllocation) []string {
	out := make([]string, 0, len(c.Devices))
	for _, d := range c.Devices {
		out = append(out, d.UUID)
	}
	sort.Strings(out)
	return out
}

func sortedEntries(m map[types.UID]*podEntry, keep func(*podEntry) bool) []*podEntry {
	var out []*podEntry
	for _, e := range m {
		if keep(e) {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].seen != out[j].seen {
			return out[i].seen < out[j].seen
		}
		return out[i].ref.String() < out[j].ref.String()
	})
	return out
}

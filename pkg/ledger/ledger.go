// Package ledger is the device plugin's pod state, kept apart from the gRPC server and the API
// clients (as NVIDIA's k8s-device-plugin keeps device state, internal/rm, apart from its server,
// internal/plugin): the pods the extender placed on this node (from their planned annotation) and
// the containers that claimed their pod's own plan when the runtime created them (ClaimPlanned,
// docs/design.md "Applying a pod's plan"). A claim is always the pod's own planned
// allocation: the kubelet's Allocate call names no pod, so it is answered without one and the
// NRI plugin applies the plan at CreateContainer, where the runtime names the pod. Nothing is
// matched, swapped or republished, and the planned annotation has one writer, the extender.
//
// It is pure: no client, no I/O; the caller feeds it pods and writes the claimed records it says
// must be written (Config.Dirty).
package ledger

import (
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// podEntry is one pod the extender placed on this node and that has not ended.
type podEntry struct {
	ref device.PodRef
	// plan is the pod's planned allocation (AnnoPlanned), with restored claims in place.
	plan device.Allocation
	// claimed maps container name -> the container's claim: its entry of plan.
	claimed map[string]*device.ContainerAllocation
	// containerIDs maps a container's runtime ID ("containerd://…" stripped) to its name, for
	// per-slice metrics.
	containerIDs map[string]string
}

// Ledger is the device plugin's in-memory record of the pods the extender placed on this node
// (from AnnoPlanned) and of the containers that claimed their plan. Every claim happens under
// one mutex, without API calls. It is safe for concurrent use.
type Ledger struct {
	node  string
	names device.ResourceNames

	mu       sync.Mutex
	pods     map[types.UID]*podEntry
	leaving  map[types.UID]*podEntry   // terminating pods: claim nothing new; a claimed container created again gets its claim back
	unplaced map[types.UID]unplacedPod // pods on this node that use the count resource but cannot be served
	dirty    func(device.PodRef)       // called (outside mu) when a pod's claimed record must be written
	// gpuMiB gives the memory of each GPU of this node as its published inventory says (the base
	// of a percentage request): a plan or claimed record is served only if it grants exactly what
	// the pod asks (device.CheckAllocation, case C36). nil: no GPU is known, nothing is served.
	gpuMiB device.GPUMemory
}

// Config is what a Ledger is built with.
type Config struct {
	// Node is the node the ledger serves: pods planned on other nodes are not its own.
	Node string
	// Names are the extended-resource names pods ask for slices with.
	Names device.ResourceNames
	// Dirty, when not nil, is called (outside the ledger's lock) with every pod whose claimed
	// record must be written: the annotation writer's queue.
	Dirty func(device.PodRef)
	// GPUMemory gives the memory, MiB, of each GPU of the node as its published inventory says
	// (the base of a percentage request): a plan or claimed record is served only if it grants
	// exactly what the pod asks (device.CheckAllocation, case C36). nil: no GPU is known,
	// nothing is served.
	GPUMemory device.GPUMemory
}

// New returns an empty ledger.
func New(cfg Config) *Ledger {
	return &Ledger{
		node: cfg.Node, names: cfg.Names,
		pods:     map[types.UID]*podEntry{},
		leaving:  map[types.UID]*podEntry{},
		unplaced: map[types.UID]unplacedPod{},
		dirty:    cfg.Dirty,
		gpuMiB:   cfg.GPUMemory,
	}
}

// UpsertPod records or updates a pod from the informer. A pod is a candidate when its
// AnnoPlanned decodes with Node == this node and it has not ended. A pod seen for the first time
// with a valid AnnoClaimed gets its claims back from it (plugin restart: the claimed record
// wins). Pods on this node that ask for the count resource but have no usable plan are kept
// aside so that ClaimPlanned can say why they get no GPU.
func (l *Ledger) UpsertPod(p *corev1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.upsertPodLocked(p)
}

// upsertPodLocked is UpsertPod under mu.
func (l *Ledger) upsertPodLocked(p *corev1.Pod) {
	ref := device.RefOf(p)
	// A finished pod is released by the extender and forgotten here; a terminating one claims
	// nothing new, but a container it claimed gets its claim back when the runtime creates it
	// again, until the pod finishes or is gone.
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
		e = &podEntry{ref: ref, plan: plan, claimed: map[string]*device.ContainerAllocation{}}
		if raw, ok := p.Annotations[device.AnnoClaimed]; ok {
			if c, err := device.DecodeAllocation(raw); err != nil {
				klog.ErrorS(err, "Ignoring malformed claimed allocation", "pod", klog.KObj(p), "annotation", device.AnnoClaimed)
			} else {
				e.restoreClaims(&c, &req, l.gpuMiBOrNone())
			}
		}
		l.pods[p.UID] = e
	}
	e.containerIDs = containerIDs(p)
}

// gpuMiBOrNone returns l.gpuMiB, or a lookup that knows no GPU when it is nil.
func (l *Ledger) gpuMiBOrNone() device.GPUMemory {
	if l.gpuMiB != nil {
		return l.gpuMiB
	}
	return func(string) (int64, bool) { return 0, false }
}

// restoreClaims takes back the claims of a pod's AnnoClaimed record (plugin restart): what the
// pod's containers were created with. A container whose record does not grant exactly what the
// pod asks (device.CheckContainer, case C36) is not restored: the record was written by someone
// else, and the container claims its plan again when the runtime next creates it.
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
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetLocked(uid)
	delete(l.unplaced, uid)
}

// leaveLocked keeps a terminating pod only for the claims it made (leaving). Caller holds mu.
func (l *Ledger) leaveLocked(uid types.UID) {
	if e, ok := l.pods[uid]; ok {
		delete(l.pods, uid)
		l.leaving[uid] = e
	}
}

// forgetLocked removes a pod from the ledger. Caller holds mu.
func (l *Ledger) forgetLocked(uid types.UID) {
	delete(l.pods, uid)
	delete(l.leaving, uid)
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

// Plan returns the pod's plan: its planned allocation, with the claims restored from its claimed
// record in place; ok is false when the ledger does not serve the pod (unknown, terminating or
// gone).
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

func cloneContainer(c *device.ContainerAllocation) device.ContainerAllocation {
	out := *c
	out.Devices = append([]device.DeviceGrant(nil), c.Devices...)
	out.SliceIDs = append([]string(nil), c.SliceIDs...)
	return out
}

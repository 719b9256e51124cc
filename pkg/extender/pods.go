package extender

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// newBooking returns a booking of pod k on node in stage st, entered now.
func (c *Cache) newBooking(k device.PodRef, node string, st stage, req *device.PodRequest) *booking {
	return &booking{key: k, node: node, stage: st, req: req, since: c.clock.Now()}
}

// decodeAnno decodes an allocation annotation placed on node; nil when absent, malformed (logged)
// or for another node.
func decodeAnno(p *corev1.Pod, anno, node string) *device.Allocation {
	s, ok := p.Annotations[anno]
	if !ok || node == "" {
		return nil
	}
	a, err := device.DecodeAllocation(s)
	if err != nil {
		klog.ErrorS(err, "Ignoring malformed allocation annotation", "pod", klog.KObj(p), "annotation", anno)
		return nil
	}
	if a.Node != node {
		klog.InfoS("Ignoring allocation annotation for another node", "pod", klog.KObj(p), "annotation", anno, "allocationNode", a.Node, "podNode", node)
		return nil
	}
	return &a
}

// OnPod applies the latest state of a pod from the informer (add or update). The pod is charged
// its planned allocation, or its claimed record where it has no plan (booking.setCharge); a
// claimed record moves it to stage claimed. A pod that ended releases its usage; a terminating
// pod keeps it; a pod that lost its annotations keeps what was booked for its key. A pending pod
// with a nomination holds its share there (onPendingLocked).
func (c *Cache) OnPod(p *corev1.Pod) {
	k := device.RefOf(p)
	if device.PodFinished(p) {
		c.onPodEnded(p, k)
		return
	}
	node := p.Spec.NodeName
	_, hasPlanned := p.Annotations[device.AnnoPlanned]
	_, hasClaimed := p.Annotations[device.AnnoClaimed]
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.pods[k]
	if node == "" {
		c.onPendingLocked(p, b) // reservation or bind in progress is the cache's own business
		return
	}
	defer c.noteLifeLocked(k, p)
	if b == nil && !hasPlanned && !hasClaimed {
		return // nothing booked and nothing to book from
	}
	if b != nil && b.node != node && !hasPlanned && !hasClaimed {
		// Bound elsewhere than booked, without a plan (another scheduler, a preset nodeName):
		// nothing of ours to charge there, and the booking here is void.
		c.removeLocked(b)
		return
	}
	planned := decodeAnno(p, device.AnnoPlanned, node)
	claimed := decodeAnno(p, device.AnnoClaimed, node)
	if planned == nil && claimed == nil {
		if b != nil && b.node == node && b.stage == stageBinding {
			// The Binding landed; annotations lost or unreadable: keep what we booked.
			c.setStageLocked(b, stagePlanned)
		}
		return
	}
	req := c.requestOfLocked(p, b)
	if req != nil {
		planned, claimed = c.floorRecordsLocked(p, b, node, req, planned, claimed)
		if planned == nil && claimed == nil && (b == nil || b.node != node) {
			return
		}
	}
	nb := c.newBooking(k, node, stagePlanned, req)
	if b != nil && b.node == node {
		nb.since = b.since
		if planned == nil {
			planned = b.planned
		}
	}
	nb.planned = planned
	if claimed != nil {
		nb.stage = stageClaimed
		nb.claimed = claimed
	}
	if b != nil && b.node == node && b.stage == nb.stage && sameAlloc(b.planned, nb.planned) && sameAlloc(b.claimed, nb.claimed) {
		return // nothing changed (resync, status update)
	}
	c.putLocked(nb)
}

// onPodEnded releases the GPUs booked for pod p (key k), which ended (device.PodFinished), if
// any are. It takes c.mu, then releases without it.
func (c *Cache) onPodEnded(p *corev1.Pod, k device.PodRef) {
	c.mu.Lock()
	b := c.pods[k]
	c.mu.Unlock()
	if b != nil {
		klog.V(4).InfoS("Pod ended; releasing its GPUs", "pod", klog.KObj(p), "phase", p.Status.Phase, "reason", p.Status.Reason)
		c.Release(k)
	}
}

// requestOfLocked is the GPU request a bound pod p is charged at: its booking's (b, nil when
// none), else p's own parsed with the configured resource names and policies; nil (logged) when
// that does not parse, and the pod is charged its allocation as recorded. Caller holds c.mu.
func (c *Cache) requestOfLocked(p *corev1.Pod, b *booking) *device.PodRequest {
	var req *device.PodRequest
	if b != nil && b.req != nil {
		req = b.req
	} else if r, err := device.ParsePodRequest(p, c.cfg.Resources); err == nil {
		r.GPUPolicy, r.NodePolicy = c.policies(p, r)
		req = &r
	} else {
		klog.ErrorS(err, "Bound pod's GPU request does not parse; charging its allocation as recorded", "pod", klog.KObj(p))
	}
	return req
}

// floorRecordsLocked returns pod p's planned and claimed records on node (decoded from its
// annotations) as charged for its request req (floorRecord, with the node's GPU memory in MiB):
// nil where a record is not the pod's. A claimed record that is not keeps the booking's last
// one (b's, where b is on node). Caller holds c.mu.
func (c *Cache) floorRecordsLocked(p *corev1.Pod, b *booking, node string, req *device.PodRequest, planned, claimed *device.Allocation) (*device.Allocation, *device.Allocation) {
	// case C36: a record on the pod is charged at least at the pod's own request, and not at
	// all when it is not the pod's (other containers, kinds or GPU counts).
	gpuMiB := c.gpuMemoryLocked(node)
	planned = floorRecord(p, device.AnnoPlanned, planned, req, gpuMiB)
	if raw := claimed; raw != nil {
		if claimed = floorRecord(p, device.AnnoClaimed, raw, req, gpuMiB); claimed == nil && b != nil && b.node == node {
			claimed = b.claimed // keep the last record that was the pod's
		}
	}
	return planned, claimed
}

// noteLifeLocked records the bound pod's priority and whether it is terminating on its booking
// (what preemption reads); when it starts terminating, the holds of pods nominated to its node
// are placed again (refreshHoldsLocked). Caller holds mu.
func (c *Cache) noteLifeLocked(k device.PodRef, p *corev1.Pod) {
	b := c.pods[k]
	if b == nil || b.node != p.Spec.NodeName {
		return
	}
	b.priority, b.informed = podPriority(p), true
	if p.DeletionTimestamp != nil && !b.terminating {
		b.terminating = true
		c.refreshHoldsLocked(b.node)
	}
}

// podPriority is the pod's spec.priority, 0 when unset (the API server's default without a
// PriorityClass).
func podPriority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// floorRecord returns record a (annotation anno of p) raised to the pod's own request
// (device.FloorAllocation), or nil when a is nil or does not match the request (logged).
func floorRecord(p *corev1.Pod, anno string, a *device.Allocation, req *device.PodRequest, gpuMiB device.GPUMemory) *device.Allocation {
	if a == nil {
		return nil
	}
	f, err := device.FloorAllocation(a, req, gpuMiB)
	if err != nil {
		klog.ErrorS(err, "Not charging an allocation record that is not the pod's request", "pod", klog.KObj(p), "annotation", anno)
		return nil
	}
	if device.SlotKey(f) != device.SlotKey(a) {
		klog.InfoS("Allocation record grants less than the pod asks; charging the pod's request", "pod", klog.KObj(p), "annotation", anno)
	}
	return f
}

// gpuMemoryLocked returns a lookup of the memory of the GPUs of node's inventory (none when the
// node has none yet). Caller holds mu (not the node's lock).
func (c *Cache) gpuMemoryLocked(node string) device.GPUMemory {
	m := map[string]int64{}
	if ns := c.node(node); ns != nil {
		ns.mu.Lock()
		if ns.inv != nil {
			for _, g := range ns.inv.GPUs {
				m[g.UUID] = g.MemoryMiB
			}
		}
		ns.mu.Unlock()
	}
	return func(uuid string) (int64, bool) { v, ok := m[uuid]; return v, ok }
}

func sameAlloc(a, b *device.Allocation) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Node != b.Node || len(a.Containers) != len(b.Containers) {
		return false
	}
	for i := range a.Containers {
		if a.Containers[i].Name != b.Containers[i].Name {
			return false
		}
	}
	return device.SlotKey(a) == device.SlotKey(b)
}

// policies applies the configured defaults where the pod has no policy annotation.
func (c *Cache) policies(p *corev1.Pod, r device.PodRequest) (gpu, node device.Policy) {
	gpu, node = r.GPUPolicy, r.NodePolicy
	if p.Annotations[device.AnnoGPUPolicy] == "" {
		gpu = c.cfg.GPUPolicy
	}
	if p.Annotations[device.AnnoNodePolicy] == "" {
		node = c.cfg.NodePolicy
	}
	return gpu, node
}

// OnPodDelete releases a deleted pod's usage. obj is a *corev1.Pod or a
// cache.DeletedFinalStateUnknown tombstone; the last state may have lost its annotations: what
// was booked for the key is released all the same. exists reports whether a pod of that
// namespace/name and the given UID is still in the informer's store (for a tombstone without
// a pod, whose UID is unknown).
func (c *Cache) OnPodDelete(obj any, exists func(ns, name string) (types.UID, bool)) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		if p, ok := t.Obj.(*corev1.Pod); ok {
			obj = p
		} else {
			ns, name, err := cache.SplitMetaNamespaceKey(t.Key)
			if err != nil {
				klog.ErrorS(err, "Unreadable pod tombstone", "key", t.Key)
				return
			}
			live, hasLive := types.UID(""), false
			if exists != nil {
				live, hasLive = exists(ns, name)
			}
			c.mu.Lock()
			var keys []device.PodRef
			for k := range c.pods {
				if k.Namespace == ns && k.Name == name && (!hasLive || k.UID != live) {
					keys = append(keys, k)
				}
			}
			c.mu.Unlock()
			for _, k := range keys {
				c.Release(k)
			}
			return
		}
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		klog.InfoS("Ignoring a deleted object that is not a pod", "type", fmt.Sprintf("%T", obj))
		return
	}
	klog.V(4).InfoS("Pod deleted; releasing its GPUs", "pod", klog.KObj(p), "uid", p.UID)
	c.Release(device.RefOf(p))
}

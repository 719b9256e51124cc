package gpuview

import (
	"errors"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// Explanation is what `kubectl hami-go why POD` shows (`-o json|yaml`: this struct).
type Explanation struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Time       time.Time `json:"time"`
	Namespace  string    `json:"namespace"`
	Pod        string    `json:"pod"`
	Phase      string    `json:"phase"`
	// Mode is where the reasons come from: "device-plugin" (the extender's Filter) or "dra"
	// (the pod's gpu.hami-go.io ResourceClaims against the ResourceSlices, drafit.go).
	Mode Mode `json:"mode"`
	// SchedulerName is the pod's spec.schedulerName.
	SchedulerName string `json:"schedulerName"`
	// Node is spec.nodeName (empty while the pod is not bound).
	Node string `json:"node,omitempty"`
	// Note is a one-line summary: why the extender does not handle the pod, or that it is bound.
	Note string `json:"note,omitempty"`
	// RequestError is device.ParsePodRequest's error (the pod cannot be placed at all).
	RequestError string `json:"requestError,omitempty"`
	// Containers is the pod's GPU request per container, as device.ParsePodRequest reads it.
	Containers []device.ContainerRequest `json:"containers,omitempty"`
	// Allocation is what a bound pod got (the record the extender charges), with its source
	// ("claimed" or "planned") in AllocationSource.
	Allocation       *device.Allocation `json:"allocation,omitempty"`
	AllocationSource string             `json:"allocationSource,omitempty"`
	// Claims are, in DRA mode, the pod's claims of DeviceClass gpu.hami-go.io with their
	// requests and, once allocated, their devices.
	Claims []DRAClaim `json:"claims,omitempty"`
	// Nodes is, for a pod that is not bound, each node and whether the pod fits there now, with
	// the extender's Filter reason where it does not.
	Nodes []NodeFit `json:"nodes,omitempty"`
	// LastSchedulingEvent is the newest FailedScheduling event of the pod, if any.
	LastSchedulingEvent *EventSummary `json:"lastSchedulingEvent,omitempty"`
	// Problems are what could not be read (for example the pod's own malformed allocation).
	Problems []string `json:"problems,omitempty"`
}

// NodeFit is one node's answer for the pod.
type NodeFit struct {
	Node string `json:"node"`
	Fits bool   `json:"fits"`
	// Reason is the extender Filter's text for this node (allocator.Unfit.Reason, or why the
	// node takes no GPU pod at all); empty when it fits.
	Reason string `json:"reason,omitempty"`
	// Unresolvable is true where freeing GPUs would not help (the extender's
	// FailedAndUnresolvableNodes: stale, no inventory, does not fit even with the node empty).
	Unresolvable bool `json:"unresolvable,omitempty"`
}

// EventSummary is one Kubernetes event, shortened.
type EventSummary struct {
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Time    time.Time `json:"time"`
	Count   int32     `json:"count,omitempty"`
}

// Explain says why pod is where it is (a pod with ResourceClaims of DeviceClass gpu.hami-go.io:
// explainDRA, Mode "dra"): for a bound pod what it got; for an unbound one, per
// node, the extender's Filter answer computed from objs (the pod itself left out of the usage)
// with allocator.Fit. events are the pod's events (any order; others are ignored).
func Explain(pod *corev1.Pod, objs Objects, events []corev1.Event, cfg Config, now time.Time) Explanation {
	e := Explanation{
		APIVersion: APIVersion, Kind: KindExplanation, Time: now.UTC(),
		Namespace: pod.Namespace, Pod: pod.Name, Phase: string(pod.Status.Phase), Mode: ModeDevicePlugin,
		SchedulerName: pod.Spec.SchedulerName, Node: pod.Spec.NodeName,
		LastSchedulingEvent: lastFailedScheduling(pod, events),
	}
	req, err := device.ParsePodRequest(pod, cfg.Resources)
	if len(pod.Spec.ResourceClaims) > 0 {
		claims, raw, problems := draUses(pod, objs)
		if len(claims) > 0 || (len(problems) > 0 && (err != nil || !req.UsesGPU())) {
			e.Problems = problems
			explainDRA(&e, pod, objs, claims, raw)
			return e
		}
	}
	if err != nil {
		e.RequestError = err.Error()
	} else {
		e.Containers = req.Containers
	}
	if e.Node != "" {
		a, source, problems := podAllocation(pod)
		e.Allocation, e.AllocationSource, e.Problems = a, source, problems
		switch {
		case a != nil:
			e.Note = "bound to node " + e.Node + "; its GPUs are below (" + source + ")"
		case err == nil && req.UsesGPU():
			e.Note = "bound to node " + e.Node + " without a hami-go allocation (placed by another scheduler or a preset nodeName): it gets no slice"
		default:
			e.Note = "bound to node " + e.Node + "; it uses no GPU"
		}
		return e
	}
	switch {
	case err != nil:
		e.Note = "the pod's GPU request does not parse; the extender refuses it on every node"
		return e
	case !req.UsesGPU():
		e.Note = "the pod asks for no GPU (resources " + cfg.Resources.Count + ", " + cfg.Resources.Memory + ", " + cfg.Resources.MemoryPercent + ", " + cfg.Resources.Cores + ")"
		return e
	case pod.Spec.SchedulerName != cfg.SchedulerName:
		e.Note = "scheduler " + pod.Spec.SchedulerName + " is not " + cfg.SchedulerName + ": hami-go's extender does not place this pod"
		return e
	}
	uid := pod.UID
	c := newCluster(objs, cfg, now, &uid)
	fits := 0
	for _, name := range c.order {
		f := c.nodes[name].fit(&req)
		if f.Fits {
			fits++
		}
		e.Nodes = append(e.Nodes, f)
	}
	sort.SliceStable(e.Nodes, func(i, j int) bool { return e.Nodes[i].Fits && !e.Nodes[j].Fits })
	switch {
	case fits > 0:
		e.Note = "fits on " + itoa(fits) + " node(s) now; kube-scheduler retries it on the next cluster event (its own filters, such as taints or free " + cfg.Resources.Count + " devices, may still refuse a node)"
	default:
		e.Note = "fits on no node now"
	}
	return e
}

// fit is the extender Filter's answer for req on this node (pkg/extender filter.go): unusable
// nodes fail as unresolvable; otherwise allocator.Fit against the booked usage, unresolvable when
// the pod would not fit even on the empty node.
func (ns *nodeState) fit(req *device.PodRequest) NodeFit {
	f := NodeFit{Node: ns.name}
	if st, why := ns.unusable(); st != StatusReady {
		f.Reason, f.Unresolvable = why, true
		return f
	}
	err := allocator.Fit(ns.inv, ns.used, req)
	if err == nil {
		f.Fits = true
		return f
	}
	var u *allocator.Unfit
	if !errors.As(err, &u) {
		f.Reason = err.Error()
		return f
	}
	f.Reason = u.Reason
	if allocator.Fit(ns.inv, allocator.NodeUsage{}, req) != nil {
		f.Reason += " (even with the node empty)"
		f.Unresolvable = true
	}
	return f
}

// lastFailedScheduling returns the newest FailedScheduling event of pod (matched by UID when the
// event names one), by its last time (series, lastTimestamp, eventTime, creation).
func lastFailedScheduling(pod *corev1.Pod, events []corev1.Event) *EventSummary {
	var best *EventSummary
	for i := range events {
		ev := &events[i]
		o := ev.InvolvedObject
		if ev.Reason != "FailedScheduling" || o.Name != pod.Name || o.Namespace != pod.Namespace || (o.UID != "" && o.UID != pod.UID) {
			continue
		}
		t := ev.CreationTimestamp.Time
		if !ev.EventTime.IsZero() {
			t = ev.EventTime.Time
		}
		if !ev.LastTimestamp.IsZero() {
			t = ev.LastTimestamp.Time
		}
		count := ev.Count
		if ev.Series != nil {
			t = ev.Series.LastObservedTime.Time
			count = ev.Series.Count
		}
		if best == nil || t.After(best.Time) {
			best = &EventSummary{Reason: ev.Reason, Message: ev.Message, Time: t.UTC(), Count: count}
		}
	}
	return best
}

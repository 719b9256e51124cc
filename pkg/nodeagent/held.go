package nodeagent

import (
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
)

// HeldBy returns what pods already hold of each of names: over the pods that have not ended
// (phase neither Succeeded nor Failed; terminating ones included, their containers still run),
// the sum of each pod's effective request (k8s.io/component-helpers resource.PodRequests: the
// larger of its app containers' sum and its largest init container, sidecars counted, plus
// overhead), in each name's own unit (MiB for GPU memory, a count of slices for the count
// name, percent for the percentage and cores names). It is the figure the kubelet counts
// those pods against when it admits them again (AtLeastHeld). It is pure: pods are the ones
// bound to the node (spec.nodeName), the caller lists them.
func HeldBy(pods []*corev1.Pod, names ...corev1.ResourceName) NodeResources {
	out := NodeResources{}
	for _, name := range names {
		out[name] = 0
	}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
		for _, name := range names {
			if q, ok := req[name]; ok {
				out[name] += q.Value()
			}
		}
	}
	return out
}

// AtLeastHeld returns the figures to publish: for each of offered's names, the larger of what
// the node offers and what its pods already hold (held, HeldBy; a name held has no figure of its
// own here unless offered names it), in the name's own unit; and over, per offered name, held −
// offered where positive, 0 otherwise (the node then offers less than its pods hold: MIG turned
// on, more memory reserved, a GPU gone or unhealthy under a pod).
//
// Why: the kubelet admits every pod again when it restarts, against the node's allocatable
// (k8s.io/kubernetes pkg/kubelet/kubelet.go HandlePodAdditions → canAdmitPod, the lifecycle
// predicate's noderesources Fits over the pods already admitted, oldest first). A figure below
// what the running pods hold makes it refuse, and kill, the youngest of them (OutOf<resource>).
// Published at least at their sum, the running pods stay; the pods' requests leave no room for a
// new one until the node offers more again, so nothing is over-committed beyond what runs.
// It is pure.
func AtLeastHeld(offered, held NodeResources) (publish, over NodeResources) {
	publish, over = NodeResources{}, NodeResources{}
	for name, v := range offered {
		h := held[name]
		publish[name] = max(v, h)
		over[name] = max(h-v, 0)
	}
	return publish, over
}

// Overcommit remembers, per resource name, how far the node's pods hold more than it offers
// (AtLeastHeld's over, in the name's own unit), for the metric
// hami_go_node_resource_overcommitted, and logs a warning once per change of a name's figure.
// It is safe for concurrent use; the zero value is ready.
type Overcommit struct {
	Node string

	mu   sync.Mutex
	last NodeResources
}

// Update records over's names (the others keep their figure) and logs each one that changed: a
// warning when the pods hold more than the node offers (klog has no structured warning: ErrorS
// with no error, the error severity), an info when that ended.
func (o *Overcommit) Update(over NodeResources) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last == nil {
		o.last = NodeResources{}
	}
	for _, name := range slices.Sorted(maps.Keys(over)) {
		v := over[name]
		prev, seen := o.last[name]
		o.last[name] = v
		if seen && prev == v || !seen && v == 0 {
			continue
		}
		if v > 0 {
			klog.ErrorS(nil, "The node's pods hold more than it offers; publishing what they hold, so that the kubelet admits them again at its restart",
				"node", o.Node, "resource", name, "overBy", v)
		} else {
			klog.InfoS("The node offers again at least what its pods hold", "node", o.Node, "resource", name)
		}
	}
}

// Snapshot returns the figures recorded (a copy), 0 for names not over.
func (o *Overcommit) Snapshot() NodeResources {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.last)
}

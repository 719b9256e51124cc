package extender

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// stamp orders the events that decide which claimed record holds a slice: a claimed record seen
// and a slice released (groups.go staleClaims, Cache.releaseSlicesLocked).
//
// rv is the resourceVersion of the pod in the informer event that showed the record or the
// release; 0 when there is none (a release the cache decides itself) or it is not a decimal
// integer. Resource versions of one resource are comparable since Kubernetes v1.35 (KEP-5504,
// k8s.io/apimachinery/pkg/util/resourceversion): every write to a pod gets a higher one. They
// give the order of the device plugin's writes also when the cache learned them out of order:
// after an extender restart the informer lists pods by name, not by when they were written.
//
// seq is Cache.seq at the event: the order in which the cache saw them, used when either side
// has no rv (objects built without one, as in unit tests) or both have the same.
type stamp struct {
	rv  uint64
	seq uint64
}

// after reports whether s is later than o.
func (s stamp) after(o stamp) bool {
	if s.rv != 0 && o.rv != 0 && s.rv != o.rv {
		return s.rv > o.rv
	}
	return s.seq > o.seq
}

// resourceVersionOf returns p's resourceVersion as a number, 0 when it is absent or not a
// decimal integer that fits 64 bits (etcd revisions are int64).
func resourceVersionOf(p *corev1.Pod) uint64 {
	rv, err := strconv.ParseUint(p.ResourceVersion, 10, 64)
	if err != nil {
		return 0
	}
	return rv
}

// nextStamp counts an event seen now with resourceVersion rv. Caller holds Cache.mu.
func (c *Cache) nextStamp(rv uint64) stamp {
	c.seq++
	return stamp{rv: rv, seq: c.seq}
}

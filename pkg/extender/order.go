package extender

import "k8s.io/apimachinery/pkg/util/resourceversion"

// stamp orders the events that decide which claimed record holds a slice: a claimed record seen
// and a slice released (groups.go staleClaims, Cache.releaseSlicesLocked).
//
// rv is the resourceVersion of the pod in the informer event that showed the record or the
// release; "" when there is none (a release the cache decides itself). Resource versions of one
// resource are comparable since Kubernetes v1.35 (KEP-5504,
// k8s.io/apimachinery/pkg/util/resourceversion): every write to a pod gets a higher one. They
// give the order of the device plugin's writes also when the cache learned them out of order:
// after an extender restart the informer lists pods by name, not by when they were written.
// A listed pod carries the resourceVersion of its latest write, which may be later than the
// write of its claimed record: a stale record looks newer after a restart only if another write
// to its pod (a status update) came between the swap's two patches and the restart came in
// that window too. The plugin's second patch, rewriting the stale record, settles it.
//
// seq is Cache.seq at the event: the order in which the cache saw them, used when either side
// has no well-formed rv (objects built without one, as in unit tests) or both have the same.
type stamp struct {
	rv  string
	seq uint64
}

// after reports whether s is later than o.
func (s stamp) after(o stamp) bool {
	if s.rv != "" && o.rv != "" {
		if cmp, err := resourceversion.CompareResourceVersion(s.rv, o.rv); err == nil && cmp != 0 {
			return cmp > 0
		}
	}
	return s.seq > o.seq
}

// nextStamp counts an event seen now with resourceVersion rv ("" when unknown). Caller holds
// Cache.mu.
func (c *Cache) nextStamp(rv string) stamp {
	c.seq++
	return stamp{rv: rv, seq: c.seq}
}

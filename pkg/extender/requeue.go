package extender

import (
	"github.com/hami-go/hami-go/pkg/device"
	"sync"
	"time"
)

// Requeueing pods refused in the informer lag.
//
// kube-scheduler retries an unschedulable pod when a cluster event might make it fit: for a pod
// an extender refused, on any event, at once. A pod that frees GPUs is such an event, and
// kube-scheduler's informer may deliver it a few milliseconds before the extender's. The retry's
// Filter then still sees the GPUs taken, the pod goes back to the unschedulable queue, and no
// further event may come for minutes (kube-scheduler flushes that queue after 5 minutes).
// Seen on the local cluster: the retry came 1.2 ms before the extender released the pod.
//
// So the cache remembers the pods its Filter refused on every node, and when it releases GPUs it
// hands the extender those refused shortly before the release (within requeueWindow) and not
// filtered again since. The extender updates each such pod (an annotation, AnnoRequeue), which
// is itself an event kube-scheduler retries the pod on.

// requeueWindow is how long before a release a refusal may have been made on state the release
// changes: kube-scheduler's and the extender's informers deliver one event at most this far
// apart in practice (milliseconds), with a margin for a loaded API server.
const requeueWindow = 2 * time.Second

// refusals records the pods Filter refused on every node, and the releases since.
type refusals struct {
	mu      sync.Mutex
	at      map[device.PodRef]time.Time // pod -> when Filter last refused it everywhere
	freed   time.Time                   // the latest release of GPUs
	pending chan struct{}               // signalled (capacity 1) after a release
	// reopen: a node's device plugin held its Lease again (reopened) at freed after releasing
	// it at reopen: every pod refused since then is handed out, however long ago (zero: none).
	reopen time.Time
}

func newRefusals() *refusals {
	return &refusals{at: map[device.PodRef]time.Time{}, pending: make(chan struct{}, 1)}
}

// refused records that Filter refused k on every node at now; fits forgets k.
func (r *refusals) refused(k device.PodRef, now time.Time) {
	r.mu.Lock()
	r.at[k] = now
	r.mu.Unlock()
}

func (r *refusals) fits(k device.PodRef) {
	r.mu.Lock()
	delete(r.at, k)
	r.mu.Unlock()
}

// released records a release of GPUs at now and signals Released.
func (r *refusals) released(now time.Time) {
	r.mu.Lock()
	r.freed = now
	r.mu.Unlock()
	select {
	case r.pending <- struct{}{}:
	default:
	}
}

// reopened records that a node's device plugin held its Lease again at now, released since
// since: a release whose window reaches back to since (the node was refused to every pod Filter
// saw in between), and signals Released.
func (r *refusals) reopened(since, now time.Time) {
	r.mu.Lock()
	r.freed = now
	if r.reopen.IsZero() || since.Before(r.reopen) {
		r.reopen = since
	}
	r.mu.Unlock()
	select {
	case r.pending <- struct{}{}:
	default:
	}
}

// Released is signalled after the cache released GPUs (deleted or ended pods, dropped
// reservations); the extender then calls RefusedBeforeRelease.
func (c *Cache) Released() <-chan struct{} { return c.refusals.pending }

// RefusedBeforeRelease returns the pods Filter refused on every node within requeueWindow before
// the latest release (or, after a Lease held again, since the node's release: reopened) and not
// since, and forgets them (each is handed out once per refusal), and
// the release time. Refusals older than the window are forgotten too.
func (c *Cache) RefusedBeforeRelease() ([]device.PodRef, time.Time) {
	r := c.refusals
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []device.PodRef
	for k, at := range r.at {
		switch {
		case at.After(r.freed):
			continue // filtered after the release: it saw the freed GPUs
		case r.freed.Sub(at) <= requeueWindow, !r.reopen.IsZero() && !at.Before(r.reopen):
			out = append(out, k)
		}
		delete(r.at, k)
	}
	r.reopen = time.Time{}
	return out, r.freed
}

// requeueSettle is how long after a release the extender waits before it updates refused pods:
// kube-scheduler's own retry, when it comes after the release, reaches Filter first and needs
// no update.
const requeueSettle = 250 * time.Millisecond

package extender

import (
	"sync"
	"time"

	"github.com/hami-go/hami-go/pkg/device"
)

// preemptOffers are the pods Filter refused on every node for GPUs, each with the nodes that
// refused it (nodes that passed kube-scheduler's own filters) and when it was first offered,
// waiting for the extender's own preemption loop (ownpreempt_loop.go).
type preemptOffers struct {
	mu      sync.Mutex
	offers  map[device.PodRef]offer
	pending chan struct{} // signalled (capacity 1) after an offer
}

type offer struct {
	nodes []string
	at    time.Time
}

func newPreemptOffers() *preemptOffers {
	return &preemptOffers{offers: map[device.PodRef]offer{}, pending: make(chan struct{}, 1)}
}

// offer records that pod k may preempt on nodes at now (replacing the nodes of an earlier offer
// of k, whose time it keeps: a pod Filter refuses again and again still settles once).
func (o *preemptOffers) offer(k device.PodRef, nodes []string, now time.Time) {
	o.mu.Lock()
	if old, ok := o.offers[k]; ok {
		now = old.at
	}
	o.offers[k] = offer{nodes: nodes, at: now}
	o.mu.Unlock()
	select {
	case o.pending <- struct{}{}:
	default:
	}
}

// withdraw forgets k's offer (kube-scheduler preempts for it, or it fits).
func (o *preemptOffers) withdraw(k device.PodRef) {
	o.mu.Lock()
	delete(o.offers, k)
	o.mu.Unlock()
}

// take returns and forgets every offer.
func (o *preemptOffers) take() map[device.PodRef][]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[device.PodRef][]string, len(o.offers))
	for k, v := range o.offers {
		out[k] = v.nodes
	}
	o.offers = map[device.PodRef]offer{}
	return out
}

// takeSettled returns and forgets the offers made at least settle before now, each pod on its
// own time, and how long until the next of the others settles (0: none left).
func (o *preemptOffers) takeSettled(now time.Time, settle time.Duration) (map[device.PodRef][]string, time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[device.PodRef][]string{}
	var next time.Duration
	for k, v := range o.offers {
		if wait := v.at.Add(settle).Sub(now); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		out[k] = v.nodes
		delete(o.offers, k)
	}
	return out, next
}

// PreemptionOffered is signalled after Filter offered a pod for preemption (TakePreemptionOffers).
func (c *Cache) PreemptionOffered() <-chan struct{} { return c.offers.pending }

// TakePreemptionOffers returns and forgets the pods offered for preemption, each with the nodes
// that refused it for GPUs.
func (c *Cache) TakePreemptionOffers() map[device.PodRef][]string { return c.offers.take() }

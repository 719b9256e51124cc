package extender

import (
	"sync"
	"time"

	"github.com/hami-go/hami-go/pkg/device"
)

// One preemption per pod.
//
// Two paths preempt for a pod: kube-scheduler, through the preempt verb (preempt.go), and the
// extender's own loop (preempt_loop.go). kube-scheduler runs at most one preemption per pod
// itself (its async preemption keeps the pod out while its victims go), but it does not know the
// loop. Each path therefore claims the pod in preemptions before it decides: the loop claims only
// a pod no preemption holds, and the verb answers nothing for a pod the loop preempts for. A
// claim lasts preemptRecordTTL (or until the pod is gone): long enough for the nomination it
// leads to to reach kube-scheduler and the extender's informer, after which a nominated pod is
// not eligible to preempt anyway (mayPreempt; kube-scheduler's PodEligibleToPreemptOthers).

// preemptRecordTTL is how long a preemption's claim on its pod lasts.
const preemptRecordTTL = time.Minute

// preemptPath is which path preempts for a pod.
type preemptPath int

const (
	// byVerb: kube-scheduler, through the preempt verb (the extender answered with victims).
	byVerb preemptPath = iota + 1
	// byOwn: the extender's own preemption loop.
	byOwn
)

func (p preemptPath) String() string {
	switch p {
	case byVerb:
		return "kube-scheduler (preempt verb)"
	case byOwn:
		return "hami-go's own preemption"
	}
	return "none"
}

// preemptRecord is one pod's claim.
type preemptRecord struct {
	by  preemptPath
	at  time.Time
	seq uint64 // tells a claim from a later one of the same pod (release)
}

// preemptions are the pods a preemption was decided for, or is being decided for.
type preemptions struct {
	mu  sync.Mutex
	m   map[device.PodRef]preemptRecord
	seq uint64
}

func newPreemptions() *preemptions { return &preemptions{m: map[device.PodRef]preemptRecord{}} }

// claim claims pod k for a preemption by path at now, and returns the claim's token (release)
// and ok. It refuses (ok false, and holder says which path holds the pod) while an unexpired
// claim of the loop holds k, and, for the loop, while an unexpired claim of the verb does: the
// verb may claim a pod the verb claimed before (kube-scheduler retrying its own preemption).
func (p *preemptions) claim(k device.PodRef, by preemptPath, now time.Time) (token uint64, holder preemptPath, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, held := p.m[k]; held && now.Sub(r.at) < preemptRecordTTL && (r.by == byOwn || by == byOwn) {
		return 0, r.by, false
	}
	p.seq++
	p.m[k] = preemptRecord{by: by, at: now, seq: p.seq}
	return p.seq, 0, true
}

// release drops claim token of pod k (no preemption came of it); a later claim stays.
func (p *preemptions) release(k device.PodRef, token uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.m[k]; ok && r.seq == token {
		delete(p.m, k)
	}
}

// forget drops pod k's claim (the pod is gone).
func (p *preemptions) forget(k device.PodRef) {
	p.mu.Lock()
	delete(p.m, k)
	p.mu.Unlock()
}

// sweep drops the claims older than preemptRecordTTL.
func (p *preemptions) sweep(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, r := range p.m {
		if now.Sub(r.at) >= preemptRecordTTL {
			delete(p.m, k)
		}
	}
}

// preemptOffers are the pods Filter refused on every node for GPUs, each with the nodes that
// refused it (nodes that passed kube-scheduler's own filters) and when it was first offered,
// waiting for the preemption loop.
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

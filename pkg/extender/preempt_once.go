package extender

import (
	"sync"
	"time"

	"github.com/hami-go/hami-go/pkg/device"
)

// One preemption per pod.
//
// Two paths preempt for a pod: kube-scheduler, through the preempt verb (preempt_verb.go), and the
// extender's own loop (ownpreempt_loop.go). kube-scheduler runs at most one preemption per pod
// itself (its async preemption keeps the pod out while its victims go), but it does not know the
// loop. Each path therefore claims the pod in preemptions before it decides: the loop claims only
// a pod no preemption holds, and the verb answers nothing for a pod the loop preempts for. A claim
// lasts preemptRecordTTL (or until the pod is gone): long enough for the nomination it leads to to
// reach kube-scheduler and the extender's informer, after which a nominated pod is not eligible to
// preempt anyway (mayPreempt; kube-scheduler's PodEligibleToPreemptOthers).

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

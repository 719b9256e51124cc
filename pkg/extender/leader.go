package extender

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// Leader hand-over: the extender serves only while its kube-scheduler leads, and a new leader's
// extender serves only once the previous leader's binds are over.
//
// kube-scheduler releases its leader-election Lease when it stops (SIGTERM: ReleaseOnCancel,
// k8s.io/kubernetes cmd/kube-scheduler/app/options/options.go), so on a graceful rollout a
// standby leads within retryPeriod (2 s), not leaseDuration (15 s). The old leader's extender may
// then still be inside a Bind: it booked the GPU share in its own cache and its Binding (which
// carries the plan, extender.go Bind) may commit up to the bind API timeout (Config.APITimeout,
// 10 s) after the Bind began, which was before the release. The new leader's extender learns of
// that Binding only from its pod informer; Filter and Bind read nothing else (BookForBind books
// from the cache; the API server checks the Binding's UID and that the pod is unassigned, not
// the GPUs). Had the new leader answered at once, it could book the same share for another pod
// and both Bindings would commit: an over-commit (TestFailoverLateBindWouldOvercommit,
// TestOvercountGracefulHandOver).
//
// The window is closed with what the extender already has:
//   - The extender watches its kube-scheduler's Lease (Config.LeaderLease; kube-scheduler's
//     identity is "<hostname>_<uuid>" and the sidecar shares the pod's hostname, Config.Identity).
//     While another holds it, or nobody, the verbs refuse (ErrNotLeading), as before readiness:
//     the old leader's extender stops binding as soon as it sees the release, and its own
//     preemption stops.
//   - From the moment it first sees its kube-scheduler hold the Lease, the extender refuses the
//     verbs (ErrHandOver) for Config.APITimeout: every Bind of the previous leader began before
//     the release, so its Binding has committed or failed by then. Only a term that follows a
//     Lease the extender saw held by another or released needs it: where the first Lease it
//     sees is already its own (a first install, or the extender restarted beside its leading
//     kube-scheduler), no previous leader's Bind can be in flight that the extender did not see
//     start (a rollout starts the new replica, whose extender then sees the old holder, before
//     the old one stops; a replica replaced after it stopped waited for its binds, Drain). Then it waits until its cache
//     has every bound GPU pod of a consistent list (the readiness check, current.go) and serves.
//     The pods Filter refused meanwhile are requeued (requeue.go), as after a node's Lease is
//     held again, so none waits for kube-scheduler's 5-minute flush.
//   - At SIGTERM the extender stops its own preemption, then refuses every verb (ErrStopping)
//     while its binds in flight finish (Drain), before it exits.
// With Config.LeaderLease empty (tests, a kube-scheduler without leader election) the extender
// serves whenever it is ready, as before.

// ErrNotLeading is what the verbs answer while the extender's kube-scheduler does not hold the
// leader-election Lease, as the extender last saw it (Config.LeaderLease).
var ErrNotLeading = errors.New("hami-go scheduler extender: its kube-scheduler does not hold the leader-election Lease (as the extender last saw it); the pod is retried by the leader")

// ErrHandOver is what the verbs answer in the first Config.APITimeout after the extender saw its
// kube-scheduler take the Lease, and until its cache caught up with the API: a Binding of the
// previous leader may still commit.
var ErrHandOver = errors.New("hami-go scheduler extender: its kube-scheduler has just taken over leadership; a bind of the previous leader may still commit, so it waits for the bind API timeout and for its cache to catch up; the pod is retried")

// ErrStopping is what the verbs answer once the extender received SIGTERM (its context ended),
// while its binds in flight finish.
var ErrStopping = errors.New("hami-go scheduler extender stopping (SIGTERM): it answers no verb any more; the pod is retried by the next leader")

// leadership is what the extender knows of its kube-scheduler's leadership.
type leadership struct {
	identity string        // the hostname: kube-scheduler's identity is identity + "_" + uuid
	hold     time.Duration // how long a new term refuses the verbs (Config.APITimeout)

	mu     sync.Mutex
	holder string    // the Lease's holderIdentity as last seen ("": released or absent)
	since  time.Time // when the extender first saw its kube-scheduler hold the Lease (zero: not ours)
	until  time.Time // when the current term's hold ends (since, or since + hold)
	// another: the extender has seen the Lease held by another, or released, since it last
	// led; the next term of its own then holds the verbs for hold.
	another bool
	closed  time.Time // when the verbs last closed (start, a lost term, a new term)
	term    uint64    // bumped whenever the holder changes to or from ours
	// settled: the current term's hold has passed and the cache caught up.
	settled bool
	changed chan struct{} // signalled (capacity 1) when term changes
}

func newLeadership(identity string, hold time.Duration, now time.Time) *leadership {
	return &leadership{identity: identity, hold: hold, closed: now, changed: make(chan struct{}, 1)}
}

// ours reports whether holder is the identity of the extender's own kube-scheduler.
func (l *leadership) ours(holder string) bool {
	return l.identity != "" && strings.HasPrefix(holder, l.identity+"_")
}

// observe records the Lease's holder seen at now.
func (l *leadership) observe(holder string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	was := !l.since.IsZero()
	is := l.ours(holder)
	old := l.holder
	l.holder = holder
	if !is {
		l.another = true
	}
	if was == is && (!is || old == holder) {
		return
	}
	// A new term (ours now, or another uuid of ours: kube-scheduler restarted and took it
	// again), or a lost one.
	l.term++
	l.settled = false
	l.since = time.Time{}
	if is {
		l.since, l.until = now, now
		if l.another || was {
			l.until = now.Add(l.hold)
		}
		l.another = false
	}
	if was {
		l.closed = now
	}
	if is {
		klog.InfoS("Its kube-scheduler took the leader-election Lease; the verbs refuse until a previous leader's binds are over and the cache caught up with the API", "holder", holder, "hold", l.until.Sub(now))
	} else {
		klog.InfoS("Its kube-scheduler does not hold the leader-election Lease; the verbs refuse and own preemption stops", "holder", holder)
	}
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// refusal returns why the verbs refuse at now (nil: they serve).
func (l *leadership) refusal(now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.since.IsZero():
		return ErrNotLeading
	case !l.settled || now.Before(l.until):
		return ErrHandOver
	}
	return nil
}

// pending returns the current term, when its hold ends, and whether it still needs settling.
func (l *leadership) pending() (term uint64, until time.Time, need bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.term, l.until, !l.since.IsZero() && !l.settled
}

// settle ends term's hold; false when the term changed meanwhile. closed is when the verbs
// closed before it (the refusals since are requeued).
func (l *leadership) settle(term uint64) (closed time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.term != term || l.since.IsZero() {
		return time.Time{}, false
	}
	l.settled = true
	return l.closed, true
}

// refusal returns why the verbs refuse now (nil: they serve): stopping (ErrStopping), not ready
// (ErrNotReady), and with Config.LeaderLease, not leading or in the hand-over (leadership).
func (e *Extender) refusal() error {
	switch {
	case e.stopping.Load():
		return ErrStopping
	case !e.ready.Load():
		return ErrNotReady
	case e.lead == nil:
		return nil
	}
	return e.lead.refusal(e.clock.Now())
}

// FilterRefusal returns why the extender weighs pod p on no node now, as its filter verb
// answers (nil: it weighs it): ErrStopping, ErrNotReady, and with Config.LeaderLease
// ErrNotLeading or ErrHandOver. A pod refused before the cache was rebuilt or for leadership is
// remembered, so that it is requeued once the extender is ready (Run) or its kube-scheduler's
// term opens (requeue.go, handOverLoop): kube-scheduler would otherwise retry it only at its next
// cluster event or its 5-minute flush. Used by the filter verb and by callers in
// kube-scheduler's own process (pkg/schedplugin's PreFilter, which kube-scheduler may call before
// the extender under it is ready).
func (e *Extender) FilterRefusal(p *corev1.Pod) error {
	why := e.refusal()
	if errors.Is(why, ErrNotReady) || errors.Is(why, ErrHandOver) || errors.Is(why, ErrNotLeading) {
		e.cache.refusals.refused(device.RefOf(p), e.clock.Now())
	}
	return why
}

// onSchedulerLease records kube-scheduler's leader-election Lease (nil: deleted).
func (e *Extender) onSchedulerLease(l *coordinationv1.Lease) {
	holder := ""
	if l != nil && l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	e.lead.observe(holder, e.clock.Now())
}

// handOverLoop settles each term of its kube-scheduler's leadership, until ctx ends: it waits
// until the term's hold has passed, then until the cache has every bound GPU pod of a consistent
// list, then opens the verbs and requeues the pods refused while they were closed.
func (e *Extender) handOverLoop(ctx context.Context) {
	for {
		term, until, need := e.lead.pending()
		if !need {
			select {
			case <-ctx.Done():
				return
			case <-e.lead.changed:
			}
			continue
		}
		if d := until.Sub(e.clock.Now()); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-e.lead.changed:
				continue
			case <-e.clock.After(d):
			}
		}
		if err := e.waitCurrent(ctx, e.charged); err != nil {
			if ctx.Err() != nil {
				return
			}
			klog.ErrorS(err, "Cannot check the cache against the API after taking over leadership; retrying")
			select {
			case <-ctx.Done():
				return
			case <-e.clock.After(time.Second):
			}
			continue
		}
		if closed, ok := e.lead.settle(term); ok {
			klog.InfoS("Leading: the previous leader's binds are over and the cache caught up; serving")
			e.cache.refusals.reopened(closed, e.clock.Now())
		}
	}
}

// charged reports whether the cache charges bound pod p on its node, or knows it gone or ended.
func (e *Extender) charged(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return true // ended: holds no GPU
	}
	return e.cache.knowsBound(device.PodRef{Namespace: p.Namespace, Name: p.Name, UID: p.UID}, p.Spec.NodeName)
}

// knowsBound reports whether the cache books pod k on node, or has released it.
func (c *Cache) knowsBound(k device.PodRef, node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, gone := c.gone[k]; gone {
		return true
	}
	b := c.pods[k]
	return b != nil && b.node == node
}

// binds counts the Binds in flight so that a stopping extender lets them finish (Drain).
type binds struct {
	mu   sync.Mutex
	n    int
	done chan struct{} // closed when n drops to 0 after Drain began (nil before)
}

// enter registers a Bind unless the extender is stopping; the caller calls leave when done.
func (e *Extender) enterBind() error {
	e.inflight.mu.Lock()
	defer e.inflight.mu.Unlock()
	if e.stopping.Load() {
		return ErrStopping
	}
	e.inflight.n++
	return nil
}

func (e *Extender) leaveBind() {
	e.inflight.mu.Lock()
	defer e.inflight.mu.Unlock()
	e.inflight.n--
	if e.inflight.n == 0 && e.inflight.done != nil {
		close(e.inflight.done)
		e.inflight.done = nil
	}
}

// drainTimeout bounds how long a stopping extender waits for its binds in flight: a Bind makes
// at most two API calls of Config.APITimeout each (the Binding and the reconcile read).
func (e *Extender) drainTimeout() time.Duration { return 2*e.cfg.APITimeout + time.Second }

// stop closes the verbs (ErrStopping; /readyz 503) and waits, at most drainTimeout of real time,
// for the binds in flight to finish; it returns how many were still in flight at the end.
func (e *Extender) stop() int {
	e.inflight.mu.Lock()
	e.stopping.Store(true)
	n := e.inflight.n
	var done chan struct{}
	if n > 0 {
		done = make(chan struct{})
		e.inflight.done = done
	}
	e.inflight.mu.Unlock()
	if done == nil {
		return 0
	}
	klog.InfoS("Stopping: waiting for the binds in flight", "binds", n)
	t := time.NewTimer(e.drainTimeout())
	defer t.Stop()
	select {
	case <-done:
		return 0
	case <-t.C:
		e.inflight.mu.Lock()
		defer e.inflight.mu.Unlock()
		return e.inflight.n
	}
}

// parseLeaderLease splits "namespace/name".
func parseLeaderLease(s string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("leader-election-lease: %q is not <namespace>/<name>", s)
	}
	return ns, name, nil
}

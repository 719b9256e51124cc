package ledger

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hami-go/hami-go/pkg/device"
)

// matchKind says how a call was matched to a pod (for logs and tests).
type matchKind int

const (
	matchNone matchKind = iota
	matchRepeat
	matchPartial
	matchFresh
)

// match finds the pod and container an Allocate call with device IDs ids serves (docs/design.md,
// "Matching Allocate to a pod"), under l.mu:
//  1. a pod partly claimed in this admission whose next container reuses its init container's
//     devices (ids overlap the IDs its init containers claimed);
//  2. a container that already claimed exactly ids: a repeat call (kubelet at container start);
//  3. a pod partly claimed whose next unclaimed container asks len(ids) GPUs (the kubelet admits
//     one pod at a time, its containers in order): the most recently claimed such pod;
//  4. pods with nothing claimed whose first container asks len(ids) GPUs: when they all share
//     one signature they are interchangeable and the call takes the slot whose planned GPUs
//     equal the ids' GPUs, else the one seen first (the kubelet admits pods in the order its
//     watch delivers them, which is the order the plugin's watch saw them; matching that order
//     spares Reconcile from swapping records and rewriting two pods); different signatures
//     are refused (case C20).
//
// It returns *ErrNoPod when nothing waits for the call (the caller may wait for the informer).
func (l *Ledger) match(ids []string) (*podEntry, *device.ContainerAllocation, matchKind, error) {
	n := len(ids)
	var partial []*podEntry
	for _, e := range l.pods {
		if len(e.claimed) == 0 {
			continue
		}
		next := e.nextUnclaimed()
		if next == nil || len(next.Devices) != n {
			continue
		}
		var initIDs []string
		for _, c := range e.claimed {
			if c.Kind == device.KindInit {
				initIDs = append(initIDs, c.SliceIDs...)
			}
		}
		if overlaps(ids, initIDs) {
			return e, next, matchPartial, nil // 1: init devices reused
		}
		partial = append(partial, e)
	}
	for _, e := range l.pods { // 2: repeat
		for _, c := range e.plan.Containers {
			if cl, ok := e.claimed[c.Name]; ok && sameSet(cl.SliceIDs, ids) {
				return e, cl, matchRepeat, nil
			}
		}
	}
	if len(partial) > 0 { // 3
		sort.Slice(partial, func(i, j int) bool { return partial[i].lastClaim.After(partial[j].lastClaim) })
		return partial[0], partial[0].nextUnclaimed(), matchPartial, nil
	}
	fresh := sortedEntries(l.pods, func(e *podEntry) bool { // 4
		return len(e.claimed) == 0 && len(e.plan.Containers) > 0 && len(e.plan.Containers[0].Devices) == n
	})
	if len(fresh) == 0 {
		return nil, nil, matchNone, l.noPodError(n)
	}
	sigs := map[device.Signature]bool{}
	for _, e := range fresh {
		sigs[e.sig] = true
	}
	if len(sigs) > 1 {
		var who []string
		var refs []device.PodRef
		for _, e := range fresh {
			who = append(who, fmt.Sprintf("%s (%s)", e.ref, describeSig(e)))
			refs = append(refs, e.ref)
		}
		return nil, nil, matchNone, &ErrConfusable{Pods: refs, Reason: fmt.Sprintf("refusing to guess: %d pods placed by hami-go on node %s wait for %d device(s) of %s with different requests, and the kubelet does not say which one this call is for: %s; one of them must be deleted or finish first (case C20)",
			len(fresh), l.node, n, l.names.Count, strings.Join(who, ", "))}
	}
	want := SliceGPUs(ids)
	for _, e := range fresh {
		if sameSet(planGPUs(&e.plan.Containers[0]), want) {
			return e, &e.plan.Containers[0], matchFresh, nil
		}
	}
	return fresh[0], &fresh[0].plan.Containers[0], matchFresh, nil
}

func describeSig(e *podEntry) string {
	var parts []string
	for _, c := range e.plan.Containers {
		var mem int64
		cores := 0
		for _, d := range c.Devices {
			mem += d.MemoryMiB
			cores = d.CoresPercent
		}
		parts = append(parts, fmt.Sprintf("container %s: %d GPU(s), %d MiB, %d%% cores", c.Name, len(c.Devices), mem/int64(len(c.Devices)), cores))
	}
	return strings.Join(parts, "; ")
}

func (l *Ledger) noPodError(n int) error {
	msg := fmt.Sprintf("no pod placed by hami-go on node %s waits for %d device(s) of %s (pods not scheduled by %s get no slice)", l.node, n, l.names.Count, device.SchedulerName)
	var refs []device.PodRef
	if len(l.unplaced) > 0 {
		u := make([]unplacedPod, 0, len(l.unplaced))
		for _, p := range l.unplaced {
			u = append(u, p)
		}
		sort.Slice(u, func(i, j int) bool { return u[i].why < u[j].why })
		why := make([]string, len(u))
		for i, p := range u {
			why[i] = p.why
			refs = append(refs, p.ref)
		}
		msg += "; pods on this node that cannot be served: " + strings.Join(why, "; ")
	}
	return &ErrNoPod{Reason: msg, Pods: refs}
}

// TryAllocate matches one Allocate call (one container's device IDs) to a pod and claims the
// slot in memory at once, so the next call sees it. It never waits. Errors: *ErrNoPod when no
// pod waits for the call yet; any other error is a refusal.
func (l *Ledger) TryAllocate(ids []string) (Claim, error) {
	l.mu.Lock()
	e, c, kind, err := l.match(ids)
	if err != nil {
		l.mu.Unlock()
		return Claim{}, err
	}
	if kind != matchRepeat {
		claimed := cloneContainer(c)
		claimed.SliceIDs = append([]string(nil), ids...)
		sort.Strings(claimed.SliceIDs)
		*c = claimed // c points into e.plan.Containers
		e.claimed[c.Name] = c
		e.lastClaim = l.clock.Now()
		l.notifyLocked()
	}
	out := Claim{Pod: e.ref, Container: cloneContainer(c), Repeat: kind == matchRepeat}
	l.mu.Unlock()
	if kind != matchRepeat && l.dirty != nil {
		l.dirty(e.ref)
	}
	return out, nil
}

// Allocate is TryAllocate that waits, up to wait, for the informer to deliver the pod when no
// pod waits for the call yet (the informer may lag the kubelet). after is the clock's After
// (injectable for tests).
func (l *Ledger) Allocate(ctx context.Context, ids []string, wait time.Duration, after func(time.Duration) <-chan time.Time) (Claim, error) {
	var timeout <-chan time.Time
	for {
		changed := l.Changed()
		c, err := l.TryAllocate(ids)
		if _, retry := err.(*ErrNoPod); !retry {
			return c, err
		}
		if timeout == nil {
			if wait <= 0 {
				return c, err
			}
			timeout = after(wait)
		}
		select {
		case <-changed:
		case <-timeout:
			c, err = l.TryAllocate(ids)
			if np, nopod := err.(*ErrNoPod); nopod {
				err = &ErrNoPod{Reason: fmt.Sprintf("%s (waited %s)", np.Reason, wait), Pods: np.Pods}
			}
			return c, err
		case <-ctx.Done():
			return Claim{}, fmt.Errorf("allocate of %v: %w", ids, ctx.Err())
		}
	}
}

// Prefer answers GetPreferredAllocation for one container: size slice IDs from available
// (must-include first) on the GPUs planned for the pod the call most likely serves, one slice
// per planned GPU (case C18). It claims nothing. When no pod matches it still answers, with
// slices on distinct GPUs.
func (l *Ledger) Prefer(available, mustInclude []string, size int) []string {
	l.mu.Lock()
	probe := mustInclude
	if len(probe) < size {
		// A hypothetical call of the right size: only the count matters for matching, except for
		// init-device reuse, which must-include expresses.
		probe = append(append([]string(nil), mustInclude...), make([]string, size-len(mustInclude))...)
		for i := len(mustInclude); i < size; i++ {
			probe[i] = fmt.Sprintf("\x00probe-%d", i)
		}
	}
	var planned []string
	if _, c, _, err := l.match(probe); err == nil && c != nil {
		for _, d := range c.Devices {
			planned = append(planned, d.UUID)
		}
	}
	l.mu.Unlock()
	return preferSlices(available, mustInclude, size, planned)
}

// preferSlices picks size IDs: must-include first, then one slice of each planned GPU not yet
// covered (lowest slice number first), then slices of GPUs not yet used, then anything left.
func preferSlices(available, mustInclude []string, size int, planned []string) []string {
	out := []string{}
	used := map[string]bool{}
	gpuUsed := map[string]bool{}
	add := func(id string) {
		if len(out) < size && !used[id] {
			used[id] = true
			out = append(out, id)
			if u, _, err := device.ParseSliceID(id); err == nil {
				gpuUsed[u] = true
			}
		}
	}
	for _, id := range mustInclude {
		add(id)
	}
	byGPU := map[string][]string{}
	var order []string
	for _, id := range available {
		u, _, err := device.ParseSliceID(id)
		if err != nil {
			continue
		}
		if _, ok := byGPU[u]; !ok {
			order = append(order, u)
		}
		byGPU[u] = append(byGPU[u], id)
	}
	for u := range byGPU {
		ids := byGPU[u]
		sort.Slice(ids, func(i, j int) bool {
			_, a, _ := device.ParseSliceID(ids[i])
			_, b, _ := device.ParseSliceID(ids[j])
			return a < b
		})
	}
	pick := func(u string) {
		if gpuUsed[u] {
			return
		}
		for _, id := range byGPU[u] {
			if !used[id] {
				add(id)
				return
			}
		}
	}
	for _, u := range planned {
		pick(u)
	}
	for _, u := range order {
		pick(u)
	}
	for _, id := range available {
		add(id)
	}
	return out
}

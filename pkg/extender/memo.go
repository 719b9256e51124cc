package extender

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// memoCapacity is how many pods' Filter scores are kept for their Prioritize call (kube-scheduler
// calls Prioritize right after Filter for the same pod, one pod at a time per profile).
const memoCapacity = 32

// scoreMemo is what Filter computed for one pod: by node idx, the score (0 where the pod did
// not fit) and the node's gen it was computed at (0: not computed). Prioritize answers from it
// for every node whose gen is unchanged and recomputes the others.
type scoreMemo struct {
	uid types.UID
	// rv is the pod's resourceVersion: a changed pod (policy annotation) is scored afresh.
	rv     string
	scores []int8
	gens   []uint64
}

// reset prepares m for a pod over a cache of n nodes, reusing its buffers.
func (m *scoreMemo) reset(uid types.UID, rv string, n int) {
	m.uid, m.rv = uid, rv
	if cap(m.gens) < n {
		m.scores, m.gens = make([]int8, n), make([]uint64, n)
	}
	m.scores, m.gens = m.scores[:n], m.gens[:n]
	clear(m.gens)
}

// score returns the memoized score of ns when ns is still at the gen it was computed at.
// Caller holds ns.mu.
func (m *scoreMemo) score(ns *nodeState) (int, bool) {
	if m == nil || ns.idx >= len(m.gens) || m.gens[ns.idx] == 0 || m.gens[ns.idx] != ns.gen {
		return 0, false
	}
	return int(m.scores[ns.idx]), true
}

// set records the score of ns at its gen. Caller holds ns.mu.
func (m *scoreMemo) set(ns *nodeState, score int) {
	if m != nil && ns.idx < len(m.gens) {
		m.scores[ns.idx], m.gens[ns.idx] = int8(score), ns.gen
	}
}

// followOwnChange keeps the memo of ns valid across one change that the pod itself made
// (its reservation removed from or put on ns: the score excludes the pod's own booking, so it
// does not change): when the memo was at before and the node moved exactly one gen, it follows.
// Any other change in between leaves the memo stale. Caller holds ns.mu.
func (m *scoreMemo) followOwnChange(ns *nodeState, before uint64) {
	if m != nil && ns.idx < len(m.gens) && m.gens[ns.idx] == before && before != 0 && ns.gen == before+1 {
		m.gens[ns.idx] = ns.gen
	}
}

// memoTable holds the memos of the last memoCapacity pods, oldest evicted first (its buffers
// reused). A memo taken by get is owned by its caller until put back; memos are never shared.
type memoTable struct {
	mu    sync.Mutex
	byUID map[types.UID]*scoreMemo
	order []types.UID
	free  []*scoreMemo
}

func newMemoTable() memoTable { return memoTable{byUID: map[types.UID]*scoreMemo{}} }

// fresh returns an empty memo for the pod (a previous memo of it is dropped).
func (t *memoTable) fresh(uid types.UID, rv string, nodes int) *scoreMemo {
	t.mu.Lock()
	var m *scoreMemo
	if old := t.byUID[uid]; old != nil {
		t.dropLocked(uid)
		m = old
	} else if n := len(t.free); n > 0 {
		m, t.free = t.free[n-1], t.free[:n-1]
	} else {
		m = &scoreMemo{}
	}
	t.mu.Unlock()
	m.reset(uid, rv, nodes)
	return m
}

// publish makes m the pod's memo, evicting the oldest beyond memoCapacity.
func (t *memoTable) publish(m *scoreMemo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.byUID[m.uid]; old != nil && old != m {
		t.dropLocked(m.uid)
		t.free = append(t.free, old)
	}
	t.byUID[m.uid] = m
	t.order = append(t.order, m.uid)
	for len(t.order) > memoCapacity {
		uid := t.order[0]
		t.order = t.order[1:]
		if old := t.byUID[uid]; old != nil {
			delete(t.byUID, uid)
			t.free = append(t.free, old)
		}
	}
}

// take removes and returns the pod's memo when it was made for resourceVersion rv, else nil.
// The caller gives it back with publish, or drops it.
func (t *memoTable) take(uid types.UID, rv string) *scoreMemo {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.byUID[uid]
	if m == nil || m.rv != rv {
		return nil
	}
	t.dropLocked(uid)
	return m
}

func (t *memoTable) dropLocked(uid types.UID) {
	delete(t.byUID, uid)
	for i, u := range t.order {
		if u == uid {
			t.order = append(t.order[:i], t.order[i+1:]...)
			break
		}
	}
}

package allocator

import (
	"cmp"
	"slices"
)

// bnb is the general search of ChooseVictims: a branch and bound over the victims in order
// (PDB violators last, then by priority ascending), deciding each in turn, taken first.
type bnb struct {
	p     *preemption
	b     *bounds
	order []int   // indexes into p.vs
	rank  []int   // rank[v]: v's position in order
	same  []bool  // same[i]: order[i] is identical to order[i-1] (charge, priority, PDB)
	suf   []freed // suf[i*gpus+g]: what order[i:] free on GPU g
	cur   []freed // what set frees, by GPU
	tmp   []freed
	set   []int
	c     cost
	best  cost
	bestS []int
	steps int
	out   bool // searchSteps ran out
}

// search runs the branch and bound and returns the best set (indexes into p.vs) and whether it
// is proven the best (false when searchSteps ran out). The first incumbent is kube-scheduler's
// greedy choice (reprieve over every victim). A branch is cut when its set plus the next undecided victim (no
// dearer by Better than adding any other) is no better than the best; when its set plus the
// relaxation's bound on the rest (bounds.lower) is no better, or the relaxation says nothing
// can fit; and when freeing every undecided victim too does not make the pod fit (sound where
// Fit is monotone in usage). A set that fits is not extended. Of identical victims only the
// first ones are taken (leaving one out leaves out those after it).
func (p *preemption) search() ([]int, bool) {
	n, gpus := len(p.vs), len(p.inv.GPUs)
	s := &bnb{p: p, order: make([]int, n), same: make([]bool, n), rank: make([]int, n), suf: make([]freed, (n+1)*gpus),
		cur: make([]freed, gpus), tmp: make([]freed, gpus)}
	for i := range s.order {
		s.order[i] = i
	}
	slices.SortFunc(s.order, func(a, b int) int { return compareVictims(&p.vs[a], &p.vs[b], a, b) })
	for i := 1; i < n; i++ {
		s.same[i] = compareVictims(&p.vs[s.order[i]], &p.vs[s.order[i-1]], 0, 0) == 0
	}
	for i := n - 1; i >= 0; i-- {
		copy(s.suf[i*gpus:(i+1)*gpus], s.suf[(i+1)*gpus:])
		for _, c := range p.vs[s.order[i]].on {
			s.suf[i*gpus+c.gpu].add(c.u, 1)
		}
	}
	for i, v := range s.order {
		s.rank[v] = i
	}
	s.b = newBounds(p, s.order)
	s.bestS, s.best = s.reprieve(s.order)
	s.c = noVictims()
	s.dfs(0, true)
	if s.out { // the best found may not be minimal
		s.bestS, _ = s.reprieve(s.bestS)
	}
	return s.bestS, !s.out
}

// compareVictims orders victims for the search: non-violators first, then by priority, then by
// charge (so that identical victims are adjacent), then by ia, ib (0 for equal when identical).
func compareVictims(a, b *victim, ia, ib int) int {
	if a.pdb != b.pdb {
		if a.pdb {
			return 1
		}
		return -1
	}
	if a.prio != b.prio {
		return cmp.Compare(a.prio, b.prio)
	}
	if c := slices.CompareFunc(a.on, b.on, compareGPUCharge); c != 0 {
		return c
	}
	return ia - ib
}

func compareGPUCharge(a, b gpuCharge) int {
	switch {
	case a.gpu != b.gpu:
		return a.gpu - b.gpu
	case a.u.MemoryMiB != b.u.MemoryMiB:
		return cmp.Compare(a.u.MemoryMiB, b.u.MemoryMiB)
	case a.u.CoresPercent != b.u.CoresPercent:
		return a.u.CoresPercent - b.u.CoresPercent
	case a.u.Sharers != b.u.Sharers:
		return a.u.Sharers - b.u.Sharers
	case a.u.Exclusive != b.u.Exclusive:
		if a.u.Exclusive {
			return 1
		}
		return -1
	}
	return 0
}

// reprieve is kube-scheduler's victim selection on a node (defaultpreemption
// SelectVictimsOnNode) over set (indexes into p.vs), whose removal lets the pod fit: remove them
// all, then put back the PDB violators and then the others, each highest priority first (the
// search order reversed), a victim staying evicted only when putting it back makes the pod not
// fit. Over every victim it is the greedy choice; over a set the search found, it makes the set
// minimal. It returns the victims that stay evicted and their cost.
func (s *bnb) reprieve(set []int) ([]int, cost) {
	p := s.p
	rem := make([]freed, len(s.cur))
	for _, v := range set {
		for _, ch := range p.vs[v].on {
			rem[ch.gpu].add(ch.u, 1)
		}
	}
	back := slices.Clone(set)
	slices.SortFunc(back, func(a, b int) int { return s.rank[b] - s.rank[a] })
	var out []int
	c := noVictims()
	for _, v := range back {
		for _, ch := range p.vs[v].on {
			rem[ch.gpu].add(ch.u, -1)
		}
		if p.fits(rem) {
			continue
		}
		for _, ch := range p.vs[v].on {
			rem[ch.gpu].add(ch.u, 1)
		}
		out = append(out, v)
		c = c.with(&p.vs[v])
	}
	return out, c
}

// step counts one step of the search; false (and s.out) once searchSteps are spent.
func (s *bnb) step() bool {
	if s.steps >= searchSteps {
		s.out = true
		return false
	}
	s.steps++
	return true
}

// fits evaluates the pod with s.cur plus what order[from:] free, within the budget (false
// when it is spent).
func (s *bnb) fits(from int) bool {
	if !s.step() {
		return false
	}
	for _, g := range s.p.touched {
		s.tmp[g] = s.cur[g].plus(s.suf[from*len(s.cur)+g])
	}
	return s.p.fits(s.tmp)
}

// dfs decides order[i:], given that s.set does not fit and s.set plus all of order[i:] does when
// known.
func (s *bnb) dfs(i int, known bool) {
	if s.out || i == len(s.order) {
		return
	}
	v := &s.p.vs[s.order[i]]
	nc := s.c.with(v)
	if !nc.less(s.best) {
		return
	}
	if !s.step() {
		return
	}
	if lb, ok := s.b.lower(s.cur, i); !ok || !s.c.plus(lb).less(s.best) {
		return
	}
	if !known && !s.fits(i) {
		return
	}
	// take order[i]
	saved := s.c
	s.take(v, 1)
	s.set, s.c = append(s.set, s.order[i]), nc
	if s.fits(len(s.order)) {
		s.best, s.bestS = nc, append(s.bestS[:0], s.set...)
	} else {
		s.dfs(i+1, true)
	}
	s.take(v, -1)
	s.set, s.c = s.set[:len(s.set)-1], saved
	// leave it out, and the identical ones after it
	j := i + 1
	for j < len(s.order) && s.same[j] {
		j++
	}
	s.dfs(j, false)
}

// take adds (sign 1) or removes (sign -1) v's charge to what s.cur frees.
func (s *bnb) take(v *victim, sign int) {
	for _, c := range v.on {
		s.cur[c.gpu].add(c.u, sign)
	}
}

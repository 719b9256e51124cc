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
	order []int     // indexes into p.vs
	same  []bool    // same[i]: order[i] is identical to order[i-1] (charge, priority, PDB)
	suf   [][]freed // suf[i]: what order[i:] free, by GPU
	cur   []freed   // what set frees, by GPU
	tmp   []freed
	set   []int
	c     cost
	best  cost
	bestS []int
	evals int
	out   bool // the evaluation budget ran out
}

// search runs the branch and bound and returns the best set (indexes into p.vs) and whether it
// is proven the best. The first bound is kube-scheduler's greedy choice (greedy). A branch is
// cut when its set plus the cheapest undecided victim (the next in order, least in every part
// of the cost) is no better than the best, and when freeing every undecided victim too does not
// make the pod fit; a set that fits is not extended. Of identical victims only the first ones
// are taken (leaving one out leaves out those after it).
func (p *preemption) search() ([]int, bool) {
	n, gpus := len(p.vs), len(p.inv.GPUs)
	s := &bnb{p: p, order: make([]int, n), same: make([]bool, n), suf: make([][]freed, n+1),
		cur: make([]freed, gpus), tmp: make([]freed, gpus)}
	for i := range s.order {
		s.order[i] = i
	}
	slices.SortFunc(s.order, func(a, b int) int { return compareVictims(&p.vs[a], &p.vs[b], a, b) })
	for i := 1; i < n; i++ {
		s.same[i] = compareVictims(&p.vs[s.order[i]], &p.vs[s.order[i-1]], 0, 0) == 0
	}
	s.suf[n] = make([]freed, gpus)
	for i := n - 1; i >= 0; i-- {
		s.suf[i] = slices.Clone(s.suf[i+1])
		for _, c := range p.vs[s.order[i]].on {
			s.suf[i][c.gpu].add(c.u, 1)
		}
	}
	s.b = newBounds(p, s.order)
	s.bestS, s.best = s.greedy()
	s.c = noVictims()
	s.dfs(0, true)
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

// greedy is kube-scheduler's choice (defaultpreemption SelectVictimsOnNode): remove every
// victim, then reprieve the PDB violators and then the others, each highest priority first, a
// victim staying evicted only when putting it back makes the pod not fit. The pod fits with
// every victim removed (ChooseVictims checked). It returns the set and its cost.
func (s *bnb) greedy() ([]int, cost) {
	p := s.p
	rem := slices.Clone(s.suf[0])
	var set []int
	c := noVictims()
	for i := len(s.order) - 1; i >= 0; i-- { // PDB violators (last in order) first, highest priority first
		v := &p.vs[s.order[i]]
		for _, ch := range v.on {
			rem[ch.gpu].add(ch.u, -1)
		}
		if p.fits(rem) {
			continue
		}
		for _, ch := range v.on {
			rem[ch.gpu].add(ch.u, 1)
		}
		set = append(set, s.order[i])
		c = c.with(v)
	}
	return set, c
}

// fits evaluates the pod with s.cur plus what order[from:] free, within the budget.
func (s *bnb) fits(from int) bool {
	if s.evals >= fitEvals {
		s.out = true
		return false
	}
	s.evals++
	for _, g := range s.p.touched {
		s.tmp[g] = s.cur[g].plus(s.suf[from][g])
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

package allocator

import (
	"cmp"
	"math"
	"slices"

	"github.com/hami-go/hami-go/pkg/device"
)

// gpuSearch is perGPU's search on one GPU: the victims on it by priority ascending (vs), sets
// built in index order by a depth-first search, each branch bounded below (bound) by how many
// more victims it needs at least (need).
type gpuSearch struct {
	p      *preemption
	c      *device.ContainerRequest
	steps  int
	single bool // Count 1: any set found is a whole answer; prune by the best
	found  bool
	best   cost
	bestVs []int
	// the GPU being searched
	g      *device.GPU
	capMiB int64 // bookable MiB
	base   GPUUsage
	vs     []int      // indexes into p.vs, by priority ascending
	ch     []GPUUsage // ch[j]: vs[j]'s charge on the GPU
	wsum   []int64    // wsum[j]: priority weights (priority + 2^31) of vs[:j]
	clean  []int      // clean[j]: non-violators in vs[j:]
	sfx    []suffix   // sfx[j]: what vs[j:] can free
	opts   *gpuOptions
}

// amounts are MiB, cores percent and sharers.
type amounts [3]int64

// suffix is what a run of the victims on one GPU can free: the largest and the total amount of
// each resource, and how many of them hold the GPU exclusively.
type suffix struct {
	most, all amounts
	excl      int
}

// addTo extends the run by one victim's charge u.
func (f *suffix) addTo(u GPUUsage) {
	x := amounts{u.MemoryMiB, int64(u.CoresPercent), int64(u.Sharers)}
	for r := range x {
		f.most[r] = max(f.most[r], x[r])
		f.all[r] += x[r]
	}
	if u.Exclusive {
		f.excl++
	}
}

// minVictims is a lower bound on how many victims of a run (f) must go so that a GPU (g,
// capMiB bookable) with usage u takes container c by capacityRefusal's rule (Fit's): per
// resource, the shortfall over the largest amount one victim frees, and one to lift an
// exclusive hold. 0 when it takes c already; -1 when the whole run is not enough.
func minVictims(c *device.ContainerRequest, g *device.GPU, capMiB int64, split int, u GPUUsage, f *suffix) int {
	short := amounts{
		u.MemoryMiB + memOn(c, g) - capMiB,
		int64(u.CoresPercent + c.CoresPercent - 100),
		int64(u.Sharers + 1 - split),
	}
	if c.Exclusive() {
		short[2] = int64(u.Sharers)
	}
	k := int64(0)
	if u.Exclusive {
		if f.excl == 0 {
			return -1
		}
		k = 1
	}
	for r, d := range short {
		if d <= 0 {
			continue
		}
		if f.all[r] < d {
			return -1
		}
		k = max(k, (d+f.most[r]-1)/f.most[r])
	}
	return int(k)
}

// on searches the GPU at position i, whose victims are on (indexes into p.vs); false when the
// step budget ran out.
func (s *gpuSearch) on(i int, on []int) (gpuOptions, bool) {
	p := s.p
	s.g, s.capMiB, s.base = &p.inv.GPUs[i], p.inv.CapacityMiB(&p.inv.GPUs[i]), p.base[i]
	o := gpuOptions{gpu: i}
	s.vs, s.ch = append(s.vs[:0], on...), s.ch[:0]
	if o.free = minVictims(s.c, s.g, s.capMiB, p.inv.SplitCount, s.base, &suffix{}) == 0; o.free {
		return o, true
	}
	if len(s.vs) > 64 {
		return o, false
	}
	slices.SortFunc(s.vs, func(a, b int) int {
		va, vb := &p.vs[a], &p.vs[b]
		if va.prio != vb.prio {
			return cmp.Compare(va.prio, vb.prio)
		}
		if va.pdb != vb.pdb {
			if va.pdb {
				return 1
			}
			return -1
		}
		return a - b
	})
	for _, v := range s.vs {
		for _, c := range p.vs[v].on {
			if c.gpu == i {
				s.ch = append(s.ch, c.u)
			}
		}
	}
	s.prepare()
	o.vs, o.best = s.vs, make([]option, len(s.vs))
	if !s.single { // perGPU keeps every GPU's options
		o.vs = slices.Clone(s.vs)
	}
	s.opts = &o
	return o, s.dfs(0, freed{}, noVictims(), 0)
}

// prepare fills the bounds' tables for s.vs.
func (s *gpuSearch) prepare() {
	m := len(s.vs)
	s.wsum = append(s.wsum[:0], 0)
	for _, v := range s.vs {
		s.wsum = append(s.wsum, s.wsum[len(s.wsum)-1]+int64(s.p.vs[v].prio)+math.MaxInt32+1)
	}
	s.clean, s.sfx = slices.Grow(s.clean[:0], m+1)[:m+1], slices.Grow(s.sfx[:0], m+1)[:m+1]
	s.clean[m], s.sfx[m] = 0, suffix{}
	for j := m - 1; j >= 0; j-- {
		s.clean[j], s.sfx[j] = s.clean[j+1], s.sfx[j+1]
		if !s.p.vs[s.vs[j]].pdb {
			s.clean[j]++
		}
		s.sfx[j].addTo(s.ch[j])
	}
}

// need is minVictims for the GPU beside cur, from vs[j:].
func (s *gpuSearch) need(cur freed, j int) int {
	s.steps++
	return minVictims(s.c, s.g, s.capMiB, s.p.inv.SplitCount, s.base.minus(cur), &s.sfx[j])
}

// dfs extends the set mask (cost cc, freeing cur, not yet enough) by one victim vs[j], j >=
// start, in turn. A set that is enough is recorded and not extended (its supersets cost more).
// It stops at the first j whose bound (bound: k more victims at least, the cheapest k of
// vs[j:]) is no better than the best set (with single) or than a set recorded at or before
// vs[j+k-1]: later j only bound higher. False when the step budget ran out.
func (s *gpuSearch) dfs(start int, cur freed, cc cost, mask uint64) bool {
	for j := start; j < len(s.vs); j++ {
		if s.steps > gpuSteps {
			return false
		}
		k := s.need(cur, j)
		if k < 0 || s.pruned(s.bound(cc, j, k), j+k-1) {
			break
		}
		nc := cc.with(&s.p.vs[s.vs[j]])
		nf := cur
		nf.add(s.ch[j], 1)
		nm := mask | 1<<uint(j)
		if s.need(nf, j+1) == 0 {
			s.record(j, nc, nm)
			continue
		}
		if !s.dfs(j+1, nf, nc, nm) {
			return false
		}
	}
	return true
}

// bound is a lower bound, in every part, of the cost of any set that extends cc by k or more
// of vs[j:]: k more victims, the highest priority at least vs[j+k-1]'s (they come in priority
// order), the k smallest weights, and as many PDB violators as k exceeds the non-violators.
func (s *gpuSearch) bound(cc cost, j, k int) cost {
	cc.n += k
	cc.max = max(cc.max, s.p.vs[s.vs[j+k-1]].prio)
	cc.sum += s.wsum[j+k] - s.wsum[j]
	cc.pdb += max(0, k-s.clean[j])
	return cc
}

// pruned reports whether no set of cost at least lb, whose last member is vs[last] or later,
// can improve on what is found: the best (single), or a recorded set at or before vs[last]
// that is no dearer in the additive parts (it is then no worse under any priority ceiling).
func (s *gpuSearch) pruned(lb cost, last int) bool {
	if s.single && s.found && !lb.less(s.best) {
		return true
	}
	for _, b := range s.opts.best[:last+1] {
		if b.c.n > 0 && !lb.lessAdditive(b.c) {
			return true
		}
	}
	return false
}

// record notes a set that is enough, whose last member is vs[j].
func (s *gpuSearch) record(j int, c cost, mask uint64) {
	if b := &s.opts.best[j]; b.c.n == 0 || c.lessAdditive(b.c) {
		*b = option{c, mask}
	}
	if s.single && (!s.found || c.less(s.best)) {
		s.found, s.best = true, c
		s.bestVs = s.opts.members(s.bestVs[:0], mask)
	}
}

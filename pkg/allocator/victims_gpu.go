package allocator

import "slices"

// perGPU solves a pod with one GPU container, which fits exactly when Count usable GPUs (on one
// NUMA node with NUMABind) each take it by their own usage (fitsAlone's rule). Each usable GPU
// is searched alone (gpuSearch.on); with Count 1 the best set on any GPU is the answer, with
// Count > 1 (every victim on one usable GPU, so GPUs' sets are disjoint) the GPUs' sets are
// combined by combine. It returns the victims (indexes into p.vs); ok is false when the pod is
// not of that shape or the step budget ran out.
func (p *preemption) perGPU() (set []int, ok bool) {
	if len(p.req.Containers) != 1 || p.req.Containers[0].Count < 1 {
		return nil, false
	}
	k := p.req.Containers[0].Count
	if k > 1 {
		for i := range p.vs {
			if len(p.vs[i].on) != 1 {
				return nil, false
			}
		}
	}
	// byGPU[at[i]:at[i+1]] are the victims on GPU i, by index
	at := make([]int, len(p.usable)+1)
	for v := range p.vs {
		for _, c := range p.vs[v].on {
			at[c.gpu+1]++
		}
	}
	for i := range p.usable {
		at[i+1] += at[i]
	}
	byGPU, next := make([]int, at[len(p.usable)]), slices.Clone(at)
	for v := range p.vs {
		for _, c := range p.vs[v].on {
			byGPU[next[c.gpu]] = v
			next[c.gpu]++
		}
	}
	s := gpuSearch{p: p, c: &p.req.Containers[0], single: k == 1}
	var opts []gpuOptions
	for i, usable := range p.usable {
		if !usable || (k == 1 && at[i] == at[i+1]) {
			continue
		}
		o, ok := s.on(i, byGPU[at[i]:at[i+1]])
		if !ok {
			return nil, false
		}
		if k > 1 && (o.free || len(o.vs) > 0) {
			opts = append(opts, o)
		}
	}
	if k == 1 {
		return s.bestVs, s.found
	}
	return p.combine(opts, k)
}

// gpuOptions are the ways to make one usable GPU take the pod's container.
type gpuOptions struct {
	gpu  int
	free bool  // it takes the container with nothing removed
	vs   []int // the victims on the GPU (indexes into p.vs), by priority ascending
	// best[h] is the cheapest set found (cost.lessAdditive) whose last member in vs order is
	// vs[h]: under a priority ceiling T the GPU's cheapest set is the least best[h] with
	// priority(vs[h]) <= T. n == 0: none.
	best []option
}

// option is a set of the victims on one GPU (bits over gpuOptions.vs) and its cost.
type option struct {
	c    cost
	mask uint64
}

// members appends the victims of mask to dst.
func (o *gpuOptions) members(dst []int, mask uint64) []int {
	for j, v := range o.vs {
		if mask&(1<<uint(j)) != 0 {
			dst = append(dst, v)
		}
	}
	return dst
}

// plus is the cost of the union of two disjoint sets.
func (c cost) plus(d cost) cost {
	return cost{pdb: c.pdb + d.pdb, max: max(c.max, d.max), sum: c.sum + d.sum, n: c.n + d.n}
}

// combine chooses k GPUs (of one NUMA node with NUMABind) and a set on each. For each priority
// ceiling T (each priority where a GPU's cheapest set can change, ascending) it takes every GPU's cheapest set within T and
// the k cheapest GPUs (lessAdditive: PDB violations, sums and counts add up over disjoint sets,
// so the k least give the least total), and keeps the best total by Better. Exact: at T = the
// optimum's highest priority, the total is no worse than the optimum in any part.
func (p *preemption) combine(opts []gpuOptions, k int) ([]int, bool) {
	prios := p.ceilings(opts)
	numas := p.numaNodes(opts)
	cur := make([]option, len(opts)) // each GPU's cheapest set within the ceiling; n == 0: none
	ptr := make([]int, len(opts))
	for i := range ptr {
		ptr[i] = -1
	}
	type pick struct {
		oi   int // index into opts
		mask uint64
	}
	sel, best := make([]int, 0, k+1), make([]pick, 0, k)
	var bestCost cost
	found := false
	for _, t := range prios {
		p.raise(opts, cur, ptr, t)
		for _, numa := range numas {
			sel = p.cheapest(sel, opts, cur, numa, k)
			if len(sel) < k {
				continue
			}
			total := noVictims()
			for _, oi := range sel {
				total = total.plus(costAt(opts, cur, oi))
			}
			if !found || total.less(bestCost) {
				found, bestCost = true, total
				best = best[:0]
				for _, oi := range sel {
					if !opts[oi].free {
						best = append(best, pick{oi, cur[oi].mask})
					}
				}
			}
		}
	}
	if !found {
		return nil, false
	}
	var set []int
	for _, b := range best {
		set = opts[b.oi].members(set, b.mask)
	}
	return set, true
}

// ceilings are the priority ceilings combine tries, ascending and distinct: the priorities
// where some GPU's cheapest set can change.
func (p *preemption) ceilings(opts []gpuOptions) []int32 {
	var prios []int32
	for _, o := range opts {
		for h, b := range o.best {
			if b.c.n > 0 {
				prios = append(prios, p.vs[o.vs[h]].prio)
			}
		}
	}
	slices.Sort(prios)
	return slices.Compact(prios)
}

// numaNodes are the NUMA nodes combine picks GPUs within: with NUMABind those of opts' GPUs in
// order of first appearance, else one (0) that stands for all.
func (p *preemption) numaNodes(opts []gpuOptions) []int {
	numas := []int{0}
	if p.req.NUMABind {
		numas = numas[:0]
		for _, o := range opts {
			if n := p.inv.GPUs[o.gpu].NUMANode; !slices.Contains(numas, n) {
				numas = append(numas, n)
			}
		}
	}
	return numas
}

// raise lifts every GPU's cheapest set to the ceiling t: ptr[oi] advances over opts[oi].vs while
// their priority is within t, and cur[oi] takes each cheaper best set (lessAdditive) it passes.
func (p *preemption) raise(opts []gpuOptions, cur []option, ptr []int, t int32) {
	for oi := range opts {
		o := &opts[oi]
		for ptr[oi]+1 < len(o.vs) && p.vs[o.vs[ptr[oi]+1]].prio <= t {
			ptr[oi]++
			if b := o.best[ptr[oi]]; b.c.n > 0 && (cur[oi].c.n == 0 || b.c.lessAdditive(cur[oi].c)) {
				cur[oi] = b
			}
		}
	}
}

// costAt is the cost of GPU opts[oi]'s cheapest set within the ceiling (cur[oi]), or of no
// victims when it takes the container with nothing removed.
func costAt(opts []gpuOptions, cur []option, oi int) cost {
	if opts[oi].free {
		return noVictims()
	}
	return cur[oi].c
}

// cheapest refills sel (capacity k+1, so nothing is allocated) with the k cheapest GPUs
// (lessAdditive, by costAt) that take the container within the ceiling, on NUMA node numa with
// NUMABind; fewer when fewer do.
func (p *preemption) cheapest(sel []int, opts []gpuOptions, cur []option, numa, k int) []int {
	sel = sel[:0]
	for oi := range opts {
		if (!opts[oi].free && cur[oi].c.n == 0) || (p.req.NUMABind && p.inv.GPUs[opts[oi].gpu].NUMANode != numa) {
			continue
		}
		sel = append(sel, oi) // insertion, keeping the k cheapest
		for j := len(sel) - 1; j > 0 && costAt(opts, cur, sel[j]).lessAdditive(costAt(opts, cur, sel[j-1])); j-- {
			sel[j], sel[j-1] = sel[j-1], sel[j]
		}
		sel = sel[:min(len(sel), k)]
	}
	return sel
}

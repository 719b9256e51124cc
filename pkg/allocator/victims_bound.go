package allocator

import (
	"math"
	"slices"

	"github.com/hami-go/hami-go/pkg/device"
)

// bounds is the general search's lower bound, from a relaxation of Fit: every GPU container of
// the pod needs Count GPUs (of one NUMA node with NUMABind) that each take it alone beside what
// stays booked, and containers of one phase that cannot share any GPU (cliques) need distinct
// GPUs. Making one GPU take a container costs at least minVictims of its undecided victims,
// the cheapest that many of them; a set of victims that lets the pod fit costs, in every part of
// the cost, at least the Count-th least of these over the GPUs, or where every victim is on one
// usable GPU (disjoint), the sum of the Count least in the additive parts.
type bounds struct {
	p        *preemption
	runs     []gpuRun
	cliques  []clique
	disjoint bool
	grid     []gpuBound // scratch: grid[c*len(runs)+k], container c on run k (n -1: cannot)
	lbs      []gpuBound // scratch
	vals     []int64    // scratch
}

// clique is a set of the pod's containers active in one phase that pairwise cannot share any
// usable GPU even when it is empty: their GPUs are distinct, gpus of them in all.
type clique struct {
	members []int
	gpus    int
}

// gpuRun is one usable GPU's victims in the search's order, with what each tail can free.
type gpuRun struct {
	gpu    int
	capMiB int64
	pos    []int      // search positions of its victims, ascending
	vs     []int      // the victims (indexes into p.vs)
	u      []GPUUsage // their charges on it
	sfx    []suffix   // sfx[s]: what the victims at pos[s:] can free
	clean  []int      // clean[s]: non-violators among them
	// prios[off[s]:off[s+1]] are the priorities of the victims at pos[s:], ascending, and
	// wsum[off[s]+s+t] the sum of the weights (priority + 2^31) of the first t of them.
	prios []int32
	wsum  []int64
	off   []int
}

// gpuBound is a lower bound on what making one GPU take a container costs.
type gpuBound struct {
	numa int
	c    cost
}

// newBounds prepares the runs for the search order (indexes into p.vs).
func newBounds(p *preemption, order []int) *bounds {
	b := &bounds{p: p}
	at := make([]int, len(p.usable)) // GPU position -> index into runs
	for i, usable := range p.usable {
		at[i] = -1
		if usable {
			at[i] = len(b.runs)
			b.runs = append(b.runs, gpuRun{gpu: i, capMiB: p.inv.CapacityMiB(&p.inv.GPUs[i])})
		}
	}
	for q, v := range order {
		for _, c := range p.vs[v].on {
			r := &b.runs[at[c.gpu]]
			r.pos, r.vs, r.u = append(r.pos, q), append(r.vs, v), append(r.u, c.u)
		}
	}
	for k := range b.runs {
		b.runs[k].prepare(p)
	}
	b.disjoint = !slices.ContainsFunc(p.vs, func(v victim) bool { return len(v.on) > 1 })
	b.cliques = phaseCliques(p)
	b.grid = make([]gpuBound, len(p.req.Containers)*len(b.runs))
	b.lbs, b.vals = make([]gpuBound, 0, len(b.runs)), make([]int64, 0, len(b.runs))
	return b
}

// phaseCliques finds in each phase of the pod (phaseRanges) the set of containers that pairwise
// cannot share a usable GPU (sharesSome) with the most GPUs in all, where that is two or more
// containers (up to 12 per phase; more are left out).
func phaseCliques(p *preemption) []clique {
	cs := p.req.Containers
	ranges := make([]phaseRange, len(cs))
	nph := phaseRanges(len(cs), func(i int) device.ContainerKind { return cs[i].Kind }, ranges)
	var out []clique
	for ph := 0; ph < nph; ph++ {
		var act []int
		for i := range cs {
			if cs[i].Count > 0 && ranges[i].lo <= ph && ph <= ranges[i].hi {
				act = append(act, i)
			}
		}
		if len(act) < 2 || len(act) > 12 {
			continue
		}
		best := clique{}
		for mask := 1; mask < 1<<len(act); mask++ {
			q := clique{}
			ok := true
			for a := 0; a < len(act) && ok; a++ {
				if mask&(1<<a) == 0 {
					continue
				}
				for _, m := range q.members {
					if p.sharesSome(&cs[m], &cs[act[a]]) {
						ok = false
						break
					}
				}
				q.members = append(q.members, act[a])
				q.gpus += cs[act[a]].Count
			}
			if ok && len(q.members) > 1 && q.gpus > best.gpus {
				best = q
			}
		}
		if best.gpus > 0 {
			out = append(out, best)
		}
	}
	return out
}

// sharesSome reports whether containers a and b, active together, could share some usable GPU
// that nothing else books (capacityRefusal's rule).
func (p *preemption) sharesSome(a, b *device.ContainerRequest) bool {
	if a.Exclusive() || b.Exclusive() || p.inv.SplitCount < 2 || a.CoresPercent+b.CoresPercent > 100 {
		return false
	}
	for i, usable := range p.usable {
		g := &p.inv.GPUs[i]
		if usable && memOn(a, g)+memOn(b, g) <= p.inv.CapacityMiB(g) {
			return true
		}
	}
	return false
}

func (r *gpuRun) prepare(p *preemption) {
	m := len(r.pos)
	r.sfx, r.clean, r.off = make([]suffix, m+1), make([]int, m+1), make([]int, m+2)
	for s := 0; s <= m; s++ {
		r.off[s+1] = r.off[s] + m - s
	}
	r.prios, r.wsum = make([]int32, r.off[m+1]), make([]int64, r.off[m+1]+m+1)
	var sorted []int32 // priorities of the tail, ascending
	for s := m; s >= 0; s-- {
		if s < m {
			v := &p.vs[r.vs[s]]
			r.sfx[s], r.clean[s] = r.sfx[s+1], r.clean[s+1]
			r.sfx[s].addTo(r.u[s])
			if !v.pdb {
				r.clean[s]++
			}
			k, _ := slices.BinarySearch(sorted, v.prio)
			sorted = slices.Insert(sorted, k, v.prio)
		}
		copy(r.prios[r.off[s]:], sorted)
		w := r.wsum[r.off[s]+s:]
		for t, pr := range sorted {
			w[t+1] = w[t] + int64(pr) + math.MaxInt32 + 1
		}
	}
}

// lower returns a lower bound, in every part, on the cost of any set of the victims at search
// positions >= i that, removed beside cur (by GPU), lets the pod fit; false when none can.
func (b *bounds) lower(cur []freed, i int) (cost, bool) {
	p := b.p
	nr := len(b.runs)
	for k := range b.runs {
		r := &b.runs[k]
		g := &p.inv.GPUs[r.gpu]
		s, _ := slices.BinarySearch(r.pos, i)
		u := p.base[r.gpu].minus(cur[r.gpu])
		for ci := range p.req.Containers {
			gb := gpuBound{numa: g.NUMANode, c: cost{n: -1}}
			if c := &p.req.Containers[ci]; c.Count > 0 {
				t := minVictims(c, g, r.capMiB, p.inv.SplitCount, u, &r.sfx[s])
				switch {
				case t == 0:
					gb.c = noVictims()
				case t > 0:
					gb.c = cost{pdb: max(0, t-r.clean[s]), max: r.prios[r.off[s]+t-1], sum: r.wsum[r.off[s]+s+t], n: t}
				}
			}
			b.grid[ci*nr+k] = gb
		}
	}
	lb := noVictims()
	for ci := range p.req.Containers {
		c := &p.req.Containers[ci]
		if c.Count <= 0 {
			continue
		}
		b.lbs = b.lbs[:0]
		for _, gb := range b.grid[ci*nr : (ci+1)*nr] {
			if gb.c.n >= 0 {
				b.lbs = append(b.lbs, gb)
			}
		}
		x, ok := b.least(c.Count, p.req.NUMABind && c.Count > 1)
		if !ok {
			return cost{}, false
		}
		lb = lb.atLeast(x)
	}
	for _, q := range b.cliques {
		b.lbs = b.lbs[:0]
		for k := range b.runs {
			gb := gpuBound{c: cost{n: -1}}
			for _, ci := range q.members {
				if x := b.grid[ci*nr+k]; x.c.n >= 0 {
					if gb.c.n < 0 {
						gb = x
					} else {
						gb.c = gb.c.atMost(x.c)
					}
				}
			}
			if gb.c.n >= 0 {
				b.lbs = append(b.lbs, gb)
			}
		}
		x, ok := b.kth(q.gpus, false, 0)
		if !ok {
			return cost{}, false
		}
		lb = lb.atLeast(x)
	}
	return lb, true
}

// least is the bound of count GPUs out of b.lbs (kth; within one NUMA node when bind, the
// least over nodes); false when too few GPUs (on any one node) qualify.
func (b *bounds) least(count int, bind bool) (cost, bool) {
	if !bind {
		return b.kth(count, false, 0)
	}
	var best cost
	found := false
	for i, x := range b.lbs {
		if slices.ContainsFunc(b.lbs[:i], func(y gpuBound) bool { return y.numa == x.numa }) {
			continue // node done
		}
		if c, ok := b.kth(count, true, x.numa); ok {
			if !found {
				best = c
			} else {
				best = best.atMost(c)
			}
			found = true
		}
	}
	return best, found
}

// kth bounds the cost of count distinct GPUs of b.lbs (of NUMA node numa when bind), in every
// part: the count-th least, or with disjoint victims the sum of the count least in the
// additive parts (PDB violations, sum, number). False when fewer GPUs qualify.
func (b *bounds) kth(count int, bind bool, numa int) (cost, bool) {
	var out [4]int64
	for part := range out {
		b.vals = b.vals[:0]
		for _, x := range b.lbs {
			if bind && x.numa != numa {
				continue
			}
			b.vals = append(b.vals, [4]int64{int64(x.c.pdb), int64(x.c.max), x.c.sum, int64(x.c.n)}[part])
		}
		if len(b.vals) < count {
			return cost{}, false
		}
		if count == 1 {
			out[part] = slices.Min(b.vals)
			continue
		}
		slices.Sort(b.vals)
		out[part] = b.vals[count-1]
		if b.disjoint && part != 1 {
			out[part] = 0
			for _, v := range b.vals[:count] {
				out[part] += v
			}
		}
	}
	return cost{pdb: int(out[0]), max: int32(out[1]), sum: out[2], n: int(out[3])}, true
}

// atLeast is the larger of c and d in every part; atMost the smaller.
func (c cost) atLeast(d cost) cost {
	return cost{pdb: max(c.pdb, d.pdb), max: max(c.max, d.max), sum: max(c.sum, d.sum), n: max(c.n, d.n)}
}

func (c cost) atMost(d cost) cost {
	return cost{pdb: min(c.pdb, d.pdb), max: min(c.max, d.max), sum: min(c.sum, d.sum), n: min(c.n, d.n)}
}

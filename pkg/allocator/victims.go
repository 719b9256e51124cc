package allocator

import (
	"maps"
	"math"
	"slices"

	"github.com/hami-go/hami-go/pkg/device"
)

// Victim is a running pod that preemption may evict on one node.
type Victim struct {
	// Charge is what the pod books on this node, by GPU UUID (ChargeOf its allocation).
	Charge Charge
	// Priority is the pod's priority (spec.priority).
	Priority int32
	// ViolatesPDB is true when evicting the pod would violate a PodDisruptionBudget, as
	// kube-scheduler computes it (preemption.FilterVictimsWithPDBViolation).
	ViolatesPDB bool
}

// VictimChoice is which victims to evict on one node, and what that costs.
type VictimChoice struct {
	// Victims are indexes into the candidates given to ChooseVictims, ascending.
	Victims []int
	// PDBViolations is the number of Victims with ViolatesPDB.
	PDBViolations int
	// MaxPriority is the highest priority among Victims; math.MinInt32 when there are none.
	MaxPriority int32
	// SumPriority is the sum over Victims of priority + 2^31, kube-scheduler's rule
	// (pickOneNodeForPreemption adds MaxInt32+1 to every priority so that each victim adds a
	// non-negative amount and a few victims of negative priority never beat fewer victims).
	SumPriority int64
	// Exact is true when the choice is proven the best by Better among all sets of candidates
	// that make the pod fit; false when ChooseVictims's search budget ran out and the choice is
	// the best it found (never worse than kube-scheduler's own greedy choice).
	Exact bool
}

// Better reports whether a is preferable to b. It is kube-scheduler's order of nodes for
// preemption (pkg/scheduler/framework/preemption, pickOneNodeForPreemption) applied to victim
// sets: fewer PDB violations, then a lower highest victim priority, then a smaller SumPriority,
// then fewer victims. (kube-scheduler's last tie-break, the latest start time, is left out: the
// choices tie.) Victims' indexes and Exact are not compared.
func (a VictimChoice) Better(b VictimChoice) bool {
	return costOf(a).less(costOf(b))
}

// Search budgets: past them ChooseVictims gives the best choice found so far (Exact false).
const (
	// gpuSteps bounds the per-GPU search (capacity checks of one GPU, a few ns each).
	gpuSteps = 1 << 16
	// searchSteps bounds the general search: its Fit evaluations of the node and its bound
	// computations (bounds.lower), about a microsecond each.
	searchSteps = 4096
)

// ChooseVictims returns the cheapest set of candidates, in the order of VictimChoice.Better, whose
// removal from used (NodeUsage.Sub of their charges) lets req fit (Fit returns nil), exact per
// GPU (memory in MiB, cores percent, sharers, exclusive holders). ok is false, with an empty
// choice, when even removing all candidates does not make req fit (kube-scheduler's test too);
// with req already fitting it returns an empty choice and ok true. The choice is minimal:
// putting back any one victim makes req not fit. Candidates must already be filtered by the
// caller (lower priority than the preemptor, not terminating); a candidate whose charge touches
// no GPU req could use (unhealthy, MIG, excluded by the pod's filters, or not in inv) is never
// chosen. cands and used are not modified.
//
// A pod with one GPU container is solved per GPU, since such a container fits on a GPU by that
// GPU's usage alone (perGPU): on each GPU, a depth-first search over the candidates on it by
// priority, bounded below by how many of them must go at least, finds the cheapest sets that
// make room; with Count > 1 (when each candidate is on one usable GPU) the sets of Count GPUs
// (of one NUMA node with NUMABind) are combined under each priority ceiling. Any other request
// (several GPU containers, or candidates on several GPUs under a multi-GPU container) runs a
// branch and bound over the candidates, cheapest first (search), from kube-scheduler's greedy
// choice (SelectVictimsOnNode: remove all, put back the PDB violators and then the others,
// highest priority first, while the pod fits), bounded by a relaxation of Fit (bounds) and
// cut where removing every undecided candidate still does not fit.
//
// Exactness (VictimChoice.Exact): the per-GPU search is exact unless it exceeds gpuSteps (or a
// GPU has more than 64 candidates), in practice never; the general search then runs. The
// general search is exact unless it exceeds its searchSteps; it then returns the best set found,
// made minimal, never worse than the greedy choice (a few ms; BenchmarkChooseVictims). On
// fragmented nodes of split count 10 (BenchmarkChooseVictims) it is exact at 8 GPUs with
// candidates on two GPUs under a 2-GPU container; at 16 GPUs with those, and for two GPU
// containers at 8 or 16 GPUs, the budget runs out (the best found there matched the optimum).
// Exactness is relative to Fit, and the cut by "removing every undecided candidate" relies on
// Fit being monotone in usage: it is, for pods of several GPU containers too, as far as Fit's
// placement search reaches (placeSearchSteps; beyond it Fit may refuse a pod that fits, and the
// cut may then miss a cheaper set).
func ChooseVictims(inv *device.Inventory, used NodeUsage, cands []Victim, req *device.PodRequest) (VictimChoice, bool) {
	none := VictimChoice{MaxPriority: math.MinInt32, Exact: true}
	if fitsQuietly(inv, used, req) {
		return none, true
	}
	p := newPreemption(inv, used, cands, req)
	if p == nil || !p.fits(p.all) {
		return none, false
	}
	if set, ok := p.perGPU(); ok {
		return p.choice(set, true), true
	}
	set, exact := p.search()
	return p.choice(set, exact), true
}

// cost is a victim set's rank under VictimChoice.Better.
type cost struct {
	pdb int
	max int32
	sum int64
	n   int
}

// noVictims is the cost of no victims.
func noVictims() cost { return cost{max: math.MinInt32} }

func costOf(c VictimChoice) cost {
	return cost{pdb: c.PDBViolations, max: c.MaxPriority, sum: c.SumPriority, n: len(c.Victims)}
}

// with is the cost of the set plus victim v (not in it).
func (c cost) with(v *victim) cost {
	c.n++
	c.max = max(c.max, v.prio)
	c.sum += int64(v.prio) + math.MaxInt32 + 1
	if v.pdb {
		c.pdb++
	}
	return c
}

// less is Better's order.
func (c cost) less(d cost) bool {
	switch {
	case c.pdb != d.pdb:
		return c.pdb < d.pdb
	case c.max != d.max:
		return c.max < d.max
	case c.sum != d.sum:
		return c.sum < d.sum
	}
	return c.n < d.n
}

// lessAdditive orders by the additive parts of the cost first (PDB violations, SumPriority,
// count), then by the highest priority: the order under a priority ceiling, where costs of
// disjoint sets add up.
func (c cost) lessAdditive(d cost) bool {
	switch {
	case c.pdb != d.pdb:
		return c.pdb < d.pdb
	case c.sum != d.sum:
		return c.sum < d.sum
	case c.n != d.n:
		return c.n < d.n
	}
	return c.max < d.max
}

// freed is what removed victims release on one GPU: sums of their charges there.
type freed struct {
	mem     int64
	cores   int
	sharers int
	excl    int // victims holding the GPU exclusively
}

func (f *freed) add(u GPUUsage, sign int) {
	f.mem += int64(sign) * u.MemoryMiB
	f.cores += sign * u.CoresPercent
	f.sharers += sign * u.Sharers
	if u.Exclusive {
		f.excl += sign
	}
}

func (f freed) plus(g freed) freed {
	return freed{f.mem + g.mem, f.cores + g.cores, f.sharers + g.sharers, f.excl + g.excl}
}

// minus is u after NodeUsage.Sub of the freed charges: each field never below zero, Exclusive
// cleared when a removed victim held the GPU exclusively.
func (u GPUUsage) minus(f freed) GPUUsage {
	return GPUUsage{
		MemoryMiB:    max(u.MemoryMiB-f.mem, 0),
		CoresPercent: max(u.CoresPercent-f.cores, 0),
		Sharers:      max(u.Sharers-f.sharers, 0),
		Exclusive:    u.Exclusive && f.excl == 0,
	}
}

// victim is a candidate that touches a GPU the request could use.
type victim struct {
	idx  int // index into the caller's candidates
	prio int32
	pdb  bool
	on   []gpuCharge // its charge on usable GPUs, by GPU position ascending
}

// gpuCharge is a victim's charge on the GPU at position gpu of the inventory.
type gpuCharge struct {
	gpu int
	u   GPUUsage
}

// preemption is one ChooseVictims problem. Per-GPU arrays are indexed by GPU position.
type preemption struct {
	inv     *device.Inventory
	req     *device.PodRequest
	usable  []bool     // GPUs the request could use (staticRefusal passes)
	base    []GPUUsage // used, by GPU
	touched []int      // usable GPUs some victim touches, ascending
	vs      []victim
	all     []freed // what removing every victim frees
	work    NodeUsage
}

// newPreemption prepares the problem; nil when the node cannot host GPU pods at all.
func newPreemption(inv *device.Inventory, used NodeUsage, cands []Victim, req *device.PodRequest) *preemption {
	if inv == nil || len(inv.GPUs) == 0 || inv.SplitCount < 1 || req == nil {
		return nil
	}
	n := len(inv.GPUs)
	p := &preemption{inv: inv, req: req, usable: make([]bool, n), base: make([]GPUUsage, n), all: make([]freed, n)}
	pos := make(map[string]int, n)
	var mc modelCache
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		p.base[i] = used[g.UUID]
		if staticRefusal(g, req, &mc) == refOK {
			p.usable[i] = true
			pos[g.UUID] = i
		}
	}
	// every victim's charges in one array: buf[ends[v-1]:ends[v]] are p.vs[v]'s
	buf, ends := make([]gpuCharge, 0, len(cands)), make([]int, 0, len(cands))
	p.vs = make([]victim, 0, len(cands))
	for k := range cands {
		start := len(buf)
		for uuid, u := range cands[k].Charge {
			if i, ok := pos[uuid]; ok && u != (GPUUsage{}) {
				buf = append(buf, gpuCharge{i, u})
			}
		}
		if len(buf) == start {
			continue
		}
		slices.SortFunc(buf[start:], func(a, b gpuCharge) int { return a.gpu - b.gpu })
		p.vs = append(p.vs, victim{idx: k, prio: cands[k].Priority, pdb: cands[k].ViolatesPDB})
		ends = append(ends, len(buf))
		for _, c := range buf[start:] {
			p.all[c.gpu].add(c.u, 1)
		}
	}
	for v := range p.vs {
		start := 0
		if v > 0 {
			start = ends[v-1]
		}
		p.vs[v].on = buf[start:ends[v]:ends[v]]
	}
	for i := range p.all {
		if p.all[i] != (freed{}) {
			p.touched = append(p.touched, i)
		}
	}
	p.work = maps.Clone(used)
	if p.work == nil {
		p.work = NodeUsage{}
	}
	return p
}

// fits reports whether req fits once rem (by GPU) is freed.
func (p *preemption) fits(rem []freed) bool {
	for _, i := range p.touched {
		p.work[p.inv.GPUs[i].UUID] = p.base[i].minus(rem[i])
	}
	return fitsQuietly(p.inv, p.work, p.req)
}

// fitsQuietly is Fit == nil without building Fit's reason (which allocates): the searches
// evaluate many removals that do not fit. It takes Fit's steps.
func fitsQuietly(inv *device.Inventory, used NodeUsage, req *device.PodRequest) bool {
	if req == nil || len(req.Containers) == 0 || (inv != nil && len(req.Containers) == 1 && fitsAlone(inv, used, req)) {
		return true
	}
	var sc scratch
	st, bad := newState(&sc, inv, used, req)
	return bad == "" && st.place() < 0
}

// choice turns a set of victims (indexes into p.vs) into the caller's VictimChoice.
func (p *preemption) choice(set []int, exact bool) VictimChoice {
	c := noVictims()
	out := make([]int, 0, len(set))
	for _, v := range set {
		c = c.with(&p.vs[v])
		out = append(out, p.vs[v].idx)
	}
	slices.Sort(out)
	return VictimChoice{Victims: out, PDBViolations: c.pdb, MaxPriority: c.max, SumPriority: c.sum, Exact: exact}
}

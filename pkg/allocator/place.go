package allocator

import (
	"github.com/hami-go/hami-go/pkg/device"
)

// refusal says why one GPU cannot take one container; refOK means it can. The reason text is
// built from it only when a pod does not fit (reason.go).
type refusal uint8

const (
	refOK refusal = iota
	refUnhealthy
	refMIG
	refUUIDDenied
	refUUIDNotAllowed
	refModel
	refExclusiveHeld // someone holds the GPU exclusively
	refNotEmpty      // the container wants the GPU exclusively, but it is shared
	refSlices
	refMemory
	refCores
)

// slot is one GPU of the node during a placement.
type slot struct {
	g      *device.GPU
	capMiB int64
	// used is what other pods book (the caller's NodeUsage).
	used GPUUsage
	// charge is what the pod being placed books so far (max over its phases).
	charge GPUUsage
	// static is the refusal that holds for every container (health, MIG, pod filters).
	static refusal
	// peers is the NVLink adjacency as a bit set over slot positions (nodes up to 64 GPUs).
	peers uint64
}

// Sizes of the stack buffers that keep Fit free of heap allocations on common nodes and pods.
const (
	stackGPUs       = 16
	stackContainers = 8
	stackSums       = 48
	stackChosen     = 32
)

// scratch holds the stack buffers of one placement. It is declared in Fit, Score and Pick and
// passed down by pointer, so it stays on the caller's stack.
type scratch struct {
	slots  [stackGPUs]slot
	ranges [stackContainers]phaseRange
	sums   [stackSums]usageSum
	chosen [stackChosen]int
	off    [stackContainers + 1]int
	order  [stackContainers]int
	cands  [stackGPUs]int
}

// state is one placement of one pod on one node.
type state struct {
	req   *device.PodRequest
	split int
	slots []slot
	// ranges[i] is the phase range of req.Containers[i].
	ranges []phaseRange
	nph    int
	// sums[p*len(slots)+s] is what the pod's containers of phase p book on slot s.
	sums []usageSum
	// chosen[off[i]:off[i+1]] are the slot positions container i got, in the policy's order.
	chosen   []int
	off      []int
	order    []int
	cands    []int
	peersSet bool
}

// newState prepares a placement. It returns a non-empty reason when the node cannot host the
// pod at all (no inventory, no GPUs, a broken split count).
func newState(sc *scratch, inv *device.Inventory, used NodeUsage, req *device.PodRequest) (state, string) {
	st := state{req: req}
	if inv == nil {
		return st, "node has no GPU inventory"
	}
	if len(inv.GPUs) == 0 {
		return st, "node has no GPUs"
	}
	if inv.SplitCount < 1 {
		return st, "node inventory has splitCount " + itoa(inv.SplitCount)
	}
	st.split = inv.SplitCount
	n := len(inv.GPUs)
	if n <= stackGPUs {
		st.slots = sc.slots[:n]
		st.cands = sc.cands[:0]
	} else {
		st.slots = make([]slot, n)
		st.cands = make([]int, 0, n)
	}
	nc := len(req.Containers)
	if nc <= stackContainers {
		st.ranges = sc.ranges[:nc]
		st.off = sc.off[:nc+1]
		st.order = sc.order[:nc]
	} else {
		st.ranges = make([]phaseRange, nc)
		st.off = make([]int, nc+1)
		st.order = make([]int, nc)
	}
	st.nph = phaseRanges(nc, func(i int) device.ContainerKind { return req.Containers[i].Kind }, st.ranges)
	if k := st.nph * n; k <= stackSums {
		st.sums = sc.sums[:k]
	} else {
		st.sums = make([]usageSum, k)
	}
	total := 0
	for i := range req.Containers {
		st.off[i] = total
		if c := req.Containers[i].Count; c > 0 && c <= n {
			total += c
		}
	}
	st.off[nc] = total
	if total <= stackChosen {
		st.chosen = sc.chosen[:total]
	} else {
		st.chosen = make([]int, total)
	}

	var mc modelCache
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		st.slots[i] = slot{g: g, capMiB: inv.CapacityMiB(g), used: used[g.UUID], static: staticRefusal(g, req, &mc)}
	}
	return st, ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// reset forgets the pod's placement so far.
func (st *state) reset() {
	for i := range st.slots {
		st.slots[i].charge = GPUUsage{}
	}
	clear(st.sums)
}

// memOn is the MiB container c books on GPU g: device.ContainerRequest.MemoryOn (its MiB, or its
// percentage of g's memory rounded up, case C08; 100% when it gives neither).
func memOn(c *device.ContainerRequest, g *device.GPU) int64 { return c.MemoryOn(g.MemoryMiB) }

// phaseMax is the largest booking of the pod on slot si over the phases of range r.
func (st *state) phaseMax(si int, r phaseRange) usageSum {
	var m usageSum
	n := len(st.slots)
	for p := r.lo; p <= r.hi; p++ {
		x := &st.sums[p*n+si]
		m.mem = max(m.mem, x.mem)
		m.cores = max(m.cores, x.cores)
		m.sharers = max(m.sharers, x.sharers)
		m.excl = m.excl || x.excl
	}
	return m
}

// check reports whether slot si can take container ci beside what is booked and what the pod
// placed so far (capacityRefusal).
func (st *state) check(si, ci int) refusal {
	s := &st.slots[si]
	if s.static != refOK {
		return s.static
	}
	return capacityRefusal(&st.req.Containers[ci], s.g, s.capMiB, st.split, s.used, s.charge, st.phaseMax(si, st.ranges[ci]))
}

// capacityRefusal is the one capacity rule: can a GPU g (capMiB bookable, split count split),
// on which other pods book used and the pod being placed books charge (phaseMax m in the phases
// of container c), take c? Sharers <= split, MiB <= capMiB, cores <= 100; an exclusive container
// (100% cores) only where nobody else is in its phases, and nobody joins an exclusive one.
func capacityRefusal(c *device.ContainerRequest, g *device.GPU, capMiB int64, split int, used, charge GPUUsage, m usageSum) refusal {
	if used.Exclusive || m.excl {
		return refExclusiveHeld
	}
	if c.Exclusive() && (used.Sharers > 0 || m.sharers > 0) {
		return refNotEmpty
	}
	if used.Sharers+max(charge.Sharers, m.sharers+1) > split {
		return refSlices
	}
	if used.MemoryMiB+max(charge.MemoryMiB, m.mem+memOn(c, g)) > capMiB {
		return refMemory
	}
	if used.CoresPercent+max(charge.CoresPercent, m.cores+c.CoresPercent) > 100 {
		return refCores
	}
	return refOK
}

// modelCache remembers the last model ModelAllowed judged (a node's GPUs are mostly one model).
type modelCache struct {
	model   string
	set     bool
	allowed bool
}

// staticRefusal is what holds for every container of the pod on g: health, MIG mode, the UUID
// allow/deny lists (exact) and the model allow/deny lists (device.ModelAllowed, case C06).
func staticRefusal(g *device.GPU, req *device.PodRequest, mc *modelCache) refusal {
	switch {
	case !g.Healthy:
		return refUnhealthy
	case g.MIGEnabled:
		return refMIG
	case contains(req.AvoidUUIDs, g.UUID):
		return refUUIDDenied
	case len(req.UseUUIDs) > 0 && !contains(req.UseUUIDs, g.UUID):
		return refUUIDNotAllowed
	case len(req.UseModels) > 0 || len(req.AvoidModels) > 0:
		if !mc.set || mc.model != g.Model {
			*mc = modelCache{model: g.Model, set: true, allowed: device.ModelAllowed(req.UseModels, req.AvoidModels, g.Model)}
		}
		if !mc.allowed {
			return refModel
		}
	}
	return refOK
}

// fitsAlone is Fit's fast path for a pod with one GPU container: nothing of the pod accumulates,
// so the container fits exactly when Count GPUs pass capacityRefusal against the booked usage
// (on one NUMA node with NUMABind: chooseSet's rule). It needs no scratch state. It reports false
// also when it cannot decide cheaply; Fit then runs the full placement.
func fitsAlone(inv *device.Inventory, used NodeUsage, req *device.PodRequest) bool {
	c := &req.Containers[0]
	n := c.Count
	if n <= 0 {
		return true
	}
	if n > len(inv.GPUs) || inv.SplitCount < 1 || (req.NUMABind && n > 1 && len(inv.GPUs) > stackGPUs) {
		return false
	}
	var mc modelCache
	var numas [stackGPUs]int
	found := 0
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if staticRefusal(g, req, &mc) != refOK ||
			capacityRefusal(c, g, inv.CapacityMiB(g), inv.SplitCount, used[g.UUID], GPUUsage{}, usageSum{}) != refOK {
			continue
		}
		if !req.NUMABind || n == 1 {
			if found++; found >= n {
				return true
			}
			continue
		}
		numas[found] = g.NUMANode
		found++
		same := 0
		for _, x := range numas[:found] {
			if x == g.NUMANode {
				same++
			}
		}
		if same >= n {
			return true
		}
	}
	return false
}

// apply books container ci on slot si.
func (st *state) apply(si, ci int) {
	c := &st.req.Containers[ci]
	s := &st.slots[si]
	r := st.ranges[ci]
	mem := memOn(c, s.g)
	n := len(st.slots)
	for p := r.lo; p <= r.hi; p++ {
		x := &st.sums[p*n+si]
		x.add(mem, c.CoresPercent, c.Exclusive())
		s.charge.raise(*x)
	}
}

// fullness orders GPUs for the policies: booked memory and booked slices, per mille each, of
// what the GPU offers (after the pod's placement so far).
func (st *state) fullness(si int) int64 {
	s := &st.slots[si]
	f := int64(s.used.Sharers+s.charge.Sharers) * 1000 / int64(st.split)
	if s.capMiB > 0 {
		f += (s.used.MemoryMiB + s.charge.MemoryMiB) * 1000 / s.capMiB
	}
	return f
}

// before reports whether slot a comes before slot b under policy p: binpack the fullest first,
// spread the emptiest first, ties by index.
func (st *state) before(p device.Policy, a, b int) bool {
	fa, fb := st.fullness(a), st.fullness(b)
	if fa != fb {
		if p == device.Spread {
			return fa < fb
		}
		return fa > fb
	}
	return a < b
}

// placeAll places the containers in the given order under GPU policy p. It returns -1 when every
// container got its GPUs, else the index of the first container that did not.
func (st *state) placeAll(order []int, p device.Policy) int {
	for _, ci := range order {
		if !st.placeOne(ci, p) {
			return ci
		}
	}
	return -1
}

// placeOne chooses and books container ci's GPUs.
func (st *state) placeOne(ci int, p device.Policy) bool {
	c := &st.req.Containers[ci]
	if c.Count <= 0 {
		return true
	}
	if c.Count > len(st.slots) {
		return false
	}
	out := st.chosen[st.off[ci]:st.off[ci+1]]
	if c.Count == 1 {
		best := -1
		for si := range st.slots {
			if st.check(si, ci) == refOK && (best < 0 || st.before(p, si, best)) {
				best = si
			}
		}
		if best < 0 {
			return false
		}
		out[0] = best
		st.apply(best, ci)
		return true
	}
	cands := st.cands[:0]
	for si := range st.slots {
		if st.check(si, ci) != refOK {
			continue
		}
		cands = append(cands, si) // insertion into policy order
		for j := len(cands) - 1; j > 0 && st.before(p, cands[j], cands[j-1]); j-- {
			cands[j], cands[j-1] = cands[j-1], cands[j]
		}
	}
	if len(cands) < c.Count || !st.chooseSet(cands, c.Count, out) {
		return false
	}
	for _, si := range out {
		st.apply(si, ci)
	}
	return true
}

// place runs the placement: containers in request order under the pod's GPU policy; when that
// fails for a pod with several GPU containers, once more with the largest containers first,
// binpacked, and then by search (every GPU set of every container, bounded by placeSearchSteps). It
// returns -1 on success, else the container that failed in the first attempt; the state is then
// left as the first attempt left it, for the reason.
func (st *state) place() int {
	for i := range st.order {
		st.order[i] = i
	}
	p := st.req.GPUPolicy
	failed := st.placeAll(st.order, p)
	if failed < 0 || len(st.order) < 2 {
		return failed
	}
	st.reset()
	st.sortLargestFirst()
	if st.placeAll(st.order, device.Binpack) < 0 || st.search() {
		return -1
	}
	st.reset()
	for i := range st.order {
		st.order[i] = i
	}
	return st.placeAll(st.order, p)
}

// sortLargestFirst orders containers for the second attempt: exclusive first, then by GPU count,
// then by memory (MiB, or percent of the largest GPU), stable.
func (st *state) sortLargestFirst() {
	var biggest int64
	for i := range st.slots {
		biggest = max(biggest, st.slots[i].g.MemoryMiB)
	}
	less := func(a, b int) bool {
		ca, cb := &st.req.Containers[a], &st.req.Containers[b]
		if ca.Exclusive() != cb.Exclusive() {
			return ca.Exclusive()
		}
		if ca.Count != cb.Count {
			return ca.Count > cb.Count
		}
		return ca.MemoryOn(biggest) > cb.MemoryOn(biggest)
	}
	o := st.order
	for i := 1; i < len(o); i++ {
		for j := i; j > 0 && less(o[j], o[j-1]); j-- {
			o[j], o[j-1] = o[j-1], o[j]
		}
	}
}

package allocator

// placeSearchSteps bounds search, place's last attempt: the GPU sets it books over all containers of
// one pod on one node. Small nodes and pods never reach it (4 GPUs and 4 containers of up to 3
// GPUs each take at most 6^4 = 1296 sets, C(4,2) per container); it bounds the cost of a refused pod of many
// multi-GPU containers on a large node (BenchmarkFitSearch).
const placeSearchSteps = 4096

// search is place's last attempt for a pod of several GPU containers, after both greedy orders
// failed: a depth-first search over the GPU sets of every container (largest container first),
// booking a set, then the next container's sets beside it. GPUs that are alike for every later
// check (sameForFit) are interchangeable, so it tries one set per choice of how many GPUs to take
// from each group of alike GPUs. It finds a placement whenever one exists within
// placeSearchSteps, so that Fit refuses such a pod only when no placement exists (greedy
// placement is not complete: TestC03SearchFindsWhatGreedyMisses). It reports whether it found one;
// the state then holds it, else the state is reset.
func (st *state) search() bool {
	st.reset()
	st.sortLargestFirst()
	steps := placeSearchSteps
	if st.searchFrom(0, &steps) {
		return true
	}
	st.reset()
	return false
}

// searchFrom books the containers st.order[k:] beside what is booked; it undoes its own bookings
// when it fails. steps counts the sets booked, over the whole search.
func (st *state) searchFrom(k int, steps *int) bool {
	if k == len(st.order) {
		return true
	}
	ci := st.order[k]
	c := &st.req.Containers[ci]
	if c.Count <= 0 {
		return st.searchFrom(k+1, steps)
	}
	if c.Count > len(st.slots) {
		return false
	}
	// groups of alike candidates, each in slot order
	var groups [][]int
	n := 0
	for si := range st.slots {
		if st.check(si, ci) != refOK {
			continue
		}
		n++
		found := false
		for g := range groups {
			if st.sameForFit(groups[g][0], si) {
				groups[g] = append(groups[g], si)
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, []int{si})
		}
	}
	if n < c.Count {
		return false
	}
	out := st.chosen[st.off[ci]:st.off[ci+1]:st.off[ci+1]]
	saved := st.save()
	// take[g] GPUs from group g, the first ones; enumerated as counts with sum c.Count
	take := make([]int, len(groups))
	var try func(g, left int) bool
	try = func(g, left int) bool {
		if left == 0 {
			if *steps <= 0 {
				return false
			}
			*steps--
			out = out[:0]
			for x, t := range take {
				out = append(out, groups[x][:t]...)
			}
			if st.req.NUMABind && c.Count > 1 && !st.oneNUMA(out) {
				return false
			}
			for _, si := range out {
				st.apply(si, ci)
			}
			if st.searchFrom(k+1, steps) {
				return true
			}
			st.restore(saved)
			return false
		}
		if g == len(groups) {
			return false
		}
		for t := min(left, len(groups[g])); t >= 0; t-- {
			take[g] = t
			if try(g+1, left-t) {
				return true
			}
			if *steps <= 0 {
				return false
			}
		}
		take[g] = 0
		return false
	}
	return try(0, c.Count)
}

// sameForFit reports whether slots a and b are alike for every check of the rest of the pod:
// same memory size and bookable MiB, same booked usage, same bookings of the pod in every phase,
// and, with NUMABind, the same NUMA node. (Both passed the pod-wide static checks.)
func (st *state) sameForFit(a, b int) bool {
	x, y := &st.slots[a], &st.slots[b]
	if x.g.MemoryMiB != y.g.MemoryMiB || x.capMiB != y.capMiB || x.used != y.used || x.charge != y.charge ||
		(st.req.NUMABind && x.g.NUMANode != y.g.NUMANode) {
		return false
	}
	n := len(st.slots)
	for p := 0; p < st.nph; p++ {
		if st.sums[p*n+a] != st.sums[p*n+b] {
			return false
		}
	}
	return true
}

// placedSoFar is what a placement has booked so far: each slot's charge and the per-phase sums.
type placedSoFar struct {
	charge []GPUUsage
	sums   []usageSum
}

// save copies what is booked, for restore.
func (st *state) save() placedSoFar {
	b := placedSoFar{charge: make([]GPUUsage, len(st.slots)), sums: append([]usageSum(nil), st.sums...)}
	for i := range st.slots {
		b.charge[i] = st.slots[i].charge
	}
	return b
}

// restore books exactly what b saved.
func (st *state) restore(b placedSoFar) {
	for i := range st.slots {
		st.slots[i].charge = b.charge[i]
	}
	copy(st.sums, b.sums)
}

// oneNUMA reports whether the slots of set share one NUMA node (unknown, -1, counts as one
// node), chooseSet's rule for req.NUMABind.
func (st *state) oneNUMA(set []int) bool {
	for _, si := range set[1:] {
		if st.slots[si].g.NUMANode != st.slots[set[0]].g.NUMANode {
			return false
		}
	}
	return true
}

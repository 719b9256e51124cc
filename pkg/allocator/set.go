package allocator

// maxCombinations bounds the sets chooseSet compares for one multi-GPU container. The first set
// it looks at is always the policy's own first n GPUs, so a bound only costs topology quality.
const maxCombinations = 4096

// Topology tiers of a GPU set, lower is better: fully NVLink-connected and on one NUMA node (0),
// NVLink only (1), one NUMA node only (2), neither (3).
const (
	tierNoNVLink = 2
	tierNoNUMA   = 1
)

// noNUMA is firstNUMAWith's "no NUMA node has enough GPUs" (real values are >= -1).
const noNUMA = -2

// loadPeers fills every slot's NVLink bit set (once per placement). Links are taken as symmetric:
// a link either GPU reports counts. Nodes of more than 64 GPUs get no NVLink preference.
func (st *state) loadPeers() {
	if st.peersSet {
		return
	}
	st.peersSet = true
	if len(st.slots) > 64 {
		return
	}
	for i := range st.slots {
		for _, u := range st.slots[i].g.NVLinkPeers {
			for j := range st.slots {
				if j != i && st.slots[j].g.UUID == u {
					st.slots[i].peers |= 1 << uint(j)
					st.slots[j].peers |= 1 << uint(i)
				}
			}
		}
	}
}

// tier rates a set of slot positions (see tierNoNVLink, tierNoNUMA).
func (st *state) tier(set []int) int {
	t := 0
	numa := st.slots[set[0]].g.NUMANode
	for _, si := range set[1:] {
		if st.slots[si].g.NUMANode != numa {
			t += tierNoNUMA
			break
		}
	}
	for i, a := range set {
		for _, b := range set[i+1:] {
			if st.slots[a].peers&(1<<uint(b)) == 0 {
				return t + tierNoNVLink
			}
		}
	}
	return t
}

// chooseSet picks n of cands (slot positions in policy order) into out: the best topology tier,
// and among equal tiers the set that comes first in policy order (lexicographically). With
// req.NUMABind only sets on one NUMA node qualify (GPUs whose NUMA node is unknown, -1, count as
// one node). It reports false when no set qualifies.
func (st *state) chooseSet(cands []int, n int, out []int) bool {
	st.loadPeers()
	bind := st.req.NUMABind
	numa := st.firstNUMAWith(cands, n)
	if bind && numa == noNUMA {
		return false
	}
	// floor is the best tier any set could reach: stop as soon as one does.
	floor := tierNoNVLink
	for _, si := range cands {
		if st.slots[si].peers != 0 {
			floor = 0
			break
		}
	}
	if numa == noNUMA {
		floor += tierNoNUMA
	}
	var idxBuf, bestBuf, setBuf [stackGPUs]int
	idx, best, set := idxBuf[:0], bestBuf[:0], setBuf[:0]
	if n > stackGPUs {
		idx, best, set = make([]int, 0, n), make([]int, 0, n), make([]int, 0, n)
	}
	for i := 0; i < n; i++ {
		idx = append(idx, i)
	}
	set = set[:n]
	bestTier := -1
	for tries := 0; tries < maxCombinations; tries++ {
		for i, k := range idx {
			set[i] = cands[k]
		}
		t := st.tier(set)
		if !(bind && t&tierNoNUMA != 0) && (bestTier < 0 || t < bestTier) {
			bestTier = t
			best = append(best[:0], set...)
			if t <= floor {
				break
			}
		}
		if !nextCombination(idx, len(cands)) {
			break
		}
	}
	if bestTier < 0 {
		// Only with bind: the bound ran out before a one-node set came up. Take the policy's
		// first n GPUs of the first NUMA node that has n.
		best = best[:0]
		for _, si := range cands {
			if len(best) < n && st.slots[si].g.NUMANode == numa {
				best = append(best, si)
			}
		}
	}
	copy(out, best)
	return true
}

// nextCombination advances idx to the next combination of len(idx) of 0..m-1 in lexicographic
// order; false after the last.
func nextCombination(idx []int, m int) bool {
	n := len(idx)
	i := n - 1
	for i >= 0 && idx[i] == m-n+i {
		i--
	}
	if i < 0 {
		return false
	}
	idx[i]++
	for j := i + 1; j < n; j++ {
		idx[j] = idx[j-1] + 1
	}
	return true
}

// firstNUMAWith returns the NUMA node of the first candidate (in policy order) whose node holds
// at least n candidates, or noNUMA.
func (st *state) firstNUMAWith(cands []int, n int) int {
	for i, a := range cands {
		numa := st.slots[a].g.NUMANode
		k := 0
		for _, b := range cands[i:] {
			if st.slots[b].g.NUMANode == numa {
				k++
			}
		}
		if k >= n {
			return numa
		}
	}
	return noNUMA
}

package allocator

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// Cases C01 and C03 (several GPU containers; init, sidecar and app phases). Property: Fit is
// complete for pods of several GPU containers: on random small nodes with
// random bookings it accepts a pod exactly when some placement exists, as found by enumerating
// every GPU set of every container (feasible, written from the rules, not from Fit's state);
// Pick's allocation of an accepted pod stays within capacity. Trials where both greedy orders
// fail and only the search finds the placement must occur (before the search, Fit refused them).
func TestC03FitCompleteProperty(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	trials := 3000
	if testing.Short() {
		trials = 600
	}
	var fits, refused, rescued int
	for n := 0; n < trials; n++ {
		inv := randomSmallInventory(rng, n)
		used := randomUsage(rng, inv)
		req := randomRequest(rng, inv)
		for len(req.Containers) < 2 {
			req = randomRequest(rng, inv)
		}
		want := feasible(inv, used, req)
		err := Fit(inv, used, req)
		if (err == nil) != want {
			t.Fatalf("trial %d: Fit says %v, a placement exists: %v\nreq %+v\ninv %+v\nused %v", n, err, want, req, inv, used)
		}
		if !want {
			refused++
			continue
		}
		fits++
		if !greedyFits(inv, used, req) {
			rescued++
		}
		a, err := Pick(inv, used, req)
		if err != nil {
			t.Fatalf("trial %d: Fit accepts, Pick refuses: %v", n, err)
		}
		after := NodeUsage{}
		for u, g := range used {
			after[u] = g
		}
		after.Add(ChargeOf(&a))
		checkCapacity(t, inv, after)
	}
	t.Logf("%d trials: %d fit (%d only by search), %d refused", trials, fits, rescued, refused)
	if rescued == 0 || fits < trials/10 || refused < trials/10 {
		t.Errorf("the generator should exercise every outcome: %d fit (%d only by search), %d refused", fits, rescued, refused)
	}
}

// TestC03SearchFindsWhatGreedyMisses is a pod both greedy orders refuse on an empty node although
// it fits (found by TestC03FitCompleteProperty, seed 7): an init container, two sidecars (3 GPUs
// at 30% cores; 2 GPUs at 33% memory, 30% cores) and an app container of 3 whole GPUs at 30%
// cores, on 4 GPUs of 40, 24, 80 and 80 GiB with NVLink pairs: the topology preference of both
// greedy orders leads them astray. Fit refused it before the search.
func TestC03SearchFindsWhatGreedyMisses(t *testing.T) {
	inv := &device.Inventory{Node: "n", SplitCount: 6, MemoryScaling: 2}
	numa := []int{1, 1, 0, 1}
	for i, mib := range []int64{40960, 24576, 81920, 81920} {
		inv.GPUs = append(inv.GPUs, device.GPU{UUID: fmt.Sprintf("GPU-%d", i), Index: i, MemoryMiB: mib, NUMANode: numa[i], Healthy: true})
	}
	// NVLink: 0-1, 0-3, 2-1, 2-3 (links either GPU reports count)
	inv.GPUs[0].NVLinkPeers = []string{"GPU-1", "GPU-3"}
	inv.GPUs[2].NVLinkPeers = []string{"GPU-1", "GPU-3"}
	req := &device.PodRequest{GPUPolicy: device.Spread, NodePolicy: device.Binpack, Containers: []device.ContainerRequest{
		{Name: "c0", Kind: device.KindInit, Count: 1},
		{Name: "c2", Kind: device.KindSidecar, Count: 3, CoresPercent: 30},
		{Name: "c3", Kind: device.KindSidecar, Count: 2, MemoryPercent: 33, CoresPercent: 30},
		{Name: "c1", Kind: device.KindApp, Count: 3, MemoryPercent: 100, CoresPercent: 30},
	}}
	used := NodeUsage{}
	if !feasible(inv, used, req) || greedyFits(inv, used, req) {
		t.Fatalf("the case should fit, and not by greedy placement: feasible %v, greedy %v", feasible(inv, used, req), greedyFits(inv, used, req))
	}
	if err := Fit(inv, used, req); err != nil {
		t.Fatalf("Fit: %v", err)
	}
	a, err := Pick(inv, used, req)
	if err != nil {
		t.Fatalf("Pick: %v", err)
	}
	used.Add(ChargeOf(&a))
	checkCapacity(t, inv, used)
	if err := a.Validate(); err != nil {
		t.Fatalf("allocation: %v", err)
	}
}

// greedyFits is place without its search: request order under the pod's policy, then largest
// first binpacked.
func greedyFits(inv *device.Inventory, used NodeUsage, req *device.PodRequest) bool {
	var sc scratch
	st, bad := newState(&sc, inv, used, req)
	if bad != "" {
		return false
	}
	for i := range st.order {
		st.order[i] = i
	}
	if st.placeAll(st.order, req.GPUPolicy) < 0 {
		return true
	}
	st.reset()
	st.sortLargestFirst()
	return st.placeAll(st.order, device.Binpack) < 0
}

// randomSmallInventory is randomInventory with at most 4 GPUs, so that feasible can enumerate.
func randomSmallInventory(rng *rand.Rand, id int) *device.Inventory {
	inv := randomInventory(rng, id)
	if len(inv.GPUs) > 4 {
		inv.GPUs = inv.GPUs[:4]
	}
	return inv
}

// randomUsage books random sharers, MiB and cores on each GPU (sometimes nothing, sometimes an
// exclusive holder).
func randomUsage(rng *rand.Rand, inv *device.Inventory) NodeUsage {
	used := NodeUsage{}
	for _, g := range inv.GPUs {
		switch rng.Intn(5) {
		case 0, 1:
			continue
		case 2:
			if rng.Intn(4) == 0 {
				used[g.UUID] = GPUUsage{Sharers: 1, MemoryMiB: g.MemoryMiB / 2, CoresPercent: 100, Exclusive: true}
				continue
			}
		}
		s := 1 + rng.Intn(inv.SplitCount)
		used[g.UUID] = GPUUsage{Sharers: s, MemoryMiB: rng.Int63n(inv.CapacityMiB(&g) + 1), CoresPercent: []int{0, 10, 50, 90}[rng.Intn(4)]}
	}
	return used
}

// feasible reports whether any placement of req exists on the node, by enumerating every GPU set
// of every container and checking the rules on the result: each GPU passes the pod's filters,
// is healthy and not in MIG mode; a multi-GPU container with NUMA binding stays on one NUMA
// node; per GPU and phase (the containers running together, case C03) an exclusive container
// (100% cores) runs alone, and the largest phase's sharers, MiB and cores fit beside the booked
// usage (split count, capacity, 100%); nothing joins an exclusive holder, and an exclusive
// container joins no booked sharer.
func feasible(inv *device.Inventory, used NodeUsage, req *device.PodRequest) bool {
	nc := len(req.Containers)
	ranges := make([]phaseRange, nc)
	nph := phaseRanges(nc, func(i int) device.ContainerKind { return req.Containers[i].Kind }, ranges)
	sets := make([][]int, nc)
	var try func(ci int) bool
	try = func(ci int) bool {
		if ci == nc {
			return placementValid(inv, used, req, ranges, nph, sets)
		}
		c := req.Containers[ci]
		if c.Count <= 0 {
			sets[ci] = nil
			return try(ci + 1)
		}
		if c.Count > len(inv.GPUs) {
			return false
		}
		idx := make([]int, c.Count)
		for i := range idx {
			idx[i] = i
		}
		for {
			sets[ci] = append([]int(nil), idx...)
			if try(ci + 1) {
				return true
			}
			if !nextCombination(idx, len(inv.GPUs)) {
				return false
			}
		}
	}
	return try(0)
}

func placementValid(inv *device.Inventory, used NodeUsage, req *device.PodRequest, ranges []phaseRange, nph int, sets [][]int) bool {
	for _, set := range sets {
		for _, gi := range set {
			g := &inv.GPUs[gi]
			if !g.Healthy || g.MIGEnabled || contains(req.AvoidUUIDs, g.UUID) ||
				(len(req.UseUUIDs) > 0 && !contains(req.UseUUIDs, g.UUID)) ||
				!device.ModelAllowed(req.UseModels, req.AvoidModels, g.Model) {
				return false
			}
			if req.NUMABind && g.NUMANode != inv.GPUs[set[0]].NUMANode {
				return false
			}
		}
	}
	for gi := range inv.GPUs {
		g := &inv.GPUs[gi]
		var maxN, maxCores int
		var maxMem int64
		var excl, touched bool
		for p := 0; p < nph; p++ {
			var n, cores int
			var mem int64
			var pexcl bool
			for ci, set := range sets {
				if p < ranges[ci].lo || p > ranges[ci].hi || !containsInt(set, gi) {
					continue
				}
				c := &req.Containers[ci]
				n++
				mem += c.MemoryOn(g.MemoryMiB)
				cores += c.CoresPercent
				pexcl = pexcl || c.Exclusive()
			}
			if pexcl && n > 1 {
				return false
			}
			touched = touched || n > 0
			excl = excl || pexcl
			maxN, maxMem, maxCores = max(maxN, n), max(maxMem, mem), max(maxCores, cores)
		}
		if !touched {
			continue
		}
		u := used[g.UUID]
		if u.Exclusive || (excl && u.Sharers > 0) || u.Sharers+maxN > inv.SplitCount ||
			u.MemoryMiB+maxMem > inv.CapacityMiB(g) || u.CoresPercent+maxCores > 100 {
			return false
		}
	}
	return true
}

func containsInt(list []int, x int) bool {
	for _, y := range list {
		if y == x {
			return true
		}
	}
	return false
}

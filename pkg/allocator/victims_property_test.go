package allocator

import (
	"math"
	"math/rand"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// randomVictims fills a random node with up to max pods placed by Pick (randomRequest: one to
// four containers of one to three GPUs, init/sidecar phases, exclusive ones), and returns the
// usage and, as candidates, most of them with random priorities (few values, so that ties
// happen; sometimes negative) and PDB flags. The rest stay booked as pods of higher priority.
func randomVictims(rng *rand.Rand, inv *device.Inventory, maxPods int) (NodeUsage, []Victim) {
	used := NodeUsage{}
	var cands []Victim
	for p := 0; p < 40 && len(cands) < maxPods; p++ {
		req := randomRequest(rng, inv)
		req.UseUUIDs, req.AvoidModels = nil, nil
		if rng.Intn(2) == 0 { // mostly small pods, so that GPUs are shared
			req.Containers = req.Containers[:1]
			req.Containers[0].Count = 1
			req.Containers[0].Kind = device.KindApp
		}
		a, err := Pick(inv, used, req)
		if err != nil {
			continue
		}
		ch := ChargeOf(&a)
		used.Add(ch)
		if rng.Intn(6) == 0 {
			continue // not a candidate
		}
		prio := int32(rng.Intn(4))
		switch rng.Intn(10) {
		case 0:
			prio = -int32(rng.Intn(3))
		case 1:
			prio = math.MinInt32
		}
		cands = append(cands, Victim{Charge: ch, Priority: prio, ViolatesPDB: rng.Intn(4) == 0})
	}
	return used, cands
}

// bruteVictims is the optimum by enumeration: every subset of cands, released with
// NodeUsage.Sub, checked with Fit; the best by Better. ok is false when no subset fits.
func bruteVictims(inv *device.Inventory, used NodeUsage, cands []Victim, req *device.PodRequest) (VictimChoice, bool) {
	var best VictimChoice
	found := false
	for mask := 0; mask < 1<<len(cands); mask++ {
		var idx []int
		for i := range cands {
			if mask&(1<<i) != 0 {
				idx = append(idx, i)
			}
		}
		c := choiceCost(cands, idx)
		if found && !c.Better(best) {
			continue
		}
		if Fit(inv, without(used, cands, idx), req) == nil {
			best, found = c, true
		}
	}
	return best, found
}

// Property (issue 25): on random nodes with at most 12 candidates, ChooseVictims's choice costs
// exactly the brute-force optimum under Better (PDB violations, highest priority, sum, count),
// is exact, makes the pod fit, and is minimal (putting back any one victim makes the pod not
// fit); ok is false exactly when removing every candidate does not make the pod fit. This rests
// on Fit being monotone in usage (removing pods never makes a pod not fit), which its complete
// search gives pods of several GPU containers (TestC03FitCompleteProperty).
func TestPropertyChooseVictimsOptimal(t *testing.T) {
	trials := 1500
	if testing.Short() {
		trials = 300
	}
	checkChooseVictims(t, 25, trials)
}

// checkChooseVictims is the property over trials random nodes drawn from seed.
func checkChooseVictims(t *testing.T, seed int64, trials int) {
	rng := rand.New(rand.NewSource(seed))
	var fits, impossible, preempted, multi int
	for n := 0; n < trials; n++ {
		inv := randomInventory(rng, n)
		used, cands := randomVictims(rng, inv, 1+rng.Intn(12))
		req := randomRequest(rng, inv)
		if rng.Intn(3) > 0 { // mostly one GPU container: the per-GPU path
			req.Containers = req.Containers[:1]
		}
		got, ok := ChooseVictims(inv, used, cands, req)
		all := make([]int, len(cands))
		for i := range all {
			all[i] = i
		}
		allFit := Fit(inv, without(used, cands, all), req) == nil
		want, wantOK := bruteVictims(inv, used, cands, req)
		optimal := ok == wantOK && (!ok || !got.Better(want) && !want.Better(got) && got.SumPriority == want.SumPriority && len(got.Victims) == len(want.Victims))
		switch {
		case optimal && ok == allFit:
		case ok != allFit:
			t.Fatalf("trial %d: ok %v, removing every candidate fits: %v", n, ok, allFit)
		default:
			t.Fatalf("trial %d: chose %+v (ok %v), optimum %+v (ok %v)\nreq %+v\ninv %+v\nused %v\ncands %+v", n, got, ok, want, wantOK, req, inv, used, cands)
		}
		if !ok {
			impossible++
			continue
		}
		if c := choiceCost(cands, got.Victims); c.PDBViolations != got.PDBViolations || c.MaxPriority != got.MaxPriority || c.SumPriority != got.SumPriority {
			t.Fatalf("trial %d: choice %+v does not cost what its victims do (%+v)", n, got, c)
		}
		if !got.Exact {
			t.Fatalf("trial %d: not exact with %d candidates", n, len(cands))
		}
		if err := Fit(inv, without(used, cands, got.Victims), req); err != nil {
			t.Fatalf("trial %d: does not fit after evicting %v: %v", n, got.Victims, err)
		}
		for i := 1; i < len(got.Victims); i++ {
			if got.Victims[i] <= got.Victims[i-1] {
				t.Fatalf("trial %d: victims %v not ascending", n, got.Victims)
			}
		}
		for k := range got.Victims {
			rest := append(append([]int{}, got.Victims[:k]...), got.Victims[k+1:]...)
			if Fit(inv, without(used, cands, rest), req) == nil {
				t.Fatalf("trial %d: victims %v not minimal: %d need not go", n, got.Victims, got.Victims[k])
			}
		}
		if len(got.Victims) == 0 {
			fits++
		} else {
			preempted++
			if len(req.Containers) > 1 || req.Containers[0].Count > 1 {
				multi++
			}
		}
	}
	t.Logf("%d trials: %d fit already, %d impossible, %d preempted (%d multi-GPU or multi-container)", trials, fits, impossible, preempted, multi)
	if preempted < trials/4 || impossible < trials/20 || multi < trials/20 {
		t.Errorf("the generator should exercise every outcome: %d fit, %d impossible, %d preempted (%d multi)", fits, impossible, preempted, multi)
	}
}

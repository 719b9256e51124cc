package allocator

import (
	"math"
	"math/rand"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// FitScoreView agrees with FitScoreAt on random nodes, usages and one-container pods: where it
// answers (ok), the pod fits and the score is FitScoreAt's; it declines exactly where the
// one-pass path (fitScoreAlone) declines, and for every pod shape it does not handle. Half of
// the pods drop their UUID/model lists and NUMA binding, so the view answers often.
func TestFitScoreViewMatchesFitScoreAt(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	answered, declined, exclusiveSeen := 0, 0, false
	for i := 0; i < 5000; i++ {
		inv := randomInventory(rng, i)
		used := NodeUsage{}
		for j := rng.Intn(8); j > 0; j-- {
			if a, err := Pick(inv, used, randomRequest(rng, inv)); err == nil {
				used.Add(ChargeOf(&a))
			}
		}
		req := randomRequest(rng, inv)
		req.Containers = req.Containers[len(req.Containers)-1:]
		if rng.Intn(2) == 0 {
			req.UseUUIDs, req.AvoidModels, req.NUMABind = nil, nil, false
		}
		req.NodePolicy = []device.Policy{device.Binpack, device.Spread}[rng.Intn(2)]
		at := UsageAt(inv, used, nil)
		for _, u := range at {
			exclusiveSeen = exclusiveSeen || u.Exclusive
		}
		var v NodeView
		if set := v.Set(inv, at); set != (len(inv.GPUs) <= ViewGPUs) {
			t.Fatalf("case %d: Set on %d GPUs = %v", i, len(inv.GPUs), set)
		}
		got, ok := FitScoreView(&v, req)
		want, werr := FitScoreAt(inv, at, used, req)
		simple := len(req.UseUUIDs) == 0 && len(req.AvoidModels) == 0 && len(req.UseModels) == 0 && len(req.AvoidUUIDs) == 0
		_, aloneOK := fitScoreAlone(inv, at, used, req)
		switch {
		case ok && (werr != nil || got != want):
			t.Fatalf("case %d: view (%d, fits), FitScoreAt (%d, %v)\ninv %+v\nused %+v\nreq %+v", i, got, want, werr, inv, used, req)
		case !ok && simple && len(inv.GPUs) <= ViewGPUs && aloneOK:
			t.Fatalf("case %d: view declined where the one-pass path answers\ninv %+v\nused %+v\nreq %+v", i, inv, used, req)
		case ok && !simple:
			t.Fatalf("case %d: view answered a pod with UUID or model lists: %+v", i, req)
		}
		if ok {
			answered++
		} else {
			declined++
		}
	}
	if answered < 500 || declined < 1000 || !exclusiveSeen {
		t.Fatalf("weak sample: %d answered, %d declined, exclusive GPU seen %v", answered, declined, exclusiveSeen)
	}
}

// The figures by hand: 2 GPUs of 10000 MiB, split 4, scaling 1.5 (capacity 15000 MiB each);
// GPU-0 holds 12000 MiB, 3 slices and 50% cores; GPU-1 is unhealthy. A pod of 1 GPU, 3000 MiB
// and 50% cores fits only on GPU-0 (12000+3000 ≤ 15000, 3+1 ≤ 4, 50+50 ≤ 100). Binpack totals
// over the healthy GPU after placement: memory 15000/15000, slices 4/4: fullness 1000 → 10;
// spread 0. One more MiB, or 51% cores, and it does not fit; an empty view declines.
func TestFitScoreViewByHand(t *testing.T) {
	inv := &device.Inventory{Node: "n", SplitCount: 4, MemoryScaling: 1.5, GPUs: []device.GPU{
		{UUID: "GPU-0", MemoryMiB: 10000, Healthy: true}, {UUID: "GPU-1", Index: 1, MemoryMiB: 10000},
	}}
	var v NodeView
	if !v.Set(inv, []GPUUsage{{MemoryMiB: 12000, Sharers: 3, CoresPercent: 50}, {}}) {
		t.Fatal("Set refused a 2-GPU node")
	}
	for _, tc := range []struct {
		name   string
		mib    int64
		cores  int
		policy device.Policy
		score  int
		ok     bool
	}{
		{"binpack", 3000, 50, device.Binpack, 10, true},
		{"spread", 3000, 50, device.Spread, 0, true},
		{"one MiB too many", 3001, 50, device.Binpack, 0, false},
		{"cores", 3000, 51, device.Binpack, 0, false},
	} {
		req := pod(ctr("c", 1, tc.mib, tc.cores))
		req.NodePolicy = tc.policy
		if s, ok := FitScoreView(&v, req); s != tc.score || ok != tc.ok {
			t.Errorf("%s: (%d, %v), want (%d, %v)", tc.name, s, ok, tc.score, tc.ok)
		}
	}
	if _, ok := FitScoreView(&NodeView{}, pod(ctr("c", 1, 1, 0))); ok {
		t.Error("the zero view answered")
	}
	// Figures at the edge of the packed int32 fields do not wrap into a fit.
	var edge NodeView
	if !edge.Set(inv, []GPUUsage{{CoresPercent: math.MaxInt32 - 10}, {Sharers: math.MaxInt32}}) {
		t.Fatal("Set refused int32-sized usage")
	}
	inv.GPUs[1].Healthy = true
	edge.Set(inv, []GPUUsage{{CoresPercent: math.MaxInt32 - 10}, {Sharers: math.MaxInt32}})
	if s, ok := FitScoreView(&edge, pod(ctr("c", 1, 1, 20))); ok {
		t.Errorf("a GPU with %d percent cores or %d slices booked took the pod (score %d)", math.MaxInt32-10, math.MaxInt32, s)
	}
	inv.GPUs[1].Healthy = false
	if v.Set(inv, []GPUUsage{{}}) {
		t.Error("Set accepted a usage slice shorter than the GPUs")
	}
	if _, ok := FitScoreView(&v, pod(ctr("c", 1, 1, 0))); ok {
		t.Error("a view left empty by a refused Set answered")
	}
}

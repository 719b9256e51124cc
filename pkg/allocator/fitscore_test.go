package allocator

import (
	"errors"
	"math/rand"
	"testing"
)

// FitScore and FitScoreAt agree with Fit and Score on random nodes, usages and pods: the same
// score where the pod fits, the same Unfit reason where it does not.
func TestFitScoreMatchesFitAndScore(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	fits, unfits := 0, 0
	for i := 0; i < 3000; i++ {
		inv := randomInventory(rng, i)
		used := NodeUsage{}
		for j := rng.Intn(6); j > 0; j-- {
			if a, err := Pick(inv, used, randomRequest(rng, inv)); err == nil {
				used.Add(ChargeOf(&a))
			}
		}
		req := randomRequest(rng, inv)
		if rng.Intn(2) == 0 {
			req.Containers = req.Containers[len(req.Containers)-1:]
		}
		wantErr := Fit(inv, used, req)
		want := 0
		if wantErr == nil {
			want = Score(inv, used, req)
			fits++
		} else {
			unfits++
		}
		at := UsageAt(inv, used, nil)
		for _, tc := range []struct {
			name string
			f    func() (int, error)
		}{
			{"FitScore", func() (int, error) { return FitScore(inv, used, req) }},
			{"FitScoreAt", func() (int, error) { return FitScoreAt(inv, at, used, req) }},
		} {
			got, err := tc.f()
			if (err == nil) != (wantErr == nil) || got != want {
				t.Fatalf("case %d %s: (%d, %v), Fit/Score say (%d, %v)", i, tc.name, got, err, want, wantErr)
			}
			if err != nil {
				var u, wu *Unfit
				if !errors.As(err, &u) || !errors.As(wantErr, &wu) || u.Reason != wu.Reason {
					t.Fatalf("case %d %s: reason %v, Fit says %v", i, tc.name, err, wantErr)
				}
			}
		}
	}
	if fits < 300 || unfits < 300 {
		t.Fatalf("weak sample: %d fit, %d do not", fits, unfits)
	}
}

// A one-container pod on the one-pass path: the figures by hand. Node of 2 GPUs of 10000 MiB,
// split 10; GPU-0 holds 4000 MiB and 2 slices. The pod asks 1 GPU of 2000 MiB: after placement
// 6000 of 20000 MiB (300‰) and 3 of 20 slices (150‰): fullness 225‰ → binpack 2, spread 8.
func TestFitScoreByHand(t *testing.T) {
	inv := node("n", 10000, 10000)
	used := NodeUsage{inv.GPUs[0].UUID: {MemoryMiB: 4000, Sharers: 2}}
	req := pod(ctr("main", 1, 2000, 0))
	if s, err := FitScoreAt(inv, UsageAt(inv, used, nil), used, req); err != nil || s != 2 {
		t.Fatalf("binpack: %d, %v; want 2", s, err)
	}
	req.NodePolicy = "spread"
	if s, err := FitScore(inv, used, req); err != nil || s != 8 {
		t.Fatalf("spread: %d, %v; want 8", s, err)
	}
	big := pod(ctr("main", 2, 7000, 0))
	if s, err := FitScore(inv, used, big); err == nil || s != 0 {
		t.Fatalf("2 × 7000 MiB fits? %d, %v", s, err)
	}
}

// BenchmarkFitScoreScale/nodes=N: FitScoreAt (one pass, usage by position) of the 1-slice +
// 8000 MiB pod over N nodes, to compare with BenchmarkFilterScale (Fit then Score).
func BenchmarkFitScoreScale(b *testing.B) {
	for _, nodes := range []int{1000, 5000, 10000} {
		b.Run(benchName(nodes), func(b *testing.B) {
			invs, used := benchFleet(nodes, nodes*32)
			ats := make([][]GPUUsage, nodes)
			for n := range invs {
				ats[n] = UsageAt(invs[n], used[n], nil)
			}
			req := pod(ctr("main", 1, 8000, 10))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				total := 0
				for n := range invs {
					if s, err := FitScoreAt(invs[n], ats[n], used[n], req); err == nil {
						total += s
					}
				}
				if total == 0 {
					b.Fatal("total score 0")
				}
			}
		})
	}
}

func benchName(nodes int) string { return "nodes=" + itoa(nodes) }

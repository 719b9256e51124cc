package allocator

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// victimNode is a fragmented node for BenchmarkChooseVictims: gpus GPUs of 81920 MiB, split
// count 10, each GPU full of sharers (10 pods of 1000..8000 MiB, 0..10% cores, priorities
// 0..999, one in ten violating a PDB; with spanning, one pod in ten also on the next GPU). One
// pod in twenty is of higher priority (booked, no candidate); the rest are the candidates.
func victimNode(gpus int, spanning bool) (*device.Inventory, NodeUsage, []Victim) {
	rng := rand.New(rand.NewSource(int64(gpus)))
	inv := &device.Inventory{Node: "bench", SplitCount: 10, MemoryScaling: 1}
	for i := 0; i < gpus; i++ {
		inv.GPUs = append(inv.GPUs, device.GPU{
			UUID: fmt.Sprintf("GPU-%08x-%04x", rng.Int63n(1<<32), i), Index: i, Model: "NVIDIA H100 80GB HBM3",
			MemoryMiB: 81920, NUMANode: i * 2 / gpus, Healthy: true,
		})
	}
	used := NodeUsage{}
	var cands []Victim
	for i := range inv.GPUs {
		for used[inv.GPUs[i].UUID].Sharers < inv.SplitCount {
			g := GPUUsage{MemoryMiB: 1000 + rng.Int63n(7000), CoresPercent: rng.Intn(3) * 5, Sharers: 1}
			ch := Charge{inv.GPUs[i].UUID: g}
			if next := i + 1; spanning && next < gpus && rng.Intn(10) == 0 {
				ch[inv.GPUs[next].UUID] = g
			}
			used.Add(ch)
			if rng.Intn(20) == 0 {
				continue
			}
			cands = append(cands, Victim{Charge: ch, Priority: int32(rng.Intn(1000)), ViolatesPDB: rng.Intn(10) == 0})
		}
	}
	return inv, used, cands
}

// BenchmarkChooseVictims: one op is ChooseVictims on one fragmented node (victimNode) of 8 or 16
// GPUs × split count 10 (about 75 or 150 candidates) for a pod that needs most of a GPU's
// memory: one GPU of 60000 MiB (per-GPU search), two such GPUs in one container (per-GPU search
// combined under priority ceilings; with spanning victims, the general search), two containers
// of one such GPU each (the general search). exact/op is the share of exact results.
func BenchmarkChooseVictims(b *testing.B) {
	reqs := []struct {
		name     string
		req      *device.PodRequest
		spanning bool
	}{
		{"1gpu", pod(ctr("main", 1, 60000, 0)), false},
		{"2gpu", pod(ctr("main", 2, 60000, 0)), false},
		{"2gpu-spanning", pod(ctr("main", 2, 60000, 0)), true},
		{"2containers", pod(ctr("a", 1, 60000, 0), ctr("b", 1, 60000, 0)), false},
	}
	for _, gpus := range []int{8, 16} {
		for _, r := range reqs {
			inv, used, cands := victimNode(gpus, r.spanning)
			b.Run(fmt.Sprintf("gpus=%d/cands=%d/%s", gpus, len(cands), r.name), func(b *testing.B) {
				exact := 0
				b.ReportAllocs()
				for b.Loop() {
					c, ok := ChooseVictims(inv, used, cands, r.req)
					if !ok || len(c.Victims) == 0 {
						b.Fatalf("no choice: %+v %v", c, ok)
					}
					if c.Exact {
						exact++
					}
				}
				b.ReportMetric(float64(exact)/float64(b.N), "exact/op")
			})
		}
	}
}

package allocator

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// benchFleet builds nodes × 8 GPUs of 81920 MiB and books pods of 1 slice + 1000..16000 MiB
// (cores 0..50%) on random GPUs of random nodes, as the extender's cache would hold them.
func benchFleet(nodes, pods int) ([]*device.Inventory, []NodeUsage) {
	rng := rand.New(rand.NewSource(1))
	invs := make([]*device.Inventory, nodes)
	used := make([]NodeUsage, nodes)
	for n := range invs {
		inv := &device.Inventory{Node: fmt.Sprintf("node-%04d", n), SplitCount: 10, MemoryScaling: 1}
		for i := 0; i < 8; i++ {
			inv.GPUs = append(inv.GPUs, device.GPU{
				UUID:  fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", n, i, rng.Intn(1<<16), rng.Intn(1<<16), rng.Int63n(1<<48)),
				Index: i, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920, NUMANode: i / 4, Healthy: true,
			})
		}
		invs[n] = inv
		used[n] = NodeUsage{}
	}
	for p := 0; p < pods; p++ {
		n := rng.Intn(nodes)
		req := pod(ctr("main", 1, 1000+rng.Int63n(15000), rng.Intn(6)*10))
		if a, err := Pick(invs[n], used[n], req); err == nil {
			used[n].Add(ChargeOf(&a))
		}
	}
	return invs, used
}

// BenchmarkFilter: one op is Fit of one 1-slice + 8000 MiB pod against 5,000 nodes × 8 GPUs of
// 81920 MiB carrying 20,000 placed pods. Target: <= 2 ms/op on one core (-cpu 1).
func BenchmarkFilter(b *testing.B) {
	invs, used := benchFleet(5000, 20000)
	req := pod(ctr("main", 1, 8000, 0))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fit := 0
		for n := range invs {
			if Fit(invs[n], used[n], req) == nil {
				fit++
			}
		}
		if fit == 0 {
			b.Fatal("no node fits")
		}
	}
}

// BenchmarkPick: one op is Pick of a 2-container pod (1 GPU + 2 GPUs) on one 8-GPU node with
// NVLink and two NUMA nodes, half full. Target: <= 20 µs/op.
func BenchmarkPick(b *testing.B) {
	invs, used := benchFleet(1, 20)
	inv := invs[0]
	for i := range inv.GPUs {
		for j := range inv.GPUs {
			if i != j && i/4 == j/4 {
				inv.GPUs[i].NVLinkPeers = append(inv.GPUs[i].NVLinkPeers, inv.GPUs[j].UUID)
			}
		}
	}
	req := pod(ctr("a", 1, 8000, 20), ctr("b", 2, 8000, 0))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Pick(inv, used[0], req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScore: one op is Score of one 1-slice + 8000 MiB pod against the 5,000 nodes of
// BenchmarkFilter (the extender scores every node that fits).
func BenchmarkScore(b *testing.B) {
	invs, used := benchFleet(5000, 20000)
	req := pod(ctr("main", 1, 8000, 0))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sum := 0
		for n := range invs {
			sum += Score(invs[n], used[n], req)
		}
		if sum == 0 {
			b.Fatal("all scores 0")
		}
	}
}

// BenchmarkFitSearch: one op is Fit of a pod that no placement fits, whose greedy orders both
// fail, so that Fit's placement search runs to its end (or to placeSearchSteps): a sidecar of 2
// GPUs and 3 app containers of 3 GPUs at 30000 MiB each, on a node of 8 or 16 GPUs of 81920 MiB
// with 30000 MiB booked on each. This is the most a refused multi-container pod costs per node.
func BenchmarkFitSearch(b *testing.B) {
	for _, gpus := range []int{8, 16} {
		b.Run(fmt.Sprintf("gpus=%d", gpus), func(b *testing.B) {
			inv := &device.Inventory{Node: "n", SplitCount: 10, MemoryScaling: 1}
			used := NodeUsage{}
			for i := 0; i < gpus; i++ {
				u := fmt.Sprintf("GPU-%d", i)
				inv.GPUs = append(inv.GPUs, device.GPU{UUID: u, Index: i, MemoryMiB: 81920, NUMANode: i * 2 / gpus, Healthy: true})
				used[u] = GPUUsage{MemoryMiB: 30000, Sharers: 1}
			}
			req := pod(ctr("side", 2, 30000, 0), ctr("a", 3, 30000, 0), ctr("b", 3, 30000, 0), ctr("c", 3, 30000, 0))
			req.Containers[0].Kind = device.KindSidecar
			req.Containers[1].Count = gpus/2 + 1
			if Fit(inv, used, req) == nil {
				b.Fatal("the pod should not fit")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if Fit(inv, used, req) == nil {
					b.Fatal("fits")
				}
			}
		})
	}
}

package main

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/hami-go/hami-go/pkg/dra"
)

func rng(s uint64) *rand.Rand { return rand.New(rand.NewPCG(s, 7)) }

// The workload is seeded and inside its documented ranges.
func TestWorkload(t *testing.T) {
	a, b := Workload(3, 500, 15), Workload(3, 500, 15)
	if !slices.Equal(a, b) {
		t.Fatal("same seed, different workloads")
	}
	two := 0
	for _, p := range a {
		if p.MemMiB < 1000 || p.MemMiB > 40000 || p.MemMiB%1000 != 0 || p.Cores < 0 || p.Cores > 50 || p.Cores%5 != 0 || (p.GPUs != 1 && p.GPUs != 2) {
			t.Fatalf("pod out of range: %+v", p)
		}
		if p.GPUs == 2 {
			two++
		}
	}
	if two < 50 || two > 100 {
		t.Fatalf("%d two-GPU pods of 500 at 15%%", two)
	}
}

// On one node, kube-scheduler's allocator over slices in the driver's binpack order places
// one-GPU pods exactly as hami-go's binpack does: the same pods, the same memory on every
// GPU. In index order (first-fit) it does not for this seed: the device order is what steers it.
func TestBinpackOrderMatchesExtender(t *testing.T) {
	ctx := context.Background()
	f := NewFleet(1, 8, 81920, 10)
	for seed := uint64(1); seed <= 3; seed++ {
		pods := Workload(seed, 300, 0)
		want := RunHAMi(f, pods, rng(seed))
		got, err := RunDRA(ctx, f, pods, DRAMode{Order: dra.OrderBinpack, Lag: 1}, rng(seed))
		if err != nil {
			t.Fatal(err)
		}
		if got.Placed != want.Placed || !slices.Equal(got.MemMiB, want.MemMiB) || !slices.Equal(got.Sharers, want.Sharers) {
			t.Errorf("seed %d: DRA binpack order placed %d %v, extender %d %v", seed, got.Placed, got.MemMiB, want.Placed, want.MemMiB)
		}
	}
	pods := Workload(1, 300, 15)
	idx, err := RunDRA(ctx, f, pods, DRAMode{Order: dra.OrderIndex, Lag: 1}, rng(1))
	if err != nil {
		t.Fatal(err)
	}
	bin, err := RunDRA(ctx, f, pods, DRAMode{Order: dra.OrderBinpack, Lag: 1}, rng(1))
	if err != nil {
		t.Fatal(err)
	}
	if idx.Placed != 26 || bin.Placed != 27 {
		t.Errorf("seed 1 mixed: index order placed %d (want 26), binpack order %d (want 27)", idx.Placed, bin.Placed)
	}
}

// Every placement, by either allocator, stays within each GPU's memory and split count, and the
// booked memory is exactly what the placed pods ask.
func TestCapacityHolds(t *testing.T) {
	ctx := context.Background()
	f := NewFleet(2, 8, 81920, 10)
	pods := Workload(5, 400, 15)
	runs := []Result{RunHAMi(f, pods, rng(5))}
	for _, m := range []DRAMode{{dra.OrderIndex, 1, false}, {dra.OrderBinpack, 1, false}, {dra.OrderBinpack, 10, false}, {dra.OrderSpread, 1, false}, {dra.OrderIndex, 1, true}} {
		r, err := RunDRA(ctx, f, pods, m, rng(5))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	for i, r := range runs {
		if r.Placed < 40 || r.Placed >= len(pods) {
			t.Errorf("run %d placed %d", i, r.Placed)
		}
		var booked int64
		for g, m := range r.MemMiB {
			if m > 81920 || r.Sharers[g] > 10 {
				t.Errorf("run %d GPU %d over capacity: %d MiB, %d sharers", i, g, m, r.Sharers[g])
			}
			booked += m
		}
		var want int64
		for _, p := range pods[:r.Placed] {
			want += p.MemMiB * int64(p.GPUs)
		}
		if booked != want {
			t.Errorf("run %d booked %d MiB, the placed pods ask %d", i, booked, want)
		}
	}
}

// Scored by booked GPU memory (MostAllocated), small pods all go to one node of four, on its first
// GPU; unscored, the node is random, and this seed spreads them.
func TestMostAllocatedPacksNodes(t *testing.T) {
	ctx := context.Background()
	f := NewFleet(4, 8, 81920, 10)
	pods := []Pod{{GPUs: 1, MemMiB: 4000}, {GPUs: 1, MemMiB: 4000}, {GPUs: 1, MemMiB: 4000}, {GPUs: 1, MemMiB: 4000}}
	used := func(r Result) (nodes, gpus int) {
		for n := 0; n < 4; n++ {
			any := false
			for _, m := range r.MemMiB[n*8 : n*8+8] {
				if m > 0 {
					gpus++
					any = true
				}
			}
			if any {
				nodes++
			}
		}
		return nodes, gpus
	}
	packed, err := RunDRA(ctx, f, pods, DRAMode{Order: dra.OrderIndex, Lag: 1, MostAllocated: true}, rng(1))
	if err != nil {
		t.Fatal(err)
	}
	if n, g := used(packed); packed.Placed != 4 || n != 1 || g != 1 {
		t.Errorf("MostAllocated: %d pods on %d nodes, %d GPUs (%v); want 4 on one GPU", packed.Placed, n, g, packed.MemMiB)
	}
	random, err := RunDRA(ctx, f, pods, DRAMode{Order: dra.OrderIndex, Lag: 1}, rng(1))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := used(random); n < 2 {
		t.Errorf("unscored: %d node(s) for seed 1; the random node choice should spread 4 pods", n)
	}
	if got := mostAllocated(map[string]dra.GPUUse{"a": {MemoryMiB: 1000}, "b": {MemoryMiB: 999}}, 1, 4000); got != 50 {
		t.Errorf("mostAllocated = %d, want 50", got)
	}
}

// The Markdown section has one row per cluster size and seed and the ratio lines.
func TestMarkdown(t *testing.T) {
	o, err := parse([]string{"--seeds=2", "--nodes=1,2", "--pods=200"})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := measure(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	md := markdown(o, rows)
	for _, want := range []string{"## Placement in DRA mode", "| 1 | 1 | ", "| 2 | 2 | ", "- 2 node(s): DRA, index order (first-fit) ", "lag 10",
		"- 1 node(s), hami-go binpack (extender): ", "nodes by GPU memory"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if got := perGPU(Result{MemMiB: []int64{1000, 0, 500, 250}}, 1000, 2); got != "100 0 | 50 25" {
		t.Errorf("perGPU = %q", got)
	}
	if _, err := parse([]string{"--nodes=0"}); err == nil {
		t.Error("--nodes=0 accepted")
	}
}

package allocator

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// vic is a candidate of priority prio booking one slice of mib MiB and cores percent on each of
// the GPUs at the given positions of node "n" (GPU-n-<i>); cores 100 holds them exclusively.
func vic(prio int32, pdb bool, mib int64, cores int, gpus ...int) Victim {
	c := Charge{}
	for _, i := range gpus {
		c[fmt.Sprintf("GPU-n-%d", i)] = GPUUsage{MemoryMiB: mib, CoresPercent: cores, Sharers: 1, Exclusive: cores >= 100}
	}
	return Victim{Charge: c, Priority: prio, ViolatesPDB: pdb}
}

// booked is the node's usage: every candidate's charge plus those of pods that are no
// candidates (higher priority).
func booked(cands []Victim, others ...Victim) NodeUsage {
	u := NodeUsage{}
	for _, v := range append(slices.Clone(cands), others...) {
		u.Add(v.Charge)
	}
	return u
}

func TestChooseVictims(t *testing.T) {
	const big = 81920
	for _, tc := range []struct {
		name   string
		inv    *device.Inventory
		cands  []Victim
		others []Victim // booked, not candidates
		req    *device.PodRequest
		want   []int // nil with !ok
		ok     bool
	}{{
		// Every GPU partly used; the pod needs a whole GPU's memory: only the pods of the
		// cheapest GPU go. GPU-2's cheap pods share it with a pod of higher priority; GPU-4
		// {3,3} beats GPU-3 {3,3,3} (same highest priority, smaller sum) and GPU-1 {5,5}.
		name: "fragmented node", inv: node("n", 24576, 24576, 24576, 24576, 24576),
		cands: []Victim{
			vic(1, false, 6000, 0, 0), vic(1, false, 6000, 0, 0), vic(50, false, 6000, 0, 0), // 0-2
			vic(5, false, 8000, 0, 1), vic(5, false, 8000, 0, 1), // 3-4
			vic(1, false, 4000, 0, 2), vic(2, false, 4000, 0, 2), // 5-6
			vic(3, false, 2000, 0, 3), vic(3, false, 2000, 0, 3), vic(3, false, 2000, 0, 3), // 7-9
			vic(3, false, 9000, 0, 4), vic(3, false, 9000, 0, 4), // 10-11
		},
		others: []Victim{vic(1000, false, 4000, 0, 2)},
		req:    pod(ctr("main", 1, 24576, 0)), want: []int{10, 11}, ok: true,
	}, {
		name: "split count", inv: func() *device.Inventory { n := node("n", big, big); n.SplitCount = 4; return n }(),
		cands: []Victim{
			vic(1, false, 1000, 0, 0), vic(2, false, 1000, 0, 0), vic(3, false, 1000, 0, 0), vic(4, false, 1000, 0, 0),
			vic(7, false, 1000, 0, 1), vic(0, false, 1000, 0, 1), vic(8, false, 1000, 0, 1), vic(9, false, 1000, 0, 1),
		},
		req: pod(ctr("main", 1, 1000, 0)), want: []int{5}, ok: true,
	}, {
		// 50% cores: 40 alone is not enough; {40 (prio 1), 30 (prio 2)} beats any set with prio 3.
		name: "cores", inv: node("n", big),
		cands: []Victim{vic(3, false, 100, 30, 0), vic(1, false, 100, 40, 0), vic(2, false, 100, 30, 0)},
		req:   pod(ctr("main", 1, 1000, 50)), want: []int{1, 2}, ok: true,
	}, {
		// GPU-0 is held exclusively (prio 5); on GPU-1 both sharers (prio 1) must go for 50000 MiB.
		name: "exclusive holder vs sharers", inv: node("n", big, big),
		cands: []Victim{vic(5, false, 1000, 100, 0), vic(1, false, 40000, 0, 1), vic(1, false, 40000, 0, 1)},
		req:   pod(ctr("main", 1, 50000, 0)), want: []int{1, 2}, ok: true,
	}, {
		// An exclusive pod needs an empty GPU: the exclusive holder (prio 5) rather than the
		// two sharers (prio 6).
		name: "exclusive request", inv: node("n", big, big),
		cands: []Victim{vic(6, false, 1000, 10, 1), vic(5, false, 1000, 100, 0), vic(6, false, 1000, 10, 1)},
		req:   pod(ctr("main", 1, 1000, 100)), want: []int{1}, ok: true,
	}, {
		name: "PDB: two victims rather than one that violates a budget", inv: node("n", 24576, 24576),
		cands: []Victim{vic(1, true, 20000, 0, 0), vic(9, false, 10000, 0, 1), vic(9, false, 10000, 0, 1)},
		req:   pod(ctr("main", 1, 24576, 0)), want: []int{1, 2}, ok: true,
	}, {
		name: "priority: three low rather than one high", inv: node("n", 24576, 24576),
		cands: []Victim{vic(10, false, 20000, 0, 0), vic(1, false, 7000, 0, 1), vic(1, false, 7000, 0, 1), vic(1, false, 7000, 0, 1)},
		req:   pod(ctr("main", 1, 24576, 0)), want: []int{1, 2, 3}, ok: true,
	}, {
		name: "negative priorities: fewer victims still win", inv: node("n", 24576, 24576),
		cands: []Victim{vic(-5, false, 20000, 0, 0), vic(-5, false, 7000, 0, 1), vic(-5, false, 7000, 0, 1)},
		req:   pod(ctr("main", 1, 24576, 0)), want: []int{0}, ok: true,
	}, {
		name: "impossible: a pod of higher priority stays", inv: node("n", 24576),
		cands: []Victim{vic(1, false, 8000, 0, 0)}, others: []Victim{vic(100, false, 8000, 0, 0)},
		req: pod(ctr("main", 1, 20000, 0)), ok: false,
	}, {
		name: "impossible: more GPUs than the node has", inv: node("n", big),
		cands: []Victim{vic(1, false, 8000, 0, 0)}, req: pod(ctr("main", 2, 1000, 0)), ok: false,
	}, {
		name: "already fits", inv: node("n", big),
		cands: []Victim{vic(1, false, 8000, 0, 0)}, req: pod(ctr("main", 1, 1000, 0)), want: []int{}, ok: true,
	}, {
		name: "candidates on no usable GPU are never chosen", inv: func() *device.Inventory {
			n := node("n", 24576, 24576)
			n.GPUs[1].Healthy = false
			return n
		}(),
		cands: []Victim{vic(0, false, 20000, 0, 1), vic(3, false, 20000, 0, 0), {Priority: -9, Charge: Charge{"GPU-x": {MemoryMiB: 1, Sharers: 1}}}},
		req:   pod(ctr("main", 1, 10000, 0)), want: []int{1}, ok: true,
	}, {
		// 2 GPUs of 60000 MiB: GPU-0 {1} with GPU-1 {1,1} (highest priority 1) beats GPU-0 with
		// GPU-2 {2} or GPU-3 {2} (fewer victims, but highest priority 2).
		name: "multi-GPU container", inv: node("n", big, big, big, big),
		cands: []Victim{
			vic(1, false, 30000, 0, 0), vic(1, false, 30000, 0, 1), vic(1, false, 30000, 0, 1),
			vic(2, false, 30000, 0, 2), vic(2, false, 30000, 0, 3),
		},
		req: pod(ctr("main", 2, 60000, 0)), want: []int{0, 1, 2}, ok: true,
	}, {
		name: "multi-GPU container, NUMA bind", inv: func() *device.Inventory {
			n := node("n", big, big, big, big)
			n.GPUs[2].NUMANode, n.GPUs[3].NUMANode = 1, 1
			return n
		}(),
		cands: []Victim{vic(1, false, 30000, 0, 0), vic(1, false, 30000, 0, 2), vic(3, false, 30000, 0, 1), vic(2, false, 30000, 0, 3)},
		req:   func() *device.PodRequest { r := pod(ctr("main", 2, 60000, 0)); r.NUMABind = true; return r }(),
		want:  []int{1, 3}, ok: true,
	}, {
		// A victim on two GPUs (general search): evicting it frees both.
		name: "multi-GPU victim", inv: node("n", big, big, big),
		cands: []Victim{vic(2, false, 30000, 0, 0, 1), vic(1, false, 30000, 0, 1), vic(1, false, 30000, 0, 2), vic(1, false, 30000, 0, 2)},
		req:   pod(ctr("main", 2, 60000, 0)), want: []int{0, 1}, ok: true,
	}, {
		name: "two containers (general search)", inv: node("n", big, big, big),
		cands: []Victim{vic(1, false, 30000, 0, 0), vic(4, false, 30000, 0, 1), vic(2, false, 30000, 0, 2), vic(2, false, 30000, 0, 2)},
		req:   pod(ctr("a", 1, 60000, 0), ctr("b", 1, 60000, 0)), want: []int{0, 2, 3}, ok: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			used := booked(tc.cands, tc.others...)
			before := fmt.Sprint(used)
			got, ok := ChooseVictims(tc.inv, used, tc.cands, tc.req)
			if fmt.Sprint(used) != before {
				t.Fatal("used was modified")
			}
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v (choice %+v)", ok, tc.ok, got)
			}
			if !ok {
				return
			}
			if !slices.Equal(got.Victims, tc.want) && !(len(got.Victims) == 0 && len(tc.want) == 0) {
				t.Fatalf("victims %v, want %v (%+v)", got.Victims, tc.want, got)
			}
			if !got.Exact {
				t.Error("not exact")
			}
			if want := choiceCost(tc.cands, tc.want); got.PDBViolations != want.PDBViolations || got.MaxPriority != want.MaxPriority || got.SumPriority != want.SumPriority {
				t.Errorf("cost %+v, want %+v", got, want)
			}
			if err := Fit(tc.inv, without(used, tc.cands, got.Victims), tc.req); err != nil {
				t.Errorf("does not fit after eviction: %v", err)
			}
		})
	}
}

func TestVictimChoiceBetter(t *testing.T) {
	c := func(pdb int, maxp int32, sum int64, n int) VictimChoice {
		return VictimChoice{Victims: make([]int, n), PDBViolations: pdb, MaxPriority: maxp, SumPriority: sum}
	}
	for _, tc := range []struct {
		a, b VictimChoice
		want bool
	}{
		{c(0, 100, 9e9, 5), c(1, 0, 1, 1), true}, // PDB violations first
		{c(1, 5, 9e9, 5), c(1, 6, 1, 1), true},   // then the highest priority
		{c(1, 5, 10, 5), c(1, 5, 11, 1), true},   // then the sum
		{c(1, 5, 10, 1), c(1, 5, 10, 2), true},   // then the count
		{c(1, 5, 10, 2), c(1, 5, 10, 2), false},
		{c(0, math.MinInt32, 0, 0), c(0, math.MinInt32, 0, 0), false},
	} {
		if got := tc.a.Better(tc.b); got != tc.want {
			t.Errorf("%+v Better %+v = %v", tc.a, tc.b, got)
		}
		if tc.want && tc.b.Better(tc.a) {
			t.Errorf("%+v Better %+v too", tc.b, tc.a)
		}
	}
}

// choiceCost is the VictimChoice of the given candidates, computed plainly.
func choiceCost(cands []Victim, idx []int) VictimChoice {
	c := VictimChoice{Victims: idx, MaxPriority: math.MinInt32}
	for _, i := range idx {
		v := cands[i]
		if v.ViolatesPDB {
			c.PDBViolations++
		}
		c.MaxPriority = max(c.MaxPriority, v.Priority)
		c.SumPriority += int64(v.Priority) + 1<<31
	}
	return c
}

// without is a copy of used with the charges of cands[idx] released (NodeUsage.Sub).
func without(used NodeUsage, cands []Victim, idx []int) NodeUsage {
	u := NodeUsage{}
	for k, g := range used {
		u[k] = g
	}
	for _, i := range idx {
		u.Sub(cands[i].Charge)
	}
	return u
}

// When the general search's budget runs out (two containers on a fragmented node of 16 GPUs,
// 150 candidates), the choice still lets the pod fit, is minimal, is marked inexact and is no
// worse than kube-scheduler's greedy choice.
func TestChooseVictimsBudget(t *testing.T) {
	inv, used, cands := victimNode(16, false)
	req := pod(ctr("a", 1, 60000, 0), ctr("b", 1, 60000, 0))
	got, ok := ChooseVictims(inv, used, cands, req)
	if !ok || got.Exact {
		t.Fatalf("ok %v, exact %v: the budget should run out", ok, got.Exact)
	}
	if err := Fit(inv, without(used, cands, got.Victims), req); err != nil {
		t.Fatalf("does not fit after eviction: %v", err)
	}
	for k := range got.Victims {
		rest := append(slices.Clone(got.Victims[:k]), got.Victims[k+1:]...)
		if Fit(inv, without(used, cands, rest), req) == nil {
			t.Errorf("victim %d need not go", got.Victims[k])
		}
	}
	if g := greedyVictims(inv, used, cands, req); g.Better(got) {
		t.Errorf("chose %+v, kube-scheduler's greedy choice is better: %+v", got, g)
	}
}

// greedyVictims is kube-scheduler's victim selection (SelectVictimsOnNode): every candidate
// removed, then put back PDB violators first, then the others, highest priority first, as long
// as the pod still fits.
func greedyVictims(inv *device.Inventory, used NodeUsage, cands []Victim, req *device.PodRequest) VictimChoice {
	back := make([]int, len(cands))
	for i := range back {
		back[i] = i
	}
	slices.SortStableFunc(back, func(a, b int) int {
		if cands[a].ViolatesPDB != cands[b].ViolatesPDB {
			if cands[a].ViolatesPDB {
				return -1
			}
			return 1
		}
		return int(cands[b].Priority) - int(cands[a].Priority)
	})
	out := map[int]bool{}
	for i := range cands {
		out[i] = true
	}
	for _, v := range back {
		delete(out, v)
		var rest []int
		for i := range cands {
			if out[i] {
				rest = append(rest, i)
			}
		}
		if Fit(inv, without(used, cands, rest), req) != nil {
			out[v] = true
		}
	}
	var idx []int
	for i := range cands {
		if out[i] {
			idx = append(idx, i)
		}
	}
	return choiceCost(cands, idx)
}

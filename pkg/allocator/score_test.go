package allocator

import (
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// Score: mean of booked memory and booked slices after placing the pod, in tenths; binpack
// rates fuller nodes higher, spread emptier.
func TestScore(t *testing.T) {
	empty := node("a", 10000, 10000)
	busy := node("b", 10000, 10000)
	busyUsed := NodeUsage{"GPU-b-0": {MemoryMiB: 5000, Sharers: 1}}
	for _, tc := range []struct {
		policy           device.Policy
		wantEmpty, wantB int
	}{
		// empty: memory 5000/20000 = 250‰, slices 1/20 = 50‰ -> 150‰ -> 2 (rounded); busy: 500‰,
		// 100‰ -> 300‰ -> 3.
		{device.Binpack, 2, 3},
		{device.Spread, 9, 7},
		{"", 2, 3},
	} {
		req := pod(ctr("c", 1, 5000, 0))
		req.NodePolicy = tc.policy
		if got := Score(empty, NodeUsage{}, req); got != tc.wantEmpty {
			t.Errorf("%q empty node: %d, want %d", tc.policy, got, tc.wantEmpty)
		}
		if got := Score(busy, busyUsed, req); got != tc.wantB {
			t.Errorf("%q busy node: %d, want %d", tc.policy, got, tc.wantB)
		}
	}
	// A full node scores 10 under binpack; unfit scores 0 under both policies.
	req := pod(ctr("c", 2, 10000, 0))
	if got := Score(empty, NodeUsage{}, req); got != 6 { // memory 1000‰, slices 100‰ -> 550‰ -> 6
		t.Errorf("full node binpack: %d, want 6", got)
	}
	for _, p := range []device.Policy{device.Binpack, device.Spread} {
		req := pod(ctr("c", 1, 10001, 0))
		req.NodePolicy = p
		if got := Score(empty, NodeUsage{}, req); got != 0 {
			t.Errorf("%s unfit: %d, want 0", p, got)
		}
	}
	// Unhealthy GPUs are left out of the node's capacity.
	sick := node("s", 10000, 10000)
	sick.GPUs[1].Healthy = false
	if got := Score(sick, NodeUsage{}, pod(ctr("c", 1, 10000, 0))); got != 6 { // 1000‰, 100‰
		t.Errorf("node with an unhealthy GPU: %d, want 6", got)
	}
	if got := Score(empty, NodeUsage{}, nil); got != 0 {
		t.Errorf("nil request: %d", got)
	}
}

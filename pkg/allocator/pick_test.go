package allocator

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// Binpack picks the fullest GPU that fits, spread the emptiest; ties by index.
func TestPickPolicy(t *testing.T) {
	inv := node("n1", 10000, 10000, 10000, 10000)
	used := NodeUsage{
		"GPU-n1-1": {MemoryMiB: 5000, Sharers: 1},
		"GPU-n1-2": {MemoryMiB: 9500, Sharers: 1}, // fullest, but 1000 does not fit
		"GPU-n1-3": {MemoryMiB: 2000, Sharers: 1},
	}
	for _, tc := range []struct {
		p    device.Policy
		want string
	}{{device.Binpack, "GPU-n1-1"}, {device.Spread, "GPU-n1-0"}, {"", "GPU-n1-1"}} {
		req := pod(ctr("c", 1, 1000, 0))
		req.GPUPolicy = tc.p
		a, err := Pick(inv, used, req)
		if err != nil {
			t.Fatal(err)
		}
		if got := uuids(a, "c"); !reflect.DeepEqual(got, []string{tc.want}) {
			t.Errorf("%q: %v, want %s", tc.p, got, tc.want)
		}
	}
	// Ties by index, both policies.
	for _, p := range []device.Policy{device.Binpack, device.Spread} {
		req := pod(ctr("c", 2, 1000, 0))
		req.GPUPolicy = p
		a, err := Pick(node("n2", 8000, 8000, 8000), NodeUsage{}, req)
		if err != nil {
			t.Fatal(err)
		}
		if got := uuids(a, "c"); !reflect.DeepEqual(got, []string{"GPU-n2-0", "GPU-n2-1"}) {
			t.Errorf("%s tie: %v", p, got)
		}
	}
}

// A container's Count GPUs are distinct; grants carry the container's figures; allocation fields.
func TestPickDistinctGPUsAndGrants(t *testing.T) {
	inv := node("n1", 16000, 16000, 16000)
	req := pod(ctr("c", 3, 4000, 20), device.ContainerRequest{Name: "p", Kind: device.KindApp, Count: 2, MemoryPercent: 25})
	a := mustPick(t, inv, NodeUsage{}, req)
	if a.Node != "n1" || len(a.Containers) != 2 || a.Containers[0].Name != "c" || a.Containers[1].Name != "p" {
		t.Fatalf("allocation %+v", a)
	}
	seen := map[string]bool{}
	for _, d := range a.Containers[0].Devices {
		if seen[d.UUID] {
			t.Errorf("GPU %s twice", d.UUID)
		}
		seen[d.UUID] = true
		if d.MemoryMiB != 4000 || d.CoresPercent != 20 {
			t.Errorf("grant %+v, want 4000 MiB 20%%", d)
		}
	}
	for _, d := range a.Containers[1].Devices {
		if d.MemoryMiB != 4000 || d.CoresPercent != 0 {
			t.Errorf("percent grant %+v, want 4000 MiB", d)
		}
	}
	if a.Containers[0].Kind != device.KindApp {
		t.Errorf("kind %q", a.Containers[0].Kind)
	}
}

// nvNode is an 8-GPU node: NUMA 0 holds GPU 0..3, NUMA 1 GPU 4..7; NVLink pairs given.
func nvNode(links [][2]int) *device.Inventory {
	inv := node("n1", 40960, 40960, 40960, 40960, 40960, 40960, 40960, 40960)
	for i := range inv.GPUs {
		inv.GPUs[i].NUMANode = i / 4
	}
	for _, l := range links {
		// One side reports the link: links are symmetric.
		inv.GPUs[l[0]].NVLinkPeers = append(inv.GPUs[l[0]].NVLinkPeers, inv.GPUs[l[1]].UUID)
	}
	return inv
}

func TestPickNVLinkAndNUMA(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inv    *device.Inventory
		used   NodeUsage
		count  int
		bind   bool
		policy device.Policy
		want   []string
		unfit  string
	}{
		{name: "no topology: first GPUs", inv: nvNode(nil), count: 2, want: []string{"GPU-n1-0", "GPU-n1-1"}},
		{name: "NVLink pair preferred", inv: nvNode([][2]int{{0, 2}}), count: 2, want: []string{"GPU-n1-0", "GPU-n1-2"}},
		{name: "NVLink clique of 3", inv: nvNode([][2]int{{1, 5}, {5, 6}, {1, 6}, {0, 1}}), count: 3, want: []string{"GPU-n1-1", "GPU-n1-5", "GPU-n1-6"}},
		{name: "NVLink and NUMA beat NVLink alone", inv: nvNode([][2]int{{0, 4}, {1, 2}}), count: 2, want: []string{"GPU-n1-1", "GPU-n1-2"}},
		{name: "one NUMA node preferred without bind", inv: nvNode(nil),
			used: NodeUsage{"GPU-n1-1": full, "GPU-n1-2": full, "GPU-n1-3": full}, count: 2, want: []string{"GPU-n1-4", "GPU-n1-5"}},
		{name: "split across NUMA when nothing else", inv: nvNode(nil),
			used: NodeUsage{"GPU-n1-1": full, "GPU-n1-2": full, "GPU-n1-3": full, "GPU-n1-5": full, "GPU-n1-6": full, "GPU-n1-7": full}, count: 2, want: []string{"GPU-n1-0", "GPU-n1-4"}},
		{name: "NUMA bind refuses a split", inv: nvNode(nil), bind: true,
			used: NodeUsage{"GPU-n1-1": full, "GPU-n1-2": full, "GPU-n1-3": full, "GPU-n1-5": full, "GPU-n1-6": full, "GPU-n1-7": full}, count: 2,
			unfit: `container "c" (2 GPUs, 1000 MiB): 2 GPUs fit but no NUMA node has 2 of them (nvidia.com/numa-bind); GPU-1..3,5..7 0 of 40960 MiB free`},
		{name: "NUMA bind takes the node that has room", inv: nvNode(nil), bind: true,
			used: NodeUsage{"GPU-n1-1": full, "GPU-n1-2": full, "GPU-n1-3": full}, count: 3, want: []string{"GPU-n1-4", "GPU-n1-5", "GPU-n1-6"}},
		{name: "spread order inside the preferred set", inv: nvNode(nil), policy: device.Spread,
			used: NodeUsage{"GPU-n1-0": half, "GPU-n1-1": half}, count: 2, want: []string{"GPU-n1-2", "GPU-n1-3"}},
		{name: "binpack order inside the preferred set", inv: nvNode(nil),
			used: NodeUsage{"GPU-n1-2": half, "GPU-n1-3": half}, count: 2, want: []string{"GPU-n1-2", "GPU-n1-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := pod(ctr("c", tc.count, 1000, 0))
			req.NUMABind = tc.bind
			if tc.policy != "" {
				req.GPUPolicy = tc.policy
			}
			used := tc.used
			if used == nil {
				used = NodeUsage{}
			}
			a, err := Pick(tc.inv, used, req)
			ferr := Fit(tc.inv, used, req)
			if (err == nil) != (ferr == nil) {
				t.Fatalf("Pick %v, Fit %v", err, ferr)
			}
			if tc.unfit != "" {
				if err == nil || err.Error() != tc.unfit {
					t.Fatalf("Pick: %v, want %q", err, tc.unfit)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := uuids(a, "c"); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

var (
	full = GPUUsage{MemoryMiB: 40960, Sharers: 1}
	half = GPUUsage{MemoryMiB: 20480, Sharers: 1}
)

// A 16-GPU fully NVLinked node asking 8 GPUs stays within the combination bound and still finds
// a one-NUMA clique; a 20-GPU node (over the stack buffers) works too.
func TestPickLargeNodes(t *testing.T) {
	mib := make([]int64, 20)
	for i := range mib {
		mib[i] = 81920
	}
	inv := node("big", mib...)
	for i := range inv.GPUs {
		inv.GPUs[i].NUMANode = i % 2
		for j := range inv.GPUs {
			if i != j {
				inv.GPUs[i].NVLinkPeers = append(inv.GPUs[i].NVLinkPeers, inv.GPUs[j].UUID)
			}
		}
	}
	req := pod(ctr("c", 8, 1000, 0), ctr("d", 8, 1000, 0))
	req.NUMABind = true
	a := mustPick(t, inv, NodeUsage{}, req)
	for _, name := range []string{"c", "d"} {
		numa := -1
		for _, u := range uuids(a, name) {
			var g *device.GPU
			for i := range inv.GPUs {
				if inv.GPUs[i].UUID == u {
					g = &inv.GPUs[i]
				}
			}
			if numa >= 0 && g.NUMANode != numa {
				t.Errorf("%s spans NUMA nodes: %v", name, uuids(a, name))
			}
			numa = g.NUMANode
		}
	}
	if err := Fit(inv, NodeUsage{}, pod(ctr("c", 21, 1000, 0))); err == nil || !strings.Contains(err.Error(), "node has 20 GPUs") {
		t.Errorf("Fit 21: %v", err)
	}
}

// When the request order would strand a container, the second attempt (largest first) places it.
func TestPickSecondAttempt(t *testing.T) {
	inv := node("n1", 10000, 6000)
	req := pod(ctr("small", 1, 5000, 0), ctr("big", 1, 10000, 0))
	req.GPUPolicy = device.Spread // spread would put "small" on the empty 10000 card first
	a := mustPick(t, inv, NodeUsage{}, req)
	if got := uuids(a, "big"); !reflect.DeepEqual(got, []string{"GPU-n1-0"}) {
		t.Errorf("big on %v", got)
	}
	if got := uuids(a, "small"); !reflect.DeepEqual(got, []string{"GPU-n1-1"}) {
		t.Errorf("small on %v", got)
	}
}

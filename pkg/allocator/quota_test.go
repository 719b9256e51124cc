package allocator

import (
	"math/rand"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

func TestRequestedMemoryMiB(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    device.ContainerRequest
		mib  int64
		ok   bool
	}{
		{"2 GPUs x 30000 MiB", device.ContainerRequest{Count: 2, MemoryMiB: 30000}, 60000, true},
		{"1 GPU x 30000 MiB", device.ContainerRequest{Count: 1, MemoryMiB: 30000}, 30000, true},
		{"percentage: unknown before placement", device.ContainerRequest{Count: 1, MemoryPercent: 50}, 0, false},
		{"no memory given (100%): unknown", device.ContainerRequest{Count: 1}, 0, false},
		{"no GPU", device.ContainerRequest{}, 0, true},
	} {
		mib, ok := RequestedMemoryMiB(tc.c)
		if mib != tc.mib || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.name, mib, ok, tc.mib, tc.ok)
		}
	}
}

// The pod figure follows Kubernetes' effective-request rule (component-helpers PodRequests):
// max(each classic init + the sidecars declared before it, all sidecars + all app containers).
func TestEffectiveMemoryMiB(t *testing.T) {
	c := func(name string, kind device.ContainerKind, n int, mib int64) device.ContainerRequest {
		return device.ContainerRequest{Name: name, Kind: kind, Count: n, MemoryMiB: mib}
	}
	pct := device.ContainerRequest{Name: "p", Kind: device.KindApp, Count: 1, MemoryPercent: 50}
	for _, tc := range []struct {
		name string
		cs   []device.ContainerRequest
		want int64
	}{
		{"one app 2 x 30000", []device.ContainerRequest{c("a", device.KindApp, 2, 30000)}, 60000},
		{"two apps add up", []device.ContainerRequest{c("a", device.KindApp, 1, 30000), c("b", device.KindApp, 2, 1000)}, 32000},
		{"init larger than app: init counts", []device.ContainerRequest{c("i", device.KindInit, 1, 50000), c("a", device.KindApp, 1, 30000)}, 50000},
		{"inits run one by one: the largest", []device.ContainerRequest{c("i1", device.KindInit, 1, 10240), c("i2", device.KindInit, 1, 10240), c("a", device.KindApp, 1, 1000)}, 10240},
		{"sidecar beside init and beside app", []device.ContainerRequest{c("s", device.KindSidecar, 1, 8192), c("i", device.KindInit, 1, 9831), c("a", device.KindApp, 1, 8192)}, 18023},
		{"init before sidecar runs alone", []device.ContainerRequest{c("i", device.KindInit, 1, 20000), c("s", device.KindSidecar, 1, 8192), c("a", device.KindApp, 1, 8192)}, 20000},
		{"percentage counts 0", []device.ContainerRequest{pct, c("a", device.KindApp, 1, 1000)}, 1000},
	} {
		// kubelet order: init containers first
		var r device.PodRequest
		for _, app := range []bool{false, true} {
			for _, x := range tc.cs {
				if (x.Kind == device.KindApp) == app {
					r.Containers = append(r.Containers, x)
				}
			}
		}
		if got := EffectiveMemoryMiB(r); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// Property (cases C40, C44 and the node figure): for pods placed one after another by Pick on random
// nodes, the figure Kubernetes counts for each pod (EffectiveMemoryMiB) never exceeds what the
// extender books for it (sum of ChargeOf over its GPUs), and equals it when no classic init
// container holds a GPU; so the node's sum of counted figures never exceeds the node's published
// device.NodeGPUMemoryMiB, and NodeResourcesFit never refuses a pod Pick placed.
func TestPropertyCountedMemoryWithinBooking(t *testing.T) {
	rng := rand.New(rand.NewSource(25))
	placed, exact := 0, 0
	for n := 0; n < 300; n++ {
		inv := randomInventory(rng, n)
		var bookable []int64
		for i := range inv.GPUs {
			bookable = append(bookable, inv.CapacityMiB(&inv.GPUs[i]))
		}
		nodeFigure := device.NodeGPUMemoryMiB(bookable)
		used := NodeUsage{}
		var counted int64
		for p := 0; p < 12; p++ {
			r := randomRequest(rng, inv)
			for i := range r.Containers { // MiB only: percentages get no figure
				if r.Containers[i].MemoryMiB == 0 {
					r.Containers[i].MemoryMiB = 1 + rng.Int63n(30000)
					r.Containers[i].MemoryPercent = 0
				}
			}
			a, err := Pick(inv, used, r)
			if err != nil {
				continue
			}
			placed++
			ch := ChargeOf(&a)
			used.Add(ch)
			var booked int64
			for _, g := range ch {
				booked += g.MemoryMiB
			}
			eff := EffectiveMemoryMiB(*r)
			hasInit := false
			for _, c := range r.Containers {
				hasInit = hasInit || c.Kind == device.KindInit
			}
			if eff > booked {
				t.Fatalf("node %d pod %d: counted %d MiB > booked %d MiB (%+v)", n, p, eff, booked, r.Containers)
			}
			if !hasInit {
				exact++
				if eff != booked {
					t.Fatalf("node %d pod %d: no classic init, counted %d MiB != booked %d MiB (%+v)", n, p, eff, booked, r.Containers)
				}
			}
			counted += eff
			if counted > nodeFigure {
				t.Fatalf("node %d: counted %d MiB > node figure %d MiB", n, counted, nodeFigure)
			}
		}
	}
	if placed < 300 || exact < 100 {
		t.Fatalf("too few pods placed (%d) or without init (%d): the property was not exercised", placed, exact)
	}
}

func TestNodeGPUMemoryMiB(t *testing.T) {
	if got := device.NodeGPUMemoryMiB([]int64{81920, 81920, 0, -1}); got != 163840 {
		t.Fatalf("%d, want 163840", got)
	}
}

package allocator

import (
	"math/rand"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

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
			eff := device.EffectiveMemoryMiB(*r)
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

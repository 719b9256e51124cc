package allocator

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// randomInventory: 1..9 GPUs of mixed sizes, NUMA nodes, NVLink, some unhealthy or MIG.
func randomInventory(rng *rand.Rand, id int) *device.Inventory {
	inv := &device.Inventory{Node: fmt.Sprintf("n%d", id), SplitCount: 1 + rng.Intn(10), MemoryScaling: []float64{1, 1, 1.5, 2}[rng.Intn(4)]}
	n := 1 + rng.Intn(9)
	for i := 0; i < n; i++ {
		inv.GPUs = append(inv.GPUs, device.GPU{
			UUID: fmt.Sprintf("GPU-%d-%d", id, i), Index: i, Model: []string{"NVIDIA A10", "NVIDIA A100-SXM4-80GB", "NVIDIA H200"}[rng.Intn(3)],
			MemoryMiB: []int64{16384, 24576, 40960, 81920}[rng.Intn(4)], NUMANode: rng.Intn(3) - 1,
			Healthy: rng.Intn(10) > 0, MIGEnabled: rng.Intn(20) == 0,
		})
	}
	for i := range inv.GPUs {
		for j := range inv.GPUs {
			if i != j && rng.Intn(3) == 0 {
				inv.GPUs[i].NVLinkPeers = append(inv.GPUs[i].NVLinkPeers, inv.GPUs[j].UUID)
			}
		}
	}
	return inv
}

func randomRequest(rng *rand.Rand, inv *device.Inventory) *device.PodRequest {
	r := &device.PodRequest{GPUPolicy: []device.Policy{device.Binpack, device.Spread}[rng.Intn(2)], NodePolicy: device.Binpack, NUMABind: rng.Intn(4) == 0}
	kinds := []device.ContainerKind{device.KindInit, device.KindSidecar, device.KindApp}
	n := []int{1, 1, 2, 3, 4}[rng.Intn(5)]
	for i := 0; i < n; i++ {
		c := device.ContainerRequest{Name: fmt.Sprintf("c%d", i), Kind: kinds[rng.Intn(3)], Count: 1 + rng.Intn(3)}
		switch rng.Intn(3) {
		case 0:
			c.MemoryMiB = 1 + rng.Int63n(30000)
		case 1:
			c.MemoryPercent = 1 + rng.Intn(100)
		}
		c.CoresPercent = []int{0, 0, 10, 30, 50, 100}[rng.Intn(6)]
		r.Containers = append(r.Containers, c)
	}
	// kubelet order: init and sidecar containers before app containers
	var ordered []device.ContainerRequest
	for _, app := range []bool{false, true} {
		for _, c := range r.Containers {
			if (c.Kind == device.KindApp) == app {
				ordered = append(ordered, c)
			}
		}
	}
	r.Containers = ordered
	if rng.Intn(5) == 0 {
		r.AvoidModels = []string{"A10"}
	}
	if rng.Intn(8) == 0 {
		r.UseUUIDs = []string{inv.GPUs[0].UUID, fmt.Sprintf("GPU-x-%d", rng.Intn(3))}
	}
	return r
}

// Property: on random nodes, pods placed one after another with Pick and booked with ChargeOf
// never exceed any GPU's capacity; Fit agrees with Pick; the allocation validates and respects
// filters, health and MIG; Score is within 0..10 and 0 exactly for unfit pods under binpack.
func TestPropertyPickNeverOverbooks(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	placed, refused := 0, 0
	for n := 0; n < 300; n++ {
		inv := randomInventory(rng, n)
		used := NodeUsage{}
		pods := map[string]int{}  // GPU UUID -> pods on it
		excl := map[string]bool{} // GPU UUID -> some pod holds it exclusively
		for p := 0; p < 25; p++ {
			req := randomRequest(rng, inv)
			ferr := Fit(inv, used, req)
			a, perr := Pick(inv, used, req)
			if (ferr == nil) != (perr == nil) {
				t.Fatalf("node %d pod %d: Fit %v, Pick %v\nreq %+v\ninv %+v\nused %v", n, p, ferr, perr, req, inv, used)
			}
			s := Score(inv, used, req)
			if s < 0 || s > 10 || (perr != nil && s != 0) {
				t.Fatalf("Score %d (err %v)", s, perr)
			}
			if full := scoreFull(inv, used, req); s != full {
				t.Fatalf("Score %d, full placement scores %d\nreq %+v\ninv %+v\nused %v", s, full, req, inv, used)
			}
			if (ferr == nil) != (fullFit(inv, used, req) == nil) {
				t.Fatalf("Fit fast path %v disagrees with the full placement", ferr)
			}
			if perr != nil {
				if perr.Error() == "" {
					t.Fatal("empty reason")
				}
				refused++
				continue
			}
			placed++
			if err := a.Validate(); err != nil {
				t.Fatalf("allocation invalid: %v", err)
			}
			for _, c := range a.Containers {
				rc := findReq(req, c.Name)
				if len(c.Devices) != rc.Count {
					t.Fatalf("%s got %d GPUs, asked %d", c.Name, len(c.Devices), rc.Count)
				}
				numa := map[int]bool{}
				for _, d := range c.Devices {
					g := findGPU(inv, d.UUID)
					numa[g.NUMANode] = true
					if !g.Healthy || g.MIGEnabled || !device.ModelAllowed(req.UseModels, req.AvoidModels, g.Model) ||
						(len(req.UseUUIDs) > 0 && !contains(req.UseUUIDs, g.UUID)) {
						t.Fatalf("%s placed on excluded GPU %+v", c.Name, g)
					}
					if d.MemoryMiB != memOn(rc, g) || d.CoresPercent != rc.CoresPercent {
						t.Fatalf("grant %+v for %+v on %d MiB", d, rc, g.MemoryMiB)
					}
				}
				if req.NUMABind && len(numa) > 1 {
					t.Fatalf("%s spans NUMA nodes %v with numa-bind", c.Name, numa)
				}
			}
			ch := ChargeOf(&a)
			for u, g := range ch {
				pods[u]++
				excl[u] = excl[u] || g.Exclusive
				if excl[u] && pods[u] > 1 {
					t.Fatalf("GPU %s held exclusively but shared by %d pods", u, pods[u])
				}
			}
			used.Add(ch)
			checkCapacity(t, inv, used)
		}
	}
	if placed < 500 || refused < 500 {
		t.Errorf("placed %d, refused %d: the generator should exercise both", placed, refused)
	}
}

// fullFit is Fit without the fast path.
func fullFit(inv *device.Inventory, used NodeUsage, req *device.PodRequest) error {
	var sc scratch
	st, bad := newState(&sc, inv, used, req)
	if bad != "" {
		return &Unfit{Reason: bad}
	}
	if failed := st.place(); failed >= 0 {
		return &Unfit{Reason: st.reason(failed)}
	}
	return nil
}

func findReq(r *device.PodRequest, name string) *device.ContainerRequest {
	for i := range r.Containers {
		if r.Containers[i].Name == name {
			return &r.Containers[i]
		}
	}
	return nil
}

func findGPU(inv *device.Inventory, uuid string) *device.GPU {
	for i := range inv.GPUs {
		if inv.GPUs[i].UUID == uuid {
			return &inv.GPUs[i]
		}
	}
	return nil
}

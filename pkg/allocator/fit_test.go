package allocator

import (
	"strings"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// Each capacity and filter rule, on one GPU of 10000 MiB with split count 3 (unless changed).
func TestFitRules(t *testing.T) {
	base := func() *device.Inventory {
		inv := node("n1", 10000)
		inv.SplitCount = 3
		return inv
	}
	one := func(mutate func(*device.Inventory)) *device.Inventory {
		inv := base()
		if mutate != nil {
			mutate(inv)
		}
		return inv
	}
	const u = "GPU-n1-0"
	for _, tc := range []struct {
		name string
		inv  *device.Inventory
		used NodeUsage
		req  *device.PodRequest
		want string // "" = fits
	}{
		{"empty GPU", base(), nil, pod(ctr("c", 1, 10000, 0)), ""},
		{"split count reached", base(), NodeUsage{u: {Sharers: 3, MemoryMiB: 3}}, pod(ctr("c", 1, 1, 0)), "GPU-0 3/3 slices used"},
		{"split count one left", base(), NodeUsage{u: {Sharers: 2, MemoryMiB: 2}}, pod(ctr("c", 1, 1, 0)), ""},
		{"own containers count as sharers", base(), nil, pod(ctr("a", 1, 1, 0), ctr("b", 1, 1, 0), ctr("c", 1, 1, 0), ctr("d", 1, 1, 0)), `container "d" (1 GPU, 1 MiB): GPU-0 3/3 slices used`},
		{"memory exactly full", base(), NodeUsage{u: {MemoryMiB: 4000, Sharers: 1}}, pod(ctr("c", 1, 6000, 0)), ""},
		{"memory one MiB over", base(), NodeUsage{u: {MemoryMiB: 4000, Sharers: 1}}, pod(ctr("c", 1, 6001, 0)), "GPU-0 6000 of 10000 MiB free"},
		{"scaling 1.5 allows 15000", one(func(i *device.Inventory) { i.MemoryScaling = 1.5 }), NodeUsage{u: {MemoryMiB: 10000, Sharers: 1}}, pod(ctr("c", 1, 5000, 0)), ""},
		{"scaling 1.5 stops at 15000", one(func(i *device.Inventory) { i.MemoryScaling = 1.5 }), NodeUsage{u: {MemoryMiB: 10000, Sharers: 1}}, pod(ctr("c", 1, 5001, 0)), "GPU-0 5000 of 15000 MiB free"},
		{"percent is of physical memory under scaling", one(func(i *device.Inventory) { i.MemoryScaling = 2 }), NodeUsage{u: {MemoryMiB: 15000, Sharers: 1}}, pod(device.ContainerRequest{Name: "c", Kind: device.KindApp, Count: 1, MemoryPercent: 50}), ""},
		{"cores to 100", base(), NodeUsage{u: {CoresPercent: 70, Sharers: 1, MemoryMiB: 1}}, pod(ctr("c", 1, 1, 30)), ""},
		{"cores over 100", base(), NodeUsage{u: {CoresPercent: 71, Sharers: 1, MemoryMiB: 1}}, pod(ctr("c", 1, 1, 30)), "GPU-0 29 percent cores free"},
		{"exclusive on empty GPU", base(), nil, pod(ctr("c", 1, 1000, 100)), ""},
		{"exclusive needs unshared GPU", base(), NodeUsage{u: {Sharers: 1, MemoryMiB: 1}}, pod(ctr("c", 1, 1000, 100)), "GPU-0 shared by 1 (100 percent cores needs an unshared GPU)"},
		{"nobody joins exclusive (cores 0)", base(), NodeUsage{u: {Sharers: 1, MemoryMiB: 1000, CoresPercent: 100, Exclusive: true}}, pod(ctr("c", 1, 1, 0)), "GPU-0 held exclusively (100 percent cores)"},
		{"exclusive container and own sibling", base(), nil, pod(ctr("x", 1, 1000, 100), ctr("y", 1, 1, 0)), `container "y" (1 GPU, 1 MiB): GPU-0 held exclusively (100 percent cores)`},
		{"unhealthy never chosen", one(func(i *device.Inventory) { i.GPUs[0].Healthy = false }), nil, pod(ctr("c", 1, 1, 0)), "GPU-0 unhealthy"},
		{"MIG never chosen", one(func(i *device.Inventory) { i.GPUs[0].MIGEnabled = true }), nil, pod(ctr("c", 1, 1, 0)), "GPU-0 MIG enabled"},
		{"uuid allowed", base(), nil, withUUIDs(pod(ctr("c", 1, 1, 0)), []string{u}, nil), ""},
		{"uuid not in allow list", base(), nil, withUUIDs(pod(ctr("c", 1, 1, 0)), []string{"GPU-n1"}, nil), "GPU-0 not in nvidia.com/use-gpuuuid"},
		{"uuid denied", base(), nil, withUUIDs(pod(ctr("c", 1, 1, 0)), nil, []string{u}), "GPU-0 (GPU-n1-0) in nvidia.com/nouse-gpuuuid"},
		{"uuid deny is exact", base(), nil, withUUIDs(pod(ctr("c", 1, 1, 0)), nil, []string{"GPU-n1"}), ""},
		{"default 100 percent memory", base(), NodeUsage{u: {MemoryMiB: 1, Sharers: 1}}, pod(device.ContainerRequest{Name: "c", Kind: device.KindApp, Count: 1}), "GPU-0 9999 of 10000 MiB free"},
		{"no GPU container fits", base(), nil, pod(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Fit(tc.inv, tc.used, tc.req)
			_, perr := Pick(tc.inv, tc.used, tc.req)
			if (err == nil) != (perr == nil) {
				t.Fatalf("Fit %v but Pick %v", err, perr)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Fit: %v, want fit", err)
			case tc.want != "" && err == nil:
				t.Errorf("Fit: fits, want %q", tc.want)
			case tc.want != "":
				r := unfitReason(t, err)
				// kube-scheduler records extender reasons with a printf-style call: a '%'
				// reached users as "100%!m(MISSING)emory".
				if strings.Contains(r, "%") {
					t.Errorf("reason %q contains '%%'", r)
				}
				if tc.want[0] == 'c' { // a whole reason
					if r != tc.want {
						t.Errorf("reason %q, want %q", r, tc.want)
					}
				} else if r != describe(&tc.req.Containers[0])+": "+tc.want {
					t.Errorf("reason %q, want …%q", r, tc.want)
				}
			}
		})
	}
}

func withUUIDs(r *device.PodRequest, use, avoid []string) *device.PodRequest {
	r.UseUUIDs, r.AvoidUUIDs = use, avoid
	return r
}

// A user reads the reason on an 8-GPU node: short, grouped by cause.
func TestReasonOnEightGPUNode(t *testing.T) {
	inv := node("n1", 24576, 24576, 24576, 24576, 24576, 24576, 24576, 24576)
	used := NodeUsage{}
	used[inv.GPUs[0].UUID] = GPUUsage{MemoryMiB: 22576, Sharers: 2}
	used[inv.GPUs[1].UUID] = GPUUsage{MemoryMiB: 10000, Sharers: 10}
	inv.GPUs[2].Healthy = false
	for i := 3; i < 8; i++ {
		used[inv.GPUs[i].UUID] = GPUUsage{MemoryMiB: 20000, Sharers: 4}
	}
	inv.GPUs[6].Healthy = false
	r := unfitReason(t, Fit(inv, used, pod(ctr("train", 1, 8000, 30))))
	want := `container "train" (1 GPU, 8000 MiB, 30 percent cores): GPU-0 2000 of 24576 MiB free; GPU-1 10/10 slices used; GPU-2,6 unhealthy; GPU-3..5,7 4576 of 24576 MiB free`
	if r != want {
		t.Errorf("reason\n %q\nwant\n %q", r, want)
	}
	if len(r) > 200 {
		t.Errorf("reason is %d characters", len(r))
	}
}

func TestIndexList(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{{[]int{0}, "0"}, {[]int{0, 1}, "0,1"}, {[]int{0, 1, 2}, "0..2"}, {[]int{0, 1, 2, 3, 5}, "0..3,5"}, {[]int{1, 3, 4, 5, 7, 8}, "1,3..5,7,8"}} {
		if got := indexList(tc.in); got != tc.want {
			t.Errorf("indexList(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Fit allocates nothing on the success path (8-GPU node, one container), nor the multi-container
// path that needs the scratch state.
func TestFitAllocationFree(t *testing.T) {
	invs, used := benchFleet(1, 10)
	for _, req := range []*device.PodRequest{
		pod(ctr("main", 1, 8000, 0)),
		pod(ctr("a", 1, 8000, 10), ctr("b", 2, 4000, 0)),
	} {
		if err := Fit(invs[0], used[0], req); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { _ = Fit(invs[0], used[0], req) }); n != 0 {
			t.Errorf("Fit of %d containers: %v allocations per run, want 0", len(req.Containers), n)
		}
	}
}

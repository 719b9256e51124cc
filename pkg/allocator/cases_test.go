package allocator

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hami-go/hami-go/pkg/device"
)

func unfitReason(t *testing.T, err error) string {
	t.Helper()
	var u *Unfit
	if !errors.As(err, &u) {
		t.Fatalf("got %v, want *Unfit", err)
	}
	return u.Reason
}

// case C01: two GPU containers, card A filled by container 1, so container 2 goes to card B;
// usage booked equals the devices written to the pod; no card over its total.
func TestC01TwoContainersDifferentCards(t *testing.T) {
	inv := node("n1", 10240, 10240)
	used := NodeUsage{}
	a := mustPick(t, inv, used, pod(ctr("c1", 1, 10240, 0), ctr("c2", 1, 1024, 0)))
	if got := uuids(a, "c1"); !reflect.DeepEqual(got, []string{"GPU-n1-0"}) {
		t.Errorf("c1 got %v, want [GPU-n1-0]", got)
	}
	if got := uuids(a, "c2"); !reflect.DeepEqual(got, []string{"GPU-n1-1"}) {
		t.Errorf("c2 got %v, want [GPU-n1-1]", got)
	}
	want := NodeUsage{"GPU-n1-0": {MemoryMiB: 10240, Sharers: 1}, "GPU-n1-1": {MemoryMiB: 1024, Sharers: 1}}
	if !reflect.DeepEqual(used, want) {
		t.Errorf("usage %v, want %v", used, want)
	}
	// The recorded usage is exactly the sum of the grants written to the pod.
	for _, c := range a.Containers {
		for _, d := range c.Devices {
			if used[d.UUID].MemoryMiB != d.MemoryMiB {
				t.Errorf("%s: booked %d MiB, granted %d", d.UUID, used[d.UUID].MemoryMiB, d.MemoryMiB)
			}
		}
	}
	r := unfitReason(t, Fit(inv, used, pod(ctr("c3", 1, 9217, 0))))
	if want := `container "c3" (1 GPU, 9217 MiB): GPU-0 0 of 10240 MiB free; GPU-1 9216 of 10240 MiB free`; r != want {
		t.Errorf("reason %q, want %q", r, want)
	}
}

// case C01, reversed order: the small container first must not block the big one.
func TestC01SmallFirst(t *testing.T) {
	for _, p := range []device.Policy{device.Binpack, device.Spread} {
		inv := node("n1", 10240, 10240)
		req := pod(ctr("small", 1, 1024, 0), ctr("big", 1, 10240, 0))
		req.GPUPolicy = p
		a := mustPick(t, inv, NodeUsage{}, req)
		if uuids(a, "small")[0] == uuids(a, "big")[0] {
			t.Errorf("%s: both containers on %s", p, uuids(a, "big")[0])
		}
	}
}

func gpuLimits(count string, mem string, cores string) corev1.ResourceRequirements {
	l := corev1.ResourceList{}
	if count != "" {
		l["nvidia.com/gpu"] = resource.MustParse(count)
	}
	if mem != "" {
		l["nvidia.com/gpumem"] = resource.MustParse(mem)
	}
	if cores != "" {
		l["nvidia.com/gpucores"] = resource.MustParse(cores)
	}
	return corev1.ResourceRequirements{Limits: l}
}

// case C02: non-GPU containers around GPU ones; allocations are looked up by name.
func TestC02NonGPUContainersAround(t *testing.T) {
	names := device.DefaultResourceNames()
	for _, tc := range []struct {
		name  string
		ctrs  []corev1.Container
		gpu   []string
		nogpu []string
	}{
		{"none-gpu-none", []corev1.Container{
			{Name: "log"}, {Name: "train", Resources: gpuLimits("1", "3000", "30")}, {Name: "proxy"},
		}, []string{"train"}, []string{"log", "proxy"}},
		{"gpu-none-gpu", []corev1.Container{
			{Name: "a", Resources: gpuLimits("1", "3000", "")}, {Name: "mid"}, {Name: "b", Resources: gpuLimits("1", "4000", "")},
		}, []string{"a", "b"}, []string{"mid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := device.ParsePodRequest(&corev1.Pod{Spec: corev1.PodSpec{Containers: tc.ctrs}}, names)
			if err != nil {
				t.Fatal(err)
			}
			inv := node("n1", 24576, 24576)
			a := mustPick(t, inv, NodeUsage{}, &req)
			if len(a.Containers) != len(tc.gpu) {
				t.Fatalf("allocation has %d containers, want %d: %+v", len(a.Containers), len(tc.gpu), a)
			}
			for _, n := range tc.gpu {
				c := a.Container(n)
				if c == nil || len(c.Devices) != 1 {
					t.Fatalf("container %q: %+v, want one device", n, c)
				}
			}
			for _, n := range tc.nogpu {
				if a.Container(n) != nil {
					t.Errorf("non-GPU container %q got an allocation", n)
				}
			}
			if tc.name == "none-gpu-none" {
				d := a.Container("train").Devices[0]
				if d.MemoryMiB != 3000 || d.CoresPercent != 30 {
					t.Errorf("train got %+v, want 3000 MiB, 30%%", d)
				}
			} else {
				if a.Container("a").Devices[0].MemoryMiB != 3000 || a.Container("b").Devices[0].MemoryMiB != 4000 {
					t.Errorf("grants swapped: %+v", a.Containers)
				}
			}
		})
	}
}

func initCtr(name string, kind device.ContainerKind, count int, mib int64, pct int) device.ContainerRequest {
	return device.ContainerRequest{Name: name, Kind: kind, Count: count, MemoryMiB: mib, MemoryPercent: pct}
}

// case C03 A: three classic init containers of 1 slice + 10240 and a non-GPU app container run
// one after another, so each pod is charged 10240 on one GPU: both pods of the Job schedule, on
// node-1 (2 × 16 GiB) as on node-2 (3 × 16 GiB).
func TestC03AInitContainersRunOneByOne(t *testing.T) {
	mk := func() *device.PodRequest {
		return pod(initCtr("i1", device.KindInit, 1, 10240, 0), initCtr("i2", device.KindInit, 1, 10240, 0), initCtr("i3", device.KindInit, 1, 10240, 0))
	}
	for _, inv := range []*device.Inventory{node("node-1", 16384, 16384), node("node-2", 16384, 16384, 16384)} {
		used := NodeUsage{}
		for p := 0; p < 2; p++ {
			a := mustPick(t, inv, used, mk())
			ch := ChargeOf(&a)
			if len(ch) != 1 {
				t.Fatalf("%s pod %d: charged on %d GPUs, want 1: %v", inv.Node, p, len(ch), ch)
			}
			for _, g := range ch {
				if g != (GPUUsage{MemoryMiB: 10240, Sharers: 1}) {
					t.Errorf("%s pod %d: charge %+v, want 10240 MiB, 1 sharer", inv.Node, p, g)
				}
			}
		}
	}
}

// case C03 B: an app container (50%) and a native sidecar (50%) run together: both are charged,
// 100% of the one GPU.
func TestC03BSidecarAndAppBothCharged(t *testing.T) {
	inv := node("n1", 16384)
	used := NodeUsage{}
	mustPick(t, inv, used, pod(initCtr("side", device.KindSidecar, 1, 0, 50), initCtr("app", device.KindApp, 1, 0, 50)))
	if want := (GPUUsage{MemoryMiB: 16384, Sharers: 2}); used["GPU-n1-0"] != want {
		t.Errorf("usage %+v, want %+v", used["GPU-n1-0"], want)
	}
	r := unfitReason(t, Fit(inv, used, pod(ctr("x", 1, 1, 0))))
	if !strings.Contains(r, "GPU-0 0 of 16384 MiB free") {
		t.Errorf("reason %q", r)
	}
}

// case C03 C: [sidecar 50%][classic init 60%] is charged 110% at init time: no fit on one GPU;
// on two GPUs the init container goes to the other card.
func TestC03CSidecarPlusInitOverOneGPU(t *testing.T) {
	req := pod(initCtr("side", device.KindSidecar, 1, 0, 50), initCtr("init", device.KindInit, 1, 0, 60))
	r := unfitReason(t, Fit(node("n1", 16384), NodeUsage{}, req))
	if want := `container "init" (1 GPU, 60 percent memory): GPU-0 8192 of 16384 MiB free`; r != want {
		t.Errorf("reason %q, want %q", r, want)
	}
	if _, err := Pick(node("n1", 16384), NodeUsage{}, req); err == nil {
		t.Error("Pick succeeded where Fit failed")
	}
	a := mustPick(t, node("n2", 16384, 16384), NodeUsage{}, req)
	if uuids(a, "side")[0] == uuids(a, "init")[0] {
		t.Errorf("sidecar and init on one GPU: %+v", a)
	}
}

// A classic init container after the app phase's sidecars may reuse the sidecar's capacity only
// in its own phase: [init 60%][sidecar 50%] fits one GPU (the init ends before the sidecar starts).
func TestInitBeforeSidecarShares(t *testing.T) {
	inv := node("n1", 10000)
	used := NodeUsage{}
	mustPick(t, inv, used, pod(initCtr("init", device.KindInit, 1, 0, 60), initCtr("side", device.KindSidecar, 1, 0, 50)))
	if want := (GPUUsage{MemoryMiB: 6000, Sharers: 1}); used["GPU-n1-0"] != want {
		t.Errorf("usage %+v, want %+v", used["GPU-n1-0"], want)
	}
}

// case C04 (b), at allocator level: 8 × 24576 MiB GPUs, 7 full; three pods of 1 slice + 12288
// placed one after another with usage updated: exactly 2 fit.
func TestC04bBurstOnAlmostFullNode(t *testing.T) {
	inv := node("n1", 24576, 24576, 24576, 24576, 24576, 24576, 24576, 24576)
	used := NodeUsage{}
	for i := 0; i < 7; i++ {
		used[inv.GPUs[i].UUID] = GPUUsage{MemoryMiB: 24576, Sharers: 1}
	}
	placed := 0
	for p := 0; p < 3; p++ {
		req := pod(ctr("main", 1, 12288, 0))
		if Fit(inv, used, req) != nil {
			continue
		}
		a, err := Pick(inv, used, req)
		if err != nil {
			t.Fatalf("Fit ok but Pick: %v", err)
		}
		used.Add(ChargeOf(&a))
		checkCapacity(t, inv, used)
		placed++
	}
	if placed != 2 {
		t.Errorf("%d pods placed, want 2", placed)
	}
	if got := used[inv.GPUs[7].UUID]; got != (GPUUsage{MemoryMiB: 24576, Sharers: 2}) {
		t.Errorf("GPU-7 %+v, want 24576 MiB, 2 sharers", got)
	}
}

// case C06: model filters match whole tokens; allow and deny combine.
func TestC06ModelTokens(t *testing.T) {
	a100 := node("node-1", 81920)
	a100.GPUs[0].Model = "NVIDIA A100-SXM4-80GB"
	a10 := node("node-2", 24576)
	a10.GPUs[0].Model = "NVIDIA A10"
	h200 := node("node-3", 143771)
	h200.GPUs[0].Model = "NVIDIA H200"
	h20 := node("node-4", 97871)
	h20.GPUs[0].Model = "NVIDIA H20"
	nodes := []*device.Inventory{a100, a10, h200, h20}
	for _, tc := range []struct {
		use, avoid []string
		want       []string
	}{
		{use: []string{"A10"}, want: []string{"node-2"}},
		{avoid: []string{"A100"}, want: []string{"node-2", "node-3", "node-4"}},
		{use: []string{"A100"}, want: []string{"node-1"}},
		{use: []string{"A10", "A100"}, avoid: []string{"A100"}, want: []string{"node-2"}},
		{use: []string{"A100-SXM4"}, want: []string{"node-1"}},
		{use: []string{"H20"}, want: []string{"node-4"}},
		{use: []string{"H200"}, want: []string{"node-3"}},
		{avoid: []string{"H20"}, want: []string{"node-1", "node-2", "node-3"}},
		{use: []string{"H20", "H200"}, avoid: []string{"H200"}, want: []string{"node-4"}},
	} {
		req := pod(ctr("c", 1, 1000, 0))
		req.UseModels, req.AvoidModels = tc.use, tc.avoid
		var got []string
		for _, inv := range nodes {
			if err := Fit(inv, NodeUsage{}, req); err == nil {
				got = append(got, inv.Node)
			} else if !strings.Contains(err.Error(), "excluded by nvidia.com/use-gputype/nvidia.com/nouse-gputype") {
				t.Errorf("use %v avoid %v on %s: reason %q", tc.use, tc.avoid, inv.Node, err)
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("use %v avoid %v: fits %v, want %v", tc.use, tc.avoid, got, tc.want)
		}
	}
}

// case C07: a 16Gi request (16384 MiB) does not fit a 24576 MiB card with 24000 used.
func TestC07SixteenGiDoesNotFit(t *testing.T) {
	q := resource.MustParse("16Gi")
	mib, err := device.ParseMemoryMiB("gpumem", q)
	if err != nil || mib != 16384 {
		t.Fatalf("ParseMemoryMiB(16Gi) = %d, %v", mib, err)
	}
	inv := node("n1", 24576)
	used := NodeUsage{"GPU-n1-0": {MemoryMiB: 24000, Sharers: 3}}
	r := unfitReason(t, Fit(inv, used, pod(ctr("c", 1, mib, 0))))
	if want := `container "c" (1 GPU, 16384 MiB): GPU-0 576 of 24576 MiB free`; r != want {
		t.Errorf("reason %q, want %q", r, want)
	}
	if err := Fit(inv, used, pod(ctr("c", 1, 576, 0))); err != nil {
		t.Errorf("576 MiB should fit exactly: %v", err)
	}
}

// case C08: 20% of 24000 MiB books 4800 and the grant says 4800; a small percentage of a small
// GPU is never booked as 0.
func TestC08PercentOfMemory(t *testing.T) {
	for _, tc := range []struct {
		total int64
		pct   int
		want  int64
	}{{24000, 20, 4800}, {24000, 100, 24000}, {50, 1, 1}, {24001, 33, 7921}} {
		inv := node("n1", tc.total)
		used := NodeUsage{}
		a := mustPick(t, inv, used, pod(device.ContainerRequest{Name: "c", Kind: device.KindApp, Count: 1, MemoryPercent: tc.pct}))
		if got := a.Containers[0].Devices[0].MemoryMiB; got != tc.want {
			t.Errorf("%d%% of %d: grant %d MiB, want %d", tc.pct, tc.total, got, tc.want)
		}
		if got := used["GPU-n1-0"].MemoryMiB; got != tc.want {
			t.Errorf("%d%% of %d: booked %d MiB, want %d", tc.pct, tc.total, got, tc.want)
		}
	}
}

// case C09: impossible requests and strange nodes get a reason, never a panic.
func TestC09ImpossibleRequests(t *testing.T) {
	two := node("n1", 24576, 24576)
	for _, tc := range []struct {
		name string
		inv  *device.Inventory
		req  *device.PodRequest
		want string
	}{
		{"four GPUs on a two-GPU node", two, pod(ctr("c", 4, 1000, 0)), `container "c" (4 GPUs, 1000 MiB): node has 2 GPUs`},
		{"more memory than any card", two, pod(ctr("c", 1, 100000, 0)), `container "c" (1 GPU, 100000 MiB): GPU-0,1 24576 of 24576 MiB free`},
		{"no inventory", nil, pod(ctr("c", 1, 1000, 0)), "node has no GPU inventory"},
		{"no GPUs", &device.Inventory{Node: "n", SplitCount: 10, MemoryScaling: 1}, pod(ctr("c", 1, 1000, 0)), "node has no GPUs"},
		{"split count 0", &device.Inventory{Node: "n", GPUs: two.GPUs, MemoryScaling: 1}, pod(ctr("c", 1, 1000, 0)), "node inventory has splitCount 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := unfitReason(t, Fit(tc.inv, NodeUsage{}, tc.req)); r != tc.want {
				t.Errorf("Fit reason %q, want %q", r, tc.want)
			}
			if _, err := Pick(tc.inv, NodeUsage{}, tc.req); err == nil || err.Error() != tc.want {
				t.Errorf("Pick error %v, want %q", err, tc.want)
			}
			if s := Score(tc.inv, NodeUsage{}, tc.req); s != 0 {
				t.Errorf("Score %d, want 0", s)
			}
		})
	}
	// Later pods still schedule.
	mustPick(t, two, NodeUsage{}, pod(ctr("c", 2, 1000, 0)))
}

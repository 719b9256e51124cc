package dra

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

func names(res resourceslice.DriverResources) []string {
	var out []string
	for _, d := range res.Pools[testNode].Slices[0].Devices {
		out = append(out, d.Name)
	}
	return out
}

// Order ranks GPUs by pkg/allocator's fullness (sharers and memory, per mille each): binpack
// fullest first, spread emptiest first, ties and index order by NVML index.
func TestOrder(t *testing.T) {
	c := SliceConfig{SplitCount: 10, MemoryScaling: 1}
	var gpus []GPUInfo
	for i := 3; i >= 0; i-- { // given out of index order
		gpus = append(gpus, GPUInfo{GPU: deviceGPU("GPU-"+string(rune('a'+i)), i, 80000, 0)})
	}
	use := map[string]GPUUse{
		"GPU-b": {MemoryMiB: 40000, Sharers: 1}, // 500 + 100
		"GPU-c": {MemoryMiB: 8000, Sharers: 5},  // 100 + 500: ties with b, index breaks it
		"GPU-d": {MemoryMiB: 72000, Sharers: 1}, // 900 + 100
	}
	idx := func(gs []GPUInfo) []int {
		var out []int
		for _, g := range gs {
			out = append(out, g.GPU.Index)
		}
		return out
	}
	for o, want := range map[DeviceOrder][]int{OrderIndex: {0, 1, 2, 3}, OrderBinpack: {3, 1, 2, 0}, OrderSpread: {0, 1, 2, 3}} {
		if got := idx(Order(gpus, use, c, o)); !slices.Equal(got, want) {
			t.Errorf("%s: order %v, want %v", o, got, want)
		}
	}
	use["GPU-a"] = GPUUse{MemoryMiB: 80000, Sharers: 10}
	if got := idx(Order(gpus, use, c, OrderSpread)); !slices.Equal(got, []int{1, 2, 3, 0}) {
		t.Errorf("spread with a full GPU-a: %v", got)
	}
	if gpus[0].GPU.Index != 3 {
		t.Error("Order changed its input")
	}
	if f := Fullness(gpus[0], use["GPU-d"], c); f != 1000 {
		t.Errorf("Fullness(GPU-d) = %d, want 1000", f)
	}
	if _, err := ParseDeviceOrder("--device-order", "fullest"); err == nil || err.Error() != `--device-order: "fullest" is not index, binpack or spread` {
		t.Errorf("ParseDeviceOrder(fullest) = %v", err)
	}
}

// With --device-order=binpack the published devices follow the prepared claims: the GPU that
// holds a claim comes first (kube-scheduler's first-fit then fills it before the others), and
// goes back when the claim is unprepared. The republish is debounced: changes within
// RepublishDelay make one ResourceSlice update, and an unchanged order none.
func TestBinpackOrderRepublished(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.DeviceOrder = OrderBinpack
	cfg.RepublishDelay = 2 * time.Second
	d, clk := newTestDriver(t, cfg, "dgxh100")
	pub := &recordingPublisher{}
	d.SetPublisher(pub)
	if got := names(d.Resources()); !slices.Equal(got, []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"}) {
		t.Fatalf("idle order %v", got)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	go d.RepublishLoop(ctx)

	a := testClaim("a", 4000, 0, result{device: "gpu-5", memMiB: 4000})
	b := testClaim("b", 30000, 0, result{device: "gpu-2", memMiB: 30000})
	prepare(t, d, a)
	prepare(t, d, b)
	waitWaiters(t, clk)
	if n := published(pub); n != 0 {
		t.Fatalf("published %d times before the delay", n)
	}
	clk.Step(2 * time.Second)
	waitPublished(t, pub, 1)
	if got := names(pub.last(t)); !slices.Equal(got[:3], []string{"gpu-2", "gpu-5", "gpu-0"}) {
		t.Fatalf("binpack order after two claims %v", got)
	}
	// the same claim again changes nothing: no update
	prepare(t, d, a)
	if n := published(pub); n != 1 {
		t.Fatalf("a repeated prepare republished (%d)", n)
	}
	obj := kubeletplugin.NamespacedObject{UID: b.UID}
	obj.Namespace, obj.Name = b.Namespace, b.Name
	if errs, err := d.UnprepareResourceClaims(bg, []kubeletplugin.NamespacedObject{obj}); err != nil || errs[b.UID] != nil {
		t.Fatal(errs, err)
	}
	waitWaiters(t, clk)
	clk.Step(2 * time.Second)
	waitPublished(t, pub, 2)
	if got := names(pub.last(t)); !slices.Equal(got[:2], []string{"gpu-5", "gpu-0"}) {
		t.Fatalf("binpack order after unprepare %v", got)
	}
}

// --device-order=index (the default) never republishes on prepare.
func TestIndexOrderNotRepublished(t *testing.T) {
	cfg := testConfig(t.TempDir())
	d, _ := newTestDriver(t, cfg, "dgxh100")
	pub := &recordingPublisher{}
	d.SetPublisher(pub)
	prepare(t, d, testClaim("a", 4000, 0, result{device: "gpu-5", memMiB: 4000}))
	select {
	case <-d.reorder:
		t.Fatal("index order signalled a republish")
	default:
	}
	if got := names(d.Resources()); got[0] != "gpu-0" || got[5] != "gpu-5" {
		t.Fatalf("index order %v", got)
	}
}

func published(p *recordingPublisher) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.got)
}

func waitPublished(t *testing.T, p *recordingPublisher, n int) {
	t.Helper()
	for i := 0; i < 500 && published(p) < n; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := published(p); got != n {
		t.Fatalf("published %d times, want %d", got, n)
	}
}

// waitWaiters waits until the republish loop waits on the fake clock.
func waitWaiters(t *testing.T, clk interface{ HasWaiters() bool }) {
	t.Helper()
	for i := 0; i < 500 && !clk.HasWaiters(); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if !clk.HasWaiters() {
		t.Fatal("the republish loop does not wait on the clock")
	}
}

package nvml_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/fake"
	"github.com/hami-go/hami-go/pkg/nvml"
)

// newFake builds a fleet from spec on node and the nvml backend over it.
func newFake(t *testing.T, node, spec string, opts nvml.Options) (*fake.Fleet, device.Backend) {
	t.Helper()
	p, err := fake.ParseProfile(spec)
	if err != nil {
		t.Fatalf("ParseProfile(%q): %v", spec, err)
	}
	f, err := fake.New(node, p)
	if err != nil {
		t.Fatalf("fake.New(%q): %v", node, err)
	}
	if opts.Name == "" {
		opts.Name = "fake"
	}
	return f, nvml.NewBackend(f.Library(), opts)
}

func discover(t *testing.T, b device.Backend) []device.GPU {
	t.Helper()
	gpus, err := b.Discover()
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return gpus
}

// TestDiscoverNamedProfiles runs discovery over a fleet of each go-nvml mock server.
func TestDiscoverNamedProfiles(t *testing.T) {
	tests := []struct {
		profile string
		model   string
		mib     int64
		sms     int
	}{
		{"dgxa100", "Mock NVIDIA A100-SXM4-40GB", 40960, 108},
		{"dgxh100", "NVIDIA H100 80GB HBM3", 81920, 132},
		{"dgxh200", "NVIDIA H200 141GB HBM3e", 144384, 132},
		{"dgxb200", "NVIDIA B200 180GB HBM3e", 184320, 148},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			f, b := newFake(t, "node-1", tt.profile, nvml.Options{})
			if b.Name() != "fake" {
				t.Errorf("Name() = %q, want fake", b.Name())
			}
			gpus := discover(t, b)
			if len(gpus) != 8 {
				t.Fatalf("found %d GPUs, want 8", len(gpus))
			}
			uuids := f.UUIDs()
			for i, g := range gpus {
				wantNUMA := 0
				if i >= 4 {
					wantNUMA = 1
				}
				if g.UUID != uuids[i] || g.UUID != fake.GPUUUID("node-1", i) || g.Index != i ||
					g.Model != tt.model || g.MemoryMiB != tt.mib || g.SMCount != tt.sms ||
					g.NUMANode != wantNUMA || !g.Healthy || g.MIGEnabled {
					t.Errorf("gpu %d = %+v, want uuid %s, %s, %d MiB, %d SMs, NUMA %d, healthy",
						i, g, uuids[i], tt.model, tt.mib, tt.sms, wantNUMA)
				}
				if want := "00000000:0" + string(rune('1'+i)) + ":00.0"; g.PCIBusID != want {
					t.Errorf("gpu %d PCIBusID = %q, want %q", i, g.PCIBusID, want)
				}
				// NVLink all-to-all: every other GPU, in index order.
				var want []string
				for j, u := range uuids {
					if j != i {
						want = append(want, u)
					}
				}
				if !reflect.DeepEqual(g.NVLinkPeers, want) {
					t.Errorf("gpu %d NVLinkPeers = %v, want the 7 others %v", i, g.NVLinkPeers, want)
				}
			}
			// The inventory that the device plugin would publish from this is valid.
			inv := device.Inventory{Node: "node-1", SplitCount: 10, MemoryScaling: 1, GPUs: gpus}
			if err := inv.Validate(); err != nil {
				t.Errorf("inventory from discovery: %v", err)
			}
		})
	}
}

func TestDiscoverCustomProfile(t *testing.T) {
	_, b := newFake(t, "node-2", "2x24576:NVIDIA A10+2x81920:NVIDIA A100-SXM4-80GB+1x16384:Acme Z9", nvml.Options{})
	gpus := discover(t, b)
	want := []struct {
		model string
		mib   int64
		sms   int
		numa  int
	}{
		{"NVIDIA A10", 24576, 72, 0},
		{"NVIDIA A10", 24576, 72, 0},
		{"NVIDIA A100-SXM4-80GB", 81920, 108, 0},
		{"NVIDIA A100-SXM4-80GB", 81920, 108, 1},
		{"Acme Z9", 16384, 80, 1},
	}
	if len(gpus) != len(want) {
		t.Fatalf("found %d GPUs, want %d", len(gpus), len(want))
	}
	for i, w := range want {
		g := gpus[i]
		if g.Model != w.model || g.MemoryMiB != w.mib || g.SMCount != w.sms || g.NUMANode != w.numa ||
			len(g.NVLinkPeers) != 0 || g.UUID != fake.GPUUUID("node-2", i) {
			t.Errorf("gpu %d = %+v, want %s, %d MiB, %d SMs, NUMA %d, no NVLink", i, g, w.model, w.mib, w.sms, w.numa)
		}
	}
}

func TestDeterministicUUIDs(t *testing.T) {
	uuidsOf := func(node string) []string {
		_, b := newFake(t, node, "dgxh100", nvml.Options{})
		var out []string
		for _, g := range discover(t, b) {
			out = append(out, g.UUID)
		}
		return out
	}
	a1, a2, b := uuidsOf("node-a"), uuidsOf("node-a"), uuidsOf("node-b")
	if !reflect.DeepEqual(a1, a2) {
		t.Errorf("same node twice gave different UUIDs:\n%v\n%v", a1, a2)
	}
	seen := map[string]string{}
	for i := range a1 {
		if !strings.HasPrefix(a1[i], "GPU-") || len(a1[i]) != len("GPU-")+36 {
			t.Errorf("UUID %q is not GPU-<uuid>", a1[i])
		}
		for _, u := range []string{a1[i], b[i]} {
			if prev, dup := seen[u]; dup {
				t.Errorf("UUID %s repeats (%s)", u, prev)
			}
		}
		seen[a1[i]], seen[b[i]] = "node-a", "node-b"
	}
}

// waitFirst injects an application XID (which changes nothing) until the watcher delivers it,
// so the test knows WatchXIDs has registered its event set; it returns that event.
func waitFirst(t *testing.T, f *fake.Fleet, uuid string, out <-chan device.XIDEvent) device.XIDEvent {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if err := f.InjectXID(uuid, 31); err != nil {
			t.Fatalf("InjectXID: %v", err)
		}
		select {
		case ev := <-out:
			return ev
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatal("no XID event arrived in 30s")
		}
	}
}

// TestWatchXIDsThroughFakeEventSet: an injected XID reaches WatchXIDs with the right UUID,
// XID and clock time; the watcher stops with ctx. Case C23 (the backend half: XID 79 arrives on
// the GPU it happened on).
func TestWatchXIDsThroughFakeEventSet(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	f, b := newFake(t, "node-1", "dgxh100", nvml.Options{Clock: clk, EventWait: 20 * time.Millisecond})
	uuids := f.UUIDs()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan device.XIDEvent, 16)
	done := make(chan error, 1)
	go func() { done <- b.WatchXIDs(ctx, uuids[:6], out) }()

	first := waitFirst(t, f, uuids[0], out)
	if first.UUID != uuids[0] || first.XID != 31 || !first.Time.Equal(now) {
		t.Errorf("first event = %+v, want %s XID 31 at %v", first, uuids[0], now)
	}
	if err := f.InjectXID(uuids[3], 79); err != nil {
		t.Fatal(err)
	}
	if err := f.InjectXID(uuids[7], 48); err != nil { // GPU 7 is not watched
		t.Fatal(err)
	}
	if err := f.InjectXID(uuids[5], 13); err != nil {
		t.Fatal(err)
	}
	var got []device.XIDEvent
	for len(got) < 2 {
		select {
		case ev := <-out:
			if ev.XID == 31 { // a late duplicate of waitFirst's probe
				continue
			}
			got = append(got, ev)
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of 2 events arrived: %+v", len(got), got)
		}
	}
	want := []device.XIDEvent{{UUID: uuids[3], XID: 79, Time: now}, {UUID: uuids[5], XID: 13, Time: now}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events = %+v, want %+v", got, want)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("WatchXIDs returned %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WatchXIDs did not return after cancel")
	}
	for len(out) > 0 {
		if ev := <-out; ev.XID == 48 {
			t.Errorf("event of unwatched GPU 7 delivered: %+v", ev)
		}
	}
}

func TestWatchXIDsUnknownUUID(t *testing.T) {
	_, b := newFake(t, "node-1", "dgxa100", nvml.Options{})
	err := b.WatchXIDs(context.Background(), []string{"GPU-missing"}, make(chan device.XIDEvent))
	if err == nil || !strings.Contains(err.Error(), "GPU-missing") {
		t.Fatalf("WatchXIDs(unknown) = %v, want an error naming GPU-missing", err)
	}
}

// TestProbeFailsAfterXID79 — case C23: XID 79 breaks the GPU (Probe fails with
// ERROR_GPU_IS_LOST), application XIDs do not, Recover makes Probe pass again.
func TestProbeFailsAfterXID79(t *testing.T) {
	f, b := newFake(t, "node-1", "dgxh200", nvml.Options{})
	u := f.UUIDs()
	for _, id := range u {
		if err := b.Probe(id); err != nil {
			t.Fatalf("Probe(%s) on a fresh fleet: %v", id, err)
		}
	}
	if err := f.InjectXID(u[2], 13); err != nil {
		t.Fatal(err)
	}
	if err := b.Probe(u[2]); err != nil {
		t.Errorf("Probe after application XID 13 = %v, want nil", err)
	}
	if err := f.InjectXID(u[2], 79); err != nil {
		t.Fatal(err)
	}
	err := b.Probe(u[2])
	if !nvml.IsReturn(err, gonvml.ERROR_GPU_IS_LOST) || !strings.Contains(err.Error(), u[2]) {
		t.Errorf("Probe after XID 79 = %v, want ERROR_GPU_IS_LOST naming %s", err, u[2])
	}
	if _, err := b.Processes(u[2]); !nvml.IsReturn(err, gonvml.ERROR_GPU_IS_LOST) {
		t.Errorf("Processes after XID 79 = %v, want ERROR_GPU_IS_LOST", err)
	}
	if err := b.Probe(u[3]); err != nil {
		t.Errorf("Probe of another GPU after XID 79 on %s = %v, want nil", u[2], err)
	}
	if _, err := b.Discover(); err == nil || !strings.Contains(err.Error(), u[2]) {
		t.Errorf("Discover with a lost GPU = %v, want an error naming it", err)
	}
	if err := f.Recover(u[2]); err != nil {
		t.Fatal(err)
	}
	if err := b.Probe(u[2]); err != nil {
		t.Errorf("Probe after Recover = %v, want nil", err)
	}
}

func TestProcessesAfterSetUsage(t *testing.T) {
	f, b := newFake(t, "node-1", "1x24576:NVIDIA A10", nvml.Options{})
	u := f.UUIDs()[0]
	if ps, err := b.Processes(u); err != nil || len(ps) != 0 {
		t.Fatalf("Processes on an idle GPU = %v, %v; want none", ps, err)
	}
	for _, s := range []struct {
		pid uint32
		mib int64
	}{{4242, 3000}, {17, 1024}, {99, 500}, {99, 0}} {
		if err := f.SetUsage(u, s.pid, s.mib); err != nil {
			t.Fatalf("SetUsage(%d, %d): %v", s.pid, s.mib, err)
		}
	}
	ps, err := b.Processes(u)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmtProcs(ps), "[{17 1024} {4242 3000}]"; got != want {
		t.Errorf("Processes = %s, want %s", got, want)
	}
	// Memory info follows: Free = Total - used.
	h, ret := f.Library().DeviceGetHandleByUUID(u)
	if ret != gonvml.SUCCESS {
		t.Fatal(ret)
	}
	mem, ret := h.GetMemoryInfo()
	if ret != gonvml.SUCCESS || mem.Total != 24576<<20 || mem.Used != 4024<<20 || mem.Free != (24576-4024)<<20 {
		t.Errorf("memory = %+v (%v), want total 24576 MiB, used 4024 MiB, free 20552 MiB", mem, ret)
	}
}

// TestConcurrentUse exercises the fleet and the backend from many goroutines (run with -race).
func TestConcurrentUse(t *testing.T) {
	f, b := newFake(t, "node-1", "dgxb200", nvml.Options{EventWait: 5 * time.Millisecond})
	u := f.UUIDs()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan device.XIDEvent, 1024)
	watcher := make(chan error, 1)
	go func() { watcher <- b.WatchXIDs(ctx, u, out) }()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				_ = f.SetUsage(id, uint32(i%5+1), int64(i*10))
				_, _ = b.Processes(id)
				_ = b.Probe(id)
				_ = f.InjectXID(id, []uint64{79, 13}[i%2])
				_ = f.Recover(id)
				_, _ = b.Discover()
			}
		}(u[w])
	}
	wg.Wait()
	cancel()
	if err := <-watcher; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchXIDs = %v, want context.Canceled", err)
	}
	for _, id := range u {
		if err := b.Probe(id); err != nil {
			t.Errorf("Probe(%s) after all recovered = %v", id, err)
		}
	}
}

package deviceplugin

import (
	"reflect"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// case C41: the inventory the plugin publishes offers each GPU's memory less its reserve, and
// the published inventory (the extender's only source) round-trips with those figures.
func TestReservedMemoryInventory(t *testing.T) {
	tests := []struct {
		name    string
		reserve string // --reserved-memory; "" = the flag unset
		gpus    int    // GPUs of 81920 MiB
		wantMiB []int64
	}{
		{name: "2048,GPU-B=8Gi", reserve: "2048,GPU-B=8Gi", gpus: 3, wantMiB: []int64{79872, 73728, 79872}},
		{name: "no reserve", gpus: 1, wantMiB: []int64{81920}}, // without the flag: the whole GPU
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			if tc.reserve != "" {
				var err error
				if cfg.ReservedMemory, err = device.ParseMemoryReserve("--reserved-memory", tc.reserve); err != nil {
					t.Fatal(err)
				}
			}
			p, _ := newTestPlugin(t, cfg, newTestBackend(tc.gpus, 81920))
			inv := p.Inventory()
			var got []int64
			for _, g := range inv.GPUs {
				got = append(got, g.MemoryMiB)
			}
			if !reflect.DeepEqual(got, tc.wantMiB) {
				t.Fatalf("offered MiB = %v, want %v", got, tc.wantMiB)
			}
			s, err := device.EncodeInventory(inv)
			if err != nil {
				t.Fatal(err)
			}
			back, err := device.DecodeInventory(s)
			if err != nil || back.GPUs[0].MemoryMiB != tc.wantMiB[0] || back.CapacityMiB(&back.GPUs[0]) != tc.wantMiB[0] {
				t.Fatalf("published %s: %+v, %v", s, back, err)
			}
		})
	}
}

// case C41: a reserve that leaves a GPU nothing, or names a GPU the node lacks, stops the
// plugin with an error naming the flag.
func TestReservedMemoryRefused(t *testing.T) {
	tests := []struct {
		name    string // --reserved-memory
		wantErr string
	}{
		{name: "81920", wantErr: "--reserved-memory: GPU GPU-A (index 0): 81920 MiB reserved on a GPU of 81920 MiB leaves nothing to offer"},
		{name: "GPU-Z=10", wantErr: "--reserved-memory: no GPU on this node has UUID GPU-Z"},
		{name: "5=10", wantErr: "--reserved-memory: no GPU on this node has index 5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			var err error
			if cfg.ReservedMemory, err = device.ParseMemoryReserve("--reserved-memory", tc.name); err != nil {
				t.Fatal(err)
			}
			clk := clocktesting.NewFakeClock(time.Now())
			if _, err := New(cfg, newTestBackend(2, 81920), Options{Clock: clk}, nil); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err = %v, want %q", tc.name, err, tc.wantErr)
			}
		})
	}
}

// The node's hami-go.io/gpu-memory figure is the sum of what its GPUs offer after the reserve
// (case C41) and the memory scaling, unhealthy GPUs included (issue 25).
func TestGPUMemoryMiBFigure(t *testing.T) {
	cfg := testConfig(t.TempDir())
	var err error
	if cfg.ReservedMemory, err = device.ParseMemoryReserve("--reserved-memory", "2048,GPU-B=8Gi"); err != nil {
		t.Fatal(err)
	}
	p, _ := newTestPlugin(t, cfg, newTestBackend(3, 81920))
	if got, want := p.GPUMemoryMiB(), int64(79872+73728+79872); got != want {
		t.Fatalf("GPUMemoryMiB = %d, want %d", got, want)
	}
	cfg = testConfig(t.TempDir())
	cfg.MemoryScaling = 1.5
	p, _ = newTestPlugin(t, cfg, newTestBackend(2, 40960))
	if got, want := p.GPUMemoryMiB(), int64(2*61440); got != want {
		t.Fatalf("scaled: GPUMemoryMiB = %d, want %d", got, want)
	}
}

package deviceplugin

import (
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// case C41: the inventory the plugin publishes offers each GPU's memory less its reserve, and
// the published inventory (the extender's only source) round-trips with those figures.
func TestReservedMemoryInventory(t *testing.T) {
	cfg := testConfig(t.TempDir())
	var err error
	if cfg.ReservedMemory, err = device.ParseMemoryReserve("--reserved-memory", "2048,GPU-B=8Gi"); err != nil {
		t.Fatal(err)
	}
	p, _ := newTestPlugin(t, cfg, newTestBackend(3, 81920))
	inv := p.Inventory()
	var got []int64
	for _, g := range inv.GPUs {
		got = append(got, g.MemoryMiB)
	}
	if len(got) != 3 || got[0] != 79872 || got[1] != 73728 || got[2] != 79872 {
		t.Fatalf("offered MiB = %v, want [79872 73728 79872]", got)
	}
	s, err := device.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	back, err := device.DecodeInventory(s)
	if err != nil || back.GPUs[0].MemoryMiB != 79872 || back.CapacityMiB(&back.GPUs[0]) != 79872 {
		t.Fatalf("published %s: %+v, %v", s, back, err)
	}
	// Without the flag: the whole GPU.
	p0, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(1, 81920))
	if m := p0.Inventory().GPUs[0].MemoryMiB; m != 81920 {
		t.Fatalf("no reserve: %d MiB, want 81920", m)
	}
}

// case C41: a reserve that leaves a GPU nothing, or names a GPU the node lacks, stops the
// plugin with an error naming the flag.
func TestReservedMemoryRefused(t *testing.T) {
	for spec, want := range map[string]string{
		"81920":    "--reserved-memory: GPU GPU-A (index 0): 81920 MiB reserved on a GPU of 81920 MiB leaves nothing to offer",
		"GPU-Z=10": "--reserved-memory: no GPU on this node has UUID GPU-Z",
		"5=10":     "--reserved-memory: no GPU on this node has index 5",
	} {
		cfg := testConfig(t.TempDir())
		var err error
		if cfg.ReservedMemory, err = device.ParseMemoryReserve("--reserved-memory", spec); err != nil {
			t.Fatal(err)
		}
		clk := clocktesting.NewFakeClock(time.Now())
		if _, err := New(cfg, newTestBackend(2, 81920), Options{Clock: clk}, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", spec, err, want)
		}
	}
}

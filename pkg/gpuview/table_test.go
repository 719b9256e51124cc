package gpuview

import (
	"strings"
	"testing"
)

// TestWriteTable prints one row per GPU with booked/bookable MiB, cores, sharers/split, the
// slices below their GPU and a node's problem below its rows.
func TestWriteTable(t *testing.T) {
	v := Build(fleet(t), DefaultConfig(), t0)
	var b strings.Builder
	if err := WriteTable(&b, &v); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"NODE     STATUS       GPU  MODEL                  HEALTH   MEMORY(MiB)  CORES  SHARERS\n",
		"fits     Ready        0    NVIDIA H100 80GB HBM3  Healthy  70000/81920  60%    1/4\n",
		"                             a/half [c]                    1000         60%\n",
		"                             a/half [init, init]           70000        0%\n",
		"fits     Ready        1    NVIDIA H100 80GB HBM3  Healthy  0/81920      0%     0/4\n",
		"full     Ready        0    NVIDIA H100 80GB HBM3  Healthy  9000/10000   0%     1/4\n",
		"sliced   Ready        0    NVIDIA H100 80GB HBM3  Healthy  1000/81920   0%     1/1\n",
		"                             a/one [c]            planned  1000         0%\n",
		"cpu      NoInventory  -    -                      -        -            -      -\n",
		"! cpu: no inventory from device plugin\n",
		"stale    Stale        0    NVIDIA H100 80GB HBM3  Healthy  0/81920      0%     0/4\n",
		"! stale: inventory stale since 2026-12-01T04:58:00Z (device plugin Lease not renewed for 1m0s)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

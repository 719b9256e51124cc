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
		"NODE     STATUS       GPU  MODEL                  HEALTH   MEMORY(MiB)  CORES  SHARERS  SLICE\n",
		"fits     Ready        0    NVIDIA H100 80GB HBM3  Healthy  70000/81920  60%    1/4\n",
		"                                                           1000         60%             a/half [c]\n",
		"                                                           70000        0%              a/half [init, init]\n",
		"fits     Ready        1    NVIDIA H100 80GB HBM3  Healthy  0/81920      0%     0/4\n",
		"full     Ready        0    NVIDIA H100 80GB HBM3  Healthy  9000/10000   0%     1/4\n",
		"sliced   Ready        0    NVIDIA H100 80GB HBM3  Healthy  1000/81920   0%     1/1\n",
		"                                                  planned  1000         0%              a/one [c]\n",
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

// A slice's label (a long KubeRay pod and DRA claim name) is the line's last cell: the columns
// keep the width of the GPU rows.
func TestWriteTableLongSliceLabelKeepsColumns(t *testing.T) {
	long := "raycluster-slices-gpu-group-worker-6kvvz"
	v := View{Nodes: []Node{{Name: "n1", Status: "Ready", SplitCount: 10, GPUs: []GPU{{
		Index: 0, Model: "H100", Health: "Healthy", CapacityMiB: 81920, BookedMiB: 20000, BookedCoresPercent: 25, Sharers: 1,
		Slices: []Slice{{Namespace: "ray", Pod: long, Container: "gpu", Claim: long + "-gpu-0", Kind: "claim", MemoryMiB: 20000, CoresPercent: 25}},
	}}}}}
	var b strings.Builder
	if err := WriteTable(&b, &v); err != nil {
		t.Fatal(err)
	}
	want := "NODE  STATUS  GPU  MODEL  HEALTH   MEMORY(MiB)  CORES  SHARERS  SLICE\n" +
		"n1    Ready   0    H100   Healthy  20000/81920  25%    1/10\n" +
		"                                   20000        25%             ray/" + long + " [claim " + long + "-gpu-0, request gpu]\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}

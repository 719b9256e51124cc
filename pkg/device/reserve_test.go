package device

import (
	"reflect"
	"strings"
	"testing"
)

// case C41: the reserve syntax.
func TestParseMemoryReserve(t *testing.T) {
	r, err := ParseMemoryReserve("--reserved-memory", " 2048, GPU-aaa=4Gi ,3=0,1=1536")
	if err != nil {
		t.Fatal(err)
	}
	want := MemoryReserve{AllMiB: 2048, ByUUID: map[string]int64{"GPU-aaa": 4096}, ByIndex: map[int]int64{3: 0, 1: 1536}}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("got %+v, want %+v", r, want)
	}
	if s := r.String(); s != "2048,1=1536,3=0,GPU-aaa=4096" {
		t.Errorf("String() = %q", s)
	}
	if r, err := ParseMemoryReserve("--reserved-memory", ""); err != nil || !reflect.DeepEqual(r, MemoryReserve{}) {
		t.Errorf("empty: %+v, %v", r, err)
	}
	for _, bad := range []struct{ in, want string }{
		{"-1", `entry "-1"`},
		{"1.5", `entry "1.5"`},
		{"3000M", `entry "3000M"`},
		{"abc", `"abc" is not a quantity`},
		{"1024,2048", "already given"},
		{"x=10", `"x" is neither a GPU UUID`},
		{"01=10", `"01" is neither`},
		{"0=1,0=2", "index 0 is named twice"},
		{"GPU-a=1,GPU-a=2", "GPU GPU-a is named twice"},
		{"GPU-a=", `entry "GPU-a="`},
	} {
		_, err := ParseMemoryReserve("--reserved-memory", bad.in)
		if err == nil || !strings.HasPrefix(err.Error(), "--reserved-memory: ") || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseMemoryReserve(%q) = %v, want an error naming the flag and %q", bad.in, err, bad.want)
		}
	}
}

// case C41: 81920 MiB with 2048 reserved offers 79872; a UUID entry beats an index entry, which
// beats the default; scaling applies after the reserve.
func TestApplyMemoryReserve(t *testing.T) {
	gpus := []GPU{{UUID: "GPU-a", Index: 0, MemoryMiB: 81920}, {UUID: "GPU-b", Index: 1, MemoryMiB: 81920}, {UUID: "GPU-c", Index: 2, MemoryMiB: 40960}}
	r := MemoryReserve{AllMiB: 2048, ByUUID: map[string]int64{"GPU-b": 10240}, ByIndex: map[int]int64{1: 1, 2: 0}}
	out, err := ApplyMemoryReserve("--reserved-memory", gpus, r)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, g := range out {
		got = append(got, g.MemoryMiB)
	}
	if !reflect.DeepEqual(got, []int64{79872, 71680, 40960}) {
		t.Fatalf("offered = %v, want [79872 71680 40960]", got)
	}
	if gpus[0].MemoryMiB != 81920 {
		t.Errorf("input changed: %d", gpus[0].MemoryMiB)
	}
	inv := Inventory{Node: "n", SplitCount: 10, MemoryScaling: 1.5, GPUs: out}
	if c := inv.CapacityMiB(&inv.GPUs[0]); c != 119808 { // (81920 - 2048) × 1.5
		t.Errorf("capacity = %d, want 119808", c)
	}
	for _, bad := range []struct {
		r    MemoryReserve
		want string
	}{
		{MemoryReserve{AllMiB: 40960}, "GPU GPU-c (index 2): 40960 MiB reserved on a GPU of 40960 MiB leaves nothing"},
		{MemoryReserve{ByUUID: map[string]int64{"GPU-z": 1}}, "no GPU on this node has UUID GPU-z"},
		{MemoryReserve{ByIndex: map[int]int64{7: 1}}, "no GPU on this node has index 7"},
	} {
		if _, err := ApplyMemoryReserve("--reserved-memory", gpus, bad.r); err == nil || !strings.Contains(err.Error(), bad.want) || !strings.HasPrefix(err.Error(), "--reserved-memory: ") {
			t.Errorf("ApplyMemoryReserve(%+v) = %v, want %q", bad.r, err, bad.want)
		}
	}
}

package ledger

import (
	"reflect"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

func slot(uuid string, mib int64) *device.Allocation {
	return &device.Allocation{Node: "n", Containers: []device.ContainerAllocation{{Name: "c", Kind: device.KindApp, Devices: []device.DeviceGrant{{UUID: uuid, MemoryMiB: mib}}}}}
}

// The multiset both sides count a signature group's slots with: Take is first in, Drop last
// in, TakeLowest goes by key, Minus counts per key.
func TestSlots(t *testing.T) {
	a1, a2, b := slot("GPU-A", 100), slot("GPU-A", 100), slot("GPU-B", 100)
	ka, kb := device.SlotKey(a1), device.SlotKey(b)
	var s Slots
	if s.TakeLowest() != nil || s.Take(ka) != nil || s.Count(ka) != 0 || len(s.Keys()) != 0 {
		t.Fatal("the zero Slots is not empty")
	}
	s.Add(b)
	s.Add(a1)
	s.Add(a2)
	if s.Count(ka) != 2 || s.Count(kb) != 1 || !reflect.DeepEqual(s.Keys(), []string{ka, kb}) || s.Peek(ka) != a1 {
		t.Fatalf("counts %d %d, keys %q", s.Count(ka), s.Count(kb), s.Keys())
	}
	var o Slots
	o.Add(b)
	o.Add(b)
	if got := s.Minus(&o); !reflect.DeepEqual(got, []string{ka, ka}) {
		t.Fatalf("s - o = %q, want GPU-A twice", got)
	}
	if got := o.Minus(&s); !reflect.DeepEqual(got, []string{kb}) {
		t.Fatalf("o - s = %q, want GPU-B once", got)
	}
	s.Drop(ka) // the latest: a2
	if s.Count(ka) != 1 || s.Peek(ka) != a1 {
		t.Fatal("Drop did not remove the latest added slot")
	}
	if got := s.TakeLowest(); got != a1 {
		t.Fatalf("TakeLowest = %v, want GPU-A (the lower key)", got)
	}
	if got := s.TakeLowest(); got != b || s.TakeLowest() != nil {
		t.Fatal("TakeLowest did not empty the multiset in key order")
	}
}

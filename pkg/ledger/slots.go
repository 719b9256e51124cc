package ledger

import (
	"sort"

	"github.com/hami-go/hami-go/pkg/device"
)

// Slots is the slot arithmetic both sides of the protocol do on a signature group: a multiset
// of slots, each a planned allocation keyed by device.SlotKey (two allocations with one key are
// the same slot to the kubelet's Allocate, whatever their container names and slice IDs).
//
// The protocol's invariant is that the planned annotations of a group's members add up, as a
// multiset of slots, to the plans the device plugin holds for them (docs/design.md "Matching Allocate
// to a pod"). The extender charges the group's unclaimed members from the slots that its
// members' planned annotations, less the claimed ones, leave (pkg/extender normalizeLocked); the
// ledger rewrites planned annotations until they add up again when a member whose plan was
// swapped goes (Ledger.republishLocked). Both count with Slots.
//
// The zero value is an empty multiset. Not safe for concurrent use.
type Slots struct {
	m map[string][]*device.Allocation
	n int
}

// Add puts slot a in (the pointer is kept, not copied).
func (s *Slots) Add(a *device.Allocation) {
	if s.m == nil {
		s.m = map[string][]*device.Allocation{}
	}
	k := device.SlotKey(a)
	s.m[k] = append(s.m[k], a)
	s.n++
}

// Take removes and returns the earliest added slot of key; nil when there is none.
func (s *Slots) Take(key string) *device.Allocation {
	l := s.m[key]
	if len(l) == 0 {
		return nil
	}
	s.m[key] = l[1:]
	s.n--
	return l[0]
}

// TakeLowest removes and returns the earliest added slot of the lowest key (in string order)
// that has one; nil when the multiset is empty.
func (s *Slots) TakeLowest() *device.Allocation {
	if s.n == 0 {
		return nil
	}
	return s.Take(s.Keys()[0])
}

// Drop removes the latest added slot of key, if any.
func (s *Slots) Drop(key string) {
	if l := s.m[key]; len(l) > 0 {
		s.m[key] = l[:len(l)-1]
		s.n--
	}
}

// Peek returns the earliest added slot of key without removing it; nil when there is none.
func (s *Slots) Peek(key string) *device.Allocation {
	if l := s.m[key]; len(l) > 0 {
		return l[0]
	}
	return nil
}

// Count returns how many slots of key s holds.
func (s *Slots) Count(key string) int { return len(s.m[key]) }

// Keys returns the keys s holds a slot of, sorted.
func (s *Slots) Keys() []string {
	out := make([]string, 0, len(s.m))
	for k, l := range s.m {
		if len(l) > 0 {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// Minus returns the keys of the slots s holds more often than o, each once per slot too many,
// sorted: s less o, as a multiset of keys.
func (s *Slots) Minus(o *Slots) []string {
	var out []string
	for _, k := range s.Keys() {
		for i := o.Count(k); i < s.Count(k); i++ {
			out = append(out, k)
		}
	}
	return out
}

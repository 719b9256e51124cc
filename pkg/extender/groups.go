package extender

import (
	"sort"
	"strconv"
	"strings"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// Signature groups (design.md "Matching Allocate to a pod"): pods bound to one node with equal
// signatures are interchangeable, and the device plugin may hand one pod's planned GPUs to a
// sibling. The group's planned allocations are therefore a pool of slots: every claimed member
// consumes the slot equal to its claim (or, failing that, its own planned slot), and the
// unclaimed members hold the remaining slots, each its own where still free. A member deleted
// before its Allocate thus releases one UNCLAIMED slot of its group, not necessarily its own.
// A slice named by two members' claimed records (the device plugin moving a claim between them,
// two writes) is charged once: the member whose record is older counts as unclaimed; so does a
// member whose record names a slice released after it was seen (staleClaims, case C04).

// slotKey renders an allocation positionally (kind and devices of each container; names are not
// part of it: Allocate never sees them).
func slotKey(a *device.Allocation) string {
	var b strings.Builder
	for _, c := range a.Containers {
		b.WriteString(string(c.Kind))
		for _, d := range c.Devices {
			b.WriteByte(' ')
			b.WriteString(d.UUID)
			b.WriteByte(':')
			b.WriteString(strconv.FormatInt(d.MemoryMiB, 10))
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(d.CoresPercent))
		}
		b.WriteByte(';')
	}
	return b.String()
}

// renamed returns slot with the container names of owner's planned allocation (by position).
func renamed(slot, owner *device.Allocation) *device.Allocation {
	out := &device.Allocation{Node: slot.Node, Containers: make([]device.ContainerAllocation, len(slot.Containers))}
	for i, c := range slot.Containers {
		c.SliceIDs = nil
		if owner != nil && i < len(owner.Containers) {
			c.Name = owner.Containers[i].Name
		}
		out.Containers[i] = c
	}
	return out
}

func setAlloc(b *booking, a *device.Allocation) {
	if b.alloc == a {
		return
	}
	b.alloc = a
	b.charge = allocator.ChargeOf(a)
}

// normalizeLocked re-derives the charged allocation of every member of changed's signature
// group on ns (or of changed alone when it has no group). Caller holds Cache.mu and ns.mu.
func (c *Cache) normalizeLocked(ns *nodeState, changed *booking) {
	if !changed.hasKey {
		c.chargeAlone(changed)
		return
	}
	var members []*booking
	for _, b := range ns.members {
		if b.hasKey && b.sig == changed.sig && b.stage != stageReserved {
			members = append(members, b)
		}
	}
	if changed.stage == stageReserved || ns.members[changed.key] != changed {
		c.chargeAlone(changed)
	}
	if len(members) == 0 {
		delete(ns.adjust, changed.sig) // nobody left to hold an adjusted slot
		return
	}
	sort.Slice(members, func(i, j int) bool {
		if !members[i].since.Equal(members[j].since) {
			return members[i].since.Before(members[j].since)
		}
		return members[i].key.String() < members[j].key.String()
	})
	stale := staleClaims(ns, members)
	pool := map[string][]*device.Allocation{}
	take := func(k string) *device.Allocation {
		l := pool[k]
		if len(l) == 0 {
			return nil
		}
		pool[k] = l[1:]
		return l[0]
	}
	for _, b := range members {
		s := b.planned
		if s == nil && !stale[b] {
			s = b.claimed
		}
		if s != nil {
			k := slotKey(s)
			pool[k] = append(pool[k], s)
		}
	}
	for k, adj := range ns.adjust[changed.sig] {
		for i := 0; i < adj.n; i++ {
			pool[k] = append(pool[k], adj.slot)
		}
		if l := pool[k]; adj.n < 0 {
			pool[k] = l[:max(len(l)+adj.n, 0)]
		}
	}
	var unclaimed []*booking
	for _, b := range members {
		if b.stage != stageClaimed || b.claimed == nil || stale[b] {
			unclaimed = append(unclaimed, b)
			continue
		}
		if take(slotKey(b.claimed)) == nil && b.planned != nil {
			take(slotKey(b.planned))
		}
		setAlloc(b, b.claimed)
	}
	var homeless []*booking
	for _, b := range unclaimed {
		if b.planned == nil {
			if stale[b] {
				b.alloc, b.charge = nil, nil // its only record is another member's slice
			}
			continue
		}
		if s := take(slotKey(b.planned)); s != nil {
			setAlloc(b, b.planned)
		} else {
			homeless = append(homeless, b)
		}
	}
	keys := make([]string, 0, len(pool))
	for k, l := range pool {
		if len(l) > 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, b := range homeless {
		var s *device.Allocation
		for len(keys) > 0 && s == nil {
			if s = take(keys[0]); s == nil {
				keys = keys[1:]
			}
		}
		if s == nil {
			setAlloc(b, b.planned) // only when adjustments removed more slots than remained: charge its own
			continue
		}
		if b.alloc == nil || slotKey(b.alloc) != slotKey(s) {
			setAlloc(b, renamed(s, b.planned))
		}
	}
}

// slotAdjust is what a signature group's pool gains (n > 0) or loses (n < 0) of one slot key
// beyond its members' planned slots. When a member whose claimed record is another member's
// planned slot is released, the device plugin frees the claimed slot and has given the member's
// own planned slot to the member it swapped records with, which the cache cannot see until that
// member claims it: the pool therefore keeps the released member's planned slot (+1) and drops
// the claimed one (-1). slot is a representative allocation of the key.
type slotAdjust struct {
	n    int
	slot *device.Allocation
}

// adjustSlot adds d to the group's adjustment of key k (slot a). Caller holds Cache.mu and ns.mu.
func (ns *nodeState) adjustSlot(sig device.Signature, k string, a *device.Allocation, d int) {
	if ns.adjust == nil {
		ns.adjust = map[device.Signature]map[string]*slotAdjust{}
	}
	g := ns.adjust[sig]
	if g == nil {
		g = map[string]*slotAdjust{}
		ns.adjust[sig] = g
	}
	adj := g[k]
	if adj == nil {
		adj = &slotAdjust{slot: renamed(a, a)}
		g[k] = adj
	}
	adj.n += d
	if adj.n == 0 {
		delete(g, k)
	}
	if len(g) == 0 {
		delete(ns.adjust, sig)
	}
}

// staleClaims returns the claimed members whose claimed record is stale: it names a slice that
// a record seen later names too, or a slice released (its holder deleted or ended) after the
// record was seen. A slice is held by one pod at a time. Two records name the same slice while
// the device plugin moves a claim between interchangeable pods: its Reconcile swaps their records
// in memory and then patches the two pods' AnnoClaimed one after the other, so the informer shows
// the new owner's record (the truth) before the old owner's is rewritten. A stale claim counts as
// unclaimed (the member holds a slot of the group's pool), so every slice is charged once and,
// when its holder goes, freed where it was (case C04). Claims without slice IDs are never stale.
func staleClaims(ns *nodeState, members []*booking) map[*booking]bool {
	var latest map[string]uint64
	for _, b := range members {
		if b.stage != stageClaimed || b.claimed == nil {
			continue
		}
		for _, c := range b.claimed.Containers {
			for _, id := range c.SliceIDs {
				if latest == nil {
					latest = map[string]uint64{}
				}
				latest[id] = max(latest[id], b.claimSeq)
			}
		}
	}
	var stale map[*booking]bool
	for _, b := range members {
		if b.stage != stageClaimed || b.claimed == nil {
			continue
		}
		for _, c := range b.claimed.Containers {
			for _, id := range c.SliceIDs {
				if latest[id] > b.claimSeq || ns.released[id] > b.claimSeq {
					if stale == nil {
						stale = map[*booking]bool{}
					}
					stale[b] = true
				}
			}
		}
	}
	return stale
}

// chargeAlone charges a booking by its own allocation (claimed wins over planned).
func (c *Cache) chargeAlone(b *booking) {
	a := b.planned
	if b.stage == stageClaimed && b.claimed != nil {
		a = b.claimed
	}
	if a != nil {
		setAlloc(b, a)
	}
}

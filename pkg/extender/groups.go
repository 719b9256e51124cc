package extender

import (
	"sort"
	"time"

	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/ledger"
)

// Signature groups (docs/design.md "Matching Allocate to a pod"): pods bound to one node with equal
// signatures are interchangeable, and the device plugin may hand one pod's planned GPUs to a
// sibling. The group's planned allocations are therefore a pool of slots: every claimed member
// consumes the slot equal to its claim (or, failing that, its own planned slot), and the
// unclaimed members hold the remaining slots, each its own where still free. A member deleted
// before its Allocate thus releases one UNCLAIMED slot of its group, not necessarily its own.
// A slice named by two members' claimed records (the device plugin moving a claim between them,
// two writes) is charged once: the member whose record is older counts as unclaimed; so does a
// member whose record names a slice released after it was seen (staleClaims, case C04).

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
		delete(ns.moves, changed.sig) // nobody left to hold a moved slot
		return
	}
	sort.Slice(members, func(i, j int) bool {
		if !members[i].since.Equal(members[j].since) {
			return members[i].since.Before(members[j].since)
		}
		return members[i].key.Exact() < members[j].key.Exact()
	})
	stale := staleClaims(ns, members)
	var pool ledger.Slots // the group's slots (ledger.Slots: the invariant both sides keep)
	for _, b := range members {
		s := b.planned
		if s == nil && !stale[b] {
			s = b.claimed
		}
		if s != nil {
			pool.Add(s)
		}
	}
	moves := ns.moves[changed.sig]
	for _, m := range moves {
		pool.Add(m.kept)
	}
	for _, m := range moves {
		pool.Drop(m.lostKey)
	}
	var unclaimed []*booking
	for _, b := range members {
		if b.stage != stageClaimed || b.claimed == nil || stale[b] {
			unclaimed = append(unclaimed, b)
			continue
		}
		if pool.Take(device.SlotKey(b.claimed)) == nil && b.planned != nil {
			pool.Take(device.SlotKey(b.planned))
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
		if s := pool.Take(device.SlotKey(b.planned)); s != nil {
			setAlloc(b, b.planned)
		} else {
			homeless = append(homeless, b)
		}
	}
	for _, b := range homeless {
		s := pool.TakeLowest()
		if s == nil {
			setAlloc(b, b.planned) // only when moves removed more slots than remained: charge its own
			continue
		}
		if b.alloc == nil || device.SlotKey(b.alloc) != device.SlotKey(s) {
			setAlloc(b, device.Renamed(s, b.planned))
		}
	}
}

// slotMove is what a signature group's pool keeps in memory beyond its members' planned slots.
// When a member whose claimed record is another member's planned slot (lost) is released, the
// device plugin frees that slot and has given the member's own planned slot (kept) to the member
// it swapped records with; the cache cannot see that until that member claims it or the plugin
// republishes a planned annotation (deviceplugin publish.go): the pool therefore holds kept once
// more and lost once less. Moves are kept one per release, not netted per slot, so that each
// republished annotation settles the very move it carries (republishedLocked). A move is a
// stopgap for the milliseconds until the plugin's rewrite lands: one that no rewrite settled
// within Config.SlotMoveTTL (the rewrite's target went first, or a plugin that does not
// republish) is dropped, and the annotations, which the plugin keeps adding up, stand alone.
type slotMove struct {
	kept, lost       *device.Allocation
	keptKey, lostKey string
	at               time.Time
}

// addMove records a move in b's group, made at now. Caller holds Cache.mu and ns.mu.
func (ns *nodeState) addMove(sig device.Signature, kept, lost *device.Allocation, now time.Time) {
	if ns.moves == nil {
		ns.moves = map[device.Signature][]slotMove{}
	}
	ns.moves[sig] = append(ns.moves[sig], slotMove{
		kept: device.Renamed(kept, kept), lost: device.Renamed(lost, lost),
		keptKey: device.SlotKey(kept), lostKey: device.SlotKey(lost), at: now,
	})
}

// expireMovesLocked drops the moves made more than Config.SlotMoveTTL before now and charges
// their groups again. Caller holds Cache.mu.
func (c *Cache) expireMovesLocked(now time.Time) {
	c.nodesMu.RLock()
	nodes := make([]*nodeState, 0, len(c.nodes))
	for _, ns := range c.nodes {
		nodes = append(nodes, ns)
	}
	c.nodesMu.RUnlock()
	changed := false
	for _, ns := range nodes {
		ns.mu.Lock()
		for sig, moves := range ns.moves {
			left := moves[:0:0]
			for _, m := range moves {
				if now.Sub(m.at) <= c.cfg.SlotMoveTTL {
					left = append(left, m)
				}
			}
			if len(left) == len(moves) {
				continue
			}
			klog.V(2).InfoS("Dropping slot moves no republished annotation settled", "node", ns.name, "moves", len(moves)-len(left))
			if len(left) == 0 {
				delete(ns.moves, sig)
			} else {
				ns.moves[sig] = left
			}
			for _, b := range ns.members {
				if b.hasKey && b.sig == sig {
					c.normalizeLocked(ns, b)
					break
				}
			}
			ns.recompute()
			changed = true
		}
		ns.mu.Unlock()
	}
	if changed {
		c.notifyLocked()
	}
}

// republishedLocked settles moves when the device plugin rewrites a member's planned annotation
// from old's slot to nb's: the plugin does so after a member holding another member's planned
// slot went, so the annotations now carry the move the cache kept in memory. One rewrite may
// carry several moves (a member republished twice before its first write landed: old → a → new);
// it settles the chain of moves that leads from old's slot to nb's. Without one (a restarted
// cache) nothing changes. Caller holds Cache.mu.
func (c *Cache) republishedLocked(old, nb *booking) {
	if !nb.hasKey || old.planned == nil || nb.planned == nil {
		return
	}
	lost, kept := device.SlotKey(old.planned), device.SlotKey(nb.planned)
	if lost == kept {
		return
	}
	ns := c.nodeOrNew(nb.node)
	ns.mu.Lock()
	defer ns.mu.Unlock()
	moves := ns.moves[nb.sig]
	chain := moveChain(moves, lost, kept)
	if chain == nil {
		return
	}
	left := moves[:0:0]
	for i, m := range moves {
		if !chain[i] {
			left = append(left, m)
		}
	}
	if len(left) == 0 {
		delete(ns.moves, nb.sig)
	} else {
		ns.moves[nb.sig] = left
	}
}

// moveChain returns the shortest chain of moves (marked by index) that leads from slot key from
// to slot key to: the first loses from, each keeps what the next loses, the last keeps to; nil
// when none does. Breadth first, so a chain never takes a detour through unrelated moves.
func moveChain(moves []slotMove, from, to string) []bool {
	via := map[string]int{from: -1} // slot key reached -> index of the move that reached it
	for frontier := []string{from}; len(frontier) > 0; {
		var next []string
		for _, k := range frontier {
			for i, m := range moves {
				if m.lostKey != k {
					continue
				}
				if _, seen := via[m.keptKey]; seen {
					continue
				}
				via[m.keptKey] = i
				if m.keptKey == to {
					used := make([]bool, len(moves))
					for at := to; via[at] >= 0; at = moves[via[at]].lostKey {
						used[via[at]] = true
					}
					return used
				}
				next = append(next, m.keptKey)
			}
		}
		frontier = next
	}
	return nil
}

// staleClaims returns the claimed members whose claimed record is stale: it names a slice that
// a later record names too, or a slice released (its holder deleted or ended) later than the
// record (stamp orders them). A slice is held by one pod at a time. Two records name the same
// slice while the device plugin moves a claim between interchangeable pods: its Reconcile swaps
// their records in memory and then patches the two pods' AnnoClaimed one after the other, in
// either order; when the new owner's record (the truth) lands first, the old owner's still names
// the slice until it is rewritten. A stale claim counts as
// unclaimed (the member holds a slot of the group's pool), so every slice is charged once and,
// when its holder goes, freed where it was (case C04). Claims without slice IDs are never stale.
func staleClaims(ns *nodeState, members []*booking) map[*booking]bool {
	var latest map[string]stamp
	for _, b := range members {
		if b.stage != stageClaimed || b.claimed == nil {
			continue
		}
		for _, c := range b.claimed.Containers {
			for _, id := range c.SliceIDs {
				if latest == nil {
					latest = map[string]stamp{}
				}
				if b.claimAt.after(latest[id]) {
					latest[id] = b.claimAt
				}
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
				if latest[id].after(b.claimAt) || ns.released[id].after(b.claimAt) {
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

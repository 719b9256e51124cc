package extender

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// stage is where a booking is in its life.
type stage int

const (
	// stageReserved: speculative reservation made by Filter on the node it ranked best.
	stageReserved stage = iota
	// stageBinding: Bind booked the pod on the chosen node; its API calls are in flight.
	stageBinding
	// stagePlanned: the pod is bound with a planned allocation; in flight until claimed.
	stagePlanned
	// stageClaimed: the device plugin recorded what it handed out (AnnoClaimed: the pod's own
	// planned allocation, applied when its container was created).
	stageClaimed
	// stageNominated: a pending pod nominated to the node (status.nominatedNodeName, set by
	// preemption: kube-scheduler's, or the extender's own, ownpreempt.go) holds the share its
	// victims free, so that no other pod takes it while they terminate. It ends when the pod
	// binds, loses its nomination or is deleted; Filter replaces it only with a fit.
	stageNominated
)

func (s stage) String() string {
	return [...]string{"reserved", "binding", "planned", "claimed", "nominated"}[s]
}

// booking is what one pod holds on one node. Guarded by Cache.mu; the node's usage that it
// contributes to is guarded by that node's nodeState.mu as well.
type booking struct {
	key   device.PodRef
	node  string
	stage stage
	// req is the pod's parsed request; nil when it could not be parsed (such a booking is still
	// charged).
	req *device.PodRequest
	// planned is the allocation the extender planned (Filter/Bind or AnnoPlanned); claimed is
	// the device plugin's record of what it handed out (AnnoClaimed: the pod's own planned
	// allocation, applied at container creation). alloc is what is charged (chargeOf) and charge
	// its allocator.ChargeOf.
	planned *device.Allocation
	claimed *device.Allocation
	alloc   *device.Allocation
	charge  allocator.Charge
	// since is when the booking entered its current stage.
	since time.Time
	// maybeBound marks a reservation left by a bind whose outcome is unknown (timeout, transport
	// error): the Binding, and the plan it carries, may yet be committed on node, so neither a
	// new Filter nor a bind to another node moves the booking; the informer settles it (the pod
	// shows up bound, or not) or Sweep drops it after ReservationTTL. Cleared by any stage change.
	maybeBound bool
	// priority is the pod's spec.priority (0 when unset), and terminating whether its deletion
	// began (metadata.deletionTimestamp): what preemption reads to choose victims. A terminating
	// pod stays charged until it is gone.
	priority    int32
	terminating bool
	// informed is set once the informer showed the pod bound (noteLifeLocked): before that,
	// priority is not known, and preemption never takes the pod as a victim.
	informed bool
	// nominating marks a hold the extender's own preemption placed (Cache.Nominate) whose
	// nomination the informer has not shown yet: a pending pod without nominatedNodeName keeps
	// it until then.
	nominating bool
}

// setCharge sets what b is charged: its own allocation, the planned one, or the claimed record
// where there is no plan (both nil: nothing). Called before b is placed on its node.
func (b *booking) setCharge() {
	a := b.planned
	if a == nil {
		a = b.claimed
	}
	b.alloc, b.charge = a, nil
	if a != nil {
		b.charge = allocator.ChargeOf(a)
	}
}

// nodeState is one node's inventory, liveness and usage.
type nodeState struct {
	mu   sync.Mutex
	name string
	// invRaw is the last AnnoInventory value seen (decoded only when it changes).
	invRaw string
	inv    *device.Inventory
	// invWhy is why the inventory cannot take GPU pods, kept with inv so that Filter's per-node
	// check reads no field of the Inventory (two pointer loads, each a likely cache miss, per
	// node per call): where inv is nil the decoder's reason (no inventory, malformed), else the
	// missing enforcement (Inventory.Unenforced; "" when enforced).
	invWhy    string
	hasLease  bool
	leaseTime time.Time
	// released: the Lease has no holder (device.LeaseReleased): the node's device plugin is not
	// serving the kubelet; releasedAt is when the extender saw it released.
	released   bool
	releasedAt time.Time
	// used is the sum of the charges of members; recomputed on every change.
	used    allocator.NodeUsage
	members map[device.PodRef]*booking
	// at is used by GPU position (at[i] = used[inv.GPUs[i].UUID]), kept with used and inv: the
	// compact form Filter and Prioritize read without hashing UUIDs (allocator.FitScoreAt).
	at []allocator.GPUUsage
	// view is inv and at packed without pointers (allocator.NodeView; empty above 8 GPUs or
	// without inventory): what Filter and Prioritize read first for one-container pods.
	view allocator.NodeView
	// idx is the node's stable position in the cache (never reused; memos are indexed by it).
	idx int
	// gen counts changes of inv and used (starts at 1): a score computed at gen g is still
	// right while gen is g (memo.go).
	gen uint64
	// nodeState is a whole number of 64-byte cache lines (448 bytes, without padding since
	// released and releasedAt: Go's size class of that size is 64-byte aligned), so that every
	// node starts on a line of its own: Filter and Prioritize walk each node's mutex and view in
	// turn, and at 416 bytes half the nodes began mid-line (BenchmarkExtenderScale/nodes=1000/
	// prioritize 1.3-1.5x slower, side by side). TestNodeStateIsWholeCacheLines keeps it so: a
	// field added pads it to the next line (a trailing _ [n]byte).
}

func (ns *nodeState) recompute() {
	u := make(allocator.NodeUsage, len(ns.used))
	for _, b := range ns.members {
		if b.charge != nil {
			u.Add(b.charge)
		}
	}
	ns.used = u
	ns.refreshCompact()
	ns.gen++
}

// refreshCompact rebuilds at and view from inv and used (after either changed). Caller holds
// ns.mu.
func (ns *nodeState) refreshCompact() {
	ns.at = allocator.UsageAt(ns.inv, ns.used, ns.at)
	ns.view.Set(ns.inv, ns.at)
}

// usageAtExcluding returns the compact usage matching usageExcluding(ns, own): ns.at when own
// is not charged on ns, else nil (FitScoreAt then reads the map copy). Caller holds ns.mu.
func usageAtExcluding(ns *nodeState, own *booking) []allocator.GPUUsage {
	if own == nil || own.node != ns.name || own.charge == nil || ns.members[own.key] != own {
		return ns.at
	}
	return nil
}

// Cache is the extender's state: what the informers feed (node inventories and Leases: OnNode,
// OnLease; pods: OnPod, OnPodDelete) and the bookings, one per pod, that the verbs (Scheduler)
// and the informer move through their stages. Every booking charges its node with its own
// allocation (booking.setCharge): the device plugin applies each pod's own plan at container
// creation, so no pod ever holds another's GPUs. A booking's life:
//
//	                    Filter (reserve)
//	   (none) ─────────────────────────────▶ reserved ─── Sweep, ReservationTTL ──▶ (none)
//	     │                                    │   ▲
//	     │                     BookForBind    │   │ FinishBind: outcome unknown
//	     │                                    ▼   │ (maybeBound: pinned to its node)
//	     │                                  binding ── FinishBind: failed ──▶ (none)
//	     │                                    │
//	     │     informer: bound, AnnoPlanned   │ FinishBind: bound, or the informer
//	     ├───────────────────────────────▶    ▼ shows the pod bound
//	     │                                  planned
//	     │     informer: bound, AnnoClaimed   │ informer: AnnoClaimed (the device
//	     └───────────────────────────────▶    ▼ plugin applied the plan at container creation)
//	                                        claimed
//
//	(none) ── informer: pending, status.nominatedNodeName ──▶ nominated ── Filter finds a fit ──▶
//	          reserved; loses its nomination ──▶ (none)
//
//	any stage ── Release: the pod is deleted or finished ──▶ (none); its reference is
//	             remembered for GoneTTL so that no racing verb books it again.
//
// The stage does not change the charge: a booking is charged what it was placed with, and a new
// allocation on the pod (AnnoPlanned, AnnoClaimed) replaces the booking. BookForBind also books
// a pod that holds no reservation (none → binding); it never waits behind another pod (case
// C20). A reserved booking whose bind may have been committed (maybeBound) moves to planned or
// claimed when the informer or a late FinishBind shows the pod bound. A pod the informer shows
// bound elsewhere without a plan loses its booking. Bound bookings are never dropped by a timer
// (case C14).
//
// Lock order: mu, then nodesMu, then one nodeState.mu at a time (never two node locks at
// once). Readers of one node's usage (Filter, Prioritize) hold only that node's lock, briefly;
// every writer holds mu and the node's lock. No lock is held across an API call.
type Cache struct {
	cfg   Config
	clock clock.Clock

	mu      sync.Mutex
	pods    map[device.PodRef]*booking
	gone    map[device.PodRef]time.Time
	nodesMu sync.RWMutex
	nodes   map[string]*nodeState
	// nodeCount is len(nodes), the next nodeState.idx (guarded by nodesMu).
	nodeCount int
	memos     memoTable
	refusals  *refusals
	offers    *preemptOffers
	// claims are the pods a preemption was decided for (one preemption per pod:
	// preempt_once.go).
	claims *preemptions
	// holds counts the bookings in stageNominated (guarded by mu for writes; read without it):
	// while it is 0, no pod's usage needs holds of lower priority left out (nominated.go).
	holds atomic.Int64
}

// NewCache returns an empty cache.
func NewCache(cfg Config, clk clock.Clock) *Cache {
	return &Cache{
		cfg:      cfg,
		clock:    clk,
		pods:     map[device.PodRef]*booking{},
		gone:     map[device.PodRef]time.Time{},
		nodes:    map[string]*nodeState{},
		memos:    newMemoTable(),
		refusals: newRefusals(),
		offers:   newPreemptOffers(),
		claims:   newPreemptions(),
	}
}

// node returns the node's state or nil.
func (c *Cache) node(name string) *nodeState {
	c.nodesMu.RLock()
	ns := c.nodes[name]
	c.nodesMu.RUnlock()
	return ns
}

// nodeOrNew returns the node's state, creating an empty one.
func (c *Cache) nodeOrNew(name string) *nodeState {
	if ns := c.node(name); ns != nil {
		return ns
	}
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	ns := c.nodes[name]
	if ns == nil {
		ns = &nodeState{name: name, used: allocator.NodeUsage{}, members: map[device.PodRef]*booking{}, invWhy: errNoInventory, idx: c.nodeCount, gen: 1}
		c.nodes[name] = ns
		c.nodeCount++
	}
	return ns
}

// errNoInventory is the reason of a node without an inventory (the node-usability rule's).
const errNoInventory = device.ReasonNoInventory

// removeLocked takes b off its node and out of the pod index. Caller holds mu.
func (c *Cache) removeLocked(b *booking) {
	if b.charge != nil {
		c.refusals.released(c.clock.Now())
	}
	if c.pods[b.key] == b && b.stage == stageNominated {
		c.holds.Add(-1)
	}
	delete(c.pods, b.key)
	ns := c.nodeOrNew(b.node)
	ns.mu.Lock()
	delete(ns.members, b.key)
	ns.recompute()
	ns.mu.Unlock()
}

// putLocked places b on its node (replacing any booking of the same key there) and indexes it.
// Caller holds mu and not the node's lock.
func (c *Cache) putLocked(b *booking) {
	if old := c.pods[b.key]; old != nil && old != b && old.node != b.node {
		c.removeLocked(old)
	}
	b.setCharge()
	if old := c.pods[b.key]; old != nil && old.stage == stageNominated {
		c.holds.Add(-1)
	}
	if b.stage == stageNominated {
		c.holds.Add(1)
	}
	c.pods[b.key] = b
	ns := c.nodeOrNew(b.node)
	ns.mu.Lock()
	ns.members[b.key] = b
	ns.recompute()
	ns.mu.Unlock()
}

// Release drops whatever the pod holds (deleted or ended pod), and its Filter refusal (requeue.go).
// Only this exact key is touched (case C12; a pod re-created under its name is another key, C34).
// It remembers the key as gone, so that a racing Filter cannot book it again.
func (c *Cache) Release(k device.PodRef) {
	c.refusals.fits(k)
	c.claims.forget(k)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gone[k] = c.clock.Now()
	if b := c.pods[k]; b != nil {
		c.removeLocked(b)
		c.refreshHoldsLocked(b.node)
	}
}

// Sweep drops reservations that no Bind confirmed within cfg.ReservationTTL and forgets gone
// pods after cfg.GoneTTL. Bound pods are never dropped by it (case C14).
func (c *Cache) Sweep() {
	now := c.clock.Now()
	c.claims.sweep(now)
	c.mu.Lock()
	defer c.mu.Unlock()
	var stale []*booking
	for _, b := range c.pods {
		if b.stage == stageReserved && now.Sub(b.since) > c.cfg.ReservationTTL {
			stale = append(stale, b)
		}
	}
	for _, b := range stale {
		c.removeLocked(b)
	}
	for k, t := range c.gone {
		if now.Sub(t) > c.cfg.GoneTTL {
			delete(c.gone, k)
		}
	}
}

// usageExcluding returns the node's usage without own's charge when own is booked there.
// Caller holds ns.mu. The result must not be modified unless it is a copy (copied reports so).
func usageExcluding(ns *nodeState, own *booking) allocator.NodeUsage {
	if own == nil || own.node != ns.name || own.charge == nil || ns.members[own.key] != own {
		return ns.used
	}
	u := make(allocator.NodeUsage, len(ns.used))
	for k, v := range ns.used {
		u[k] = v
	}
	u.Sub(own.charge)
	return u
}

// ownBooking returns the pod's booking (read under mu; the pointer is stable).
func (c *Cache) ownBooking(k device.PodRef) *booking {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pods[k]
}

// ownBookingPinned returns the pod's booking and whether it is pinned to its node because its
// last bind may yet be committed there (booking.maybeBound), both read under mu.
func (c *Cache) ownBookingPinned(k device.PodRef) (*booking, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.pods[k]
	return b, b != nil && b.maybeBound
}

// GPUUsage is one GPU's booked usage, for inspection and metrics.
type GPUUsage struct {
	Node  string
	GPU   device.GPU
	Usage allocator.GPUUsage
}

// NodeGPUUsage returns the booked usage of every GPU of the node's inventory, in index order.
func (c *Cache) NodeGPUUsage(node string) []GPUUsage {
	ns := c.node(node)
	if ns == nil {
		return nil
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.inv == nil {
		return nil
	}
	out := make([]GPUUsage, 0, len(ns.inv.GPUs))
	for _, g := range ns.inv.GPUs {
		out = append(out, GPUUsage{Node: node, GPU: g, Usage: ns.used[g.UUID]})
	}
	return out
}

// NodeNames returns the names of every node the cache knows, sorted.
func (c *Cache) NodeNames() []string {
	c.nodesMu.RLock()
	defer c.nodesMu.RUnlock()
	out := make([]string, 0, len(c.nodes))
	for n := range c.nodes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// PodState reports the node and stage of the pod's booking ("" when it holds nothing), and the
// allocation charged for it.
func (c *Cache) PodState(k device.PodRef) (node, stageName string, alloc *device.Allocation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.pods[k]
	if b == nil {
		return "", "", nil
	}
	return b.node, b.stage.String(), b.alloc
}

// setStageLocked moves b to stage st (its charge stays: it does not depend on the stage).
// Caller holds mu (not b's node lock).
func (c *Cache) setStageLocked(b *booking, st stage) {
	if c.pods[b.key] == b && b.stage != st {
		switch stageNominated {
		case b.stage:
			c.holds.Add(-1)
		case st:
			c.holds.Add(1)
		}
	}
	ns := c.nodeOrNew(b.node)
	ns.mu.Lock()
	b.stage, b.since, b.maybeBound = st, c.clock.Now(), false
	ns.mu.Unlock()
}

// nodesOf looks up the states of names under one read lock (nil where unknown), and returns the
// number of nodes the cache knows (every nodeState.idx is below it).
func (c *Cache) nodesOf(names []string) ([]*nodeState, int) {
	out := make([]*nodeState, len(names))
	c.nodesMu.RLock()
	for i, n := range names {
		out[i] = c.nodes[n]
	}
	count := c.nodeCount
	c.nodesMu.RUnlock()
	return out, count
}

// lockedGen reads ns.gen under ns.mu.
func (ns *nodeState) lockedGen() uint64 {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.gen
}

package extender

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// pluginModel plays the device plugin's ledger and the kubelet for interchangeable one-slice
// pods on one node (unit tests only): the kubelet admits pods in its own order and takes a slice
// of the GPU the plugin prefers (the first-seen unclaimed pod's plan; Ledger.Prefer); the plugin
// records the claim on the first-seen unclaimed pod whose plan is on that GPU (Ledger.match); its
// Reconcile later moves a claim to the pod the kubelet reports it under by swapping the two pods'
// records (Ledger.Reconcile); when a pod whose plan was swapped goes, the plugin republishes a
// remaining pod's planned annotation (deviceplugin publish.go); changed records are written to
// the pods one pod at a time, in any
// order, each write carrying the pod's latest record (the annotation writer's queue). It also
// keeps each pod as the API server has it, with a resourceVersion per write, for an extender
// restart (the informer's list, by name).
type pluginModel struct {
	order []string                      // bound pods in the order the plugin saw them
	plan  map[string]*device.Allocation // effective plan (swapped by Reconcile)
	claim map[string]string             // slice ID the pod's record claims ("" none)
	holds map[string]string             // slice ID the kubelet gave the pod ("" not admitted)
	free  map[string][]string           // free slice IDs per GPU UUID
	dirty map[string]bool               // a write is due (claimed record or republished plan)
	// claimDirty: the pod's claimed record is not written yet.
	claimDirty map[string]bool
	pods       map[string]*corev1.Pod        // as bound (planned annotation set), planned as republished
	repub      map[string]*device.Allocation // planned annotation to write (publish.go)
	api        map[string]*corev1.Pod        // latest write of each pod, resourceVersion set
	rv         int                           // the API server's last resourceVersion
}

func newPluginModel(inv device.Inventory) *pluginModel {
	m := &pluginModel{plan: map[string]*device.Allocation{}, claim: map[string]string{}, holds: map[string]string{},
		free: map[string][]string{}, dirty: map[string]bool{}, claimDirty: map[string]bool{}, pods: map[string]*corev1.Pod{}, api: map[string]*corev1.Pod{}, repub: map[string]*device.Allocation{}}
	for _, g := range inv.GPUs {
		for i := 0; i < inv.SplitCount; i++ {
			m.free[g.UUID] = append(m.free[g.UUID], device.SliceID(g.UUID, i))
		}
	}
	return m
}

func gpuOf(a *device.Allocation) string { return a.Containers[0].Devices[0].UUID }

func plannedPtr(t testing.TB, p *corev1.Pod) *device.Allocation {
	a := plannedOf(t, p)
	return &a
}

// stored is p as the API server stores a write of it: with the next resourceVersion.
func (m *pluginModel) stored(p *corev1.Pod) *corev1.Pod {
	m.rv++
	q := withRV(p, m.rv)
	m.api[q.Name] = q
	return q
}

// list returns the pods as an informer lists them: by name.
func (m *pluginModel) list() []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range m.api {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// bound records a pod the informer delivered bound with its plan.
func (m *pluginModel) bound(t testing.TB, p *corev1.Pod) {
	a := plannedOf(t, p)
	m.order = append(m.order, p.Name)
	m.plan[p.Name] = &a
	m.pods[p.Name] = p
}

// admit: the kubelet admits pod q (Prefer, Allocate, claim on the matched record).
func (m *pluginModel) admit(q string) {
	var first string
	for _, n := range m.order {
		if m.claim[n] == "" {
			first = n
			break
		}
	}
	if first == "" {
		// Every record claims a slice (one claims the slice of a pod deleted before Reconcile
		// moved it): the plugin finds no pod for the call and the kubelet fails the admission.
		return
	}
	g := gpuOf(m.plan[first])
	if len(m.free[g]) == 0 { // preferred GPU has no free slice: any other
		for _, n := range m.order {
			if u := gpuOf(m.plan[n]); len(m.free[u]) > 0 {
				g = u
				break
			}
		}
	}
	id := m.free[g][0]
	m.free[g] = m.free[g][1:]
	m.holds[q] = id
	owner := first
	for _, n := range m.order {
		if m.claim[n] == "" && gpuOf(m.plan[n]) == g {
			owner = n
			break
		}
	}
	m.claim[owner] = id
	m.dirty[owner], m.claimDirty[owner] = true, true
}

// reconcile moves every claim to the pod the kubelet reports it under (swapping records).
func (m *pluginModel) reconcile() {
	names := append([]string(nil), m.order...)
	sort.Strings(names)
	for _, q := range names {
		id := m.holds[q]
		if id == "" || m.claim[q] == id {
			continue
		}
		for _, e := range m.order {
			if m.claim[e] == id {
				m.plan[e], m.plan[q] = m.plan[q], m.plan[e]
				m.claim[e], m.claim[q] = m.claim[q], m.claim[e]
				m.dirty[e], m.dirty[q] = true, true
				m.claimDirty[e], m.claimDirty[q] = true, true
				break
			}
		}
	}
}

// published is the planned annotation of pod n once its pending write lands.
func (m *pluginModel) published(t testing.TB, n string) *device.Allocation {
	if a := m.repub[n]; a != nil {
		return a
	}
	return plannedPtr(t, m.pods[n])
}

// write returns pod n as the plugin's patch of its claimed record (and republished plan) leaves it.
func (m *pluginModel) write(t testing.TB, n string) *corev1.Pod {
	delete(m.dirty, n)
	delete(m.claimDirty, n)
	if a := m.repub[n]; a != nil {
		enc, err := device.EncodeAllocation(*a)
		if err != nil {
			t.Fatal(err)
		}
		p := m.pods[n].DeepCopy()
		p.Annotations[device.AnnoPlanned] = enc
		m.pods[n] = p
		delete(m.repub, n)
	}
	if m.claim[n] == "" {
		return m.stored(withClaim(t, m.pods[n], nil))
	}
	a := *m.plan[n]
	a.Containers = []device.ContainerAllocation{m.plan[n].Containers[0]}
	a.Containers[0].SliceIDs = []string{m.claim[n]}
	return m.stored(withClaim(t, m.pods[n], &a))
}

// remove forgets a deleted pod (its slice back to the kubelet's free list) and republishes.
func (m *pluginModel) remove(t testing.TB, n string) {
	defer m.republish(t)
	if id := m.holds[n]; id != "" {
		u, _, _ := device.ParseSliceID(id)
		m.free[u] = append(m.free[u], id)
	}
	for i, x := range m.order {
		if x == n {
			m.order = append(m.order[:i], m.order[i+1:]...)
			break
		}
	}
	delete(m.plan, n)
	delete(m.claim, n)
	delete(m.holds, n)
	delete(m.dirty, n)
	delete(m.claimDirty, n)
	delete(m.pods, n)
	delete(m.api, n)
	delete(m.repub, n)
}

// republish rewrites remaining pods' planned annotations until they add up to the plans, as
// Ledger.republishLocked does: each slot held more often than published goes to a pod
// published on a slot published more often than held, the one whose plan it is first.
func (m *pluginModel) republish(t testing.TB) {
	held, published := map[string]int{}, map[string]int{}
	slot := map[string]*device.Allocation{}
	for _, x := range m.order {
		held[device.SlotKey(m.plan[x])]++
		slot[device.SlotKey(m.plan[x])] = m.plan[x]
		published[device.SlotKey(m.published(t, x))]++
	}
	var short []string
	for k, n := range held {
		for i := published[k]; i < n; i++ {
			short = append(short, k)
		}
	}
	sort.Strings(short)
	for _, want := range short {
		pick := ""
		for _, x := range m.order {
			if k := device.SlotKey(m.published(t, x)); published[k] <= held[k] {
				continue
			}
			if pick == "" || device.SlotKey(m.plan[x]) == want && device.SlotKey(m.plan[pick]) != want {
				pick = x
			}
		}
		if pick == "" {
			continue
		}
		published[device.SlotKey(m.published(t, pick))]--
		published[want]++
		m.repub[pick] = device.Renamed(slot[want], plannedPtr(t, m.pods[pick]))
		m.dirty[pick] = true
	}
}

// case C04: a burst of interchangeable one-slice pods through Filter, Bind, the informer and the
// device plugin (modelled: kubelet admission in its own order, claims recorded on the matching
// pod, Reconcile swaps written one pod at a time in any order, deletions, extender restarts that
// rebuild the cache from the pods listed by name): after every single
// event no GPU has more sharers than the split count (checkInvariants), the node's total equals
// the number of booked pods, and once every write has landed each GPU's sharers equal what the
// plugin holds or plans there.
func TestOvercountBurstWithPluginSwaps(t *testing.T) {
	for seed := int64(1); seed <= 100; seed++ {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) { burstWithSwaps(t, seed) })
	}
}

func burstWithSwaps(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	inv := testInventory("node-1", 4, 24576, 4)
	c := memoCache(t, inv) // replaced at an extender restart
	m := newPluginModel(inv)
	nodes := []string{"node-1"}
	total := func() int {
		s := 0
		for _, g := range c.NodeGPUUsage("node-1") {
			s += g.Usage.Sharers
		}
		return s
	}
	live := 0 // pods booked (reserved or bound) and not deleted
	var history []string
	t.Cleanup(func() {
		if t.Failed() {
			for _, h := range history {
				t.Log(h)
			}
			c.mu.Lock()
			var rows []string
			for k, b := range c.pods {
				row := fmt.Sprintf("%s %s planned=%s", k.Name, b.stage, gpuOf(b.planned))
				if b.claimed != nil {
					row += fmt.Sprintf(" claimed=%s%v", gpuOf(b.claimed), b.claimed.Containers[0].SliceIDs)
				}
				if b.alloc != nil {
					row += " charged=" + gpuOf(b.alloc)
				}
				if x := m.plan[k.Name]; x != nil {
					row += fmt.Sprintf(" | plugin plan=%s claim=%s holds=%s", gpuOf(x), m.claim[k.Name], m.holds[k.Name])
				}
				rows = append(rows, row)
			}
			c.mu.Unlock()
			sort.Strings(rows)
			for _, r := range rows {
				t.Log(r)
			}
			for _, ns := range c.nodes {
				for _, g := range ns.moves {
					for _, mv := range g {
						t.Logf("move: kept %s, lost %s", gpuOf(mv.kept), gpuOf(mv.lost))
					}
				}
			}
		}
	})
	check := func(what string) {
		t.Helper()
		history = append(history, fmt.Sprintf("%s: sharers %v", what, sharersOf(c, "node-1")))
		checkInvariants(t, c)
		if got := total(); got != live {
			t.Fatalf("seed %d, %s: %d sharers on the node, want %d (live booked pods)", seed, what, got, live)
		}
	}
	const n = 24 // more than the node's 16 slices: some wait for deletions
	var pending []*corev1.Pod
	for i := 0; i < n; i++ {
		pending = append(pending, podtest.Pending("burst", fmt.Sprintf("p-%02d", i), podtest.GPU("main", 1, "1000", 0)))
	}
	for steps := 0; steps < 400 && (len(pending) > 0 || len(m.dirty) > 0); steps++ {
		switch r := rng.Intn(10); {
		case r < 3 && len(pending) > 0: // schedule one pod: Filter, Bind, then informer and FinishBind in either order
			p := pending[0]
			res := c.Filter(p, nodes)
			if len(*res.NodeNames) == 0 {
				check("filter " + p.Name)
				pending = append(pending[1:], p)
				continue
			}
			live++
			check("filter " + p.Name)
			req, _, err := c.ParseRequest(p)
			if err != nil {
				t.Fatal(err)
			}
			a, _, err := c.BookForBind(context.Background(), device.RefOf(p), req, "node-1")
			if err != nil {
				t.Fatalf("seed %d: bind of %s: %v", seed, p.Name, err)
			}
			pending = pending[1:]
			check("book " + p.Name)
			b := p.DeepCopy()
			b.Spec.NodeName = "node-1"
			enc, err := device.EncodeAllocation(*a)
			if err != nil {
				t.Fatal(err)
			}
			b.Annotations[device.AnnoPlanned] = enc
			b = m.stored(b)
			if rng.Intn(2) == 0 {
				c.FinishBind(device.RefOf(p), "node-1", outcomeBound)
				check("finish " + p.Name)
				c.OnPod(b)
			} else {
				c.OnPod(b)
				check("informer " + p.Name)
				c.FinishBind(device.RefOf(p), "node-1", outcomeBound)
			}
			m.bound(t, b)
			check("bound " + p.Name)
		case r < 5: // the kubelet admits a random bound pod
			var waiting []string
			for _, x := range m.order {
				if m.holds[x] == "" {
					waiting = append(waiting, x)
				}
			}
			if len(waiting) > 0 {
				q := waiting[rng.Intn(len(waiting))]
				m.admit(q)
				history = append(history, fmt.Sprintf("kubelet admits %s: holds %s; records %v", q, m.holds[q], m.claim))
			}
		case r < 6:
			m.reconcile()
			history = append(history, fmt.Sprintf("reconcile: records %v", m.claim))
		case r < 9 && len(m.dirty) > 0: // one pod's claimed record is written
			var names []string
			for x := range m.dirty {
				names = append(names, x)
			}
			sort.Strings(names)
			x := names[rng.Intn(len(names))]
			c.OnPod(m.write(t, x))
			check("write " + x)
		case r == 9 && rng.Intn(3) == 0:
			// A pod is deleted (or ends): one running with its record written, or one waiting
			// for admission that holds its own plan, also when a republished plan is still to
			// be written on it. Left out: a waiting pod whose record was swapped, or a pod whose
			// claimed record is not written yet; the plugin then frees a plan the cache cannot
			// know until that write lands (milliseconds).
			var running []string
			for _, x := range m.order {
				settled := m.holds[x] != "" && m.claim[x] == m.holds[x]
				waitingOwn := m.holds[x] == "" && m.claim[x] == "" && device.SlotKey(m.plan[x]) == device.SlotKey(plannedPtr(t, m.pods[x]))
				if (settled || waitingOwn) && !m.claimDirty[x] {
					running = append(running, x)
				}
			}
			if len(running) == 0 {
				continue
			}
			x := running[rng.Intn(len(running))]
			p := m.stored(m.api[x]) // the deletion's resourceVersion
			m.remove(t, x)
			history = append(history, fmt.Sprintf("republish pending: %v", func() map[string]string {
				o := map[string]string{}
				for k, a := range m.repub {
					o[k] = gpuOf(a)
				}
				return o
			}()))
			c.OnPodDelete(p, nil)
			live--
			check("delete " + x)
		case r == 9 && rng.Intn(2) == 0 && len(m.dirty) == 0:
			// The extender restarts: a new cache from the API's pods. Not while one of the
			// plugin's writes is in flight: when the pod on the other side of a swap or of a
			// republished plan was deleted meanwhile, the API does not hold the fact until the
			// write lands (milliseconds), and a cache rebuilt in that instant is off by one slot
			// until then. TestOvercountRestartListsStaleRecordLast covers a rebuild during a swap.
			c = memoCache(t, inv)
			for _, p := range m.list() {
				c.OnPod(p)
			}
			check("restart")
		}
	}
	// Quiescence: reconcile and land every write; the cache then matches the plugin.
	m.reconcile()
	for len(m.dirty) > 0 {
		for x := range m.dirty {
			c.OnPod(m.write(t, x))
			check("final write " + x)
		}
	}
	// At rest: moves no republished annotation settled expire after the reservation TTL; the
	// cache, and one rebuilt from the API now, then charge what the plugin holds or plans.
	c.clock.(*clocktesting.FakeClock).Step(DefaultConfig().ReservationTTL + time.Second)
	c.Sweep()
	want := map[string]int{}
	for _, x := range m.order {
		want[gpuOf(m.plan[x])]++
	}
	rebuilt := memoCache(t, inv)
	for _, p := range m.list() {
		rebuilt.OnPod(p)
	}
	for name, cache := range map[string]*Cache{"the cache": c, "a rebuilt cache": rebuilt} {
		for _, g := range cache.NodeGPUUsage("node-1") {
			if g.Usage.Sharers != want[g.GPU.UUID] {
				t.Fatalf("seed %d, at rest: %s has %d sharers on GPU %d, the plugin holds or plans %d", seed, name, g.Usage.Sharers, g.GPU.Index, want[g.GPU.UUID])
			}
		}
	}
}

package extender

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/ledger"
)

// pluginModel is the device plugin's real ledger (pkg/ledger) with the kubelet and the API
// server modelled around it, for interchangeable one-slice pods on one node (unit tests only):
// the kubelet admits pods in its own order, takes the slice the ledger prefers
// (Ledger.Prefer) from its free ones, and the ledger claims it for a pod (Ledger.TryAllocate);
// Reconcile reports what the kubelet holds (Ledger.Reconcile, which swaps records); a deleted
// pod leaves the ledger (Ledger.DeletePod, which republishes); the pods the ledger queues are
// written one pod at a time, in any order, each write carrying the pod's latest record and
// republished plan (as PodSync writes them) and delivered back to the ledger (its informer).
// It keeps each pod as the API server has it, with a resourceVersion per write, for an
// extender restart (the informer's list, by name).
type pluginModel struct {
	l     *ledger.Ledger
	cfg   ledger.Config          // what l is built with (a restart builds a new one)
	gpus  []string               // GPU UUIDs in index order
	holds map[string]string      // slice ID the kubelet gave the pod ("" not admitted)
	given map[string]string      // GPU the pod's container was given by Allocate's answer
	free  map[string][]string    // free slice IDs per GPU UUID
	dirty map[string]bool        // queued by the ledger for writing
	pods  map[string]*corev1.Pod // as the plugin's informer last delivered them
	api   map[string]*corev1.Pod // latest write of each pod, resourceVersion set
	rv    int                    // the API server's last resourceVersion
	// planAtCreate models --apply-plan-at=create-container (issue 15 design (b)): Allocate
	// claims nothing, the NRI guard claims the pod's own plan at container creation
	// (Ledger.ClaimPlanned), and the plugin never reconciles with the kubelet's IDs.
	planAtCreate bool
}

func newPluginModel(inv device.Inventory) *pluginModel {
	m := &pluginModel{holds: map[string]string{}, given: map[string]string{}, free: map[string][]string{}, dirty: map[string]bool{},
		pods: map[string]*corev1.Pod{}, api: map[string]*corev1.Pod{}}
	mib := map[string]int64{}
	for _, g := range inv.GPUs {
		m.gpus = append(m.gpus, g.UUID)
		mib[g.UUID] = g.MemoryMiB
		for i := 0; i < inv.SplitCount; i++ {
			m.free[g.UUID] = append(m.free[g.UUID], device.SliceID(g.UUID, i))
		}
	}
	m.cfg = ledger.Config{
		Node: inv.Node, Names: device.DefaultResourceNames(), Clock: clocktesting.NewFakeClock(t0),
		Dirty:     func(r device.PodRef) { m.dirty[r.Name] = true },
		GPUMemory: func(u string) (int64, bool) { v, ok := mib[u]; return v, ok },
	}
	m.l = ledger.New(m.cfg)
	return m
}

// restart: the device plugin restarts and the writes it had queued are lost. The new ledger
// gets the pods as the API holds them (its informer's list), reconciles with the kubelet (as
// PodSync.Start does before the plugin serves), and then the NRI guard connects and the
// runtime's Synchronize reports each running container's answer (Ledger.Answered). An answer
// the ledger cannot take is a container that runs on a slot another pod holds: an over-commit.
//
// Under planAtCreate, Synchronize claims each running container's own plan again
// (Ledger.ClaimPlanned), which must be the GPU the container runs on.
func (m *pluginModel) restart(t testing.TB) {
	t.Helper()
	m.l = ledger.New(m.cfg)
	m.dirty = map[string]bool{}
	m.pods = map[string]*corev1.Pod{}
	for _, p := range m.list() {
		m.pods[p.Name] = p
		m.l.UpsertPod(p)
	}
	m.reconcile()
	for _, q := range m.names() {
		g := m.given[q]
		switch {
		case g == "":
		case m.planAtCreate:
			if cl, _, err := m.l.ClaimPlanned(m.pods[q].UID, "main"); err != nil || cl.Container.Devices[0].UUID != g {
				t.Fatalf("after a plugin restart: %s claims %+v, %v; its container runs on %s", q, cl, err, g)
			}
		default:
			if _, err := m.l.Answered(m.pods[q].UID, "main", []string{g}); err != nil {
				t.Fatalf("after a plugin restart: %v", err)
			}
		}
	}
}

// claimName names a claimed container in the test's records: its first slice ID, or, for a claim
// made at container creation (no slice IDs), "on <GPU>".
func claimName(c device.ContainerAllocation) string {
	if len(c.SliceIDs) > 0 {
		return c.SliceIDs[0]
	}
	return "on " + c.Devices[0].UUID
}

func gpuOf(a *device.Allocation) string { return a.Containers[0].Devices[0].UUID }

func plannedPtr(t testing.TB, p *corev1.Pod) *device.Allocation {
	a := plannedOf(t, p)
	return &a
}

// plan is the ledger's effective plan of pod n (swapped by Reconcile); nil when it has none.
func (m *pluginModel) plan(n string) *device.Allocation {
	p := m.pods[n]
	if p == nil {
		return nil
	}
	a, ok := m.l.Plan(p.UID)
	if !ok {
		return nil
	}
	return &a
}

// claim is the slice ID the ledger's claimed record of pod n names ("" none).
func (m *pluginModel) claim(n string) string {
	if p := m.pods[n]; p != nil {
		if rec, ok := m.l.ClaimedRecord(p.UID); ok && len(rec.Containers) > 0 {
			return claimName(rec.Containers[0])
		}
	}
	return ""
}

// claims are the ledger's claimed records by pod name (for the test's history).
func (m *pluginModel) claims() map[string]string {
	out := map[string]string{}
	for n := range m.pods {
		out[n] = m.claim(n)
	}
	return out
}

// claimWritten is the slice ID pod n's AnnoClaimed names in the API ("" none).
func (m *pluginModel) claimWritten(t testing.TB, n string) string {
	raw, ok := m.api[n].Annotations[device.AnnoClaimed]
	if !ok {
		return ""
	}
	a, err := device.DecodeAllocation(raw)
	if err != nil {
		t.Fatal(err)
	}
	return claimName(a.Containers[0])
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

// bound delivers a pod bound with its plan to the ledger.
func (m *pluginModel) bound(p *corev1.Pod) {
	m.pods[p.Name] = p
	m.l.UpsertPod(p)
}

// admit: the kubelet admits pod q: GetPreferredAllocation over its free slices, then Allocate
// with the slice preferred. When the ledger finds no pod for the call (every record claims a
// slice, one of them the slice of a pod deleted before Reconcile moved it), the kubelet fails
// the admission and the slice stays free.
func (m *pluginModel) admit(q string) {
	var avail []string
	for _, u := range m.gpus {
		avail = append(avail, m.free[u]...)
	}
	ids := m.l.Prefer(avail, nil, 1)
	if len(ids) != 1 {
		return
	}
	if m.planAtCreate {
		// Allocate answers the pending answer; the runtime then creates q's container, and the
		// guard claims q's own plan.
		cl, planned, err := m.l.ClaimPlanned(m.pods[q].UID, "main")
		if err != nil || !planned {
			panic(fmt.Sprintf("ClaimPlanned(%s) = %+v, %v, %v", q, cl, planned, err))
		}
		m.given[q] = cl.Container.Devices[0].UUID
	} else {
		cl, err := m.l.TryAllocate(ids)
		if err != nil {
			return
		}
		m.given[q] = cl.Container.Devices[0].UUID // the env of the answer: what q's container uses
	}
	u, _, _ := device.ParseSliceID(ids[0])
	for i, id := range m.free[u] {
		if id == ids[0] {
			m.free[u] = append(m.free[u][:i:i], m.free[u][i+1:]...)
			break
		}
	}
	m.holds[q] = ids[0]
}

// reconcile reports to the ledger what the kubelet holds (PodResources).
// reconcile runs the ledger's Reconcile on what the kubelet holds and returns how many pods'
// records it changed (swaps).
func (m *pluginModel) reconcile() int {
	if m.planAtCreate {
		return 0 // the plugin does not reconcile: each claim is its pod's own plan
	}
	var obs []ledger.ObservedContainer
	for q, id := range m.holds {
		if id != "" {
			obs = append(obs, ledger.ObservedContainer{Namespace: m.pods[q].Namespace, Pod: q, Container: "main", IDs: []string{id}})
		}
	}
	return len(m.l.Reconcile(obs))
}

// write returns pod n as the plugin's patch of its claimed record (and republished plan) leaves
// it, and delivers it back to the ledger.
func (m *pluginModel) write(t testing.TB, n string) *corev1.Pod {
	delete(m.dirty, n)
	p := m.pods[n]
	if a := m.l.PlannedRewrite(p.UID); a != nil {
		enc, err := device.EncodeAllocation(*a)
		if err != nil {
			t.Fatal(err)
		}
		p = p.DeepCopy()
		p.Annotations[device.AnnoPlanned] = enc
	}
	var q *corev1.Pod
	if rec, _ := m.l.ClaimedRecord(p.UID); len(rec.Containers) == 0 {
		q = m.stored(withClaim(t, p, nil))
	} else {
		q = m.stored(withClaim(t, p, &rec))
	}
	m.pods[n] = q
	m.l.UpsertPod(q)
	return q
}

// remove: pod n is deleted; its slice goes back to the kubelet's free list and the ledger
// forgets it (and republishes its group).
func (m *pluginModel) remove(n string) {
	if id := m.holds[n]; id != "" {
		u, _, _ := device.ParseSliceID(id)
		m.free[u] = append(m.free[u], id)
	}
	uid := m.pods[n].UID
	delete(m.holds, n)
	delete(m.given, n)
	delete(m.dirty, n)
	delete(m.pods, n)
	delete(m.api, n)
	m.l.DeletePod(uid)
}

// republishPending reports whether the ledger has a republished plan still to write.
func (m *pluginModel) republishPending() bool {
	for _, p := range m.pods {
		if m.l.PlannedRewrite(p.UID) != nil {
			return true
		}
	}
	return false
}

// names are the pods the ledger serves, sorted.
func (m *pluginModel) names() []string {
	var out []string
	for n := range m.pods {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// case C04: a burst of interchangeable one-slice pods through Filter, Bind, the informer and the
// device plugin (modelled: kubelet admission in its own order, claims recorded on the matching
// pod, Reconcile swaps written one pod at a time in any order, deletions, extender restarts that
// rebuild the cache from the pods listed by name): after every single
// event no GPU has more sharers than the split count (checkInvariants), the node's total equals
// the number of booked pods, and once every write has landed each GPU's sharers equal what the
// plugin holds or plans there, and each admitted pod's plan is the GPU Allocate's answer gave its
// container.
//
// Subtest serialize-same-key runs the same burst with Config.SerializeSameKey (issue 15 option
// (a)): a bind behind an in-flight pod of the same call key is refused at once (BindWait 0) and
// the pod retried later, as kube-scheduler retries a refused bind.
//
// Subtest plugin-restarts restarts the device plugin at random steps, losing the writes it had
// queued (claimed records, swaps), and then has the runtime report each running container's
// answer (NRI Synchronize, Ledger.Answered); an answer the ledger cannot take fails the test. Not
// while a republished plan is still to be written: a restart in the milliseconds between a
// swapped pod's deletion and that write loses the fact (docs/design.md "Recoverable").
//
// Subtest apply-plan-at-create-container is design (b) (--apply-plan-at=create-container): the
// kubelet's slice names no pod's GPU, each container claims its own pod's plan at creation, and
// the plugin restarts at random steps, with none of the exceptions above: any pod may be deleted
// at any step, and the plugin and the extender restart with writes in flight.
func TestOvercountBurstWithPluginSwaps(t *testing.T) {
	for _, v := range []burstVariant{
		{name: "default"}, {name: "serialize-same-key", serialize: true}, {name: "plugin-restarts", restarts: true},
		{name: "apply-plan-at-create-container", restarts: true, planAtCreate: true},
	} {
		t.Run(v.name, func(t *testing.T) {
			refused, swapped, restarted := 0, 0, 0
			for seed := int64(1); seed <= 100; seed++ {
				t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
					r, s, n := burstWithSwaps(t, seed, v)
					refused, swapped, restarted = refused+r, swapped+s, restarted+n
				})
			}
			t.Logf("%s over 100 seeds: %d binds refused behind an in-flight pod of the same call key, %d records changed by Reconcile, %d plugin restarts", v.name, refused, swapped, restarted)
			// (a) refuses binds and leaves Reconcile nothing to swap; (b) neither refuses nor
			// swaps; (c) never refuses and swaps.
			if v.serialize != (refused > 0) || (v.serialize || v.planAtCreate) != (swapped == 0) || v.restarts != (restarted > 0) {
				t.Fatalf("%s: %d binds refused, %d records swapped, %d restarts", v.name, refused, swapped, restarted)
			}
		})
	}
}

// burstVariant is one design the burst model runs: serialize is Config.SerializeSameKey (design
// (a)), planAtCreate --apply-plan-at=create-container (design (b)), neither today's (c);
// restarts restarts the plugin at random steps, losing the writes it had queued.
type burstVariant struct {
	name                              string
	serialize, restarts, planAtCreate bool
}

// burstWithSwaps runs one seed of the burst and returns how many binds were refused, how many
// records the plugin's Reconcile changed and how often the plugin restarted.
func burstWithSwaps(t *testing.T, seed int64, v burstVariant) (refused, swapped, restarted int) {
	serialize, restarts := v.serialize, v.restarts
	rng := rand.New(rand.NewSource(seed))
	inv := testInventory("node-1", 4, 24576, 4)
	inv.OwnPlanAtCreate = v.planAtCreate // as the plugin publishes it
	newCache := func() *Cache {
		c := memoCache(t, inv)
		c.cfg.SerializeSameKey = serialize
		c.cfg.BindWait = 0 // refuse at once: the fake clock never fires a wait
		return c
	}
	c := newCache()               // replaced at an extender restart
	filtered := map[string]bool{} // pods reserved by Filter whose bind was refused
	m := newPluginModel(inv)
	m.planAtCreate = v.planAtCreate
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
				if x := m.plan(k.Name); x != nil {
					row += fmt.Sprintf(" | plugin plan=%s claim=%s holds=%s", gpuOf(x), m.claim(k.Name), m.holds[k.Name])
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
			res := NewScheduler(c).Filter(p, nodes)
			if len(*res.NodeNames) == 0 {
				check("filter " + p.Name)
				pending = append(pending[1:], p)
				continue
			}
			if !filtered[p.Name] {
				live++
			}
			filtered[p.Name] = true
			check("filter " + p.Name)
			req, _, err := c.ParseRequest(p)
			if err != nil {
				t.Fatal(err)
			}
			a, _, err := NewScheduler(c).BookForBind(context.Background(), device.RefOf(p), req, "node-1")
			var r *BindRefusal
			if serialize && errors.As(err, &r) && strings.Contains(r.Reason, "the device plugin could confuse the two") {
				refused++ // kube-scheduler retries the pod later; its reservation stays
				pending = append(pending[1:], p)
				check("refused " + p.Name)
				continue
			}
			if err != nil {
				t.Fatalf("seed %d: bind of %s: %v", seed, p.Name, err)
			}
			delete(filtered, p.Name)
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
				NewScheduler(c).FinishBind(device.RefOf(p), "node-1", outcomeBound)
				check("finish " + p.Name)
				c.OnPod(b)
			} else {
				c.OnPod(b)
				check("informer " + p.Name)
				NewScheduler(c).FinishBind(device.RefOf(p), "node-1", outcomeBound)
			}
			m.bound(b)
			check("bound " + p.Name)
		case r < 5: // the kubelet admits a random bound pod
			var waiting []string
			for _, x := range m.names() {
				if m.holds[x] == "" {
					waiting = append(waiting, x)
				}
			}
			if len(waiting) > 0 {
				q := waiting[rng.Intn(len(waiting))]
				m.admit(q)
				history = append(history, fmt.Sprintf("kubelet admits %s: holds %s; records %v", q, m.holds[q], m.claims()))
			}
		case r < 6:
			swapped += m.reconcile()
			history = append(history, fmt.Sprintf("reconcile: records %v", m.claims()))
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
			for _, x := range m.names() {
				settled := m.holds[x] != "" && m.claim(x) == m.holds[x]
				waitingOwn := m.holds[x] == "" && m.claim(x) == "" && device.SlotKey(m.plan(x)) == device.SlotKey(plannedPtr(t, m.pods[x]))
				claimWritten := m.claim(x) == m.claimWritten(t, x)
				if v.planAtCreate || (settled || waitingOwn) && claimWritten {
					running = append(running, x)
				}
			}
			if len(running) == 0 {
				continue
			}
			x := running[rng.Intn(len(running))]
			p := m.stored(m.api[x]) // the deletion's resourceVersion
			m.remove(x)
			history = append(history, fmt.Sprintf("republish pending: %v", func() map[string]string {
				o := map[string]string{}
				for _, k := range m.names() {
					if a := m.l.PlannedRewrite(m.pods[k].UID); a != nil {
						o[k] = gpuOf(a)
					}
				}
				return o
			}()))
			c.OnPodDelete(p, nil)
			live--
			check("delete " + x)
		case r == 9 && restarts && rng.Intn(2) == 0 && (v.planAtCreate || !m.republishPending()):
			m.restart(t)
			restarted++
			history = append(history, fmt.Sprintf("plugin restart: records %v", m.claims()))
		case r == 9 && rng.Intn(2) == 0 && (v.planAtCreate || len(m.dirty) == 0):
			// The extender restarts: a new cache from the API's pods. Not while one of the
			// plugin's writes is in flight: when the pod on the other side of a swap or of a
			// republished plan was deleted meanwhile, the API does not hold the fact until the
			// write lands (milliseconds), and a cache rebuilt in that instant is off by one slot
			// until then. TestOvercountRestartListsStaleRecordLast covers a rebuild during a swap.
			c = newCache()
			for k := range filtered { // reservations live in memory only
				delete(filtered, k)
				live--
			}
			for _, p := range m.list() {
				c.OnPod(p)
			}
			check("restart")
		}
	}
	// Quiescence: reconcile and land every write; the cache then matches the plugin.
	swapped += m.reconcile()
	for len(m.dirty) > 0 {
		for x := range m.dirty {
			c.OnPod(m.write(t, x))
			check("final write " + x)
		}
	}
	// At rest: moves no republished annotation settled expire after the slot move TTL; the
	// cache, and one rebuilt from the API now, then charge what the plugin holds or plans.
	c.clock.(*clocktesting.FakeClock).Step(DefaultConfig().SlotMoveTTL + time.Second)
	c.Sweep()
	want := map[string]int{}
	for _, x := range m.names() {
		want[gpuOf(m.plan(x))]++
		if g := m.given[x]; g != "" && gpuOf(m.plan(x)) != g {
			t.Fatalf("seed %d, at rest: the plugin charges %s to GPU %s, but its container was given GPU %s", seed, x, gpuOf(m.plan(x)), g)
		}
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
	return refused, swapped, restarted
}

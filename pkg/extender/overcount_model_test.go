package extender

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/ledger"
)

// pluginModel is the device plugin's real ledger (pkg/ledger) with the kubelet, the NRI plugin and
// the API server modelled around it, for one-slice pods on one node (unit tests only): the
// kubelet admits pods in its own order and takes any free slice (the kubelet's IDs name no GPU of
// the pod's); the NRI plugin claims the pod's own plan when the runtime creates its container
// (Ledger.ClaimPlanned); a deleted pod leaves the ledger (Ledger.DeletePod); the pods the ledger
// queues are written one pod at a time, in any order, each write carrying the pod's latest
// claimed record (as PodSync writes them) and delivered back to the ledger (its informer). It
// keeps each pod as the API server has it, with a resourceVersion per write, for a restart (the
// informer's list, by name).
type pluginModel struct {
	l     *ledger.Ledger
	cfg   ledger.Config          // what l is built with (a restart builds a new one)
	gpus  []string               // GPU UUIDs in index order
	holds map[string]string      // slice ID the kubelet gave the pod ("" not admitted)
	given map[string]string      // GPU the pod's container was given (its claim at creation)
	free  map[string][]string    // free slice IDs per GPU UUID
	dirty map[string]bool        // queued by the ledger for writing
	pods  map[string]*corev1.Pod // as the plugin's informer last delivered them
	api   map[string]*corev1.Pod // latest write of each pod, resourceVersion set
	rv    int                    // the API server's last resourceVersion
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
		Node: inv.Node, Names: device.DefaultResourceNames(),
		Dirty:     func(r device.PodRef) { m.dirty[r.Name] = true },
		GPUMemory: func(u string) (int64, bool) { v, ok := mib[u]; return v, ok },
	}
	m.l = ledger.New(m.cfg)
	return m
}

// restart: the device plugin restarts and the writes it had queued are lost. The new ledger
// gets the pods as the API holds them (its informer's list): a pod whose claimed record was
// written has its claim back (Ledger.ContainerClaim). Then the NRI plugin connects and the
// runtime's Synchronize claims each running container's own plan again (Ledger.ClaimPlanned),
// which must be the GPU the container runs on: else it runs on a slot the ledger charges to
// another GPU, an over-commit.
func (m *pluginModel) restart(t testing.TB) {
	t.Helper()
	m.l = ledger.New(m.cfg)
	m.dirty = map[string]bool{}
	m.pods = map[string]*corev1.Pod{}
	for _, p := range m.list() {
		m.pods[p.Name] = p
		m.l.UpsertPod(p)
	}
	for _, q := range m.names() {
		g := m.given[q]
		if g == "" {
			continue
		}
		uid := m.pods[q].UID
		if w := m.claimWritten(t, q); w != "" {
			if cl, claimed, _ := m.l.ContainerClaim(uid, "main"); !claimed || claimName(cl.Container) != w {
				t.Fatalf("after a plugin restart: %s's claim %+v (claimed %v), its record says %s", q, cl, claimed, w)
			}
		}
		if cl, _, err := m.l.ClaimPlanned(uid, "main"); err != nil || cl.Container.Devices[0].UUID != g {
			t.Fatalf("after a plugin restart: %s claims %+v, %v; its container runs on %s", q, cl, err, g)
		}
	}
}

// claimName names a claimed container in the test's records: "on <GPU>" (a claim made at
// container creation has no slice IDs).
func claimName(c device.ContainerAllocation) string { return "on " + c.Devices[0].UUID }

func gpuOf(a *device.Allocation) string { return a.Containers[0].Devices[0].UUID }

// plan is the ledger's plan of pod n; nil when it has none.
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

// claim names the ledger's claimed record of pod n (claimName; "" none).
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

// claimWritten names pod n's AnnoClaimed in the API (claimName; "" none).
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

// admit: the kubelet admits pod q: it takes the first free slice (its IDs name no GPU of the
// pod's), and the runtime creates q's container, for which the NRI plugin claims q's own plan. With
// no slice free the kubelet fails the admission.
func (m *pluginModel) admit(q string) {
	for _, u := range m.gpus {
		if len(m.free[u]) == 0 {
			continue
		}
		cl, planned, err := m.l.ClaimPlanned(m.pods[q].UID, "main")
		if err != nil || !planned {
			panic(fmt.Sprintf("ClaimPlanned(%s) = %+v, %v, %v", q, cl, planned, err))
		}
		m.given[q] = cl.Container.Devices[0].UUID
		m.holds[q], m.free[u] = m.free[u][0], m.free[u][1:]
		return
	}
}

// write returns pod n as the plugin's patch of its claimed record leaves it, and delivers it
// back to the ledger.
func (m *pluginModel) write(t testing.TB, n string) *corev1.Pod {
	delete(m.dirty, n)
	p := m.pods[n]
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
// forgets it.
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

// names are the pods the ledger serves, sorted.
func (m *pluginModel) names() []string {
	var out []string
	for n := range m.pods {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// withClaim returns a copy of p whose claimed annotation is a (nil: annotation removed), as the
// device plugin's merge patch leaves it.
func withClaim(t testing.TB, p *corev1.Pod, a *device.Allocation) *corev1.Pod {
	t.Helper()
	q := p.DeepCopy()
	if a == nil {
		delete(q.Annotations, device.AnnoClaimed)
		return q
	}
	s, err := device.EncodeAllocation(*a)
	if err != nil {
		t.Fatal(err)
	}
	q.Annotations[device.AnnoClaimed] = s
	return q
}

// withRV returns p with resourceVersion rv, as the API server stamps every write.
func withRV(p *corev1.Pod, rv int) *corev1.Pod {
	q := p.DeepCopy()
	q.ResourceVersion = fmt.Sprint(rv)
	return q
}

func sharersOf(c *Cache, node string) []int {
	var out []int
	for _, g := range c.NodeGPUUsage(node) {
		out = append(out, g.Usage.Sharers)
	}
	return out
}

// case C04: a burst of one-slice pods of one device request through Filter, Bind, the informer and the
// device plugin (modelled: kubelet admission in its own order, each container claiming its own
// pod's plan at creation, claimed records written one pod at a time in any order, deletions of
// any pod at any step, device-plugin restarts that lose the writes in flight, extender restarts
// that rebuild the cache from the pods listed by name, also with writes in flight): after every
// single event no GPU has more sharers than the split count (checkInvariants) and the node's
// total equals the number of booked pods; after a plugin restart each running container gets its
// own claim back on the GPU it runs on; once every write has landed each GPU's sharers equal
// what the plugin plans there, in the cache and in one rebuilt from the API, and each admitted
// pod's plan is the GPU its container was given. Any of these failing is an over-commit.
func TestOvercountBurstWithPluginRestarts(t *testing.T) {
	restarted := 0
	for seed := int64(1); seed <= 100; seed++ {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			r, _ := burstWithRestarts(t, seed, false)
			restarted += r
		})
	}
	t.Logf("over 100 seeds: %d plugin restarts, no over-commit", restarted)
	if restarted == 0 {
		t.Fatal("the plugin never restarted: the model no longer covers restarts")
	}
}

// Issue 28 item 3: the burst of TestOvercountBurstWithPluginRestarts with two extenders
// (scheduler.replicas 2): the leader's and the standby's, which the same informer events feed
// all along. The leader's binds may stay in flight (booked, their Binding not yet in the API)
// across steps, and the leader may die (failover): each of its binds in flight then lands (the
// standby's informer delivers it, nobody finishes it) or is lost (the pod is pending again), and
// the standby serves from its informer state; a new standby starts from the API's pods. After
// every event neither cache over-commits, and the leader's total is its booked pods.
//
// The binds settle before the new leader's first verb, as they do on a cluster: after a crash
// kube-scheduler's standby leads only once the dead leader's Lease has expired (leaseDuration,
// 15 s by default, after its last renewal, at most retryPeriod before it died), and its extender
// then holds its verbs for the bind API timeout besides (leader.go); after a graceful release
// (SIGTERM) the standby leads within retryPeriod and only that hold orders it
// (TestOvercountGracefulHandOver). TestFailoverLateBindWouldOvercommit shows why that order
// matters.
func TestOvercountBurstWithSchedulerFailover(t *testing.T) {
	failovers := 0
	for seed := int64(1); seed <= 100; seed++ {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			_, f := burstWithRestarts(t, seed, true)
			failovers += f
		})
	}
	t.Logf("over 100 seeds: %d scheduler failovers, no over-commit", failovers)
	if failovers == 0 {
		t.Fatal("no failover happened: the model no longer covers them")
	}
}

// burstWithRestarts runs one seed of the burst and returns how often the plugin restarted and,
// with failover (TestOvercountBurstWithSchedulerFailover), how often the scheduler failed over.
func burstWithRestarts(t *testing.T, seed int64, failover bool) (restarted, failovers int) {
	rng := rand.New(rand.NewSource(seed))
	inv := testInventory("node-1", 4, 24576, 4)
	c := memoCache(t, inv) // the leader's; replaced at an extender restart or a failover
	m := newPluginModel(inv)
	// With failover: the standby's cache, fed the same informer events, and the leader's binds in
	// flight (booked in c; their Binding, the pod bound with its plan, not yet in the API).
	var standby *Cache
	if failover {
		standby = memoCache(t, inv)
	}
	inform := func(p *corev1.Pod) {
		c.OnPod(p)
		if standby != nil {
			standby.OnPod(p)
		}
	}
	type inFlight struct{ pending, bound *corev1.Pod }
	var flying []inFlight
	nodes := []string{"node-1"}
	total := func() int {
		s := 0
		for _, g := range c.NodeGPUUsage("node-1") {
			s += g.Usage.Sharers
		}
		return s
	}
	live := 0 // pods booked and not deleted
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
					row += " claimed=" + gpuOf(b.claimed)
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
		}
	})
	check := func(what string) {
		t.Helper()
		history = append(history, fmt.Sprintf("%s: sharers %v", what, sharersOf(c, "node-1")))
		checkInvariants(t, c)
		if standby != nil {
			checkInvariants(t, standby)
		}
		if got := total(); got != live {
			t.Fatalf("seed %d, %s: %d sharers on the node, want %d (live booked pods)", seed, what, got, live)
		}
	}
	var pending []*corev1.Pod
	// land: the leader's Binding of p (b: p bound with its plan) is committed; the informer and the
	// leader's FinishBind follow in either order.
	land := func(p, b *corev1.Pod) {
		t.Helper()
		b = m.stored(b)
		if rng.Intn(2) == 0 {
			NewScheduler(c).FinishBind(device.RefOf(p), "node-1", outcomeBound)
			check("finish " + p.Name)
			inform(b)
		} else {
			inform(b)
			check("informer " + p.Name)
			NewScheduler(c).FinishBind(device.RefOf(p), "node-1", outcomeBound)
		}
		m.bound(b)
		check("bound " + p.Name)
	}
	// settle: the leader's extender died with binds in flight; each Binding was committed (the
	// informer delivers it to the standby; nobody finishes it) or not (the pod is pending again).
	// The caller then replaces c.
	settle := func(what string) {
		for _, f := range flying {
			if rng.Intn(2) == 0 {
				b := m.stored(f.bound)
				if standby != nil {
					standby.OnPod(b)
				}
				m.bound(b)
				history = append(history, fmt.Sprintf("%s: the dead leader's bind of %s landed", what, f.pending.Name))
			} else {
				live--
				pending = append(pending, f.pending)
				history = append(history, fmt.Sprintf("%s: the dead leader's bind of %s was lost", what, f.pending.Name))
			}
		}
		flying = nil
	}
	const n = 24 // more than the node's 16 slices: some wait for deletions
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
			live++
			check("filter " + p.Name)
			req, _, err := c.ParseRequest(p)
			if err != nil {
				t.Fatal(err)
			}
			a, _, err := NewScheduler(c).BookForBind(device.RefOf(p), req, "node-1")
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
			if failover && rng.Intn(2) == 0 {
				flying = append(flying, inFlight{p, b})
				continue
			}
			land(p, b)
		case failover && r < 5 && len(flying) > 0: // one of the leader's binds in flight lands
			i := rng.Intn(len(flying))
			f := flying[i]
			flying = append(flying[:i], flying[i+1:]...)
			land(f.pending, f.bound)
		case r < 6: // the kubelet admits a random bound pod
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
		case r < 9 && len(m.dirty) > 0: // one pod's claimed record is written
			var names []string
			for x := range m.dirty {
				names = append(names, x)
			}
			sort.Strings(names)
			x := names[rng.Intn(len(names))]
			c.OnPod(m.write(t, x))
			check("write " + x)
		case r == 9 && rng.Intn(3) == 0: // any pod is deleted (or ends), its record written or not
			names := m.names()
			if len(names) == 0 {
				continue
			}
			x := names[rng.Intn(len(names))]
			p := m.stored(m.api[x]) // the deletion's resourceVersion
			m.remove(x)
			c.OnPodDelete(p, nil)
			if standby != nil {
				standby.OnPodDelete(p, nil)
			}
			live--
			check("delete " + x)
		case failover && r == 9 && rng.Intn(2) == 0:
			// Failover: the leading kube-scheduler and its extender die; their binds in flight
			// settle before the standby, which leads now, gets its first verb (see
			// TestOvercountBurstWithSchedulerFailover); a new standby starts from the API's pods.
			settle("failover")
			c, standby = standby, memoCache(t, inv)
			for _, p := range m.list() {
				standby.OnPod(p)
			}
			failovers++
			check("failover")
		case r == 9 && rng.Intn(2) == 0:
			m.restart(t)
			restarted++
			history = append(history, fmt.Sprintf("plugin restart: records %v", m.claims()))
		case r == 9 && rng.Intn(2) == 0:
			// The extender restarts: a new cache from the API's pods, writes in flight or not
			// (and, with failover, its binds in flight settled).
			settle("extender restart")
			c = memoCache(t, inv)
			for _, p := range m.list() {
				c.OnPod(p)
			}
			check("restart")
		}
	}
	// Quiescence: land every bind and write; the cache, and one rebuilt from the API now, then
	// charge what the plugin plans.
	for _, f := range flying {
		land(f.pending, f.bound)
	}
	flying = nil
	for len(m.dirty) > 0 {
		for x := range m.dirty {
			c.OnPod(m.write(t, x))
			check("final write " + x)
		}
	}
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
				t.Fatalf("seed %d, at rest: %s has %d sharers on GPU %d, the plugin plans %d", seed, name, g.Usage.Sharers, g.GPU.Index, want[g.GPU.UUID])
			}
		}
	}
	return restarted, failovers
}

// Why a failover must let the dead leader's binds settle before the new leader books (issue 28
// item 3): on a GPU with one slot, the leader books pod y and dies with y's Binding in flight;
// were the standby to serve at once, it would find the GPU free and bind pod x there, and y's
// Binding landing afterwards would put two pods on one slot. After a crash kube-scheduler's
// leader election orders it (the standby leads only leaseDuration, 15 s, after the dead
// leader's last renewal, later than a Binding of the dead extender can land: its API timeout,
// 10 s); after a graceful release (kube-scheduler releases the Lease at SIGTERM, the standby
// leads within retryPeriod) the new leader's extender orders it: it refuses its verbs for the
// bind API timeout after it saw its kube-scheduler take the Lease, and until its cache caught up
// (leader.go; TestHandOverWaitsForOldLeadersBinding, TestOvercountGracefulHandOver).
func TestFailoverLateBindWouldOvercommit(t *testing.T) {
	inv := testInventory("node-1", 1, 24576, 1)
	leader, standby := memoCache(t, inv), memoCache(t, inv)
	bindPlan := func(c *Cache, p *corev1.Pod) *corev1.Pod {
		t.Helper()
		if res := NewScheduler(c).Filter(p, []string{"node-1"}); len(*res.NodeNames) != 1 {
			t.Fatalf("filter %s: %+v", p.Name, res)
		}
		req, _, err := c.ParseRequest(p)
		if err != nil {
			t.Fatal(err)
		}
		a, _, err := NewScheduler(c).BookForBind(device.RefOf(p), req, "node-1")
		if err != nil {
			t.Fatalf("bind %s: %v", p.Name, err)
		}
		b := p.DeepCopy()
		b.Spec.NodeName = "node-1"
		enc, err := device.EncodeAllocation(*a)
		if err != nil {
			t.Fatal(err)
		}
		b.Annotations[device.AnnoPlanned] = enc
		return b
	}
	y := bindPlan(leader, podtest.Pending("burst", "y", podtest.GPU("main", 1, "1000", 0))) // in flight when the leader dies
	x := bindPlan(standby, podtest.Pending("burst", "x", podtest.GPU("main", 1, "1000", 0)))
	standby.OnPod(withRV(x, 1))
	standby.OnPod(withRV(y, 2)) // the dead leader's Binding lands late
	if u := gpuUse(standby, "node-1", 0); u.Sharers != 2 {
		t.Fatalf("the late Binding left %+v on the one-slot GPU; the model expects the over-commit it shows (2 sharers)", u)
	}
	// The order kube-scheduler's leader election gives: y lands, then the new leader filters.
	standby = memoCache(t, inv)
	standby.OnPod(withRV(y, 2))
	x = podtest.Pending("burst", "x", podtest.GPU("main", 1, "1000", 0))
	if res := NewScheduler(standby).Filter(x, []string{"node-1"}); len(*res.NodeNames) != 0 {
		t.Fatalf("with y's Binding landed first the new leader still places x on the full GPU: %+v", res)
	}
	checkInvariants(t, standby)
}

// Issue 37 item 6: a graceful hand-over. kube-scheduler releases its Lease at SIGTERM, so the
// standby leads within retryPeriod (2 s), while Binds of the old leader's extender that began
// before the release may still commit up to the bind API timeout (10 s) after they began. The
// model: one node (two GPUs of two slots), two extenders fed the same informer events, the
// leader's binds in flight for any time up to APITimeout (the model's clock moves 0-1.5 s a
// step; a bind whose time is up lands or is lost first), pods deleted at any step, and graceful
// releases: the old leader's verbs close at once (its kube-scheduler's release, its SIGTERM) but
// its binds in flight go on; the standby's kube-scheduler takes the Lease 0-2 s later and its
// extender, gated by the real leadership (leader.go), answers only once refusal is nil (settling
// its term once the hold has passed: the model's informers are synchronous, so the cache is
// current at once); then a new standby starts from the API. After every step the API must not
// hold more bound pods on a GPU than its slots, nor any cache charge more.
//
// With hold false (the fix removed: the new leader serves at its first verb) the model must find
// the over-commit; with the hold (Config.APITimeout), never.
func TestOvercountGracefulHandOver(t *testing.T) {
	for _, hold := range []bool{true, false} {
		found, handovers, early := 0, 0, 0
		var example string
		for seed := int64(1); seed <= 100; seed++ {
			why, h, e := gracefulHandOver(t, seed, hold)
			handovers += h
			early += e
			if why != "" {
				found++
				if example == "" {
					example = fmt.Sprintf("seed %d: %s", seed, why)
				}
			}
		}
		t.Logf("hold=%v: 100 seeds, %d graceful hand-overs, %d with a bind of the old leader in flight, %d over-committed (%s)", hold, handovers, early, found, example)
		if handovers == 0 || early == 0 {
			t.Fatalf("hold=%v: %d hand-overs, %d with a bind in flight: the model no longer covers them", hold, handovers, early)
		}
		if hold && found != 0 {
			t.Fatalf("with the hand-over hold: over-commit in %d seeds, e.g. %s", found, example)
		}
		if !hold && found == 0 {
			t.Fatal("without the hand-over hold the model found no over-commit: it no longer shows why the hold is needed")
		}
	}
}

// gracefulHandOver runs one seed of TestOvercountGracefulHandOver; it returns the first
// over-commit ("" none), the number of hand-overs and of those with binds of the old leader in
// flight.
func gracefulHandOver(t *testing.T, seed int64, hold bool) (overcommit string, handovers, early int) {
	rng := rand.New(rand.NewSource(seed))
	inv := testInventory("node-1", 2, 24576, 2)
	apiTimeout := DefaultConfig().APITimeout
	now := t0
	type extender struct {
		c    *Cache
		lead *leadership // the gate of its verbs (real leader.go)
		host string
	}
	newExt := func(host string) *extender {
		h := time.Duration(0)
		if hold {
			h = apiTimeout
		}
		return &extender{c: memoCache(t, inv), lead: newLeadership(host, h, now), host: host}
	}
	api := map[string]*corev1.Pod{} // bound pods as the API holds them
	rv := 0
	hosts := 0
	nextHost := func() string { hosts++; return fmt.Sprintf("sched-%d", hosts) }
	leader := newExt(nextHost())
	leader.lead.observe(leader.host+"_u", now)
	leader.lead.settle(1) // the first leader serves from the start of the model
	now = now.Add(apiTimeout)
	standby := newExt(nextHost())
	exts := []*extender{leader, standby}
	inform := func(p *corev1.Pod, deleted bool) {
		for _, x := range exts {
			if deleted {
				x.c.OnPodDelete(p, nil)
			} else {
				x.c.OnPod(p)
			}
		}
	}
	// serving: the extender's gate at now, settling its term once the hold has passed.
	serving := func(x *extender) bool {
		if term, until, need := x.lead.pending(); need && !now.Before(until) {
			x.lead.settle(term)
		}
		return x.lead.refusal(now) == nil
	}
	type inFlight struct {
		by      *extender
		pending *corev1.Pod
		bound   *corev1.Pod
		start   time.Time
	}
	var flying []inFlight
	var pending []*corev1.Pod
	for i := 0; i < 12; i++ {
		pending = append(pending, podtest.Pending("burst", fmt.Sprintf("p-%02d", i), podtest.GPU("main", 1, "1000", 0)))
	}
	settle := func(i int, lands bool) {
		f := flying[i]
		flying = append(flying[:i], flying[i+1:]...)
		if lands {
			rv++
			b := withRV(f.bound, rv)
			api[b.Name] = b
			inform(b, false)
			NewScheduler(f.by.c).FinishBind(device.RefOf(f.pending), "node-1", outcomeBound)
			return
		}
		NewScheduler(f.by.c).FinishBind(device.RefOf(f.pending), "node-1", outcomeFailed)
		pending = append(pending, f.pending)
	}
	// check: no GPU holds more bound pods in the API than its slots; no cache charges more.
	check := func(what string) string {
		per := map[string]int{}
		for _, p := range api {
			a, err := device.DecodeAllocation(p.Annotations[device.AnnoPlanned])
			if err != nil {
				t.Fatal(err)
			}
			per[gpuOf(&a)]++
		}
		for _, g := range inv.GPUs {
			if per[g.UUID] > inv.SplitCount {
				return fmt.Sprintf("%s: %d pods bound on GPU %d of %d slots", what, per[g.UUID], g.Index, inv.SplitCount)
			}
		}
		for _, x := range exts {
			for _, g := range x.c.NodeGPUUsage("node-1") {
				if g.Usage.Sharers > inv.SplitCount {
					return fmt.Sprintf("%s: %s's cache charges %d sharers on GPU %d", what, x.host, g.Usage.Sharers, g.GPU.Index)
				}
			}
		}
		return ""
	}
	for step := 0; step < 300; step++ {
		now = now.Add(time.Duration(rng.Intn(1500)) * time.Millisecond)
		// A Bind's API calls end within the bind API timeout: the Binding landed or not by then.
		for i := 0; i < len(flying); {
			if now.Sub(flying[i].start) >= apiTimeout {
				settle(i, rng.Intn(2) == 0)
				if why := check("a bind at its timeout"); why != "" {
					return why, handovers, early
				}
				continue
			}
			i++
		}
		what := ""
		switch r := rng.Intn(10); {
		case r < 4 && len(pending) > 0: // the leading kube-scheduler schedules a pod through its extender
			p := pending[0]
			if !serving(leader) {
				what = "refused " + p.Name
				pending = append(pending[1:], p)
				break
			}
			res := NewScheduler(leader.c).Filter(p, []string{"node-1"})
			if len(*res.NodeNames) == 0 {
				pending = append(pending[1:], p)
				continue
			}
			req, _, err := leader.c.ParseRequest(p)
			if err != nil {
				t.Fatal(err)
			}
			a, _, err := NewScheduler(leader.c).BookForBind(device.RefOf(p), req, "node-1")
			if err != nil {
				pending = append(pending[1:], p)
				continue
			}
			pending = pending[1:]
			b := p.DeepCopy()
			b.Spec.NodeName = "node-1"
			enc, err := device.EncodeAllocation(*a)
			if err != nil {
				t.Fatal(err)
			}
			b.Annotations[device.AnnoPlanned] = enc
			flying = append(flying, inFlight{by: leader, pending: p, bound: b, start: now})
			what = "bind " + p.Name
		case r < 7 && len(flying) > 0: // a bind in flight lands (or, 1 in 4, fails)
			i := rng.Intn(len(flying))
			what = "bind settles " + flying[i].pending.Name
			settle(i, rng.Intn(4) != 0)
		case r < 9 && len(api) > 0: // a bound pod is deleted (or ends)
			var names []string
			for n := range api {
				names = append(names, n)
			}
			sort.Strings(names)
			n := names[rng.Intn(len(names))]
			p := api[n]
			delete(api, n)
			rv++
			inform(withRV(p, rv), true)
			q := p.DeepCopy() // a new pod of the workload, pending
			q.Name, q.UID, q.Spec.NodeName = n+"x", q.UID+"x", ""
			delete(q.Annotations, device.AnnoPlanned)
			pending = append(pending, q)
			what = "delete " + n
		case r == 9 && leader.lead.refusal(now) == nil: // graceful rollout of the leader's pod
			handovers++
			if len(flying) > 0 {
				early++
			}
			// SIGTERM: kube-scheduler releases the Lease; the old extender's verbs close (ErrStopping,
			// or ErrNotLeading once it sees the release); its binds in flight go on.
			leader.lead.observe("", now)
			standby.lead.observe("", now)
			now = now.Add(time.Duration(rng.Intn(2000)) * time.Millisecond) // retryPeriod
			standby.lead.observe(standby.host+"_u", now)
			leader.lead.observe(standby.host+"_u", now)
			old := leader
			leader = standby
			// The old pod's extender exits once its binds finished; a new standby lists the API.
			standby = newExt(nextHost())
			for _, p := range api {
				standby.c.OnPod(p)
			}
			exts = []*extender{old, leader, standby}
			what = "graceful hand-over to " + leader.host
		}
		if what == "" {
			continue
		}
		if why := check(what); why != "" {
			return why, handovers, early
		}
	}
	return "", handovers, early
}

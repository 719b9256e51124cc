package extender

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// preemptionModel drives one node's cache through preemption churn as kube-scheduler, the
// extender's preemption loop and the API server would (unit test only): pods of random size and
// priority are scheduled (Filter, BookForBind, FinishBind, the informer), preempt (PlanPreemption,
// the nomination, the victims terminating then gone), are retried, lose their nomination or end.
type preemptionModel struct {
	c       *Cache
	s       *Scheduler
	pending map[string]*corev1.Pod // unbound pods by name (status as the API has it)
	bound   map[string]*corev1.Pod // bound pods, terminating ones included
	seq     int
}

func (m *preemptionModel) newPod(rng *rand.Rand) {
	m.seq++
	p := podtest.Pending("m", fmt.Sprintf("p%d", m.seq), podtest.GPU("main", 1, fmt.Sprint(2000+rng.Intn(12)*2000), 0))
	prio := int32(rng.Intn(4) * 100)
	p.Spec.Priority = &prio
	m.pending[p.Name] = p
	m.c.OnPod(p)
}

// schedule runs one scheduling cycle of p as kube-scheduler would: Filter, then Bind on the
// first fitting node; a refusal everywhere runs the extender's preemption for it at once.
func (m *preemptionModel) schedule(t *testing.T, p *corev1.Pod) {
	res := m.s.Filter(p, []string{"node-1"})
	if len(*res.NodeNames) == 0 {
		m.preempt(t, p)
		return
	}
	k := device.RefOf(p)
	req := mustReq(t, m.c, p)
	a, _, err := m.s.BookForBind(k, req, "node-1")
	if err != nil {
		return // refused: kube-scheduler retries later
	}
	m.s.FinishBind(k, "node-1", outcomeBound)
	enc, err := device.EncodeAllocation(*a)
	if err != nil {
		t.Fatal(err)
	}
	b := p.DeepCopy()
	b.Spec.NodeName = "node-1"
	b.Status.NominatedNodeName = ""
	b.Annotations[device.AnnoPlanned] = enc
	delete(m.pending, p.Name)
	m.bound[b.Name] = b
	m.c.OnPod(b)
}

func (m *preemptionModel) preempt(t *testing.T, p *corev1.Pod) {
	if !mayPreempt(p) {
		return
	}
	plan, ok := m.c.PlanPreemption(device.RefOf(p), mustReq(t, m.c, p), podPriority(p), []string{"node-1"}, nil)
	if !ok {
		return
	}
	n := p.DeepCopy()
	n.Status.NominatedNodeName = plan.Node
	m.pending[n.Name] = n
	m.c.OnPod(n)
	for _, v := range plan.Victims {
		b := m.bound[v.Name]
		if b == nil || b.DeletionTimestamp != nil {
			t.Fatalf("victim %s is not a running bound pod", v.Name)
		}
		if podPriority(b) >= podPriority(p) {
			t.Fatalf("victim %s of priority %d for a pod of priority %d", v.Name, podPriority(b), podPriority(p))
		}
		now := metav1.NewTime(t0)
		b = b.DeepCopy()
		b.DeletionTimestamp = &now
		m.bound[b.Name] = b
		m.c.OnPod(b)
	}
}

// check: what runs or is being bound (every booking but holds) fits the node, and so does what
// stays (every booking but terminating pods): a hold is a promise that can be kept.
func (m *preemptionModel) check(t *testing.T, step int, op string) {
	t.Helper()
	c := m.c
	c.mu.Lock()
	defer c.mu.Unlock()
	ns := c.node("node-1")
	ns.mu.Lock()
	defer ns.mu.Unlock()
	running, staying := allocator.NodeUsage{}, allocator.NodeUsage{}
	for _, b := range ns.members {
		if b.charge == nil {
			continue
		}
		if b.stage != stageNominated {
			running.Add(b.charge)
		}
		if !b.terminating {
			staying.Add(b.charge)
		}
	}
	for i := range ns.inv.GPUs {
		g := &ns.inv.GPUs[i]
		for what, u := range map[string]allocator.GPUUsage{"running and binding pods": running[g.UUID], "holds and pods that stay": staying[g.UUID]} {
			if u.MemoryMiB > ns.inv.CapacityMiB(g) || u.Sharers > ns.inv.SplitCount {
				t.Fatalf("step %d (%s): GPU %d: %s book %+v, over %d MiB / %d sharers", step, op, i, what, u, ns.inv.CapacityMiB(g), ns.inv.SplitCount)
			}
		}
	}
}

func pick(rng *rand.Rand, pods map[string]*corev1.Pod) *corev1.Pod {
	if len(pods) == 0 {
		return nil
	}
	names := make([]string, 0, len(pods))
	for n := range pods {
		names = append(names, n)
	}
	sort.Strings(names)
	return pods[names[rng.Intn(len(names))]]
}

// case C43: under preemption churn (random pods, priorities and sizes; preemption, victims
// terminating and gone, nominations cleared, pods ending) nothing running is over-committed, no
// hold is promised that the node cannot keep, and only pods of lower priority are victims.
func TestPreemptionChurnNeverOvercommits(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewSource(seed))
		inv := testInventory("node-1", 3, 24576, 4)
		c := NewCache(DefaultConfig(), clocktesting.NewFakeClock(t0))
		c.OnNode(testNode(t, inv))
		c.OnLease(testLease("node-1", t0))
		m := &preemptionModel{c: c, s: NewScheduler(c), pending: map[string]*corev1.Pod{}, bound: map[string]*corev1.Pod{}}
		preempted := 0
		for step := 0; step < 400; step++ {
			var op string
			switch r := rng.Intn(10); {
			case r < 3:
				op = "new pod"
				m.newPod(rng)
				m.schedule(t, m.pending[fmt.Sprintf("p%d", m.seq)])
			case r < 6:
				op = "retry a pending pod"
				if p := pick(rng, m.pending); p != nil {
					m.schedule(t, p)
				}
			case r < 8:
				op = "a terminating pod is gone"
				for _, b := range m.bound {
					if b.DeletionTimestamp != nil {
						delete(m.bound, b.Name)
						c.OnPodDelete(b, nil)
						preempted++
						break
					}
				}
			case r < 9:
				op = "a nomination is cleared"
				if p := pick(rng, m.pending); p != nil && p.Status.NominatedNodeName != "" {
					q := p.DeepCopy()
					q.Status.NominatedNodeName = ""
					m.pending[q.Name] = q
					c.OnPod(q)
				}
			default:
				op = "a running pod ends"
				if b := pick(rng, m.bound); b != nil && b.DeletionTimestamp == nil {
					delete(m.bound, b.Name)
					c.OnPodDelete(b, nil)
				}
			}
			m.check(t, step, op)
		}
		if seed == 1 && preempted == 0 {
			t.Fatalf("seed 1: no pod was ever preempted; the model does not exercise preemption")
		}
	}
}

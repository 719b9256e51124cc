package extender

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// onceFixture: node-1 (two 24576 MiB GPUs) runs low (priority 0) and mid (priority 10), 15000 MiB
// each on a GPU of its own; pre (priority 100) asks 20000 MiB: evicting low is the one answer.
func onceFixture(t *testing.T, cfg *Config, setup func(*fake.Clientset)) (e *env, low, pre *corev1.Pod) {
	inv := testInventory("node-1", 2, 24576, 10)
	objs, _ := setupNodes(t, inv)
	e = newEnvSetup(t, cfg, setup, objs...)
	e.waitNodes("node-1")
	low = prioritized(boundPod(t, "v", "low", "node-1", inv.GPUs[0].UUID, 15000, true), 0)
	mid := prioritized(boundPod(t, "v", "mid", "node-1", inv.GPUs[1].UUID, 15000, true), 10)
	pre = prioritized(podtest.Pending("p", "pre", podtest.GPU("main", 1, "20000", 0)), 100)
	e.create(low, mid, pre)
	c := e.ext.cache
	eventually(t, "the pods in the cache", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		b := c.pods[device.RefOf(low)]
		return gpuUse(c, "node-1", 1).MemoryMiB == 15000 && b != nil && b.informed
	})
	return e, low, pre
}

func (e *env) exists(ns, name string) bool {
	_, err := e.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	return err == nil
}

// Issue 37 item 3: kube-scheduler (through the verb) and the extender's own loop race for one
// pod; exactly one of them preempts, whichever comes first (run with -race).
func TestVerbAndLoopPreemptOnce(t *testing.T) {
	for _, order := range []string{"verb first", "loop first", "together"} {
		t.Run(order, func(t *testing.T) {
			e, low, pre := onceFixture(t, nil, nil)
			k := device.RefOf(pre)
			args := &extenderv1.ExtenderPreemptionArgs{Pod: pre, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"node-1": {}}}
			var verbNodes int
			var loopErr error
			verb := func() { verbNodes = len(e.ext.sched.Preempt(args).NodeNameToMetaVictims) }
			loop := func() { loopErr = e.ext.preempt(context.Background(), k, []string{"node-1"}) }
			switch order {
			case "verb first":
				verb()
				loop()
			case "loop first":
				loop()
				verb()
			default:
				var wg sync.WaitGroup
				start := make(chan struct{})
				wg.Add(2)
				go func() { defer wg.Done(); <-start; verb() }()
				go func() { defer wg.Done(); <-start; loop() }()
				close(start)
				wg.Wait()
			}
			if loopErr != nil {
				t.Fatal(loopErr)
			}
			loopEvicted := !e.exists("v", low.Name)
			if (verbNodes > 0) == loopEvicted {
				t.Fatalf("verb answered %d node(s), loop evicted: %v; want exactly one preemption", verbNodes, loopEvicted)
			}
			switch {
			case order == "verb first" && verbNodes != 1:
				t.Fatal("the verb, first, answered no node")
			case order == "loop first" && !loopEvicted:
				t.Fatal("the loop, first, evicted nobody")
			}
			if loopEvicted && e.getPod("p", "pre").Status.NominatedNodeName != "node-1" {
				t.Fatal("the loop evicted without nominating")
			}
		})
	}
}

// Issue 37 item 3: the own preemption nominates (and holds) before it evicts, so a victim that
// exits at once (grace period 0) frees a share that only the preemptor may take: a pod of lower
// or equal priority that asks for it at that moment is refused.
func TestGraceZeroVictimKeepsThePreemptorsShare(t *testing.T) {
	for _, prio := range []int32{0, 50, 100} {
		t.Run(fmt.Sprint("competitor priority ", prio), func(t *testing.T) {
			var e *env
			var low *corev1.Pod
			var mu sync.Mutex
			competitorFit, deleted := false, false
			competitor := prioritized(podtest.Pending("c", "competitor", podtest.GPU("main", 1, "20000", 0)), prio)
			e, low, pre := onceFixture(t, nil, func(c *fake.Clientset) {
				// The victim's DisruptionTarget condition is not stored: no late informer update
				// of the victim races the exit simulated below.
				c.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
					pa := a.(k8stesting.PatchAction)
					return pa.GetName() == "low" && pa.GetSubresource() == "status", nil, nil
				})
				c.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
					if a.(k8stesting.DeleteAction).GetName() != "low" {
						return false, nil, nil
					}
					// The victim exits at once: the informer shows it gone, and kube-scheduler
					// filters the competitor right then.
					e.ext.cache.OnPodDelete(low, nil)
					res := e.ext.sched.Filter(competitor, []string{"node-1"})
					mu.Lock()
					competitorFit, deleted = len(*res.NodeNames) > 0, true
					mu.Unlock()
					return false, nil, nil
				})
			})
			if err := e.ext.preempt(context.Background(), device.RefOf(pre), []string{"node-1"}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if !deleted {
				t.Fatal("low was not evicted")
			}
			if competitorFit {
				t.Fatalf("a pod of priority %d took the share freed for the preemptor (priority 100)", prio)
			}
			if res := e.ext.sched.Filter(pre, []string{"node-1"}); len(*res.NodeNames) != 1 {
				t.Fatalf("the preemptor does not fit once its victim is gone: %v", res.FailedNodes)
			}
		})
	}
}

// Issue 37 item 3: a hold counts only against pods of equal or lower priority (kube-scheduler
// counts nominated pods of equal or higher priority against a pod it filters): a pod of higher
// priority fits over a lower-priority hold and takes the share, and the outranked hold loses its
// placement (it is placed again when room comes).
func TestHigherPriorityIgnoresLowerHold(t *testing.T) {
	for _, tc := range []struct {
		prio int32
		fits bool
	}{{0, false}, {100, false}, {200, true}} {
		t.Run(fmt.Sprint("priority ", tc.prio), func(t *testing.T) {
			inv := testInventory("node-1", 1, 24576, 10)
			c := NewCache(DefaultConfig(), clocktesting.NewFakeClock(t0))
			c.OnNode(testNode(t, inv))
			c.OnLease(testLease("node-1", t0))
			s := NewScheduler(c)
			victim := prioritized(boundPod(t, "v", "victim", "node-1", inv.GPUs[0].UUID, 20000, true), 0)
			c.OnPod(victim)
			pre := prioritized(podtest.Pending("p", "pre", podtest.GPU("main", 1, "20000", 0)), 100)
			pre.Status.NominatedNodeName = "node-1"
			c.OnPod(pre)
			now := metav1.NewTime(t0)
			gone := victim.DeepCopy()
			gone.DeletionTimestamp = &now
			c.OnPod(gone)
			c.OnPodDelete(gone, nil)
			if _, st, a := c.PodState(device.RefOf(pre)); st != "nominated" || a == nil {
				t.Fatalf("pre: %s %v; want a placed hold", st, a)
			}
			other := prioritized(podtest.Pending("o", "other", podtest.GPU("main", 1, "10000", 0)), tc.prio)
			res := s.Filter(other, []string{"node-1"})
			if fit := len(*res.NodeNames) == 1; fit != tc.fits {
				t.Fatalf("priority %d over a hold of priority 100: fits %v (%v); want %v", tc.prio, fit, res.FailedNodes, tc.fits)
			}
			_, st, a := c.PodState(device.RefOf(pre))
			if st != "nominated" || (a == nil) != tc.fits {
				t.Fatalf("hold after the Filter: %s, placed %v; want placed %v", st, a != nil, !tc.fits)
			}
			if tc.fits {
				if _, _, a := c.PodState(device.RefOf(other)); a == nil {
					t.Fatal("the higher-priority pod holds no reservation")
				}
				c.Release(device.RefOf(other))
				if _, _, a := c.PodState(device.RefOf(pre)); a == nil {
					t.Fatal("the outranked hold is not placed again once room came back")
				}
			}
			checkInvariants(t, c)
		})
	}
}

// Issue 37 item 3: --preemption verb (and none) turns the extender's own preemption off: a pod
// refused for GPUs is offered, and nobody is evicted for it; none also answers no node in the
// verb (TestPreemptVerbKeepsTheProposal). Unknown values are refused.
func TestPreemptionModeSwitchesOwnPreemptionOff(t *testing.T) {
	for _, mode := range []PreemptionMode{PreemptionVerb, PreemptionNone} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Preemption = mode
			e, low, pre := onceFixture(t, &cfg, nil)
			if res := e.ext.sched.Filter(pre, []string{"node-1"}); len(*res.NodeNames) != 0 {
				t.Fatal("pre fits")
			}
			for i := 0; i < 5; i++ {
				e.clock.Step(preemptSettle)
				time.Sleep(20 * time.Millisecond)
			}
			if !e.exists("v", low.Name) || e.getPod("p", "pre").Status.NominatedNodeName != "" {
				t.Fatal("the own preemption ran although switched off")
			}
		})
	}
	cfg := DefaultConfig()
	cfg.Preemption = "sometimes"
	if err := cfg.Validate(); err == nil || err.Error() != `preemption: "sometimes" is not none, verb or own` {
		t.Fatalf("Validate: %v", err)
	}
}

// Issue 37 item 3: each offered pod settles on its own time: a pod offered just before another
// one settled waits its full preemptSettle (kube-scheduler's PostFilter gets its turn for it).
func TestOffersSettlePerPod(t *testing.T) {
	o := newPreemptOffers()
	a, b := device.PodRef{Namespace: "p", Name: "a", UID: "a"}, device.PodRef{Namespace: "p", Name: "b", UID: "b"}
	o.offer(a, []string{"n1"}, t0)
	o.offer(b, []string{"n2"}, t0.Add(900*time.Millisecond))
	o.offer(a, []string{"n3"}, t0.Add(950*time.Millisecond)) // a refused again: keeps its first time
	due, next := o.takeSettled(t0.Add(preemptSettle), preemptSettle)
	if len(due) != 1 || due[a] == nil || due[a][0] != "n3" || next != 900*time.Millisecond {
		t.Fatalf("at 1s: due %v, next %v; want a (nodes [n3]) and b in 900ms", due, next)
	}
	due, next = o.takeSettled(t0.Add(1900*time.Millisecond), preemptSettle)
	if len(due) != 1 || due[b] == nil || next != 0 {
		t.Fatalf("at 1.9s: due %v, next %v; want b and nothing left", due, next)
	}
}

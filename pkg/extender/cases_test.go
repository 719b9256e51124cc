package extender

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// case C01: two GPU containers in one pod land on different cards; usage equals what was
// written to the pod; no card exceeds its memory.
func TestC01TwoContainersDifferentCards(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 2, 10240, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	p := podtest.Pending("default", "c01", podtest.GPU("c1", 1, "10240", 0), podtest.GPU("c2", 1, "1024", 0))
	e.create(p)
	node, err := e.schedule(p, names)
	if err != nil || node != "node-1" {
		t.Fatalf("schedule: %q %v", node, err)
	}
	a := plannedOf(t, e.getPod("default", "c01"))
	c1, c2 := a.Container("c1"), a.Container("c2")
	if c1 == nil || c2 == nil || c1.Devices[0].UUID == c2.Devices[0].UUID {
		t.Fatalf("containers not on different cards: %+v", a)
	}
	if c1.Devices[0].MemoryMiB != 10240 || c2.Devices[0].MemoryMiB != 1024 {
		t.Fatalf("limits: %+v", a)
	}
	want := map[string]int64{c1.Devices[0].UUID: 10240, c2.Devices[0].UUID: 1024}
	for _, g := range e.ext.cache.NodeGPUUsage("node-1") {
		if g.Usage.MemoryMiB != want[g.GPU.UUID] || g.Usage.Sharers != 1 {
			t.Fatalf("GPU %s usage %+v, want %d MiB, 1 sharer", g.GPU.UUID, g.Usage, want[g.GPU.UUID])
		}
	}
	checkInvariants(t, e.ext.cache)
}

// case C02: non-GPU containers around GPU ones; allocation looked up by container name.
func TestC02NonGPUContainersAround(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 2, 24576, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	p1 := podtest.Pending("default", "c02a", podtest.Ctr{Name: "a", NoGPU: true}, podtest.GPU("b", 1, "3000", 30), podtest.Ctr{Name: "c", NoGPU: true})
	p2 := podtest.Pending("default", "c02b", podtest.GPU("gpu1", 1, "1000", 0), podtest.Ctr{Name: "none", NoGPU: true}, podtest.GPU("gpu2", 1, "2000", 0))
	e.create(p1, p2)
	for _, p := range []*corev1.Pod{p1, p2} {
		if _, err := e.schedule(p, names); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
	}
	a1 := plannedOf(t, e.getPod("default", "c02a"))
	if len(a1.Containers) != 1 || a1.Container("b") == nil || a1.Container("b").Devices[0].MemoryMiB != 3000 || a1.Container("b").Devices[0].CoresPercent != 30 {
		t.Fatalf("c02a allocation %+v", a1)
	}
	a2 := plannedOf(t, e.getPod("default", "c02b"))
	if a2.Container("gpu1").Devices[0].MemoryMiB != 1000 || a2.Container("gpu2").Devices[0].MemoryMiB != 2000 || a2.Container("none") != nil {
		t.Fatalf("c02b allocation %+v", a2)
	}
	checkInvariants(t, e.ext.cache)
}

// case C03: init containers by Kubernetes' effective-request rule.
func TestC03InitContainers(t *testing.T) {
	t.Run("A: 2-pod job with 3 classic init containers of 1 slice + 10240 each", func(t *testing.T) {
		objs, names := setupNodes(t, testInventory("node-1", 2, 16384, 10), testInventory("node-2", 3, 16384, 10))
		e := newEnv(t, nil, objs...)
		e.waitNodes(names...)
		for i := 0; i < 2; i++ {
			init := func(n string) podtest.Ctr { return podtest.Ctr{Name: n, Kind: device.KindInit, Count: 1, Mem: "10240"} }
			p := podtest.Pending("default", fmt.Sprintf("job-%d", i), init("i1"), init("i2"), init("i3"), podtest.Ctr{Name: "app", NoGPU: true})
			e.create(p)
			if _, err := e.schedule(p, names); err != nil {
				t.Fatalf("pod %d: %v", i, err)
			}
		}
		checkInvariants(t, e.ext.cache)
	})
	t.Run("B: app 50% + sidecar 50% are both charged", func(t *testing.T) {
		objs, names := setupNodes(t, testInventory("node-1", 1, 16000, 10))
		e := newEnv(t, nil, objs...)
		e.waitNodes(names...)
		p := podtest.Pending("default", "b", podtest.Ctr{Name: "side", Kind: device.KindSidecar, Count: 1, Pct: 50}, podtest.Ctr{Name: "app", Kind: device.KindApp, Count: 1, Pct: 50})
		e.create(p)
		if _, err := e.schedule(p, names); err != nil {
			t.Fatal(err)
		}
		if u := gpuUse(e.ext.cache, "node-1", 0); u.MemoryMiB != 16000 || u.Sharers != 2 {
			t.Fatalf("usage %+v, want 16000 MiB (100%%), 2 sharers", u)
		}
	})
	t.Run("C: sidecar 50% then classic init 60% is 110% at init time", func(t *testing.T) {
		objs, names := setupNodes(t, testInventory("node-1", 1, 16000, 10))
		e := newEnv(t, nil, objs...)
		e.waitNodes(names...)
		p := podtest.Pending("default", "c", podtest.Ctr{Name: "side", Kind: device.KindSidecar, Count: 1, Pct: 50}, podtest.Ctr{Name: "init", Kind: device.KindInit, Count: 1, Pct: 60})
		res := e.ext.sched.Filter(p, names)
		if len(*res.NodeNames) != 0 || !strings.Contains(res.FailedAndUnresolvableNodes["node-1"], "MiB free") {
			t.Fatalf("want node-1 unresolvable with a memory reason; got %+v", res)
		}
	})
}

// case C04 (a): 2 nodes × 4 GPUs split 10, 90 one-slice pods filtered and bound from many
// goroutines at once: exactly 80 bind, no GPU ever has more than 10 sharers.
func TestC04aBurstOneSlicePods(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 4, 81920, 10), testInventory("node-2", 4, 81920, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	const n = 90
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = podtest.Pending("burst", fmt.Sprintf("p-%02d", i), podtest.GPU("main", 1, "1000", 0))
		e.create(pods[i])
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	bound, failures := 0, 0
	for _, p := range pods {
		wg.Add(1)
		go func(p *corev1.Pod) {
			defer wg.Done()
			_, err := e.schedule(p, names)
			checkInvariants(t, e.ext.cache)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				bound++
			} else {
				failures++
			}
		}(p)
	}
	wg.Wait()
	if bound != 80 || failures != 10 {
		t.Fatalf("bound %d, failed %d; want 80 and 10", bound, failures)
	}
	for _, node := range names {
		for i := 0; i < 4; i++ {
			if u := gpuUse(e.ext.cache, node, i); u.Sharers != 10 || u.MemoryMiB != 10000 {
				t.Fatalf("%s GPU %d: %+v, want 10 sharers, 10000 MiB", node, i, u)
			}
		}
	}
	checkInvariants(t, e.ext.cache)
}

// claimedPod returns a pod bound to node with a claimed allocation (as the device plugin leaves it).
func claimedPod(t testing.TB, ns, name, node string, grants map[string][]device.DeviceGrant) *corev1.Pod {
	var ctrs []podtest.Ctr
	a := device.Allocation{Node: node}
	for cn, g := range grants {
		ctrs = append(ctrs, podtest.GPU(cn, int64(len(g)), fmt.Sprint(g[0].MemoryMiB), int64(g[0].CoresPercent)))
		a.Containers = append(a.Containers, device.ContainerAllocation{Name: cn, Kind: device.KindApp, Devices: g})
	}
	p := podtest.Pending(ns, name, ctrs...)
	p.Spec.NodeName = node
	s, err := device.EncodeAllocation(a)
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[device.AnnoPlanned] = s
	p.Annotations[device.AnnoClaimed] = s
	p.Status.Phase = corev1.PodRunning
	return p
}

// case C04 (b): 8 × 24 GiB GPUs, 7 full; 3 replicas of 1 slice + 12288 at once: exactly 2 bind.
func TestC04bReplicasOnLastGPU(t *testing.T) {
	inv := testInventory("node-1", 8, 24576, 10)
	objs, names := setupNodes(t, inv)
	for i := 0; i < 7; i++ {
		objs = append(objs, claimedPod(t, "busy", fmt.Sprintf("full-%d", i), "node-1", map[string][]device.DeviceGrant{"main": {{UUID: inv.GPUs[i].UUID, MemoryMiB: 24576}}}))
	}
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	if u := gpuUse(e.ext.cache, "node-1", 6); u.MemoryMiB != 24576 {
		t.Fatalf("rebuilt usage of GPU 6: %+v", u)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	bound := 0
	for i := 0; i < 3; i++ {
		p := podtest.Pending("default", fmt.Sprintf("replica-%d", i), podtest.GPU("main", 1, "12288", 0))
		e.create(p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.schedule(p, names)
			checkInvariants(t, e.ext.cache)
			if err == nil {
				mu.Lock()
				bound++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if bound != 2 {
		t.Fatalf("%d replicas bound, want exactly 2", bound)
	}
	if u := gpuUse(e.ext.cache, "node-1", 7); u.MemoryMiB != 24576 || u.Sharers != 2 {
		t.Fatalf("GPU 7 usage %+v, want 24576 MiB and 2 sharers", u)
	}
}

// case C09: impossible requests and strange nodes get per-node reasons; later pods still schedule.
func TestC09ImpossibleRequestsAndStrangeNodes(t *testing.T) {
	objs, _ := setupNodes(t, testInventory("node-1", 2, 24576, 10))
	bad := testNode(t, testInventory("node-bad", 1, 1000, 10))
	bad.Annotations[device.AnnoInventory] = `{"version":"v1","node":"node-bad","splitCount":0}`
	objs = append(objs, bad, testLease("node-bad", t0),
		&corev1.Node{}, testLease("node-none", t0))
	objs[len(objs)-2].(*corev1.Node).Name = "node-none"
	e := newEnv(t, nil, objs...)
	e.waitNodes("node-1")
	names := []string{"node-1", "node-bad", "node-none", "node-unknown"}
	eventually(t, "node-bad", func() bool { return e.ext.cache.node("node-bad") != nil })

	four := podtest.Pending("default", "four", podtest.GPU("main", 4, "1000", 0))
	res := e.ext.sched.Filter(four, names)
	if len(*res.NodeNames) != 0 {
		t.Fatalf("gpu:4 fits somewhere: %+v", res)
	}
	if r := res.FailedAndUnresolvableNodes["node-1"]; !strings.Contains(r, "node has 2 GPUs") {
		t.Fatalf("node-1 reason %q", r)
	}
	if r := res.FailedAndUnresolvableNodes["node-bad"]; !strings.Contains(r, "malformed inventory") || !strings.Contains(r, "splitCount") {
		t.Fatalf("node-bad reason %q", r)
	}
	for _, n := range []string{"node-none", "node-unknown"} {
		if r := res.FailedAndUnresolvableNodes[n]; r != errNoInventory {
			t.Fatalf("%s reason %q", n, r)
		}
	}
	huge := podtest.Pending("default", "huge", podtest.GPU("main", 1, "30000", 0))
	res = e.ext.sched.Filter(huge, names)
	if r := res.FailedAndUnresolvableNodes["node-1"]; !strings.Contains(r, "24576 of 24576 MiB free") {
		t.Fatalf("huge: node-1 reason %q", r)
	}
	bad1 := podtest.Pending("default", "badq", podtest.GPU("main", 1, "3000M", 0))
	res = e.ext.sched.Filter(bad1, names)
	if r := res.FailedAndUnresolvableNodes["node-1"]; !strings.Contains(r, "did you mean 3000Mi") || len(res.FailedAndUnresolvableNodes) != 4 {
		t.Fatalf("unparsable pod: %+v", res)
	}
	ok := podtest.Pending("default", "ok", podtest.GPU("main", 1, "1000", 0))
	e.create(ok)
	if node, err := e.schedule(ok, names); err != nil || node != "node-1" {
		t.Fatalf("later pod: %q %v", node, err)
	}
}

// case C12: identity is namespace + name + UID exactly.
func TestC12ExactIdentity(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 1, 24576, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	pods := []*corev1.Pod{
		podtest.Pending("ns1", "abc", podtest.GPU("m", 1, "1000", 0)),
		podtest.Pending("ns1", "abc-123", podtest.GPU("m", 1, "2000", 0)),
		podtest.Pending("ns2", "abc-123", podtest.GPU("m", 1, "4000", 0)),
	}
	for _, p := range pods {
		e.create(p)
		if _, err := e.schedule(p, names); err != nil {
			t.Fatal(err)
		}
	}
	if u := gpuUse(e.ext.cache, "node-1", 0); u.MemoryMiB != 7000 {
		t.Fatalf("usage %+v", u)
	}
	e.ext.cache.Release(device.PodRef{Namespace: "ns1", Name: "abc", UID: "uid-ns1-abc-123"}) // wrong UID: nothing
	e.ext.cache.Release(device.PodRef{Namespace: "ns1", Name: "abc-12", UID: "uid-ns1-abc-123"})
	if u := gpuUse(e.ext.cache, "node-1", 0); u.MemoryMiB != 7000 {
		t.Fatalf("near-miss releases freed something: %+v", u)
	}
	e.deletePod("ns1", "abc")
	eventually(t, "abc released", func() bool { return gpuUse(e.ext.cache, "node-1", 0).MemoryMiB == 6000 })
	e.deletePod("ns1", "abc-123")
	eventually(t, "ns1/abc-123 released", func() bool { return gpuUse(e.ext.cache, "node-1", 0).MemoryMiB == 4000 })
	if n, _, _ := e.ext.cache.PodState(device.RefOf(pods[2])); n != "node-1" {
		t.Fatalf("ns2/abc-123 lost its booking")
	}
}

// pods of one device request (nvidia.com/gpu: 1) and different sizes (C13, C14, C20).
func bigSmall() (*corev1.Pod, *corev1.Pod) {
	return podtest.Pending("default", "big", podtest.GPU("main", 1, "24576", 0)), podtest.Pending("default", "small", podtest.GPU("main", 1, "600", 0))
}

// case C13: the pod holding the GPU is deleted, or rejected at admission (phase Failed,
// UnexpectedAdmissionError): its GPU is free at once, without the clock moving, and the next
// pod, refused while it held the GPU, schedules.
func TestC13NextPodProceedsAtOnce(t *testing.T) {
	for _, how := range []string{"deleted", "UnexpectedAdmissionError"} {
		t.Run(how, func(t *testing.T) {
			objs, names := setupNodes(t, testInventory("node-1", 1, 24576, 10))
			cfg := DefaultConfig()
			cfg.ReservationTTL = 24 * time.Hour // no sweeper tick during the test
			cfg.SweepInterval = 24 * time.Hour
			e := newEnv(t, &cfg, objs...)
			e.waitNodes(names...)
			big, small := bigSmall()
			e.create(big, small)
			if _, err := e.schedule(big, names); err != nil {
				t.Fatal(err)
			}
			if res := e.ext.sched.Filter(small, names); len(*res.NodeNames) != 0 {
				t.Fatalf("small fits beside big: %+v", res)
			}
			if how == "deleted" {
				e.deletePod("default", "big")
			} else {
				p := e.getPod("default", "big")
				p.Status.Phase, p.Status.Reason = corev1.PodFailed, "UnexpectedAdmissionError"
				e.updatePod(p)
			}
			eventually(t, "big released", func() bool { return gpuUse(e.ext.cache, "node-1", 0).MemoryMiB == 0 })
			if _, err := e.schedule(small, names); err != nil {
				t.Fatal(err)
			}
			if got := e.clock.Now(); !got.Equal(t0) {
				t.Fatalf("clock moved to %v", got)
			}
			if u := gpuUse(e.ext.cache, "node-1", 0).MemoryMiB; u != 600 {
				t.Fatalf("node usage %d MiB, want 600 (big released)", u)
			}
		})
	}
}

// case C14: a slow Allocate keeps its own pod's slot however long it takes: no timer releases
// an in-flight pod, so a later pod is never planned onto its GPU.
func TestC14SlowAllocateKeepsItsSlot(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 1, 24576, 10))
	cfg := DefaultConfig()
	e := newEnv(t, &cfg, objs...)
	e.waitNodes(names...)
	big, small := bigSmall()
	e.create(big, small)
	if _, err := e.schedule(big, names); err != nil {
		t.Fatal(err)
	}
	before := plannedOf(t, e.getPod("default", "big"))
	for i := 0; i < 5; i++ {
		e.clock.Step(time.Hour)
		e.ext.cache.Sweep()
		e.create(testLease(fmt.Sprintf("keepalive-%d", i), e.clock.Now())) // unrelated churn
	}
	// The node's own lease is stale after hours; renew it so only big's slot can refuse.
	l := testLease("node-1", e.clock.Now())
	if _, err := e.client.CoordinationV1().Leases(l.Namespace).Update(context.Background(), l, metaUpdate()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "lease renewed", func() bool {
		ns := e.ext.cache.node("node-1")
		ns.mu.Lock()
		defer ns.mu.Unlock()
		return ns.leaseTime.Equal(e.clock.Now())
	})
	node, stage, alloc := e.ext.cache.PodState(device.RefOf(big))
	if node != "node-1" || stage != "planned" || device.SlotKey(alloc) != device.SlotKey(&before) {
		t.Fatalf("big after 5 h: %s %s %+v", node, stage, alloc)
	}
	res := e.ext.sched.Filter(small, names)
	if len(*res.NodeNames) != 0 || !strings.Contains(res.FailedNodes["node-1"], "MiB free") {
		t.Fatalf("small after 5 h: %+v, want node-1 full (big's slot kept)", res)
	}
	if _, err := e.schedule(small, names); err == nil {
		t.Fatal("small bound onto big's GPU")
	}
	if u := gpuUse(e.ext.cache, "node-1", 0); u.MemoryMiB != 24576 || u.Sharers != 1 {
		t.Fatalf("GPU usage %+v, want big's 24576 MiB alone", u)
	}
}

// case C20: pods of the same device request and different sizes (and an identical one) bind on one
// node at once, none waiting for another to be claimed, and each keeps its own planned GPUs and
// limits: the device plugin applies each pod's own plan at container creation.
func TestC20ConfusablePodsBindTogether(t *testing.T) {
	c := memoCache(t, testInventory("node-1", 2, 81920, 10))
	big, small := bigSmall()
	twin := podtest.Pending("default", "small-twin", podtest.GPU("main", 1, "600", 0))
	want := map[string]int64{}
	for _, p := range []*corev1.Pod{small, big, twin} {
		req, _, err := c.ParseRequest(p)
		if err != nil {
			t.Fatal(err)
		}
		NewScheduler(c).Filter(p, []string{"node-1"})
		a, _, err := NewScheduler(c).BookForBind(device.RefOf(p), req, "node-1")
		if err != nil {
			t.Fatalf("%s: bind refused beside in-flight pods: %v", p.Name, err)
		}
		if m := a.Containers[0].Devices[0].MemoryMiB; m != req.Containers[0].MemoryMiB {
			t.Fatalf("%s planned %d MiB, asks %d", p.Name, m, req.Containers[0].MemoryMiB)
		}
		want[p.Name] = a.Containers[0].Devices[0].MemoryMiB
	}
	var total int64
	for _, p := range []*corev1.Pod{small, big, twin} {
		node, stage, alloc := c.PodState(device.RefOf(p))
		if node != "node-1" || stage != "binding" || alloc.Containers[0].Devices[0].MemoryMiB != want[p.Name] {
			t.Errorf("%s: %s %s %+v, want its own plan of %d MiB", p.Name, node, stage, alloc, want[p.Name])
		}
		total += want[p.Name]
	}
	if u := gpuUse(c, "node-1", 0).MemoryMiB + gpuUse(c, "node-1", 1).MemoryMiB; u != total || total != 24576+600+600 {
		t.Errorf("node charged %d MiB, want %d", u, total)
	}
	checkInvariants(t, c)
}

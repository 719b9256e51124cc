package extender

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// TestReserveOnAndUnreserve: ReserveOn books the pod on exactly the node asked (confirming
// Filter's reservation or moving it), refuses with a reason naming the node or the pod's stage,
// and Unreserve drops only a plain reservation, without marking the pod gone.
func TestReserveOnAndUnreserve(t *testing.T) {
	const mib = "4096"
	tests := []struct {
		name string
		// prepare runs after Filter reserved p (on node-1, binpack's choice: other holds 2 GiB
		// there) and before ReserveOn(p, node).
		prepare   func(e *env, p *corev1.Pod, req *device.PodRequest)
		node      string
		wantErr   string // "" = ReserveOn succeeds
		unreserve string // the node passed to Unreserve afterwards
		dropped   bool   // what Unreserve reports
		// wantNode/wantStage: p's booking after both calls ("" = none); wantMiB: GPU 0's
		// booked memory on node-1 and node-2.
		wantNode, wantStage string
		wantMiB             [2]int64
	}{
		{name: "confirms Filter's reservation", node: "node-1", unreserve: "node-2",
			wantNode: "node-1", wantStage: "reserved", wantMiB: [2]int64{2048 + 4096, 0}},
		{name: "moves the reservation to the chosen node", node: "node-2", unreserve: "node-1",
			wantNode: "node-2", wantStage: "reserved", wantMiB: [2]int64{2048, 4096}},
		{name: "unreserve drops it and frees the GPU", node: "node-2", unreserve: "node-2", dropped: true,
			wantMiB: [2]int64{2048, 0}},
		{name: "unreserve of any node", node: "node-2", unreserve: "", dropped: true,
			wantMiB: [2]int64{2048, 0}},
		{name: "no inventory", node: "node-9", wantErr: "node node-9: " + errNoInventory, unreserve: "",
			dropped: true, wantMiB: [2]int64{2048, 0}},
		{name: "GPUs no longer fit", node: "node-2", wantErr: "node node-2: the pod's GPUs no longer fit there",
			prepare: func(e *env, _ *corev1.Pod, _ *device.PodRequest) {
				big := podtest.Pending("default", "big", podtest.GPU("c", 1, "8192", 0))
				e.create(big)
				if _, err := e.schedule(big, []string{"node-2"}); err != nil {
					e.t.Fatal(err)
				}
			},
			unreserve: "", wantMiB: [2]int64{2048, 8192}},
		{name: "being bound stays", node: "node-2", wantErr: "is already bound (or being bound) to node node-1",
			prepare: func(e *env, p *corev1.Pod, req *device.PodRequest) {
				if _, _, err := e.ext.sched.BookForBind(device.RefOf(p), req, "node-1"); err != nil {
					e.t.Fatal(err)
				}
			},
			unreserve: "node-1", wantNode: "node-1", wantStage: "binding", wantMiB: [2]int64{2048 + 4096, 0}},
		{name: "a bind that may be committed stays", node: "node-1",
			prepare: func(e *env, p *corev1.Pod, req *device.PodRequest) {
				k := device.RefOf(p)
				if _, _, err := e.ext.sched.BookForBind(k, req, "node-1"); err != nil {
					e.t.Fatal(err)
				}
				e.ext.sched.FinishBind(k, "node-1", outcomeUnknown)
			},
			unreserve: "node-1", wantNode: "node-1", wantStage: "reserved", wantMiB: [2]int64{2048 + 4096, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, names := setupNodes(t, testInventory("node-1", 1, 10240, 10), testInventory("node-2", 1, 10240, 10))
			e := newEnv(t, nil, objs...)
			e.waitNodes(names...)
			other := podtest.Pending("default", "other", podtest.GPU("c", 1, "2048", 0))
			p := podtest.Pending("default", "p", podtest.GPU("c", 1, mib, 0))
			e.create(other, p)
			if _, err := e.schedule(other, []string{"node-1"}); err != nil {
				t.Fatal(err)
			}
			req := mustReq(t, e.ext.cache, p)
			if res := e.ext.sched.Filter(p, names); len(*res.NodeNames) != 2 {
				t.Fatalf("Filter: %+v", res)
			}
			if node, stage, _ := e.ext.cache.PodState(device.RefOf(p)); node != "node-1" || stage != "reserved" {
				t.Fatalf("after Filter: %q %q, want reserved on node-1", node, stage)
			}
			if tc.prepare != nil {
				tc.prepare(e, p, req)
			}
			err := e.ext.Scheduler().ReserveOn(p, req, tc.node)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("ReserveOn(%s) = %v, want %q", tc.node, err, tc.wantErr)
			}
			k := device.RefOf(p)
			if got := e.ext.cache.Unreserve(k, tc.unreserve); got != tc.dropped {
				t.Fatalf("Unreserve(%q) = %v, want %v", tc.unreserve, got, tc.dropped)
			}
			if e.ext.cache.Unreserve(k, tc.unreserve) {
				t.Fatal("a second Unreserve dropped something")
			}
			node, stage, _ := e.ext.cache.PodState(k)
			if node != tc.wantNode || stage != tc.wantStage {
				t.Fatalf("booking %q %q, want %q %q", node, stage, tc.wantNode, tc.wantStage)
			}
			for i, n := range names {
				if got := gpuUse(e.ext.cache, n, 0).MemoryMiB; got != tc.wantMiB[i] {
					t.Fatalf("%s GPU 0: %d MiB booked, want %d", n, got, tc.wantMiB[i])
				}
			}
			checkInvariants(t, e.ext.cache)
		})
	}
}

// TestUnreserveDoesNotMarkGone: after Unreserve the pod can be reserved again at once (Release
// would refuse it for GoneTTL).
func TestUnreserveDoesNotMarkGone(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 1, 10240, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	p := podtest.Pending("default", "p", podtest.GPU("c", 1, "4096", 0))
	e.create(p)
	req := mustReq(t, e.ext.cache, p)
	s := e.ext.Scheduler()
	if err := s.ReserveOn(p, req, "node-1"); err != nil {
		t.Fatal(err)
	}
	if !e.ext.cache.Unreserve(device.RefOf(p), "node-1") {
		t.Fatal("Unreserve dropped nothing")
	}
	if err := s.ReserveOn(p, req, "node-1"); err != nil {
		t.Fatalf("ReserveOn after Unreserve: %v", err)
	}
	if got := gpuUse(e.ext.cache, "node-1", 0).MemoryMiB; got != 4096 {
		t.Fatalf("node-1 GPU 0: %d MiB, want 4096", got)
	}
	if err := e.ext.Bind(t.Context(), device.RefOf(p), "node-1"); err != nil {
		t.Fatalf("Bind confirms the reservation: %v", err)
	}
	if a := plannedOf(t, e.getPod("default", "p")); a.Container("c").Devices[0].MemoryMiB != 4096 {
		t.Fatalf("plan %+v", a)
	}
}

// TestSchedulerAccessor: Extender.Scheduler is the scheduler over the extender's own cache.
func TestSchedulerAccessor(t *testing.T) {
	e := newEnv(t, nil)
	if e.ext.Scheduler() != e.ext.sched || e.ext.Scheduler().Cache() != e.ext.Cache() {
		t.Fatal("Scheduler() is not the extender's scheduler over its cache")
	}
}

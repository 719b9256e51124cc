package deviceplugin

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hami-go/hami-go/pkg/ledger"
	"github.com/hami-go/hami-go/pkg/nri"
)

// case C37: the NRI env guard's Source in device-plugin mode answers from the ledger: a claimed
// container gets exactly the env Allocate returned, a container without GPUs none, a GPU
// container not claimed yet an error (the guard refuses it: fail closed).
func TestNRISource(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81920))
	pod := testPod("p", t0, testNode, ctr{name: "gpu", mem: 1000, gpus: []string{"GPU-A"}}, ctr{name: "side"})
	p.Ledger().UpsertPod(pod)
	reconciled := 0
	src := NRISource(p, func(context.Context) { reconciled++ })
	c := func(name string) nri.Container {
		return nri.Container{PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name, Name: name}
	}
	ctx := context.Background()

	if _, err := src.Allocated(ctx, c("gpu")); err == nil || !strings.Contains(err.Error(), "container gpu of pod default/p is planned GPUs but the device plugin has no claim for it yet") {
		t.Errorf("before Allocate: err %v, want the no-claim refusal", err)
	}
	if reconciled != 1 {
		t.Errorf("reconciled %d times before looking up a planned container, want 1", reconciled)
	}
	resp := mustAlloc(t, p, "GPU-A::4")
	got, err := src.Allocated(ctx, c("gpu"))
	if err != nil || !got.GPU || !reflect.DeepEqual(got.Env, resp.Envs) {
		t.Errorf("after Allocate: %+v, %v; want GPU with the Allocate env %v", got, err, resp.Envs)
	}
	for _, name := range []string{"side"} {
		if got, err := src.Allocated(ctx, c(name)); err != nil || got.GPU {
			t.Errorf("container %s without GPUs: %+v, %v; want no GPU", name, got, err)
		}
	}
	if got, err := src.Allocated(ctx, nri.Container{PodUID: "other", PodNamespace: "default", PodName: "plain", Name: "main"}); err != nil || got.GPU {
		t.Errorf("pod unknown to the ledger: %+v, %v; want no GPU", got, err)
	}
	if reconciled != 2 {
		t.Errorf("reconciled %d times, want 2 (only for the planned container)", reconciled)
	}

	// Through the guard: the runtime's env is the plugin's, then an envFrom value.
	var env []string
	for k, v := range resp.Envs {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	g := nri.NewGuard(src)
	if ch, err := g.Decide(ctx, c("gpu"), env); err != nil || len(ch.Env) != len(resp.Envs) {
		t.Errorf("plugin env only: %+v, %v; want every name pinned", ch, err)
	}
	_, err = g.Decide(ctx, c("gpu"), append(env, "CUDA_DEVICE_MEMORY_LIMIT_0=81920m"))
	var r *nri.RefusedError
	if !errors.As(err, &r) || r.Name != "CUDA_DEVICE_MEMORY_LIMIT_0" || r.Value != "81920m" || r.Want != "1000m" {
		t.Errorf("envFrom widening: %v; want refused with 1000m allocated", err)
	}
}

// case C37: a container the kubelet admitted while the plugin had no claim for it (a restart
// before the claimed record was written) is claimed by the reconcile the Source runs first, so
// the guard does not refuse it.
func TestNRISourceReconcilesFirst(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81920))
	pod := testPod("p", t0, testNode, ctr{name: "gpu", mem: 1000, gpus: []string{"GPU-B"}})
	p.Ledger().UpsertPod(pod)
	src := NRISource(p, func(context.Context) {
		p.Ledger().Reconcile([]ledger.ObservedContainer{{Namespace: pod.Namespace, Pod: pod.Name, Container: "gpu", IDs: []string{"GPU-B::2"}}})
	})
	got, err := src.Allocated(context.Background(), nri.Container{PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name, Name: "gpu"})
	if err != nil || !got.GPU || got.Env["CUDA_VISIBLE_DEVICES"] != "GPU-B" || got.Env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
		t.Errorf("Allocated = %+v, %v; want GPU-B with 1000m", got, err)
	}
}

// case C37 with case C04: two identical pods; Allocate matches the kubelet's call for b's
// container to a (the ledger cannot tell them apart), and the reconcile with the kubelet's
// PodResources then swaps the claims. b's container holds the response of that call: the
// guard's want, rebuilt from b's claim, is that response exactly (the response names no pod:
// its HAMi-core cache path is the container's), so b's own container is not refused.
func TestNRISourceAfterSwapIsTheResponse(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81920))
	a := testPod("a", t0, testNode, ctr{name: "main", mem: 1000, gpus: []string{"GPU-A"}})
	b := testPod("b", t0.Add(time.Second), testNode, ctr{name: "main", mem: 1000, gpus: []string{"GPU-A"}})
	p.Ledger().UpsertPod(a)
	p.Ledger().UpsertPod(b)
	resp := mustAlloc(t, p, "GPU-A::3") // the kubelet's call for b; the ledger matches a
	if cl, claimed, _ := p.Ledger().ContainerClaim(a.UID, "main"); !claimed || len(cl.Container.SliceIDs) != 1 {
		t.Fatalf("the call was not matched to a (%+v, %v): the test no longer covers a swap", cl, claimed)
	}
	src := NRISource(p, func(context.Context) {
		p.Ledger().Reconcile([]ledger.ObservedContainer{{Namespace: b.Namespace, Pod: b.Name, Container: "main", IDs: []string{"GPU-A::3"}}})
	})
	got, err := src.Allocated(context.Background(), nri.Container{PodUID: string(b.UID), PodNamespace: b.Namespace, PodName: b.Name, Name: "main"})
	if err != nil || !got.GPU || !reflect.DeepEqual(got.Env, resp.Envs) {
		t.Fatalf("b after the swap: %+v, %v; want the env of the response the kubelet gave b's IDs %v", got, err, resp.Envs)
	}
	if cache := got.Env["CUDA_DEVICE_MEMORY_SHARED_CACHE"]; cache != "/usr/local/vgpu/main.cache" {
		t.Errorf("cache path %q, want the container's own /usr/local/vgpu/main.cache (no pod named)", cache)
	}
	if got.Env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
		t.Errorf("limit %q, want 1000m", got.Env["CUDA_DEVICE_MEMORY_LIMIT_0"])
	}
}

// case C04 through the guard: the plugin answers the kubelet's call for p's container with q's
// slot (interchangeable pods, the kubelet chose GPU-B's IDs), then restarts before any record is
// written. The restarted plugin's reconcile claims p from its own plan (GPU-A); at p's container
// creation the runtime's env is the answer the kubelet kept (GPU-B), which moves the claim to
// q's slot, so the guard pins p's env instead of refusing it, and q's later Allocate gets GPU-A.
func TestC04NRISourceAfterRestartFollowsTheAnswer(t *testing.T) {
	backend := newTestBackend(2, 81920)
	p1, _ := newTestPlugin(t, testConfig(t.TempDir()), backend)
	pp := testPod("p", t0, testNode, ctr{name: "main", mem: 1000, gpus: []string{"GPU-A"}})
	pq := testPod("q", t0.Add(time.Second), testNode, ctr{name: "main", mem: 1000, gpus: []string{"GPU-B"}})
	p1.Ledger().UpsertPod(pp)
	p1.Ledger().UpsertPod(pq)
	resp := mustAlloc(t, p1, "GPU-B::3") // the kubelet's call for p; the ledger matches q's slot
	if resp.Envs["CUDA_VISIBLE_DEVICES"] != "GPU-B" {
		t.Fatalf("answer %v, want GPU-B (q's slot)", resp.Envs)
	}
	var env []string
	for k, v := range resp.Envs {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)

	p2, _ := newTestPlugin(t, testConfig(t.TempDir()), backend) // restarted: nothing was written
	p2.Ledger().UpsertPod(pp)
	p2.Ledger().UpsertPod(pq)
	src := NRISource(p2, func(context.Context) {
		p2.Ledger().Reconcile([]ledger.ObservedContainer{{Namespace: pp.Namespace, Pod: pp.Name, Container: "main", IDs: []string{"GPU-B::3"}}})
	})
	g := nri.NewGuard(src)
	if _, err := g.Configure(context.Background(), "", "containerd", "v2.4.2"); err != nil {
		t.Fatal(err)
	}
	ch, err := g.Decide(context.Background(), nri.Container{PodUID: string(pp.UID), PodNamespace: pp.Namespace, PodName: pp.Name, Name: "main"}, env)
	if err != nil || len(ch.Env) != len(resp.Envs) {
		t.Fatalf("p's container after the restart: %+v, %v; want every name pinned to the answer", ch, err)
	}
	for _, c := range ch.Env {
		if c.Value != resp.Envs[c.Name] {
			t.Errorf("pinned %s=%s, want the answer's %s", c.Name, c.Value, resp.Envs[c.Name])
		}
	}
	if got := mustAlloc(t, p2, "GPU-A::0").Envs["CUDA_VISIBLE_DEVICES"]; got != "GPU-A" {
		t.Errorf("q's Allocate after the restart answered %s, want GPU-A (the slot p left)", got)
	}
	if u := p2.Ledger().Charged(); u["GPU-A"].Sharers != 1 || u["GPU-B"].Sharers != 1 {
		t.Errorf("charged %+v, want one sharer on each GPU", u)
	}
}

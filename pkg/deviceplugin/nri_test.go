package deviceplugin

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

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
	if ch, err := g.Decide(ctx, c("gpu"), env); err != nil || len(ch) != len(resp.Envs) {
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

package deviceplugin

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hami-go/hami-go/pkg/nri"
)

// case C37: the NRI plugin's Source in device-plugin mode answers from the ledger: a GPU
// container that did not carry the pending answer and has no claim gets an error (the plugin
// refuses it: fail closed); the pending answer claims the plan (Plan); a claimed container (a
// running one, reported when the plugin reconnects) is granted exactly the env of its claim; a
// container without GPUs nothing.
func TestNRISource(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81920))
	pod := testPod("p", t0, testNode, ctr{name: "gpu", mem: 1000, gpus: []string{"GPU-A"}}, ctr{name: "side"})
	p.Ledger().UpsertPod(pod)
	src := NRISource(p)
	c := func(name string) nri.Container {
		return nri.Container{PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name, Name: name}
	}
	ctx := context.Background()

	if _, err := src.Granted(ctx, c("gpu")); err == nil || !strings.Contains(err.Error(), "container gpu of pod default/p is planned GPUs, but its env does not carry the device plugin's pending answer (a single empty HAMI_GO_GPU_UUIDS) and it has not claimed its plan") {
		t.Errorf("before the claim: err %v, want the no-claim refusal", err)
	}
	claim, err := src.Plan(ctx, c("gpu"))
	if err != nil || claim.Env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "1000m" {
		t.Fatalf("the pending answer: %+v, %v; want its plan, 1000m of GPU-A, to apply", claim, err)
	}
	resp := &pluginapi.ContainerAllocateResponse{Envs: claim.Env}
	got, err := src.Granted(ctx, c("gpu"))
	if err != nil || !got.GPU || !reflect.DeepEqual(got.Env, resp.Envs) {
		t.Errorf("after the claim: %+v, %v; want GPU with the claim's env %v", got, err, resp.Envs)
	}
	for _, name := range []string{"side"} {
		if got, err := src.Granted(ctx, c(name)); err != nil || got.GPU {
			t.Errorf("container %s without GPUs: %+v, %v; want no GPU", name, got, err)
		}
	}
	if got, err := src.Granted(ctx, nri.Container{PodUID: "other", PodNamespace: "default", PodName: "plain", Name: "main"}); err != nil || got.GPU {
		t.Errorf("pod unknown to the ledger: %+v, %v; want no GPU", got, err)
	}

	// Through the NRI plugin: the running container's env is its plan's, then an envFrom value.
	if claim.DriverCapabilities != "compute,utility" {
		t.Errorf("the plan's driver capabilities %q, want HAMi-core's compute,utility", claim.DriverCapabilities)
	}
	env := []string{"NVIDIA_DRIVER_CAPABILITIES=compute,utility"} // set at its creation
	for k, v := range resp.Envs {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	g := nri.NewPlugin(src)
	if ch, err := g.Decide(ctx, c("gpu"), env); err != nil || len(ch.Env) != len(resp.Envs) {
		t.Errorf("plugin env only: %+v, %v; want every name pinned", ch, err)
	}
	_, err = g.Decide(ctx, c("gpu"), append(env, "CUDA_DEVICE_MEMORY_LIMIT_0=81920m"))
	var r *nri.RefusedError
	if !errors.As(err, &r) || r.Name != "CUDA_DEVICE_MEMORY_LIMIT_0" || r.Value != "81920m" || r.Want != "1000m" {
		t.Errorf("envFrom widening: %v; want refused with 1000m allocated", err)
	}
}

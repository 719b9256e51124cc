package nri

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

// case C52: a container that reaches StartContainer still carrying the device plugin's pending
// answer (created while the NRI plugin was away, or its call timed out) is refused there, with
// an error naming the pod and the container; one that got its plan, or has no marker, starts.
func TestC52StartContainerRefusesAContainerWithoutItsPlan(t *testing.T) {
	g := onContainerd2(NewPlugin(&standInSource{}))
	pod := &api.PodSandbox{Id: "sb", Uid: "uid-1", Namespace: "team-a", Name: "trainer-0"}
	err := g.StartContainer(context.Background(), pod, &api.Container{Name: "cuda", Env: envOf([]string{"NVIDIA_VISIBLE_DEVICES=void"}, pendingEnv)})
	if err == nil {
		t.Fatal("StartContainer of a container still pending = nil; want it refused")
	}
	for _, want := range []string{"container cuda of pod team-a/trainer-0 (UID uid-1) was created without its GPU plan", MarkerEnv} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	for name, env := range map[string][]string{
		"plan applied": pluginEnv,
		"no marker":    {"PATH=/bin"},
		"two markers":  envOf(pendingEnv, []string{MarkerEnv + "=GPU-x"}),
	} {
		if err := g.StartContainer(context.Background(), pod, &api.Container{Name: "c", Env: env}); err != nil {
			t.Errorf("%s: StartContainer = %v; want nil", name, err)
		}
	}
}

// case C52, through containerd's own NRI adaptation: the plugin counts as connected (and so
// PreStartContainer lets GPU containers through) only once the runtime synchronizes it, not
// when the stub's Start returns after Configure; the runtime's StartContainer fails with the
// plugin's refusal.
func TestC52ConnectedAtSynchronizeAndStartRefused(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "nri.sock")
	release := make(chan struct{})
	var syncs atomic.Int32
	sync := func(ctx context.Context, cb adaptation.SyncCB) error {
		if syncs.Add(1) > 1 { // the first is the runtime's own start (pre-installed plugins)
			<-release
		}
		_, err := cb(ctx, nil, nil)
		return err
	}
	update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	r, err := adaptation.New("containerd", "v2.4.2", sync, update, adaptation.WithSocketPath(socket),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")), adaptation.WithPluginConfigPath(filepath.Join(dir, "conf")))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	g := NewPlugin(&standInSource{})
	go func() { Run(ctx, socket, g, 50*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()

	waitFor := func(what string, f func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !f(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("Configure", func() bool { name, _, _ := g.Runtime(); return name == "containerd" })
	time.Sleep(100 * time.Millisecond) // the stub's Start has returned by now
	if err := g.CanApplyPlans(true); err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("after Configure, before Synchronize: CanApplyPlans = %v; want not connected", err)
	}
	close(release)
	waitFor("Synchronize", func() bool { return g.CanApplyPlans(true) == nil })

	pod := &api.PodSandbox{Id: "sb", Uid: "uid-1", Namespace: "ns", Name: "p"}
	err = r.StartContainer(context.Background(), &adaptation.StartContainerRequest{Pod: pod, Container: &api.Container{Id: "c1", PodSandboxId: "sb", Name: "main", Env: pendingEnv}})
	if err == nil || !strings.Contains(err.Error(), "container main of pod ns/p (UID uid-1) was created without its GPU plan") {
		t.Fatalf("runtime StartContainer = %v; want the NRI plugin's refusal", err)
	}
	if err := r.StartContainer(context.Background(), &adaptation.StartContainerRequest{Pod: pod, Container: &api.Container{Id: "c2", PodSandboxId: "sb", Name: "main", Env: pluginEnv}}); err != nil {
		t.Fatalf("runtime StartContainer of a planned container = %v; want nil", err)
	}
}

// case C52: under the cdi strategy the pending answer sets NVIDIA_VISIBLE_DEVICES=void beside
// the empty marker (Plan.Answer), after the image's own NVIDIA_VISIBLE_DEVICES=all; the applied
// plan sets void again, so the two agree and the container is not refused for the repeated
// name. A kubelet checkpoint from before the change (no void entry) gets void too; a tenant's
// value after the answer is refused.
func TestC52PendingVoidAnswerAndThePlan(t *testing.T) {
	planEnv := map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-a", MarkerEnv: "GPU-a", "NVIDIA_VISIBLE_DEVICES": "void"}
	src := &standInSource{out: map[string]standIn{"main": {GPU: true, Env: planEnv, CDIDevices: []string{"hami-go.io/gpu=GPU-a", "nvidia.com/gpu=GPU-a"},
		Answer: map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"}}}}
	g := onContainerd2(NewPlugin(src))
	c := Container{PodUID: "u", PodNamespace: "ns", PodName: "p", Name: "main"}
	want := []EnvChange{set("CUDA_VISIBLE_DEVICES", "GPU-a"), set(MarkerEnv, "GPU-a"), set("NVIDIA_VISIBLE_DEVICES", "void")}
	for name, env := range map[string][]string{
		"image all, then the answer": {"NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=12.4.1", "NVIDIA_VISIBLE_DEVICES=void", MarkerEnv + "="},
		"answer only":                {MarkerEnv + "=", "NVIDIA_VISIBLE_DEVICES=void"},
		"an older checkpoint":        {"NVIDIA_VISIBLE_DEVICES=all", MarkerEnv + "="},
	} {
		adj, err := g.Decide(context.Background(), c, env)
		if err != nil {
			t.Errorf("%s: Decide = %v; want the plan applied", name, err)
			continue
		}
		if !reflect.DeepEqual(adj.Env, want) || len(adj.CDIDevices) != 2 {
			t.Errorf("%s: Decide = %+v; want env %+v and both CDI devices", name, adj, want)
		}
	}
	_, err := g.Decide(context.Background(), c, []string{"NVIDIA_VISIBLE_DEVICES=void", MarkerEnv + "=", "NVIDIA_VISIBLE_DEVICES=all"})
	if err == nil || !strings.Contains(err.Error(), "NVIDIA_VISIBLE_DEVICES=all after the value NVIDIA_VISIBLE_DEVICES=void") {
		t.Errorf("pod env NVIDIA_VISIBLE_DEVICES=all after the answer: Decide = %v; want refused", err)
	}
}

// case C51: a container hami-go gives no GPU whose image is one the NVIDIA Container Toolkit
// treats as legacy (CUDA_VERSION, no NVIDIA_REQUIRE_CUDA) and that sets no
// NVIDIA_VISIBLE_DEVICES would get every GPU from the toolkit; the NRI plugin sets
// NVIDIA_VISIBLE_DEVICES=void in it. Any other container without GPUs is left as it is.
func TestC51LegacyCUDAImageGetsNoGPU(t *testing.T) {
	src := &standInSource{}
	g := onContainerd2(NewPlugin(src, "kube-system"))
	void := []EnvChange{set("NVIDIA_VISIBLE_DEVICES", "void")}
	for _, tc := range []struct {
		name string
		ns   string
		env  []string
		want []EnvChange
	}{
		{"legacy image", "ns", []string{"PATH=/usr/bin", "CUDA_VERSION=11.0.3"}, void},
		{"legacy image with a driver-capabilities list", "ns", []string{"CUDA_VERSION=11.0.3", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"}, void},
		{"NVIDIA_REQUIRE_CUDA set", "ns", []string{"CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4"}, nil},
		{"no CUDA_VERSION", "ns", []string{"PATH=/usr/bin"}, nil},
		{"empty CUDA_VERSION", "ns", []string{"CUDA_VERSION="}, nil},
		{"exempt namespace", "kube-system", []string{"CUDA_VERSION=11.0.3"}, nil},
	} {
		adj, err := g.Decide(context.Background(), Container{PodNamespace: tc.ns, PodName: "p", Name: "c"}, tc.env)
		if err != nil || !reflect.DeepEqual(adj.Env, tc.want) {
			t.Errorf("%s: Decide = %+v, %v; want env %+v", tc.name, adj, err, tc.want)
		}
	}
	// A container without GPUs that carries a protected name (not NVIDIA_VISIBLE_DEVICES) is
	// checked against its (empty) grant; void is added beside whatever that gives.
	adj, err := g.Decide(context.Background(), Container{PodNamespace: "ns", PodName: "p", Name: "c"}, []string{"CUDA_VERSION=11.0.3", "CUDA_VISIBLE_DEVICES=-1"})
	if err != nil {
		t.Fatalf("Decide = %v", err)
	}
	found := false
	for _, ch := range adj.Env {
		found = found || ch == set("NVIDIA_VISIBLE_DEVICES", "void")
	}
	if !found {
		t.Errorf("legacy image with CUDA_VISIBLE_DEVICES=-1: changes %+v lack NVIDIA_VISIBLE_DEVICES=void", adj.Env)
	}
}

package nri

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

// standIn is what a standInSource answers for one container: its plan (Plan) or what it was
// granted (Granted), from the same table.
type standIn struct {
	GPU        bool
	Env        map[string]string
	CDIDevices []string
	Mounts     []Mount
	Caps       string // the driver capabilities the container needs
	Answer     map[string]string
}

// standInSource is a stand-in for the node agents' Source (the device plugin's ledger, the DRA
// driver's prepared claims): it answers from a fixed table and records what it was asked, and
// through which method.
type standInSource struct {
	mu      sync.Mutex
	asked   []Container
	viaPlan []bool
	out     map[string]standIn // by container name
	err     error
	panic   bool
}

func (s *standInSource) ask(c Container, plan bool) standIn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, c)
	s.viaPlan = append(s.viaPlan, plan)
	if s.panic {
		panic("stand-in source bug")
	}
	return s.out[c.Name]
}

func (s *standInSource) Plan(_ context.Context, c Container) (Plan, error) {
	a := s.ask(c, true)
	if !a.GPU {
		return Plan{}, s.err
	}
	return Plan{Env: a.Env, CDIDevices: a.CDIDevices, Mounts: a.Mounts, DriverCapabilities: a.Caps, Answer: a.Answer}, s.err
}

func (s *standInSource) Granted(_ context.Context, c Container) (Granted, error) {
	a := s.ask(c, false)
	return Granted{GPU: a.GPU, Env: a.Env, DriverCapabilities: a.Caps}, s.err
}

func (s *standInSource) calls() []Container {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Container(nil), s.asked...)
}

// planCalls says, per call, whether the Source was asked through Plan (the pending answer).
func (s *standInSource) planCalls() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bool(nil), s.viaPlan...)
}

// gpuAllocated is what the device plugin hands a container asking for 1000 MiB of GPU-a.
var gpuAllocated = standIn{GPU: true, Env: map[string]string{
	mem0: "1000m", "CUDA_VISIBLE_DEVICES": "GPU-a", MarkerEnv: "GPU-a", "HAMI_GO_GPU_MEMORY_MIB": "1000",
}}

// pluginEnv is the device plugin's env for gpuAllocated as the runtime lists it.
var pluginEnv = []string{"CUDA_VISIBLE_DEVICES=GPU-a", mem0 + "=1000m", "HAMI_GO_GPU_MEMORY_MIB=1000", MarkerEnv + "=GPU-a"}

// pendingAllocated is gpuAllocated left to the NRI plugin (the device plugin's pending answer: the
// Allocate response set only the empty marker), with a CDI device to add.
var pendingAllocated = standIn{GPU: true, Env: gpuAllocated.Env, CDIDevices: []string{"hami-go.io/gpu=GPU-a"}}

// pendingEnv is that Allocate response as the runtime lists it.
var pendingEnv = []string{MarkerEnv + "="}

// pendingOut is what the NRI plugin sets for pendingAllocated.
var pendingOut = []EnvChange{set(mem0, "1000m"), set("CUDA_VISIBLE_DEVICES", "GPU-a"), set("HAMI_GO_GPU_MEMORY_MIB", "1000"), set(MarkerEnv, "GPU-a")}

// withCaps is a under HAMi-core: its container needs the driver capabilities compute,utility.
func withCaps(a standIn) standIn {
	a.Caps = "compute,utility"
	return a
}

func envOf(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// onContainerd2 is g as the runtime configures it on containerd 2.4.2.
func onContainerd2(g *Plugin) *Plugin {
	if _, err := g.Configure(context.Background(), "", "containerd", "v2.4.2"); err != nil {
		panic(err)
	}
	return g
}

// The single empty marker is taken as the device plugin's pending answer only on runtimes that
// keep a repeated env name as two entries (containerd >= 2.0); where a later value replaces an
// earlier one, a tenant's envFrom value could be the only entry. The NRI plugin subscribes to the
// events it handles.
func TestGuardConfigure(t *testing.T) {
	for _, tc := range []struct {
		runtime, version string
		answers          bool
	}{
		{"containerd", "v2.4.2", true}, {"containerd", "2.0.0", true}, {"containerd", "v1.7.20", false},
		{"cri-o", "1.31.0", false}, {"containerd", "", false}, {"containerd", "devel", false},
	} {
		src := &standInSource{out: map[string]standIn{"main": pendingAllocated}}
		g := NewPlugin(src)
		if ev, err := g.Configure(context.Background(), "", tc.runtime, tc.version); ev != 0 || err != nil {
			t.Fatalf("Configure(%s %s) = %v, %v; want 0 (the handled events), nil", tc.runtime, tc.version, ev, err)
		}
		_, _ = g.Decide(context.Background(), Container{PodNamespace: "ns", PodName: "p", Name: "main"}, pendingEnv)
		if got := src.planCalls(); len(got) != 1 || got[0] != tc.answers {
			t.Errorf("%s %s: Source asked through Plan %v, want [%v]", tc.runtime, tc.version, got, tc.answers)
		}
	}
}

// The NRI plugin applies a plan Allocate left to it only where the single empty marker can be
// hami-go's own (containerd >= 2.0; elsewhere a tenant's envFrom value could replace the
// plugin's) and, for CDI devices, where the runtime injects the devices an NRI adjustment names
// (containerd >= 2.1); never while disconnected.
func TestCanApplyPlans(t *testing.T) {
	for _, tc := range []struct {
		runtime, version string
		pending          bool   // the empty marker is the pending answer (Source.Plan asked)
		errEnv, errCDI   string // CanApplyPlans(false), CanApplyPlans(true): "" = nil
	}{
		{"containerd", "v2.4.2", true, "", ""},
		{"containerd", "2.1.0", true, "", ""},
		{"containerd", "v2.0.5", true, "", "is not containerd >= 2.1"},
		{"containerd", "v1.7.20", false, "is not containerd >= 2.0", "is not containerd >= 2.0"},
		{"cri-o", "1.31.0", false, "the runtime (cri-o 1.31.0) is not containerd >= 2.0", "is not containerd >= 2.0"},
	} {
		t.Run(tc.runtime+"-"+tc.version, func(t *testing.T) {
			src := &standInSource{out: map[string]standIn{"main": pendingAllocated}}
			g := NewPlugin(src)
			if err := g.CanApplyPlans(false); err == nil || !strings.Contains(err.Error(), "not connected") {
				t.Errorf("before connecting: %v, want not connected", err)
			}
			if _, err := g.Configure(context.Background(), "", tc.runtime, tc.version); err != nil {
				t.Fatal(err)
			}
			g.connected.Store(true)
			for cdi, want := range map[bool]string{false: tc.errEnv, true: tc.errCDI} {
				if err := g.CanApplyPlans(cdi); (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
					t.Errorf("CanApplyPlans(cdi=%v) = %v, want %q", cdi, err, want)
				}
			}
			_, _ = g.Decide(context.Background(), Container{PodNamespace: "ns", PodName: "p", Name: "main"}, pendingEnv)
			if got := src.planCalls(); len(got) != 1 || got[0] != tc.pending {
				t.Errorf("Source asked through Plan %v, want [%v]", got, tc.pending)
			}
		})
	}
}

// The pending answer in an exempt namespace (hami-go's own, kube-system): the env is not checked,
// but a plan Allocate left to the NRI plugin is applied, or the GPU pod would run without its GPU.
func TestGuardExemptAppliesPendingPlan(t *testing.T) {
	src := &standInSource{out: map[string]standIn{"main": pendingAllocated}}
	g := onContainerd2(NewPlugin(src, "kube-system"))
	env := envOf([]string{"NVIDIA_VISIBLE_DEVICES=all"}, pendingEnv, []string{mem0 + "=81920m"})
	got, err := g.Decide(context.Background(), Container{PodNamespace: "kube-system", PodName: "p", Name: "main"}, env)
	if err != nil || !reflect.DeepEqual(got, Adjustment{Env: pendingOut, CDIDevices: pendingAllocated.CDIDevices}) {
		t.Errorf("Decide = %+v, %v; want the plan's env %v and CDI devices %v, unchecked", got, err, pendingOut, pendingAllocated.CDIDevices)
	}
}

// case C37: the NRI plugin's decision per container, with what it asks the Source.
func TestGuardDecide(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		src     *standInSource
		out     []EnvChange
		cdi     []string // CDI devices added
		errHas  string   // "" = no error
		refused *RefusedError
		asks    bool // the Source is asked
		// pending: the Source is asked through Plan (the env's only marker is empty: Allocate
		// left the plan to the NRI plugin), else through Granted.
		pending bool
	}{{
		name: "no protected env: let through without asking (pods without GPUs never depend on hami-go)",
		env:  []string{"PATH=/bin", "CUDA_HOME=/usr/local/cuda"},
		src:  &standInSource{err: errors.New("must not be asked")},
	}, {
		name:    "GPU container, envFrom after the plugin widens the limit: refused",
		env:     envOf([]string{"PATH=/bin"}, pluginEnv, []string{mem0 + "=81920m"}),
		src:     &standInSource{out: map[string]standIn{"main": gpuAllocated}},
		refused: &RefusedError{Name: mem0, Value: "81920m", Want: "1000m", HasWant: true},
		asks:    true,
	}, {
		name: "GPU container, image ENV before the plugin: pinned to hami-go's values",
		env:  envOf([]string{mem0 + "=99999m", "LD_PRELOAD=/evil.so"}, pluginEnv),
		src:  &standInSource{out: map[string]standIn{"main": gpuAllocated}},
		out: []EnvChange{set(mem0, "1000m"), set("CUDA_VISIBLE_DEVICES", "GPU-a"), set("HAMI_GO_GPU_MEMORY_MIB", "1000"),
			set(MarkerEnv, "GPU-a")}, // case C54: a GPU container's own LD_PRELOAD is kept
		asks: true,
	}, {
		name:    "the pod's env sets the marker again: refused, and not passed on as the answer (two writers)",
		env:     envOf(pluginEnv, []string{MarkerEnv + "=GPU-a,GPU-b"}),
		src:     &standInSource{out: map[string]standIn{"main": gpuAllocated}},
		refused: &RefusedError{Name: MarkerEnv, Value: "GPU-a,GPU-b", Want: "GPU-a", HasWant: true},
		asks:    true,
	}, {
		name: "one GPU container answered two GPUs: the answer's UUIDs in order",
		env:  []string{"CUDA_VISIBLE_DEVICES=GPU-a,GPU-b", MarkerEnv + "=GPU-a,GPU-b"},
		src: &standInSource{out: map[string]standIn{"main": {GPU: true, Env: map[string]string{
			"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b", MarkerEnv: "GPU-a,GPU-b"}}}},
		out:  []EnvChange{set("CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b"), set(MarkerEnv, "GPU-a,GPU-b")},
		asks: true,
	}, {
		name: "container without GPUs, envFrom NVIDIA_VISIBLE_DEVICES=all: emptied",
		env:  []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"},
		src:  &standInSource{},
		out:  []EnvChange{empty("NVIDIA_VISIBLE_DEVICES")},
		asks: true,
	}, {
		name:   "the Source cannot tell (GPU container not yet known): refused, fail closed",
		env:    pluginEnv,
		src:    &standInSource{err: errors.New("container main of pod ns/p has no claim yet")},
		errHas: "cannot tell which GPUs container ns/p/main was given, so its env cannot be checked (the kubelet retries): container main of pod ns/p has no claim yet",
		asks:   true,
	}, {
		name:   "hami-go's marker but no GPU known: refused, never emptied (emptying would lift the limits)",
		env:    pluginEnv,
		src:    &standInSource{},
		errHas: "container ns/p/main carries HAMI_GO_GPU_UUIDS but hami-go has no GPU allocation for it",
		asks:   true,
	}, {
		name:    "plan left to the NRI plugin, which cannot apply it (enforcement missing): refused with the Source's reason",
		env:     envOf(pendingEnv),
		src:     &standInSource{err: errors.New("the node's GPU enforcement (hami-core) is missing")},
		errHas:  "hami-go: cannot apply container ns/p/main's GPU plan (the kubelet retries): the node's GPU enforcement (hami-core) is missing",
		asks:    true,
		pending: true,
	}, {
		name: "plan left to the NRI plugin (the pending answer): Allocate's empty marker and the image's ENV are set to the plan, its CDI devices added",
		env:  envOf([]string{"NVIDIA_VISIBLE_DEVICES=all", mem0 + "=99999m"}, pendingEnv),
		src:  &standInSource{out: map[string]standIn{"main": pendingAllocated}},
		out: []EnvChange{set(mem0, "1000m"), set("CUDA_VISIBLE_DEVICES", "GPU-a"), set("HAMI_GO_GPU_MEMORY_MIB", "1000"),
			set(MarkerEnv, "GPU-a"), empty("NVIDIA_VISIBLE_DEVICES")},
		cdi:     []string{"hami-go.io/gpu=GPU-a"},
		asks:    true,
		pending: true,
	}, {
		name:    "plan left to the NRI plugin: an envFrom limit (after Allocate's marker) is refused",
		env:     envOf(pendingEnv, []string{mem0 + "=81920m"}),
		src:     &standInSource{out: map[string]standIn{"main": pendingAllocated}},
		refused: &RefusedError{Name: mem0, Value: "81920m", Want: "1000m", HasWant: true},
		asks:    true,
		pending: true,
	}, {
		name:    "plan left to the NRI plugin: an image ENV limit alone is set to the plan's",
		env:     envOf([]string{mem0 + "=81920m"}, pendingEnv),
		src:     &standInSource{out: map[string]standIn{"main": pendingAllocated}},
		out:     pendingOut,
		cdi:     []string{"hami-go.io/gpu=GPU-a"},
		asks:    true,
		pending: true,
	}, {
		name:    "plan left to the NRI plugin: image ENV and envFrom both set a limit: refused (the later entry would win)",
		env:     envOf([]string{mem0 + "=99999m"}, pendingEnv, []string{mem0 + "=81920m"}),
		src:     &standInSource{out: map[string]standIn{"main": pendingAllocated}},
		refused: &RefusedError{Name: mem0, Value: "81920m", Want: "1000m", HasWant: true, Repeated: true},
		asks:    true,
		pending: true,
	}, {
		// Two markers: not the pending answer, so the container is checked against what it was
		// granted; the device plugin's Source refuses a planned container that did not claim.
		name:   "plan left to the NRI plugin: envFrom sets the marker after Allocate's empty one: refused",
		env:    envOf(pendingEnv, []string{MarkerEnv + "=GPU-b"}),
		src:    &standInSource{err: errors.New("container main of pod ns/p is planned GPUs, but its env does not carry the device plugin's pending answer")},
		errHas: "cannot tell which GPUs container ns/p/main was given",
		asks:   true,
	}, {
		name:   "plan left to the NRI plugin: the image sets the marker before Allocate's: refused (the empty one would win)",
		env:    envOf([]string{MarkerEnv + "=GPU-a"}, pendingEnv),
		src:    &standInSource{err: errors.New("container main of pod ns/p is planned GPUs, but its env does not carry the device plugin's pending answer")},
		errHas: "its env does not carry the device plugin's pending answer",
		asks:   true,
	}, {
		name: "plan under HAMi-core: the image's driver capabilities gain compute and utility, none dropped",
		env:  envOf([]string{"NVIDIA_DRIVER_CAPABILITIES=video"}, pendingEnv),
		src:  &standInSource{out: map[string]standIn{"main": withCaps(pendingAllocated)}},
		out: []EnvChange{set(mem0, "1000m"), set("CUDA_VISIBLE_DEVICES", "GPU-a"), set("HAMI_GO_GPU_MEMORY_MIB", "1000"),
			set(MarkerEnv, "GPU-a"), set("NVIDIA_DRIVER_CAPABILITIES", "video,compute,utility")},
		cdi:     []string{"hami-go.io/gpu=GPU-a"},
		asks:    true,
		pending: true,
	}, {
		name: "granted under HAMi-core, no driver capabilities in env (the toolkit would give utility only): compute,utility set",
		env:  pluginEnv,
		src:  &standInSource{out: map[string]standIn{"main": withCaps(gpuAllocated)}},
		out: []EnvChange{set(mem0, "1000m"), set("CUDA_VISIBLE_DEVICES", "GPU-a"), set("HAMI_GO_GPU_MEMORY_MIB", "1000"),
			set(MarkerEnv, "GPU-a"), set("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")},
		asks: true,
	}, {
		name: "granted under HAMi-core, driver capabilities all: left as they are",
		env:  envOf([]string{"NVIDIA_DRIVER_CAPABILITIES=all"}, pluginEnv),
		src:  &standInSource{out: map[string]standIn{"main": withCaps(gpuAllocated)}},
		out:  []EnvChange{set(mem0, "1000m"), set("CUDA_VISIBLE_DEVICES", "GPU-a"), set("HAMI_GO_GPU_MEMORY_MIB", "1000"), set(MarkerEnv, "GPU-a")},
		asks: true,
	}, {
		name:   "granted under HAMi-core, driver capabilities set twice, the last without compute: refused with the value to set",
		env:    envOf([]string{"NVIDIA_DRIVER_CAPABILITIES=all"}, pluginEnv, []string{"NVIDIA_DRIVER_CAPABILITIES=utility"}),
		src:    &standInSource{out: map[string]standIn{"main": withCaps(gpuAllocated)}},
		errHas: "sets NVIDIA_DRIVER_CAPABILITIES more than once (last NVIDIA_DRIVER_CAPABILITIES=utility)",
		asks:   true,
	}, {
		name:   "a panic in the Source refuses the container, it does not reach the runtime",
		env:    []string{"NVIDIA_VISIBLE_DEVICES=all"},
		src:    &standInSource{panic: true},
		errHas: "hami-go: internal error while checking the container's env: stand-in source bug",
		asks:   true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := Container{PodUID: "uid-1", PodNamespace: "ns", PodName: "p", Name: "main"}
			got, err := onContainerd2(NewPlugin(tc.src)).Decide(context.Background(), c, tc.env)
			switch {
			case tc.refused != nil:
				var r *RefusedError
				if !errors.As(err, &r) || *r != *tc.refused {
					t.Fatalf("Decide = %+v, %v; want refusal %+v", got, err, *tc.refused)
				}
			case tc.errHas != "":
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("Decide error %v, want one containing %q", err, tc.errHas)
				}
			case err != nil:
				t.Fatalf("Decide: %v", err)
			}
			if !reflect.DeepEqual(got, Adjustment{Env: tc.out, CDIDevices: tc.cdi}) {
				t.Errorf("Decide = %+v, want env %+v, CDI devices %v", got, tc.out, tc.cdi)
			}
			if asked := tc.src.calls(); (len(asked) > 0) != tc.asks || (tc.asks && !reflect.DeepEqual(asked, []Container{c})) {
				t.Errorf("Source asked %+v, want asked=%v for %+v", asked, tc.asks, c)
			}
			if via := tc.src.planCalls(); tc.asks && len(via) == 1 && via[0] != tc.pending {
				t.Errorf("Source asked through Plan: %v, want %v", via[0], tc.pending)
			}
		})
	}
}

// case C37: pods in an exempt namespace (hami-go's own, kube-system: those the webhook does not
// see) are let through unchanged, even with env the NRI plugin refuses elsewhere.
func TestGuardExemptNamespaces(t *testing.T) {
	src := &standInSource{}
	g := NewPlugin(src, "hami-go-system", "kube-system")
	env := []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=all"}
	for ns, refused := range map[string]bool{"hami-go-system": false, "kube-system": false, "tenant": true} {
		ch, err := g.Decide(context.Background(), Container{PodNamespace: ns, PodName: "p", Name: "main"}, env)
		if (err != nil) != refused || len(ch.Env) != 0 {
			t.Errorf("namespace %s: %+v, %v; want refused=%v and no changes", ns, ch, err, refused)
		}
	}
	if got := src.calls(); len(got) != 1 || got[0].PodNamespace != "tenant" {
		t.Errorf("Source asked %+v, want only for the tenant's pod", got)
	}
}

// case C37: CreateContainer passes the pod's identity and the CDI devices to the Source, marked
// as being created (case C56: a Source may prepare host state, a fresh HAMi-core cache file), and
// turns the changes into NRI env adjustments.
func TestGuardCreateContainer(t *testing.T) {
	src := &standInSource{out: map[string]standIn{"main": gpuAllocated}}
	pod := &api.PodSandbox{Uid: "uid-1", Namespace: "ns", Name: "p"}
	ctr := &api.Container{Name: "main", Env: envOf([]string{mem0 + "=99999m"}, pluginEnv),
		CDIDevices: []*api.CDIDevice{{Name: "gpu.hami-go.io/claim=c1"}}}
	adj, upd, err := onContainerd2(NewPlugin(src)).CreateContainer(context.Background(), pod, ctr)
	if err != nil || upd != nil {
		t.Fatalf("CreateContainer = %v, %v, %v", adj, upd, err)
	}
	want := Container{PodUID: "uid-1", PodNamespace: "ns", PodName: "p", Name: "main", CDIDevices: []string{"gpu.hami-go.io/claim=c1"}, Creating: true}
	if got := src.calls(); !reflect.DeepEqual(got, []Container{want}) {
		t.Errorf("Source asked %+v, want %+v", got, want)
	}
	var env []string
	for _, e := range adj.GetEnv() {
		env = append(env, e.GetKey()+"="+e.GetValue())
	}
	if w := []string{mem0 + "=1000m", "CUDA_VISIBLE_DEVICES=GPU-a", "HAMI_GO_GPU_MEMORY_MIB=1000", MarkerEnv + "=GPU-a"}; !reflect.DeepEqual(env, w) {
		t.Errorf("adjusted env %v, want %v", env, w)
	}

	// The plan left to the NRI plugin (the device plugin's pending answer): its CDI devices are added.
	src.out["main"] = pendingAllocated
	ctr.Env = pendingEnv
	adj, _, err = onContainerd2(NewPlugin(src)).CreateContainer(context.Background(), pod, ctr)
	if err != nil || len(adj.GetEnv()) != len(pendingOut) || len(adj.GetCDIDevices()) != 1 || adj.GetCDIDevices()[0].GetName() != "hami-go.io/gpu=GPU-a" {
		t.Errorf("pending plan: CreateContainer = %v, %v; want %d env changes and CDI device hami-go.io/gpu=GPU-a", adj, err, len(pendingOut))
	}

	ctr.Env = []string{"PATH=/bin"}
	if adj, _, err := NewPlugin(src).CreateContainer(context.Background(), pod, ctr); adj != nil || err != nil {
		t.Errorf("no protected env: CreateContainer = %v, %v; want nothing", adj, err)
	}
}

// When the NRI plugin (re)connects, the runtime lists the containers it already runs, and the Source
// is asked again for each running GPU container, as at its creation (what fails is logged). A
// running container whose env still carries the pending answer was created while the NRI plugin was
// away: it goes to the Unplanned handler and never claims its plan (the Source is not asked).
// Stopped containers and containers without protected env are not asked; nothing is updated,
// and a check that fails is not an error of the synchronisation (the container runs already).
func TestGuardSynchronize(t *testing.T) {
	src := &standInSource{out: map[string]standIn{"main": gpuAllocated}}
	pods := []*api.PodSandbox{{Id: "sb1", Uid: "uid-1", Namespace: "ns", Name: "p"}, {Id: "sb2", Uid: "uid-2", Namespace: "ns", Name: "q"}}
	ctrs := []*api.Container{
		{Id: "c1", PodSandboxId: "sb1", Name: "main", State: api.ContainerState_CONTAINER_RUNNING, Env: pluginEnv},
		{Id: "c2", PodSandboxId: "sb1", Name: "sidecar", State: api.ContainerState_CONTAINER_RUNNING, Env: []string{"PATH=/bin"}},
		{Id: "c3", PodSandboxId: "sb2", Name: "main", State: api.ContainerState_CONTAINER_STOPPED, Env: pluginEnv},
		{Id: "c4", PodSandboxId: "sb2", Name: "widened", State: api.ContainerState_CONTAINER_CREATED, Env: envOf(pluginEnv, []string{mem0 + "=81920m"})},
		{Id: "c5", PodSandboxId: "sb2", Name: "unplanned", State: api.ContainerState_CONTAINER_RUNNING, Env: pendingEnv},
	}
	g := onContainerd2(NewPlugin(src))
	var mu sync.Mutex
	var unplanned []Container
	g.OnUnplanned(func(_ context.Context, c Container) { mu.Lock(); defer mu.Unlock(); unplanned = append(unplanned, c) })
	upd, err := g.Synchronize(context.Background(), pods, ctrs)
	if err != nil || upd != nil {
		t.Fatalf("Synchronize = %v, %v; want no updates, no error", upd, err)
	}
	// Running containers: not being created (Creating false; case C56).
	want := []Container{
		{PodUID: "uid-1", PodNamespace: "ns", PodName: "p", Name: "main", ID: "c1"},
		{PodUID: "uid-2", PodNamespace: "ns", PodName: "q", Name: "widened", ID: "c4"},
	}
	deadline := time.Now().Add(10 * time.Second) // the checks run after Synchronize returns
	for len(src.calls()) < len(want) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // and no more than those
	if got := src.calls(); !reflect.DeepEqual(got, want) {
		t.Errorf("Source asked %+v, want %+v", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []Container{{PodUID: "uid-2", PodNamespace: "ns", PodName: "q", Name: "unplanned", ID: "c5"}}; !reflect.DeepEqual(unplanned, want) {
		t.Errorf("Unplanned handler got %+v, want %+v", unplanned, want)
	}
}

// case C37, through the runtime side of NRI (containerd's own pkg/adaptation, over a unix
// socket): Run registers the NRI plugin, a refusal fails the runtime's CreateContainer with the
// NRI plugin's message, and an adjustment reaches the runtime. The NRI plugin starts before the runtime
// (no socket yet) and connects once it is there.
func TestRunThroughNRI(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "nri.sock")
	startRuntime := func() *adaptation.Adaptation {
		t.Helper()
		sync := func(ctx context.Context, cb adaptation.SyncCB) error { _, err := cb(ctx, nil, nil); return err }
		update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
			return nil, nil
		}
		r, err := adaptation.New("runtime-stand-in", "v0", sync, update, adaptation.WithSocketPath(socket),
			adaptation.WithPluginPath(filepath.Join(dir, "plugins")), adaptation.WithPluginConfigPath(filepath.Join(dir, "conf")))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	src := &standInSource{out: map[string]standIn{"gpu": gpuAllocated}}
	g := NewPlugin(src)
	go func() { Run(ctx, socket, g, 50*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()
	time.Sleep(200 * time.Millisecond) // a few failed connects first
	r := startRuntime()
	defer r.Stop()

	pod := &api.PodSandbox{Id: "sb", Uid: "uid-1", Namespace: "ns", Name: "p"}
	nonGPU := &api.Container{Id: "c1", PodSandboxId: "sb", Name: "plain", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}}
	// waitEmptied creates nonGPU until the NRI plugin (connected) empties NVIDIA_VISIBLE_DEVICES.
	waitEmptied := func(r *adaptation.Adaptation) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			rpl, err := r.CreateContainer(context.Background(), &adaptation.CreateContainerRequest{Pod: pod, Container: nonGPU})
			if err == nil && len(rpl.GetAdjust().GetEnv()) == 1 {
				if e := rpl.GetAdjust().GetEnv()[0]; e.GetKey() != "NVIDIA_VISIBLE_DEVICES" || e.GetValue() != "" {
					t.Fatalf("adjusted env %s=%q, want NVIDIA_VISIBLE_DEVICES emptied", e.GetKey(), e.GetValue())
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the NRI plugin never adjusted the container: %v, %v", rpl, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitEmptied(r)

	widen := &api.Container{Id: "c2", PodSandboxId: "sb", Name: "gpu", Env: envOf(pluginEnv, []string{mem0 + "=81920m"})}
	_, err := r.CreateContainer(context.Background(), &adaptation.CreateContainerRequest{Pod: pod, Container: widen})
	if err == nil || !strings.Contains(err.Error(), "sets CUDA_DEVICE_MEMORY_LIMIT_0=81920m after the value CUDA_DEVICE_MEMORY_LIMIT_0=1000m that hami-go allocated") {
		t.Fatalf("runtime CreateContainer error %v, want the NRI plugin's refusal", err)
	}
}

// Changed is closed whenever the NRI plugin connects or goes (the device plugin's PreStartContainer
// waits on it for an NRI plugin the runtime closed to come back).
func TestGuardChanged(t *testing.T) {
	g := onContainerd2(NewPlugin(&standInSource{}))
	for _, v := range []bool{true, false} {
		ch := g.Changed()
		g.setConnected(v)
		select {
		case <-ch:
		default:
			t.Fatalf("Changed not closed when connected became %v", v)
		}
		if (g.CanApplyPlans(false) == nil) != v {
			t.Errorf("connected=%v: CanApplyPlans = %v", v, g.CanApplyPlans(false))
		}
	}
}

// A plan's mounts reach the runtime as bind mounts of the NRI adjustment: the container's
// HAMi-core cache directory read-write, the library read-only.
func TestCreateContainerAddsPlanMounts(t *testing.T) {
	withMount := pendingAllocated
	withMount.Mounts = []Mount{{Source: "/usr/local/vgpu/containers/uid-1_main", Destination: "/usr/local/vgpu/cache"}, {Source: "/usr/local/vgpu/libvgpu.so", Destination: "/usr/local/vgpu/libvgpu.so", ReadOnly: true}}
	g := onContainerd2(NewPlugin(&standInSource{out: map[string]standIn{"main": withMount}}))
	pod := &api.PodSandbox{Id: "sb", Uid: "uid-1", Namespace: "ns", Name: "p"}
	adj, _, err := g.CreateContainer(context.Background(), pod, &api.Container{Id: "c", PodSandboxId: "sb", Name: "main", Env: pendingEnv})
	if err != nil {
		t.Fatal(err)
	}
	want := []*api.Mount{
		{Destination: "/usr/local/vgpu/cache", Source: "/usr/local/vgpu/containers/uid-1_main", Type: "bind", Options: []string{"rbind", "rw"}},
		{Destination: "/usr/local/vgpu/libvgpu.so", Source: "/usr/local/vgpu/libvgpu.so", Type: "bind", Options: []string{"rbind", "ro"}},
	}
	got := adj.GetMounts()
	if len(got) != len(want) {
		t.Fatalf("adjustment mounts %v, want %v", got, want)
	}
	for i := range want {
		if got[i].GetDestination() != want[i].Destination || got[i].GetSource() != want[i].Source ||
			got[i].GetType() != "bind" || !reflect.DeepEqual(got[i].GetOptions(), want[i].Options) {
			t.Errorf("adjustment mount %d: %v, want %v", i, got[i], want[i])
		}
	}
}

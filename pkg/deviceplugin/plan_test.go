package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/nri"
)

// case C04: Allocate names no GPU, and the NRI plugin gives each of two interchangeable pods
// its own plan at container creation, whichever slices the kubelet chose for them: p (planned
// GPU-A) gets a slice of GPU-B from the kubelet and still runs on GPU-A with the env its claim
// builds; each GPU is charged once, and each claimed record is the pod's plan. While the NRI plugin
// cannot apply plans, Allocate still answers and PreStartContainer refuses with the reason.
func TestC04PlanAppliedAtContainerCreation(t *testing.T) {
	for _, strategy := range []string{StrategyEnvvar, StrategyCDI} {
		t.Run(strategy, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.DeviceListStrategy = strategy
			cfg.CDISpecDir = t.TempDir()
			p, _ := newTestPlugin(t, cfg, newTestBackend(2, 81920))
			pp := testPod("p", t0, testNode, ctr{name: "main", mem: 1000, gpus: []string{"GPU-A"}})
			pq := testPod("q", t0, testNode, ctr{name: "main", mem: 1000, gpus: []string{"GPU-B"}})
			p.Ledger().UpsertPod(pp)
			p.Ledger().UpsertPod(pq)

			for _, why := range []string{"", "the NRI plugin is not connected to the runtime"} {
				p.canApplyPlans = nil
				if why != "" {
					p.canApplyPlans = func(cdi bool) error {
						if cdi != (strategy == StrategyCDI) {
							t.Errorf("asked whether CDI devices can be applied: %v, strategy %s", cdi, strategy)
						}
						return errors.New(why)
					}
				}
				// Allocate answers whatever the NRI plugin's state (a refused Allocate fails the pod);
				// PreStartContainer, before the container's creation, refuses with the reason.
				if _, err := alloc(t, p, "GPU-B::0"); err != nil {
					t.Fatalf("Allocate while the NRI plugin cannot apply plans (%q): %v; want the pending answer", why, err)
				}
				_, err := p.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"GPU-B::0"}})
				if want := "so the container's GPU plan could not be applied at its creation; the container is not created until the node agent's NRI plugin is connected"; status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), why) {
					t.Fatalf("PreStartContainer while the NRI plugin cannot apply plans (%q): %v; want FailedPrecondition saying why and %q", why, err, want)
				}
			}
			p.canApplyPlans = func(bool) error { return nil }
			resp, err := alloc(t, p, "GPU-B::0") // the kubelet's slice for p, on q's GPU
			if err != nil {
				t.Fatal(err)
			}
			wantEnv := map[string]string{device.EnvGPUUUIDs: ""}
			if strategy == StrategyCDI {
				wantEnv["NVIDIA_VISIBLE_DEVICES"] = "void" // case C52: no GPU without the plan
			}
			if !reflect.DeepEqual(resp.Envs, wantEnv) || len(resp.CdiDevices) != 0 {
				t.Fatalf("Allocate answered env %v, CDI devices %v; want only %v", resp.Envs, resp.CdiDevices, wantEnv)
			}
			if _, claimed, _ := p.Ledger().ContainerClaim(pp.UID, "main"); claimed {
				t.Fatal("Allocate claimed p's container; the claim is made at container creation")
			}

			g := testNRIPlugin(t, p)
			for _, tc := range []struct {
				pod *podEntryRef
				gpu string
			}{{&podEntryRef{pp.UID, pp.Namespace, pp.Name}, "GPU-A"}, {&podEntryRef{pq.UID, pq.Namespace, pq.Name}, "GPU-B"}} {
				// The runtime's env: a CUDA image's ENV, then the pending answer.
				env := []string{"NVIDIA_VISIBLE_DEVICES=all", device.EnvGPUUUIDs + "="}
				if strategy == StrategyCDI {
					env = append(env, "NVIDIA_VISIBLE_DEVICES=void") // the pending answer's (case C52)
				}
				c := nri.Container{PodUID: string(tc.pod.uid), PodNamespace: tc.pod.ns, PodName: tc.pod.name, Name: "main"}
				adj, err := g.Decide(context.Background(), c, env)
				if err != nil {
					t.Fatalf("pod %s: Decide: %v", tc.pod.name, err)
				}
				cl, claimed, _ := p.Ledger().ContainerClaim(tc.pod.uid, "main")
				if !claimed || cl.Container.Devices[0].UUID != tc.gpu {
					t.Fatalf("pod %s: claim %+v (claimed %v); want its own plan on %s", tc.pod.name, cl, claimed, tc.gpu)
				}
				want := p.resp.build(cl) // the env and CDI devices the claim builds
				got := map[string]string{}
				for _, ch := range adj.Env {
					got[ch.Name] = ch.Value
				}
				if strategy == StrategyCDI && want.Env["NVIDIA_VISIBLE_DEVICES"] != "void" {
					t.Errorf("pod %s: the plan sets NVIDIA_VISIBLE_DEVICES=%q; want void, the pending answer's: the GPU comes as a CDI device", tc.pod.name, want.Env["NVIDIA_VISIBLE_DEVICES"])
				}
				want.Env["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility" // HAMi-core's, the image having none
				if !reflect.DeepEqual(got, want.Env) {
					t.Errorf("pod %s: the NRI plugin sets %v; want %v", tc.pod.name, got, want.Env)
				}
				if !reflect.DeepEqual(adj.CDIDevices, want.CDIDevices) {
					t.Errorf("pod %s: the NRI plugin adds CDI devices %v; want %v", tc.pod.name, adj.CDIDevices, want.CDIDevices)
				}
				if rec, ok := p.Ledger().ClaimedRecord(tc.pod.uid); !ok || len(rec.Containers) != 1 || rec.Containers[0].Devices[0].UUID != tc.gpu {
					t.Errorf("pod %s: claimed record %+v; want its plan on %s", tc.pod.name, rec, tc.gpu)
				}
			}
			if u := p.Ledger().Charged(); u["GPU-A"].Sharers != 1 || u["GPU-B"].Sharers != 1 {
				t.Errorf("charged %+v, want one sharer on each GPU", u)
			}
			// An empty marker beside one of hami-go's CDI devices (which only the NRI plugin adds):
			// refused, never given a second GPU.
			c := nri.Container{PodUID: string(pq.UID), PodNamespace: pq.Namespace, PodName: pq.Name, Name: "main", CDIDevices: []string{CDIKind + "=GPU-A"}}
			if _, err := g.Decide(context.Background(), c, []string{device.EnvGPUUUIDs + "="}); err == nil || !strings.Contains(err.Error(), "carries an empty HAMI_GO_GPU_UUIDS beside hami-go's CDI device hami-go.io/gpu=GPU-A") {
				t.Errorf("pending marker with an Allocate answer's CDI device: %v; want refused", err)
			}
		})
	}
}

// podEntryRef names a test pod for the NRI plugin.
type podEntryRef struct {
	uid      types.UID
	ns, name string
}

// BenchmarkAllocate measures what one GPU container costs the device plugin, with 200 pods in
// flight on one node: the pending Allocate answer, then the NRI plugin's whole decision at
// container creation (Guard.Decide: ClaimPlanned, the env built from the claim, PlanEnv over a
// CUDA image's env), reporting p50/p99 in microseconds (target p99 <= 1 ms).
func BenchmarkAllocate(b *testing.B) {
	cfg := testConfig(b.TempDir())
	cfg.SplitCount = 100
	p, _ := newTestPlugin(b, cfg, newTestBackend(8, 81559))
	p.canApplyPlans = func(bool) error { return nil }
	g := testNRIPlugin(b, p)
	env := []string{"PATH=/usr/local/nvidia/bin:/usr/bin", "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility", device.EnvGPUUUIDs + "="}
	var pods []nri.Container
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if i%benchInFlight == 0 {
			pods = pods[:0]
			for _, pod := range benchLedger(p) {
				pods = append(pods, nri.Container{PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name, Name: "c"})
			}
		}
		id := device.SliceID(fmt.Sprintf("GPU-%c", 'A'+i%8), i%benchInFlight/8)
		b.StartTimer()
		s := time.Now()
		if _, err := alloc(b, p, id); err != nil {
			b.Fatal(err)
		}
		if _, err := g.Decide(context.Background(), pods[i%benchInFlight], env); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(s))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// Case C42: PreStartContainer, which the kubelet calls before each GPU container's creation, waits (at most
// --plan-wait) for the NRI plugin to be able to apply plans, woken when its connection changes: a
// plugin the runtime closed reconnects within a second, and the container created meanwhile gets
// its plan, not a failure. Past the wait it is refused, naming the wait; the kubelet retries.
func TestPreStartWaitsForTheNRIPlugin(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.PlanWait = 5 * time.Second
	p, clk := newTestPlugin(t, cfg, newTestBackend(2, 81920))
	var mu sync.Mutex
	why := errors.New("the NRI plugin is not connected to the runtime")
	changed := make(chan struct{})
	p.canApplyPlans = func(bool) error { mu.Lock(); defer mu.Unlock(); return why }
	p.nriChanged = func() <-chan struct{} { mu.Lock(); defer mu.Unlock(); return changed }
	flip := func(err error) {
		mu.Lock()
		why = err
		close(changed)
		changed = make(chan struct{})
		mu.Unlock()
	}
	preStart := func(id string) error {
		_, err := p.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{id}})
		return err
	}

	done := make(chan error, 1)
	go func() { done <- preStart("GPU-A::0") }()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	flip(nil) // the NRI plugin reconnected
	if err := <-done; err != nil {
		t.Fatalf("PreStartContainer after the NRI plugin reconnected: %v; want nil", err)
	}
	clk.Step(cfg.PlanWait) // fires the first wait's timer, which nobody reads any more
	for clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}

	flip(errors.New("the NRI plugin is not connected to the runtime"))
	go func() { done <- preStart("GPU-A::1") }()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(cfg.PlanWait)
	if err := <-done; status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not connected to the runtime (waited 5s)") {
		t.Errorf("PreStartContainer while the NRI plugin stays away: %v; want refused after the 5s wait", err)
	}
	if err := preStart("GPU-Z::0"); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `names GPU "GPU-Z"`) {
		t.Errorf("PreStartContainer with a device of another node: %v; want InvalidArgument naming the GPU", err)
	}
}

// At shutdown the agent keeps its NRI plugin until the runtime has created every container
// PreStartContainer let the kubelet create with its plan (a graceful restart must not leave a
// container to be created without the plugin), or --plan-wait passes. The plan computed is not
// enough: containerd creates the container unadjusted when the plugin's connection closes before
// it read the answer (the flaky TestNoPlanlessContainerAgentDeletedMidBurst), so only NRI's
// PostCreateContainer of a container carrying its plan counts (case C58).
func TestDrainWaitsForLetThroughContainers(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.PlanWait = 5 * time.Second
	p, clk := newTestPlugin(t, cfg, newTestBackend(1, 81920))
	p.canApplyPlans = func(bool) error { return nil }
	pod := testPod("d", t0, testNode, ctr{name: "main", mem: 1000, gpus: []string{"GPU-A"}})
	p.Ledger().UpsertPod(pod)
	if n := p.Drain(); n != 0 {
		t.Fatalf("Drain with nothing let through = %d, want 0 at once", n)
	}
	for _, id := range []string{"GPU-A::0", "GPU-A::1"} {
		if _, err := p.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{id}}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan int, 1)
	go func() { done <- p.Drain() }()
	// The first container gets its plan; the second never comes (its creation failed).
	g := testNRIPlugin(t, p)
	sandbox := &api.PodSandbox{Id: "sb", Uid: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name}
	ctr := &api.Container{Id: "c1", PodSandboxId: "sb", Name: "main", Env: []string{device.EnvGPUUUIDs + "="}}
	adj, _, err := g.CreateContainer(context.Background(), sandbox, ctr)
	if err != nil {
		t.Fatal(err)
	}
	stillWaiting := func(when string) {
		t.Helper()
		select {
		case n := <-done:
			t.Fatalf("Drain returned %d %s", n, when)
		case <-time.After(50 * time.Millisecond):
		}
	}
	stillWaiting("once the plan was computed, before the runtime created the container with it")
	// The runtime created it: its env is the plan's (the adjustment applied).
	for _, e := range adj.GetEnv() {
		if e.GetKey() == device.EnvGPUUUIDs {
			ctr.Env = []string{e.GetKey() + "=" + e.GetValue()}
		}
	}
	if err := g.PostCreateContainer(context.Background(), sandbox, ctr); err != nil {
		t.Fatal(err)
	}
	// A container created without its plan (the empty marker) does not count.
	if err := g.PostCreateContainer(context.Background(), sandbox, &api.Container{Id: "c2", PodSandboxId: "sb", Name: "other", Env: []string{device.EnvGPUUUIDs + "="}}); err != nil {
		t.Fatal(err)
	}
	stillWaiting("before --plan-wait with one container still to come")
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(cfg.PlanWait)
	if n := <-done; n != 1 {
		t.Errorf("Drain after --plan-wait = %d, want 1 container not seen", n)
	}
}

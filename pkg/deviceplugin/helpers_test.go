package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/nri"
)

const testNode = "node-1"

// testBackend is a test double of device.Backend (unit tests only).
type testBackend struct {
	gpus []device.GPU
	// name is what Name reports: "fake" unless a test sets "nvml" (enforcement is then checked
	// on the host, not simulated).
	name string

	mu       sync.Mutex
	probeErr map[string]error
	procs    map[string][]device.ProcessMemory
}

func newTestBackend(n int, memMiB int64) *testBackend {
	b := &testBackend{name: "fake", probeErr: map[string]error{}, procs: map[string][]device.ProcessMemory{}}
	for i := 0; i < n; i++ {
		b.gpus = append(b.gpus, device.GPU{
			UUID: fmt.Sprintf("GPU-%c", 'A'+i), Index: i, Model: "NVIDIA H100 80GB HBM3",
			MemoryMiB: memMiB, NUMANode: i % 2, Healthy: true,
			// NVML's bus ids, ascending with the index (GPU-A first in PCI order) unless a test
			// reorders them.
			PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+0x10*i),
		})
	}
	return b
}

func (b *testBackend) Name() string { return b.name }
func (b *testBackend) Discover() ([]device.GPU, error) {
	return append([]device.GPU(nil), b.gpus...), nil
}
func (b *testBackend) WatchXIDs(ctx context.Context, _ []string, _ chan<- device.XIDEvent) error {
	<-ctx.Done()
	return ctx.Err()
}
func (b *testBackend) Probe(uuid string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.probeErr[uuid]
}
func (b *testBackend) Processes(uuid string) ([]device.ProcessMemory, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.procs[uuid], nil
}

// ctr describes one GPU container of a test pod: its request and the GPUs the extender planned.
type ctr struct {
	name  string
	kind  device.ContainerKind
	mem   int64 // MiB per GPU
	pct   int   // when > 0: the container asks this percentage of each GPU's memory instead of mem (plan each GPU's MiB with memOn)
	cores int
	gpus  []string // planned UUIDs (len = count); per-GPU memory may differ via memOn
	memOn map[string]int64
}

var podSeq int

// testPod builds a pod placed by the extender on node with the given containers: the shared
// test pod (podtest.Pending) with a unique UID, bound to node, its AnnoPlanned the plan of cs.
func testPod(name string, created time.Time, node string, cs ...ctr) *corev1.Pod {
	podSeq++
	var ctrs []podtest.Ctr
	plan := device.Allocation{Node: node}
	for _, c := range cs {
		pc := podtest.Ctr{Name: c.name, Kind: c.kind, NoGPU: len(c.gpus) == 0}
		if len(c.gpus) > 0 {
			pc.Count = int64(len(c.gpus))
			if c.pct > 0 {
				pc.Pct = int64(c.pct)
			} else {
				pc.Mem = strconv.FormatInt(c.mem, 10)
			}
			pc.Cores = int64(c.cores)
			ca := device.ContainerAllocation{Name: c.name, Kind: c.kind}
			if ca.Kind == "" {
				ca.Kind = device.KindApp
			}
			for _, u := range c.gpus {
				m := c.mem
				if v, ok := c.memOn[u]; ok {
					m = v
				}
				ca.Devices = append(ca.Devices, device.DeviceGrant{UUID: u, MemoryMiB: m, CoresPercent: c.cores})
			}
			plan.Containers = append(plan.Containers, ca)
		}
		ctrs = append(ctrs, pc)
	}
	p := podtest.Pending("default", name, ctrs...)
	p.UID = types.UID(fmt.Sprintf("uid-%s-%d", name, podSeq))
	p.CreationTimestamp = metav1.NewTime(created)
	p.Spec.NodeName = node
	if len(plan.Containers) > 0 {
		s, err := device.EncodeAllocation(plan)
		if err != nil {
			panic(err)
		}
		p.Annotations[device.AnnoPlanned] = s
	}
	return p
}

func testConfig(dir string) Config {
	c := Defaults()
	c.NodeName = testNode
	c.DevicePluginDir = dir
	c.DeviceListStrategy = StrategyEnvvar
	c.PlanWait = 0
	c.NRISocket = "/nonexistent/nri.sock" // New never dials it: no test registers with a runtime (a local cluster's containerd)
	return c
}

func newTestPlugin(t testing.TB, cfg Config, b *testBackend) (*Plugin, *clocktesting.FakeClock) {
	t.Helper()
	return newTestPluginDirty(t, cfg, b, nil)
}

// newTestPluginDirty is newTestPlugin whose ledger queues the pods to write on dirty.
func newTestPluginDirty(t testing.TB, cfg Config, b *testBackend, dirty func(device.PodRef)) (*Plugin, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	p, err := New(cfg, b, Options{Clock: clk, WatchInterval: 20 * time.Millisecond, FileExists: func(string) bool { return false }}, dirty)
	if err != nil {
		t.Fatal(err)
	}
	return p, clk
}

func alloc(t testing.TB, p *Plugin, ids ...string) (*pluginapi.ContainerAllocateResponse, error) {
	t.Helper()
	r, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return nil, err
	}
	return r.ContainerResponses[0], nil
}

// testNRIPlugin is the NRI plugin over p's ledger, configured as on containerd 2.4.2 (the local
// cluster's runtime).
func testNRIPlugin(t testing.TB, p *Plugin) *nri.Plugin {
	t.Helper()
	g := nri.NewPlugin(NRISource(p))
	g.OnPlanCreated(p.PlanCreated)
	if _, err := g.Configure(context.Background(), "", "containerd", "v2.4.2"); err != nil {
		t.Fatal(err)
	}
	return g
}

// create is what container name of pod gets on this node, as one ContainerAllocateResponse: the
// kubelet's Allocate call for it (ids: its device IDs; the pending answer, whose mounts it
// keeps), then the NRI plugin at its creation (nri.Plugin.Decide over the pending answer's
// env: the env it sets and the CDI devices it adds). Unless the test set p.canApplyPlans, the
// NRI plugin counts as connected.
func create(t testing.TB, p *Plugin, pod *corev1.Pod, name string, ids ...string) (*pluginapi.ContainerAllocateResponse, error) {
	t.Helper()
	if p.canApplyPlans == nil {
		p.canApplyPlans = func(bool) error { return nil }
	}
	r, err := alloc(t, p, ids...)
	if err != nil {
		return nil, err
	}
	var env []string
	for k, v := range r.Envs {
		env = append(env, k+"="+v)
	}
	c := nri.Container{PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name, Name: name}
	adj, err := testNRIPlugin(t, p).Decide(context.Background(), c, env)
	if err != nil {
		return nil, err
	}
	out := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}, Mounts: r.Mounts}
	for _, m := range adj.Mounts {
		out.Mounts = append(out.Mounts, &pluginapi.Mount{ContainerPath: m.Destination, HostPath: m.Source, ReadOnly: m.ReadOnly})
	}
	for _, ch := range adj.Env {
		out.Envs[ch.Name] = ch.Value
	}
	for _, d := range adj.CDIDevices {
		out.CdiDevices = append(out.CdiDevices, &pluginapi.CDIDevice{Name: d})
	}
	return out, nil
}

// mustCreate is create that fails the test on an error.
func mustCreate(t testing.TB, p *Plugin, pod *corev1.Pod, name string, ids ...string) *pluginapi.ContainerAllocateResponse {
	t.Helper()
	r, err := create(t, p, pod, name, ids...)
	if err != nil {
		t.Fatalf("container %s/%s (device IDs %v): %v", pod.Name, name, ids, err)
	}
	return r
}

// fakeKubelet is an in-process fake of the kubelet's registration service (unit tests only):
// it serves kubelet.sock in a test directory and records every RegisterRequest.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir  string
	srv  *grpc.Server
	regs chan *pluginapi.RegisterRequest
}

func startFakeKubelet(t *testing.T, dir string) *fakeKubelet {
	t.Helper()
	k := &fakeKubelet{dir: dir, regs: make(chan *pluginapi.RegisterRequest, 10)}
	l, err := net.Listen("unix", filepath.Join(dir, KubeletSocketName))
	if err != nil {
		t.Fatal(err)
	}
	k.srv = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(l) }()
	t.Cleanup(k.srv.Stop)
	return k
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.regs <- r
	return &pluginapi.Empty{}, nil
}

func (k *fakeKubelet) waitRegistration(t *testing.T, within time.Duration) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case r := <-k.regs:
		return r
	case <-time.After(within):
		t.Fatalf("no registration within %s", within)
		return nil
	}
}

// client dials the plugin's socket the way the kubelet does.
func (k *fakeKubelet) client(t *testing.T, endpoint string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

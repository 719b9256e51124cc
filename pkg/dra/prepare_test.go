package dra

import (
	"encoding/json"
	"fmt"
	"github.com/hami-go/hami-go/pkg/draapi"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

func readSpec(t *testing.T, d *Driver, uid types.UID) *cdispec.Spec {
	t.Helper()
	return readSpecIn(t, d.cfg.CDIDir, uid)
}

func readSpecIn(t *testing.T, dir string, uid types.UID) *cdispec.Spec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ClaimSpecName(uid)))
	if err != nil {
		t.Fatal(err)
	}
	var s cdispec.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

func specEnv(s *cdispec.Spec) map[string]string {
	out := map[string]string{}
	for _, e := range s.Devices[0].ContainerEdits.Env {
		k, v, _ := strings.Cut(e, "=")
		out[k] = v
	}
	return out
}

func prepare(t *testing.T, d *Driver, claims ...*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	t.Helper()
	res, err := d.PrepareResourceClaims(bg, claims)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(claims) {
		t.Fatalf("%d results for %d claims", len(res), len(claims))
	}
	return res
}

// A 4000 MiB, 25 % claim on a fake H100 gets one CDI spec named by its UID with the device
// plugin's env for the same slice (shared builder), and the kubelet gets that CDI device.
func TestPrepareCDISpecEnv(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.HAMiCoreLibrary = "/usr/local/vgpu/libvgpu.so"
	d, _ := newTestDriver(t, cfg, "dgxh100", cfg.HAMiCoreLibrary)
	uuid := d.GPUs()[0].GPU.UUID
	c := testClaim("a", 4000, 25, result{device: "gpu-0", memMiB: 4000, cores: 25})
	res := prepare(t, d, c)[c.UID]
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if len(res.Devices) != 1 || res.Devices[0].PoolName != testNode || res.Devices[0].DeviceName != "gpu-0" ||
		!slices.Equal(res.Devices[0].CDIDeviceIDs, []string{"gpu.hami-go.io/claim=uid-a"}) || res.Devices[0].ShareID == nil || *res.Devices[0].ShareID != "share-a-a" {
		t.Fatalf("devices = %+v", res.Devices)
	}
	s := readSpec(t, d, c.UID)
	if s.Kind != "gpu.hami-go.io/claim" || len(s.Devices) != 1 || s.Devices[0].Name != "uid-a" {
		t.Fatalf("spec kind %q devices %+v", s.Kind, s.Devices)
	}
	env := specEnv(s)
	want := map[string]string{
		"CUDA_DEVICE_MEMORY_LIMIT_0":      "4000m",
		"CUDA_DEVICE_SM_LIMIT_0":          "25",
		"CUDA_DEVICE_ORDER":               "PCI_BUS_ID",
		"LIBCUDA_LOG_LEVEL":               "1",
		"HAMI_GO_GPU_MEMORY_MIB":          "4000",
		"NVIDIA_VISIBLE_DEVICES":          uuid,
		"HAMI_GO_GPU_UUIDS":               uuid,
		"HAMI_GO_GPU_MODEL":               "H100",
		"CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/uid-a.cache",
		"LD_PRELOAD":                      "/usr/local/vgpu/libvgpu.so",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if len(env) != len(want) {
		t.Errorf("env = %v, want exactly %v", env, want)
	}
	m := s.Devices[0].ContainerEdits.Mounts
	if len(m) != 2 || m[0].HostPath != cfg.HAMiCoreLibrary || m[0].ContainerPath != gpuenv.HAMiContainerLibrary || !slices.Contains(m[0].Options, "ro") ||
		m[1].HostPath != "/dev/null" || m[1].ContainerPath != gpuenv.HAMiOverrideEnv || !slices.Contains(m[1].Options, "ro") {
		t.Fatalf("mounts = %+v", m)
	}
	// The same slice through the device plugin's builder gives the same env (one builder).
	same := gpuenv.Build(cfg.envConfig(), gpuenv.Request{Grants: []gpuenv.Grant{{UUID: uuid, MemoryMiB: 4000, CoresPercent: 25}}, Model: "NVIDIA H100 80GB HBM3", CacheName: "uid-a"}, func(p string) bool { return p == cfg.HAMiCoreLibrary })
	for k, v := range same.Env {
		if env[k] != v {
			t.Errorf("builder env %s = %q, spec %q", k, v, env[k])
		}
	}
}

// Two GPUs in one claim follow PCI bus order in every positional value, not the allocation's
// (gpu-3 first), each with its own compute limit; the NVML backend's toolkit devices are named
// beside the claim's.
func TestPrepareTwoGPUsOrderToolkit(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.ToolkitCDIKind = DefaultToolkitCDIKind
	d, _ := newTestDriver(t, cfg, "dgxh100")
	g := d.GPUs()
	c := testClaim("two", 20000, 30, result{device: "gpu-3", memMiB: 20000, cores: 30}, result{device: "gpu-1", memMiB: 10000})
	res := prepare(t, d, c)[c.UID]
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	env := specEnv(readSpec(t, d, c.UID))
	if g[1].GPU.PCIBusID >= g[3].GPU.PCIBusID {
		t.Fatalf("fixture: gpu-1 at %s is not before gpu-3 at %s on the PCI bus", g[1].GPU.PCIBusID, g[3].GPU.PCIBusID)
	}
	if env["HAMI_GO_GPU_UUIDS"] != g[1].GPU.UUID+","+g[3].GPU.UUID || env["NVIDIA_VISIBLE_DEVICES"] != env["HAMI_GO_GPU_UUIDS"] ||
		env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "10000m" || env["CUDA_DEVICE_MEMORY_LIMIT_1"] != "20000m" || env["HAMI_GO_GPU_MEMORY_MIB"] != "30000" ||
		env["CUDA_DEVICE_SM_LIMIT_1"] != "30" || env["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID" {
		t.Fatalf("env = %v", env)
	}
	for _, k := range []string{"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_SM_LIMIT_0"} {
		if v, ok := env[k]; ok {
			t.Fatalf("env sets %s=%q (gpu-1 has no compute limit): %v", k, v, env)
		}
	}
	if len(res.Devices) != 2 || res.Devices[0].DeviceName != "gpu-3" || res.Devices[1].DeviceName != "gpu-1" ||
		!slices.Equal(res.Devices[0].CDIDeviceIDs, []string{"gpu.hami-go.io/claim=uid-two", "nvidia.com/gpu=" + g[3].GPU.UUID}) ||
		!slices.Equal(res.Devices[1].CDIDeviceIDs, []string{"nvidia.com/gpu=" + g[1].GPU.UUID}) || !slices.Equal(res.Devices[0].Requests, []string{"gpu"}) ||
		!slices.Equal(res.Devices[1].Requests, []string{"gpu"}) {
		t.Fatalf("devices = %+v", res.Devices)
	}
}

// Prepare and Unprepare are idempotent; a restarted driver (same directories) answers a
// repeated Prepare the same and unprepares by UID alone.
func TestPrepareUnprepareIdempotentAndRestart(t *testing.T) {
	cfg := testConfig(t.TempDir())
	d, _ := newTestDriver(t, cfg, "dgxh100")
	c := testClaim("a", 4000, 25, result{device: "gpu-0", memMiB: 4000, cores: 25})
	first := prepare(t, d, c)[c.UID]
	again := prepare(t, d, c)[c.UID]
	if first.Err != nil || again.Err != nil || !slices.Equal(first.Devices[0].CDIDeviceIDs, again.Devices[0].CDIDeviceIDs) || len(d.Prepared()) != 1 {
		t.Fatalf("first %+v again %+v prepared %d", first, again, len(d.Prepared()))
	}
	// restart: a new driver reads the checkpoint
	d2, _ := newTestDriver(t, cfg, "dgxh100")
	if p := d2.Prepared(); len(p) != 1 || p[0].UID != c.UID || p[0].Grants[0].MemoryMiB != 4000 || p[0].Pod != "pod-a" {
		t.Fatalf("restarted driver's prepared claims = %+v", p)
	}
	if r := prepare(t, d2, c)[c.UID]; r.Err != nil || !slices.Equal(r.Devices[0].CDIDeviceIDs, first.Devices[0].CDIDeviceIDs) {
		t.Fatalf("repeat after restart = %+v", r)
	}
	obj := kubeletplugin.NamespacedObject{UID: c.UID}
	obj.Namespace, obj.Name = c.Namespace, c.Name
	for i := 0; i < 2; i++ {
		errs, err := d2.UnprepareResourceClaims(bg, []kubeletplugin.NamespacedObject{obj})
		if err != nil || len(errs) != 1 || errs[c.UID] != nil {
			t.Fatalf("unprepare %d: %v %v", i, errs, err)
		}
	}
	if _, err := os.Stat(filepath.Join(cfg.CDIDir, ClaimSpecName(c.UID))); !os.IsNotExist(err) {
		t.Fatalf("CDI spec still there after unprepare: %v", err)
	}
	d3, _ := newTestDriver(t, cfg, "dgxh100")
	if p := d3.Prepared(); len(p) != 0 {
		t.Fatalf("checkpoint still holds %+v after unprepare", p)
	}
	// a prepared claim whose spec file vanished gets it rewritten on a repeated Prepare
	prepare(t, d3, c)
	os.Remove(filepath.Join(cfg.CDIDir, ClaimSpecName(c.UID)))
	prepare(t, d3, c)
	readSpec(t, d3, c.UID)
}

// Bad claims are refused with an error naming the claim and the problem; nothing is prepared.
func TestPrepareBadClaims(t *testing.T) {
	for _, tc := range []struct {
		name  string
		claim func() *resourceapi.ResourceClaim
		want  string
	}{
		{"not on node", func() *resourceapi.ResourceClaim { return testClaim("x", 0, 0, result{device: "gpu-9", memMiB: 1000}) }, `device "gpu-9" is not on node node-1`},
		{"other pool", func() *resourceapi.ResourceClaim {
			c := testClaim("x", 0, 0, result{device: "gpu-0", memMiB: 1000})
			c.Status.Allocation.Devices.Results[0].Pool = "node-2"
			return c
		}, `pool "node-2" is not this node's pool "node-1"`},
		{"above request", func() *resourceapi.ResourceClaim {
			return testClaim("x", 1000, 0, result{device: "gpu-0", memMiB: 2000})
		}, "consumed memory 2000Mi is above the 1000Mi the request allowed"},
		{"cores above request", func() *resourceapi.ResourceClaim {
			return testClaim("x", 1000, 10, result{device: "gpu-0", memMiB: 1000, cores: 50})
		}, "consumed cores 50 is above the 10 the request allowed"},
		{"cores above default", func() *resourceapi.ResourceClaim {
			return testClaim("x", 1000, 0, result{device: "gpu-0", memMiB: 1000, cores: 5})
		}, "consumed cores 5 is above the 0 the request allowed"},
		{"above device", func() *resourceapi.ResourceClaim { return testClaim("x", 0, 0, result{device: "gpu-0", memMiB: 90000}) }, "consumed memory 90000Mi is outside 0..80Gi"},
		{"sharers above split", func() *resourceapi.ResourceClaim {
			return testClaim("x", 0, 0, result{device: "gpu-0", memMiB: 1000, sharers: 11})
		}, "consumed sharers 11 is outside 0..10"},
		{"no consumed capacity", func() *resourceapi.ResourceClaim {
			return testClaim("x", 0, 0, result{device: "gpu-0", noCapacity: true})
		}, "no consumed capacity"},
		{"not allocated", func() *resourceapi.ResourceClaim {
			c := testClaim("x", 0, 0)
			c.Status.Allocation = nil
			return c
		}, "claim default/x is not allocated"},
		{"no device of driver", func() *resourceapi.ResourceClaim { return testClaim("x", 0, 0) }, "has no device of driver gpu.hami-go.io"},
		{"same GPU twice", func() *resourceapi.ResourceClaim {
			return testClaim("x", 0, 0, result{device: "gpu-0", memMiB: 1000}, result{device: "gpu-0", memMiB: 1000})
		}, "allocated twice in one claim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			d, _ := newTestDriver(t, cfg, "dgxh100")
			c := tc.claim()
			r := prepare(t, d, c)[c.UID]
			if r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) || !strings.Contains(r.Err.Error(), "default/x") {
				t.Fatalf("err = %v, want one naming default/x and %q", r.Err, tc.want)
			}
			if len(d.Prepared()) != 0 {
				t.Fatal("a refused claim was prepared")
			}
			if ents, _ := os.ReadDir(cfg.CDIDir); len(ents) != 0 {
				t.Fatalf("CDI specs written for a refused claim: %v", ents)
			}
		})
	}
}

// The driver refuses a claim that would over-commit a GPU together with the claims it already
// prepared (last line of defense), and one bad claim does not fail the others of the call.
func TestPrepareRefusesOvercommit(t *testing.T) {
	cfg := testConfig(t.TempDir())
	d, _ := newTestDriver(t, cfg, "dgxh100")
	big := testClaim("big", 0, 0, result{device: "gpu-0", memMiB: 81920})
	more := testClaim("more", 1000, 0, result{device: "gpu-0", memMiB: 1000})
	ok := testClaim("ok", 1000, 0, result{device: "gpu-1", memMiB: 1000})
	res := prepare(t, d, big, more, ok)
	if res[big.UID].Err != nil || res[ok.UID].Err != nil {
		t.Fatalf("big %v ok %v", res[big.UID].Err, res[ok.UID].Err)
	}
	if e := res[more.UID].Err; e == nil || !strings.Contains(e.Error(), "would hold 82920 MiB of prepared claims, above its 81920 MiB") {
		t.Fatalf("over-commit err = %v", e)
	}
}

// case C41 in DRA mode: --reserved-memory has the device plugin's syntax and rule
// (device.MemoryReserve): 2048 MiB on every GPU, 4Gi on the GPU named by UUID, none on index 3;
// the reserve comes before the scaling factor and is honoured in the slices and in Prepare's
// capacity check; a reserve naming a GPU the node lacks is refused at start.
func TestReservedMemoryPerGPU(t *testing.T) {
	b, _ := fakeBackend(t, "dgxh100")
	found, err := b.Discover()
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t.TempDir())
	cfg.ReservedMemory, err = device.ParseMemoryReserve("--reserved-memory", "2048,"+found[1].UUID+"=4Gi,3=0")
	if err != nil {
		t.Fatal(err)
	}
	d, _ := newTestDriver(t, cfg, "dgxh100")
	want := map[string]int64{"gpu-0": 79872, "gpu-1": 77824, "gpu-2": 79872, "gpu-3": 81920}
	for _, dev := range d.Resources().Pools[testNode].Slices[0].Devices {
		w, ok := want[dev.Name]
		if !ok {
			continue
		}
		m := dev.Capacity[draapi.CapacityMemory]
		if m.Value.Value() != w*MiB || m.RequestPolicy.Default.Value() != w*MiB || m.RequestPolicy.ValidRange.Max.Value() != w*MiB {
			t.Errorf("%s memory = %s (default %s), want %d MiB", dev.Name, m.Value.String(), m.RequestPolicy.Default.String(), w)
		}
		if errs := validateDevice(dev); len(errs) > 0 {
			t.Errorf("%s: %s", dev.Name, strings.Join(errs, "; "))
		}
	}
	// The node's hami-go.io/gpu-memory figure: the published devices' memory, summed (issue 25).
	if got, want := d.GPUMemoryMiB(), int64(79872+77824+79872+81920+4*79872); got != want {
		t.Errorf("GPUMemoryMiB = %d, want %d", got, want)
	}
	// Both synthetic resources, published and withdrawn (issue 37 item 4): 8 GPUs, 100% each.
	nr := d.NodeResources()
	if nr[device.ResourceGPUMemory] != d.GPUMemoryMiB() || nr[device.ResourceGPUCores] != 800 || len(nr) != 2 {
		t.Errorf("NodeResources = %s, want %s=%d %s=800", nr, device.ResourceGPUMemory, d.GPUMemoryMiB(), device.ResourceGPUCores)
	}
	if names := fmt.Sprint(d.NodeResourceNames()); names != "[hami-go.io/gpu-cores hami-go.io/gpu-memory]" {
		t.Errorf("NodeResourceNames = %s", names)
	}
	// Issue 37 item 7 in DRA mode: the published figures never drop below what the node's pods
	// hold (a GPU gone under them), and the shortfall is reported.
	d.SetHeld(func(names ...corev1.ResourceName) nodeagent.NodeResources {
		return nodeagent.NodeResources{device.ResourceGPUMemory: nr[device.ResourceGPUMemory] + 1000, device.ResourceGPUCores: 300}
	})
	pub := d.PublishedResources()
	if pub[device.ResourceGPUMemory] != nr[device.ResourceGPUMemory]+1000 || pub[device.ResourceGPUCores] != 800 {
		t.Errorf("PublishedResources = %s, want the memory held (+1000 MiB) and the cores offered (800)", pub)
	}
	if over := d.Overcommitted(); over[device.ResourceGPUMemory] != 1000 || over[device.ResourceGPUCores] != 0 {
		t.Errorf("Overcommitted = %s, want %s=1000 %s=0", over, device.ResourceGPUMemory, device.ResourceGPUCores)
	}
	// gpu-0 offers 79872 MiB: a claim of all of it prepares, 1 MiB more on top does not.
	all := testClaim("all", 0, 0, result{device: "gpu-0", memMiB: 79872})
	more := testClaim("more", 1, 0, result{device: "gpu-0", memMiB: 1})
	whole3 := testClaim("whole3", 0, 0, result{device: "gpu-3", memMiB: 81920})
	res := prepare(t, d, all, more, whole3)
	if res[all.UID].Err != nil || res[whole3.UID].Err != nil {
		t.Fatalf("all: %v, whole3: %v", res[all.UID].Err, res[whole3.UID].Err)
	}
	if e := res[more.UID].Err; e == nil || !strings.Contains(e.Error(), "would hold 79873 MiB of prepared claims, above its 79872 MiB") {
		t.Fatalf("over-reserve err = %v", e)
	}

	// Scaling applies after the reserve: (81920 − 2048) × 1.5 = 119808 MiB.
	cfg2 := testConfig(t.TempDir())
	cfg2.MemoryScaling = 1.5
	cfg2.ReservedMemory = device.MemoryReserve{AllMiB: 2048}
	d2, _ := newTestDriver(t, cfg2, "dgxh100")
	if m := d2.Resources().Pools[testNode].Slices[0].Devices[0].Capacity[draapi.CapacityMemory]; m.Value.Value() != 119808*MiB {
		t.Fatalf("scaled memory = %s, want 119808 MiB", m.Value.String())
	}

	cfg3 := testConfig(t.TempDir())
	cfg3.ReservedMemory = device.MemoryReserve{ByIndex: map[int]int64{9: 1024}}
	if _, err := New(cfg3, b, Options{}); err == nil || !strings.Contains(err.Error(), "--reserved-memory: no GPU on this node has index 9") {
		t.Fatalf("unknown index: err = %v", err)
	}
}

// prepareAsync prepares claims on a goroutine; the result arrives on the channel.
func prepareAsync(d *Driver, claims ...*resourceapi.ResourceClaim) <-chan map[types.UID]kubeletplugin.PrepareResult {
	ch := make(chan map[types.UID]kubeletplugin.PrepareResult, 1)
	go func() {
		res, _ := d.PrepareResourceClaims(bg, claims)
		ch <- res
	}()
	return ch
}

// waitForWaiter waits until the prepare under test sleeps on the fake clock (its wait timer).
func waitForWaiter(t *testing.T, clk interface{ HasWaiters() bool }) {
	t.Helper()
	for i := 0; !clk.HasWaiters(); i++ {
		if i > 2000 {
			t.Fatal("the prepare never waited for room")
		}
		time.Sleep(time.Millisecond)
	}
}

// A force-deleted pod frees its claim's capacity in the API before the kubelet has unprepared
// it; the next claim the scheduler puts there waits in Prepare (--prepare-wait) for that
// Unprepare instead of being refused into the kubelet's minute-long retry. An Unprepare that
// frees nothing on the GPU does not let it through; the one that frees room does.
func TestPrepareWaitsForUnprepare(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.PrepareWait = 30 * time.Second
	d, clk := newTestDriver(t, cfg, "dgxh100")
	old := testClaim("old", 0, 0, result{device: "gpu-0", memMiB: 81920})
	other := testClaim("other", 1000, 0, result{device: "gpu-1", memMiB: 1000})
	if res := prepare(t, d, old, other); res[old.UID].Err != nil || res[other.UID].Err != nil {
		t.Fatalf("old %v other %v", res[old.UID].Err, res[other.UID].Err)
	}
	next := testClaim("next", 1000, 0, result{device: "gpu-0", memMiB: 1000})
	got := prepareAsync(d, next)
	waitForWaiter(t, clk)
	unprepare(t, d, other)
	waitForWaiter(t, clk) // woken, still no room on gpu-0: waits again
	time.Sleep(50 * time.Millisecond)
	select {
	case res := <-got:
		t.Fatalf("prepare returned before the blocking claim was unprepared: %v", res[next.UID].Err)
	default:
	}
	unprepare(t, d, old)
	res := <-got
	if res[next.UID].Err != nil {
		t.Fatalf("next: %v", res[next.UID].Err)
	}
	readSpec(t, d, next.UID)
	if ps := d.Prepared(); len(ps) != 1 || ps[0].UID != next.UID {
		t.Errorf("prepared %+v, want only next", ps)
	}
}

// Without an Unprepare within --prepare-wait the claim is refused with the capacity error;
// --prepare-wait=0 refuses at once (no waiting).
func TestPrepareWaitGivesUp(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.PrepareWait = 30 * time.Second
	d, clk := newTestDriver(t, cfg, "dgxh100")
	old := testClaim("old", 0, 0, result{device: "gpu-0", memMiB: 81920})
	prepare(t, d, old)
	next := testClaim("next", 1000, 0, result{device: "gpu-0", memMiB: 1000})
	got := prepareAsync(d, next)
	waitForWaiter(t, clk)
	clk.Step(30 * time.Second)
	res := <-got
	e := res[next.UID].Err
	if e == nil || !strings.Contains(e.Error(), "would hold 82920 MiB of prepared claims, above its 81920 MiB") ||
		!strings.Contains(e.Error(), "no Unprepare freed room within --prepare-wait 30s") {
		t.Fatalf("err = %v", e)
	}
	if _, err := os.Stat(filepath.Join(cfg.CDIDir, ClaimSpecName(next.UID))); !os.IsNotExist(err) {
		t.Errorf("CDI spec of the refused claim: %v", err)
	}

	cfg0 := testConfig(t.TempDir())
	d0, _ := newTestDriver(t, cfg0, "dgxh100")
	prepare(t, d0, old)
	if e := prepare(t, d0, next)[next.UID].Err; e == nil || strings.Contains(e.Error(), "prepare-wait") {
		t.Fatalf("--prepare-wait=0: err = %v, want the plain refusal", e)
	}
}

// unprepare unprepares claims by name and UID, failing the test on any error.
func unprepare(t *testing.T, d *Driver, claims ...*resourceapi.ResourceClaim) {
	t.Helper()
	objs := make([]kubeletplugin.NamespacedObject, len(claims))
	for i, c := range claims {
		objs[i] = kubeletplugin.NamespacedObject{UID: c.UID, NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}}
	}
	errs, err := d.UnprepareResourceClaims(bg, objs)
	if err != nil {
		t.Fatal(err)
	}
	for uid, e := range errs {
		if e != nil {
			t.Fatalf("unprepare %s: %v", uid, e)
		}
	}
}

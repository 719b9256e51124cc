package deviceplugin

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/ledger"
	"reflect"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func uuids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("GPU-%c", 'A'+i)
	}
	return out
}

// case C18: 8 GPUs x 10 slices, a pod asks gpu: 8, and the kubelet offers 4 slices of GPU-A and
// one of four others: the container still gets the visible devices and limits of the 8 planned
// GPUs, never duplicates (the kubelet's IDs name no GPU of the pod's).
func TestAllocateC18(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(8, 81559))
	planned := uuids(8)
	pod := testPod("big", t0, testNode, ctr{name: "main", mem: 40000, gpus: planned})
	p.Ledger().UpsertPod(pod)
	if o, _ := p.GetDevicePluginOptions(context.Background(), nil); o.GetPreferredAllocationAvailable || !o.PreStartRequired {
		t.Fatalf("device plugin options %+v; want PreStartContainer (which gates creation on the NRI plugin), not GetPreferredAllocation", o)
	}

	ids := []string{"GPU-A::0", "GPU-A::1", "GPU-A::2", "GPU-A::3", "GPU-B::0", "GPU-C::0", "GPU-D::0", "GPU-E::0"}
	r := mustCreate(t, p, pod, "main", ids...)
	want := strings.Join(planned, ",") // GPU-A..GPU-H: also their PCI order
	if r.Envs[gpuenv.EnvNVIDIAVisibleDevices] != want || r.Envs[device.EnvGPUUUIDs] != want {
		t.Fatalf("visible = %q / %q, want %q", r.Envs[gpuenv.EnvNVIDIAVisibleDevices], r.Envs[device.EnvGPUUUIDs], want)
	}
	if v, ok := r.Envs[gpuenv.EnvCUDAVisibleDevices]; ok {
		t.Fatalf("%s=%q is set; the container sees only its own GPUs", gpuenv.EnvCUDAVisibleDevices, v)
	}
	for i := 0; i < 8; i++ {
		if v := r.Envs[fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_%d", i)]; v != "40000m" {
			t.Fatalf("limit %d = %q", i, v)
		}
	}
	if _, ok := r.Envs["CUDA_DEVICE_MEMORY_LIMIT_8"]; ok {
		t.Fatal("a 9th limit exists")
	}
	if r.Envs[device.EnvGPUMemoryMiB] != "320000" {
		t.Fatalf("%s = %q, want 320000", device.EnvGPUMemoryMiB, r.Envs[device.EnvGPUMemoryMiB])
	}
}

// positional returns (uuid, limit) pairs read back from a response the way HAMi-core and CUDA
// do: CUDA ordinal i (CUDA_DEVICE_ORDER=PCI_BUS_ID) is the container's i-th GPU in PCI bus order,
// which HAMI_GO_GPU_UUIDS lists, and CUDA_DEVICE_MEMORY_LIMIT_<i> is its limit. It fails t
// unless the list is in the PCI order of b's GPUs, NVIDIA_VISIBLE_DEVICES (envvar) is the same
// list, and CUDA_VISIBLE_DEVICES is not set.
func positional(t *testing.T, b *testBackend, r *pluginapi.ContainerAllocateResponse) map[string]string {
	t.Helper()
	list := r.Envs[device.EnvGPUUUIDs]
	vis := strings.Split(list, ",")
	bus := map[string]string{}
	for _, g := range b.gpus {
		bus[g.UUID] = g.PCIBusID
	}
	out := map[string]string{}
	for i, u := range vis {
		if _, dup := out[u]; dup {
			t.Fatalf("GPU %s appears twice in %q", u, list)
		}
		if i > 0 && bus[vis[i-1]] >= bus[u] { // the test backends' ids compare as strings
			t.Fatalf("%s = %q is not in PCI bus order (%s at %s before %s at %s)", device.EnvGPUUUIDs, list, vis[i-1], bus[vis[i-1]], u, bus[u])
		}
		out[u] = r.Envs[fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_%d", i)]
	}
	if _, extra := r.Envs[fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_%d", len(vis))]; extra {
		t.Fatalf("a limit past the %d GPUs of %q: %v", len(vis), list, r.Envs)
	}
	if r.Envs[gpuenv.EnvNVIDIAVisibleDevices] != list {
		t.Fatalf("device lists differ: %s=%q, %s=%q", gpuenv.EnvNVIDIAVisibleDevices, r.Envs[gpuenv.EnvNVIDIAVisibleDevices], device.EnvGPUUUIDs, list)
	}
	if v, ok := r.Envs[gpuenv.EnvCUDAVisibleDevices]; ok {
		t.Fatalf("%s=%q is set; the container sees only its own GPUs (HAMi-core parses it with atoi)", gpuenv.EnvCUDAVisibleDevices, v)
	}
	if r.Envs[gpuenv.EnvCUDADeviceOrder] != gpuenv.CUDADeviceOrderPCI {
		t.Fatalf("%s = %q, want %s", gpuenv.EnvCUDADeviceOrder, r.Envs[gpuenv.EnvCUDADeviceOrder], gpuenv.CUDADeviceOrderPCI)
	}
	return out
}

// One pod, its GPU containers in the order the kubelet admits and the runtime creates them, and
// the env each gets: limits follow the planned GPUs, never the kubelet's IDs.
func TestAllocateEnvs(t *testing.T) {
	type call struct {
		ctr string   // the container created
		ids []string // the kubelet's device IDs for it
		// env are variables the response must carry; pairs, when set, are the GPU → memory
		// limit pairs of the response, by position (each GPU once).
		env   map[string]string
		pairs map[string]string
		// absent are variables the response must not carry.
		absent []string
	}
	for _, tc := range []struct {
		name  string
		gpus  int
		memOf map[int]int64 // GPU index → MiB (default 81559)
		split int           // 0: the default split count
		pod   []ctr
		calls []call
	}{{
		// case C19: limits follow the physical GPU whatever order the kubelet lists the slices in.
		name: "C19 limits follow the physical GPU", gpus: 2, memOf: map[int]int64{0: 20000, 1: 60000}, // 50% is 10000 MiB on GPU-A, 30000 on GPU-B
		pod:   []ctr{{name: "main", gpus: []string{"GPU-A", "GPU-B"}, pct: 50, memOn: map[string]int64{"GPU-A": 10000, "GPU-B": 30000}}},
		calls: []call{{ctr: "main", ids: []string{"GPU-B::3", "GPU-A::0"}, pairs: map[string]string{"GPU-A": "10000m", "GPU-B": "30000m"}}},
	}, {
		// case C21: one Allocate per container: C1 (1 slice) then C2 (2 slices) of one pod both
		// get their own limits.
		name: "C21 one call per container", gpus: 3,
		pod: []ctr{{name: "c1", mem: 1000, gpus: []string{"GPU-A"}}, {name: "c2", mem: 2000, cores: 30, gpus: []string{"GPU-B", "GPU-C"}}},
		calls: []call{
			{ctr: "c1", ids: []string{"GPU-C::0"}, env: map[string]string{device.EnvGPUUUIDs: "GPU-A", "CUDA_DEVICE_MEMORY_LIMIT_0": "1000m"}},
			{ctr: "c2", ids: []string{"GPU-A::4", "GPU-B::2"}, env: map[string]string{device.EnvGPUUUIDs: "GPU-B,GPU-C", "CUDA_DEVICE_MEMORY_LIMIT_1": "2000m",
				gpuenv.EnvHAMiSMLimit + "_0": "30", gpuenv.EnvHAMiSMLimit + "_1": "30"}, absent: []string{gpuenv.EnvHAMiSMLimit, gpuenv.EnvCUDAVisibleDevices}},
		},
	}, {
		// case C21: a pod with one GPU and one non-GPU container works.
		name: "C21 one GPU container beside one without", gpus: 1,
		pod:   []ctr{{name: "sidecar"}, {name: "gpu", mem: 5000, gpus: []string{"GPU-A"}}},
		calls: []call{{ctr: "gpu", ids: []string{"GPU-A::7"}, env: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "5000m"}}},
	}, {
		// case C22: the kubelet's IDs name several slices of one GPU: each physical GPU once,
		// from the recorded allocation (split count 100 makes long lists), in PCI bus order
		// whatever the plan's order.
		name: "C22 several slices of one GPU", gpus: 4, split: 100,
		pod: []ctr{{name: "c", mem: 7000, gpus: []string{"GPU-C", "GPU-D", "GPU-A"}}},
		calls: []call{{ctr: "c", ids: []string{"GPU-B::97", "GPU-B::98", "GPU-B::99"}, env: map[string]string{device.EnvGPUUUIDs: "GPU-A,GPU-C,GPU-D"},
			pairs: map[string]string{"GPU-C": "7000m", "GPU-D": "7000m", "GPU-A": "7000m"}}},
	}, {
		// Init containers: the kubelet calls Allocate for init containers first and may reuse an
		// init container's devices for the next container; both get their own limits.
		name: "init container's devices reused", gpus: 2,
		pod: []ctr{{name: "init", kind: device.KindInit, mem: 9000, gpus: []string{"GPU-A"}}, {name: "app", mem: 4000, gpus: []string{"GPU-A"}}},
		calls: []call{
			{ctr: "init", ids: []string{"GPU-B::1"}, env: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "9000m"}},
			{ctr: "app", ids: []string{"GPU-B::1"}, env: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "4000m"}}, // reused
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			if tc.split > 0 {
				cfg.SplitCount = tc.split
			}
			b := newTestBackend(tc.gpus, 81559)
			for i, m := range tc.memOf {
				b.gpus[i].MemoryMiB = m
			}
			p, _ := newTestPlugin(t, cfg, b)
			pod := testPod("p", t0, testNode, tc.pod...)
			p.Ledger().UpsertPod(pod)
			for i, c := range tc.calls {
				r := mustCreate(t, p, pod, c.ctr, c.ids...)
				for k, v := range c.env {
					if r.Envs[k] != v {
						t.Fatalf("call %d (%v): %s = %q, want %q (env %v)", i, c.ids, k, r.Envs[k], v, r.Envs)
					}
				}
				for _, k := range c.absent {
					if v, ok := r.Envs[k]; ok {
						t.Fatalf("call %d (%v): %s=%q is set (env %v)", i, c.ids, k, v, r.Envs)
					}
				}
				if c.pairs != nil {
					if got := positional(t, b, r); !reflect.DeepEqual(got, c.pairs) {
						t.Fatalf("call %d (%v): pairs = %v, want %v", i, c.ids, got, c.pairs)
					}
				}
			}
		})
	}
}

// case C19 property: for random GPU sets, per-GPU limits, PCI bus ids and kubelet orders
// (including several slices of one GPU, case C22), every (uuid, limit) pair survives, each GPU
// appears once, and the list is in PCI bus order.
func TestAllocateC19Property(t *testing.T) {
	rng := rand.New(rand.NewSource(19))
	for iter := 0; iter < 300; iter++ {
		n := 1 + rng.Intn(8)
		b := newTestBackend(8, 81559)
		mem := map[string]int64{}
		bus := rng.Perm(len(b.gpus)) // PCI order unrelated to the UUIDs' or the plan's
		for i := range b.gpus {      // GPUs of random sizes; the pod asks 100% of each
			b.gpus[i].MemoryMiB = 1 + rng.Int63n(81559)
			b.gpus[i].PCIBusID = fmt.Sprintf("00000000:%02X:00.0", 0x18+0x10*bus[i])
			mem[b.gpus[i].UUID] = b.gpus[i].MemoryMiB
		}
		p, _ := newTestPlugin(t, testConfig(t.TempDir()), b)
		all := uuids(8)
		rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		chosen := all[:n]
		for _, u := range all[n:] {
			delete(mem, u)
		}
		pod := testPod("p", t0, testNode, ctr{name: "c", gpus: chosen, pct: 100, memOn: mem})
		p.Ledger().UpsertPod(pod)
		// The kubelet's IDs: any n slices, in any order, possibly several of one GPU.
		ids := map[string]bool{}
		for len(ids) < n {
			ids[device.SliceID(all[rng.Intn(8)], rng.Intn(10))] = true
		}
		var list []string
		for id := range ids {
			list = append(list, id)
		}
		rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
		got := positional(t, b, mustCreate(t, p, pod, "c", list...))
		if len(got) != n {
			t.Fatalf("iter %d: %d GPUs visible, want %d", iter, len(got), n)
		}
		for u, m := range mem {
			if got[u] != fmt.Sprintf("%dm", m) {
				t.Fatalf("iter %d: kubelet order %v: %s limit %q, want %dm", iter, list, u, got[u], m)
			}
		}
	}
}

// case C20 at the plugin alone: two pods with the same device request (1 slice) but different memory
// in flight together, whichever slice the kubelet picks and whichever container the runtime
// creates first: each gets its own limit, never the other's (the runtime names the pod at
// container creation, so there is nothing to confuse).
func TestAllocateC20(t *testing.T) {
	for _, first := range []string{"big", "small"} {
		t.Run(first+"-first", func(t *testing.T) {
			p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(1, 81559))
			pods := map[string]*corev1.Pod{
				"big":   testPod("big", t0, testNode, ctr{name: "c", mem: 24576, gpus: []string{"GPU-A"}}),
				"small": testPod("small", t0.Add(time.Second), testNode, ctr{name: "c", mem: 600, gpus: []string{"GPU-A"}}),
			}
			p.Ledger().UpsertPod(pods["big"])
			p.Ledger().UpsertPod(pods["small"])
			order := []string{"big", "small"}
			if first == "small" {
				order = []string{"small", "big"}
			}
			want := map[string]string{"big": "24576m", "small": "600m"}
			for i, n := range order {
				if r := mustCreate(t, p, pods[n], "c", fmt.Sprintf("GPU-A::%d", i)); r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != want[n] {
					t.Errorf("%s got limit %q, want %s", n, r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"], want[n])
				}
			}
		})
	}
}

// A container the runtime creates again (it exited) gets the same env, from the same claim.
func TestAllocateRepeat(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
	pod := testPod("p", t0, testNode, ctr{name: "c", mem: 3000, gpus: []string{"GPU-B"}})
	p.Ledger().UpsertPod(pod)
	r1 := mustCreate(t, p, pod, "c", "GPU-A::2")
	r2 := mustCreate(t, p, pod, "c", "GPU-A::2")
	if fmt.Sprint(r1.Envs) != fmt.Sprint(r2.Envs) || r1.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "3000m" || r1.Envs[device.EnvGPUUUIDs] != "GPU-B" {
		t.Fatalf("first %v, repeat %v; want both 3000m of GPU-B", r1.Envs, r2.Envs)
	}
}

// Restart: a new plugin rebuilds claims from AnnoClaimed; containers created again get the same
// env, and a pod whose record was never written claims its own plan again: the same env too.
func TestAllocateRestart(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
	a := testPod("a", t0, testNode, ctr{name: "c", mem: 1111, gpus: []string{"GPU-A"}})
	b := testPod("b", t0, testNode, ctr{name: "c", mem: 2222, gpus: []string{"GPU-B"}, cores: 20}, ctr{name: "d", mem: 3333, gpus: []string{"GPU-A"}})
	p.Ledger().UpsertPod(a)
	ra := mustCreate(t, p, a, "c", "GPU-B::0")
	rec, _ := p.Ledger().ClaimedRecord(a.UID)
	s, err := device.EncodeAllocation(rec)
	if err != nil {
		t.Fatal(err)
	}
	a.Annotations[device.AnnoClaimed] = s // the writer's work
	p.Ledger().UpsertPod(b)
	mustCreate(t, p, b, "c", "GPU-A::0")
	rb := mustCreate(t, p, b, "d", "GPU-A::1")
	// b's record was never written.

	p2, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
	p2.Ledger().UpsertPod(a)
	p2.Ledger().UpsertPod(b)
	if _, claimed, _ := p2.Ledger().ContainerClaim(a.UID, "c"); !claimed {
		t.Fatal("a's claim was not restored from its record")
	}
	if r := mustCreate(t, p2, a, "c", "GPU-B::0"); fmt.Sprint(r.Envs) != fmt.Sprint(ra.Envs) {
		t.Fatalf("a after restart %v, before %v", r.Envs, ra.Envs)
	}
	if r := mustCreate(t, p2, b, "d", "GPU-A::1"); fmt.Sprint(r.Envs) != fmt.Sprint(rb.Envs) {
		t.Fatalf("b/d after restart %v, before %v", r.Envs, rb.Envs)
	}
	if u := p2.Ledger().Charged(); u["GPU-A"].Sharers != 2 || u["GPU-A"].MemoryMiB != 1111+3333 {
		t.Fatalf("GPU-A charged %+v after restart; want a/c and b/d once each (2 sharers, 4444 MiB)", u["GPU-A"])
	}
}

// Bad input: unknown or malformed IDs (Allocate) and malformed annotations (at container
// creation) give clear errors.
func TestAllocateBadInput(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.SplitCount = 4
	p, _ := newTestPlugin(t, cfg, newTestBackend(1, 81559))
	tests := []struct {
		name    string // the kubelet's device IDs, comma-separated
		wantErr string
	}{
		{name: "GPU-Z::0", wantErr: `names GPU "GPU-Z", which is not on node node-1`},
		{name: "GPU-A", wantErr: `device id "GPU-A" is not <GPU-UUID>::<n>`},
		{name: "GPU-A::x", wantErr: `is not <GPU-UUID>::<n>`},
		{name: "GPU-A::4", wantErr: "slice 4 is not below the split count 4"},
		{name: "GPU-A::1,GPU-A::1", wantErr: `"GPU-A::1" appears twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := alloc(t, p, strings.Split(tc.name, ",")...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Allocate(%s) = %v, want %q", tc.name, err, tc.wantErr)
			}
		})
	}
	bad := testPod("bad", t0, testNode, ctr{name: "c", mem: 100, gpus: []string{"GPU-A"}})
	bad.Annotations[device.AnnoPlanned] = `{"version":"v9"}`
	p.Ledger().UpsertPod(bad)
	nosched := testPod("nosched", t0, testNode, ctr{name: "c", mem: 100, gpus: []string{"GPU-A"}})
	delete(nosched.Annotations, device.AnnoPlanned)
	p.Ledger().UpsertPod(nosched)
	for pod, want := range map[*corev1.Pod]string{
		bad:     `default/bad: annotation hami-go.io/allocation-planned is malformed: allocation.version: "v9" is not supported`,
		nosched: "default/nosched has no hami-go.io/allocation-planned annotation (not scheduled by hami-go-scheduler)",
	} {
		if _, err := create(t, p, pod, "c", "GPU-A::0"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("creating %s's container: %v, want %q", pod.Name, err, want)
		}
	}
	// A malformed claimed record is ignored (planned used), not a crash.
	ok := testPod("ok", t0, testNode, ctr{name: "c", mem: 100, gpus: []string{"GPU-A"}})
	ok.Annotations[device.AnnoClaimed] = "{"
	p.Ledger().UpsertPod(ok)
	if r := mustCreate(t, p, ok, "c", "GPU-A::0"); r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "100m" {
		t.Fatalf("ok = %v", r.Envs)
	}
}

// A container created before the informer delivered its pod is refused (its env carries the
// pending answer, and the ledger knows no plan for it: the kubelet retries); once the pod is
// delivered, the retry gets its plan.
func TestCreateBeforeInformer(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(1, 81559))
	late := testPod("late", t0, testNode, ctr{name: "c", mem: 777, gpus: []string{"GPU-A"}})
	if _, err := create(t, p, late, "c", "GPU-A::0"); err == nil || !strings.Contains(err.Error(), "carries HAMI_GO_GPU_UUIDS but hami-go has no GPU allocation for it (the kubelet retries") {
		t.Fatalf("creating before the pod is known: %v; want refused, the kubelet retrying", err)
	}
	p.Ledger().UpsertPod(late)
	if r := mustCreate(t, p, late, "c", "GPU-A::0"); r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "777m" {
		t.Fatalf("the retry got %v; want 777m", r.Envs)
	}
}

// Ended pods get no plan; their claims are forgotten. Nor do pods bound to another node.
func TestEndedPodsIgnored(t *testing.T) {
	type podOn struct {
		name  string
		phase corev1.PodPhase // "" = the test pod's Pending
		node  string
	}
	done := podOn{name: "done", phase: corev1.PodFailed, node: testNode}
	other := podOn{name: "other", node: "node-2"}
	tests := []struct {
		name string
		pods []podOn // each with a container planned 100 MiB on GPU-A
	}{
		{name: "ended and foreign pod", pods: []podOn{done, other}},
		{name: "ended pod", pods: []podOn{done}},
		{name: "foreign pod", pods: []podOn{other}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(1, 81559))
			for _, x := range tc.pods {
				pod := testPod(x.name, t0, x.node, ctr{name: "c", mem: 100, gpus: []string{"GPU-A"}})
				if x.phase != "" {
					pod.Status.Phase = x.phase
				}
				p.Ledger().UpsertPod(pod)
				if _, err := create(t, p, pod, "c", "GPU-A::0"); err == nil {
					t.Fatalf("%s pod served", x.name)
				}
			}
		})
	}
}

// What the two containers of a pod get (the NRI plugin's env, the Allocate answer's mounts), logged so
// it can be quoted.
func TestAllocateResponseTwoContainers(t *testing.T) {
	tests := []struct {
		name string // Config.Enforcement
		// check checks the responses to the pod's two containers.
		check func(t *testing.T, r1, r2 *pluginapi.ContainerAllocateResponse)
	}{{
		name: gpuenv.EnforceHAMiCore,
		check: func(t *testing.T, r1, r2 *pluginapi.ContainerAllocateResponse) {
			// The plan lists GPU-B first; the container's ordinals follow PCI order (GPU-A first).
			if r1.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "10000m" || r1.Envs["CUDA_DEVICE_MEMORY_LIMIT_1"] != "20000m" || r1.Envs[device.EnvGPUUUIDs] != "GPU-A,GPU-B" ||
				r1.Envs[gpuenv.EnvHAMiSMLimit+"_0"] != "30" || r1.Envs[gpuenv.EnvHAMiSMLimit+"_1"] != "30" || r1.Envs[gpuenv.EnvCUDADeviceOrder] != gpuenv.CUDADeviceOrderPCI ||
				r1.Envs[device.EnvGPUMemoryMiB] != "30000" || r1.Envs[device.EnvGPUModel] != "H100" || r1.Envs[gpuenv.EnvHAMiLogLevel] != gpuenv.HAMiLogLevel {
				t.Fatalf("hami-core container 1: %v", r1.Envs)
			}
			for _, k := range []string{gpuenv.EnvCUDAVisibleDevices, gpuenv.EnvHAMiSMLimit, gpuenv.EnvHAMiSMLimit + "_2"} {
				if v, ok := r1.Envs[k]; ok {
					t.Fatalf("hami-core container 1 sets %s=%q: %v", k, v, r1.Envs)
				}
			}
			if r2.Envs[gpuenv.EnvHAMiSMLimit+"_0"] != "10" || r2.Envs[device.EnvGPUUUIDs] != "GPU-A" {
				t.Fatalf("hami-core container 2: %v", r2.Envs)
			}
			if len(r1.Mounts) != 3 || r1.Mounts[0].ContainerPath != gpuenv.HAMiContainerLibrary || r1.Mounts[1].ContainerPath != "/etc/ld.so.preload" ||
				r1.Mounts[2].ContainerPath != gpuenv.HAMiOverrideEnv || r1.Mounts[2].HostPath != "/dev/null" || !r1.Mounts[2].ReadOnly {
				t.Fatalf("mounts %v", r1.Mounts)
			}
		},
	}, {
		name: gpuenv.EnforceMPS,
		check: func(t *testing.T, r1, r2 *pluginapi.ContainerAllocateResponse) {
			if r1.Envs[gpuenv.EnvMPSPinnedMemLimit] != "0=10000M,1=20000M" || r1.Envs[gpuenv.EnvMPSActiveThreadPct] != "30" || r2.Envs[gpuenv.EnvMPSPinnedMemLimit] != "0=4096M" || r1.Envs[gpuenv.EnvMPSPipeDirectory] != "/tmp/nvidia-mps" {
				t.Fatalf("mps: %v / %v", r1.Envs, r2.Envs)
			}
			if _, ok := r1.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"]; ok {
				t.Fatal("mps mode sets HAMi-core env")
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mode := tc.name
			cfg := testConfig(t.TempDir())
			cfg.Enforcement = mode
			b := newTestBackend(2, 40000)
			b.gpus[1].MemoryMiB = 80000 // 25% is 10000 MiB on GPU-A, 20000 on GPU-B
			p, _ := newTestPlugin(t, cfg, b)
			p.resp.exists = func(string) bool { return true }
			pod := testPod("ray-worker", t0, testNode,
				ctr{name: "ray", pct: 25, cores: 30, gpus: []string{"GPU-B", "GPU-A"}, memOn: map[string]int64{"GPU-A": 10000, "GPU-B": 20000}},
				ctr{name: "sidecar", mem: 4096, cores: 10, gpus: []string{"GPU-A"}})
			p.Ledger().UpsertPod(pod)
			r1 := mustCreate(t, p, pod, "ray", "GPU-A::0", "GPU-B::0")
			r2 := mustCreate(t, p, pod, "sidecar", "GPU-A::1")
			for i, r := range []*pluginapi.ContainerAllocateResponse{r1, r2} {
				var keys []string
				for k := range r.Envs {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				var b strings.Builder
				for _, k := range keys {
					fmt.Fprintf(&b, "  %s=%s\n", k, r.Envs[k])
				}
				for _, m := range r.Mounts {
					fmt.Fprintf(&b, "  mount %s -> %s ro=%v\n", m.HostPath, m.ContainerPath, m.ReadOnly)
				}
				t.Logf("enforcement %s, container %d:\n%s", mode, i+1, b.String())
			}
			tc.check(t, r1, r2)
		})
	}
}

func TestResponseNoneAndCDI(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Enforcement = gpuenv.EnforceNone
	cfg.DeviceListStrategy = StrategyCDI
	p, _ := newTestPlugin(t, cfg, newTestBackend(2, 81559))
	pod := testPod("p", t0, testNode, ctr{name: "c", mem: 100, gpus: []string{"GPU-B", "GPU-A"}})
	p.Ledger().UpsertPod(pod)
	r := mustCreate(t, p, pod, "c", "GPU-A::0", "GPU-B::0")
	// Each GPU by hami-go's device (its nodes) and the toolkit's (the driver's libraries; C53),
	// in PCI bus order (GPU-A first), not the plan's.
	if len(r.CdiDevices) != 4 || r.CdiDevices[0].Name != "hami-go.io/gpu=GPU-A" || r.CdiDevices[1].Name != "nvidia.com/gpu=GPU-A" ||
		r.CdiDevices[2].Name != "hami-go.io/gpu=GPU-B" || r.CdiDevices[3].Name != "nvidia.com/gpu=GPU-B" {
		t.Fatalf("cdi = %v", r.CdiDevices)
	}
	if r.Envs[device.EnvGPUUUIDs] != "GPU-A,GPU-B" || r.Envs[gpuenv.EnvCUDADeviceOrder] != gpuenv.CUDADeviceOrderPCI {
		t.Fatalf("env %v; want %s=GPU-A,GPU-B and %s=%s (the ordinals follow PCI order in every mode)", r.Envs, device.EnvGPUUUIDs, gpuenv.EnvCUDADeviceOrder, gpuenv.CUDADeviceOrderPCI)
	}
	if v := r.Envs[gpuenv.EnvNVIDIAVisibleDevices]; v != "void" {
		t.Fatalf("cdi strategy sets NVIDIA_VISIBLE_DEVICES=%q; want void (the CDI devices name the GPUs; case C52)", v)
	}
	for k := range r.Envs {
		if (strings.HasPrefix(k, "CUDA_DEVICE_") && k != gpuenv.EnvCUDADeviceOrder) || strings.HasPrefix(k, "CUDA_MPS_") || k == gpuenv.EnvCUDAVisibleDevices || k == gpuenv.EnvHAMiLogLevel {
			t.Fatalf("none mode sets %s", k)
		}
	}
	if len(r.Mounts) != 0 {
		t.Fatalf("mounts %v", r.Mounts)
	}
}

// benchInFlight is the number of pods in flight in the device plugin's benchmarks.
const benchInFlight = 200

// benchLedger gives p a new ledger with benchInFlight one-container pods ("p<j>", container
// "c", 300 MiB) planned on GPU-A..GPU-H in turn, none claimed, and returns them.
func benchLedger(p *Plugin) []*corev1.Pod {
	p.ledger = ledger.New(ledger.Config{Node: testNode, Names: p.cfg.Resources, GPUMemory: p.inventoryMiB})
	pods := make([]*corev1.Pod, benchInFlight)
	for j := range pods {
		pods[j] = testPod(fmt.Sprintf("p%d", j), t0.Add(time.Duration(j)), testNode, ctr{name: "c", mem: 300, gpus: []string{fmt.Sprintf("GPU-%c", 'A'+j%8)}})
		p.ledger.UpsertPod(pods[j])
	}
	return pods
}

// reportLatency reports the median and 99th percentile of lat in microseconds (p50-µs, p99-µs).
func reportLatency(b *testing.B, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

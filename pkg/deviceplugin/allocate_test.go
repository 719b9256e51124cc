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

// case C18: 8 GPUs x 10 slices, a pod asks gpu: 8. GetPreferredAllocation returns one slice per
// planned GPU; when the kubelet ignores it and offers 4 slices of GPU-A, Allocate still builds
// the visible devices and limits from the 8 chosen GPUs, never duplicates.
func TestAllocateC18(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(8, 81559))
	planned := uuids(8)
	p.Ledger().UpsertPod(testPod("big", t0, testNode, ctr{name: "main", mem: 40000, gpus: planned}))

	var avail []string
	for _, u := range planned {
		for n := 0; n < 10; n++ {
			avail = append(avail, device.SliceID(u, n))
		}
	}
	rand.New(rand.NewSource(1)).Shuffle(len(avail), func(i, j int) { avail[i], avail[j] = avail[j], avail[i] })
	pr, err := p.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: avail, AllocationSize: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	got := ledger.SliceGPUs(pr.ContainerResponses[0].DeviceIDs)
	if len(pr.ContainerResponses[0].DeviceIDs) != 8 || strings.Join(got, ",") != strings.Join(planned, ",") {
		t.Fatalf("preferred = %v, want one slice on each of %v", pr.ContainerResponses[0].DeviceIDs, planned)
	}

	ids := []string{"GPU-A::0", "GPU-A::1", "GPU-A::2", "GPU-A::3", "GPU-B::0", "GPU-C::0", "GPU-D::0", "GPU-E::0"}
	r := mustAlloc(t, p, ids...)
	want := strings.Join(planned, ",")
	if r.Envs[gpuenv.EnvNVIDIAVisibleDevices] != want || r.Envs[gpuenv.EnvCUDAVisibleDevices] != want {
		t.Fatalf("visible = %q / %q, want %q", r.Envs[gpuenv.EnvNVIDIAVisibleDevices], r.Envs[gpuenv.EnvCUDAVisibleDevices], want)
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

// positional returns (uuid, limit) pairs read back from a response the way HAMi-core does.
func positional(t *testing.T, r *pluginapi.ContainerAllocateResponse) map[string]string {
	t.Helper()
	vis := strings.Split(r.Envs[gpuenv.EnvCUDAVisibleDevices], ",")
	out := map[string]string{}
	for i, u := range vis {
		if _, dup := out[u]; dup {
			t.Fatalf("GPU %s appears twice in %q", u, r.Envs[gpuenv.EnvCUDAVisibleDevices])
		}
		out[u] = r.Envs[fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_%d", i)]
	}
	if r.Envs[gpuenv.EnvNVIDIAVisibleDevices] != r.Envs[gpuenv.EnvCUDAVisibleDevices] || r.Envs[device.EnvGPUUUIDs] != r.Envs[gpuenv.EnvCUDAVisibleDevices] {
		t.Fatalf("device lists differ: %q %q %q", r.Envs[gpuenv.EnvNVIDIAVisibleDevices], r.Envs[gpuenv.EnvCUDAVisibleDevices], r.Envs[device.EnvGPUUUIDs])
	}
	return out
}

// One pod, the kubelet's Allocate calls for it in order (one per GPU container), and the env
// each call answers: limits follow the planned GPUs, never the kubelet's IDs.
func TestAllocateEnvs(t *testing.T) {
	type call struct {
		ids []string
		// env are variables the response must carry; pairs, when set, are the GPU → memory
		// limit pairs of the response, by position (each GPU once).
		env   map[string]string
		pairs map[string]string
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
		calls: []call{{ids: []string{"GPU-B::3", "GPU-A::0"}, pairs: map[string]string{"GPU-A": "10000m", "GPU-B": "30000m"}}},
	}, {
		// case C21: one Allocate per container: C1 (1 slice) then C2 (2 slices) of one pod both
		// succeed with their own limits.
		name: "C21 one call per container", gpus: 3,
		pod: []ctr{{name: "c1", mem: 1000, gpus: []string{"GPU-A"}}, {name: "c2", mem: 2000, cores: 30, gpus: []string{"GPU-B", "GPU-C"}}},
		calls: []call{
			{ids: []string{"GPU-C::0"}, env: map[string]string{gpuenv.EnvCUDAVisibleDevices: "GPU-A", "CUDA_DEVICE_MEMORY_LIMIT_0": "1000m"}},
			{ids: []string{"GPU-A::4", "GPU-B::2"}, env: map[string]string{gpuenv.EnvCUDAVisibleDevices: "GPU-B,GPU-C", "CUDA_DEVICE_MEMORY_LIMIT_1": "2000m", gpuenv.EnvHAMiSMLimit: "30"}},
		},
	}, {
		// case C21: a pod with one GPU and one non-GPU container works.
		name: "C21 one GPU container beside one without", gpus: 1,
		pod:   []ctr{{name: "sidecar"}, {name: "gpu", mem: 5000, gpus: []string{"GPU-A"}}},
		calls: []call{{ids: []string{"GPU-A::7"}, env: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "5000m"}}},
	}, {
		// case C22: the kubelet's IDs name several slices of one GPU: each physical GPU once,
		// from the recorded allocation (split count 100 makes long lists).
		name: "C22 several slices of one GPU", gpus: 4, split: 100,
		pod: []ctr{{name: "c", mem: 7000, gpus: []string{"GPU-C", "GPU-D", "GPU-A"}}},
		calls: []call{{ids: []string{"GPU-B::97", "GPU-B::98", "GPU-B::99"}, env: map[string]string{gpuenv.EnvCUDAVisibleDevices: "GPU-C,GPU-D,GPU-A"},
			pairs: map[string]string{"GPU-C": "7000m", "GPU-D": "7000m", "GPU-A": "7000m"}}},
	}, {
		// Init containers: the kubelet calls Allocate for init containers first and may reuse an
		// init container's devices for the next container; both get their own limits.
		name: "init container's devices reused", gpus: 2,
		pod: []ctr{{name: "init", kind: device.KindInit, mem: 9000, gpus: []string{"GPU-A"}}, {name: "app", mem: 4000, gpus: []string{"GPU-A"}}},
		calls: []call{
			{ids: []string{"GPU-B::1"}, env: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "9000m"}},
			{ids: []string{"GPU-B::1"}, env: map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_0": "4000m"}}, // reused
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
			p.Ledger().UpsertPod(testPod("p", t0, testNode, tc.pod...))
			for i, c := range tc.calls {
				r := mustAlloc(t, p, c.ids...)
				for k, v := range c.env {
					if r.Envs[k] != v {
						t.Fatalf("call %d (%v): %s = %q, want %q (env %v)", i, c.ids, k, r.Envs[k], v, r.Envs)
					}
				}
				if c.pairs != nil {
					if got := positional(t, r); !reflect.DeepEqual(got, c.pairs) {
						t.Fatalf("call %d (%v): pairs = %v, want %v", i, c.ids, got, c.pairs)
					}
				}
			}
		})
	}
}

// case C19 property: for random GPU sets, per-GPU limits and kubelet orders (including several
// slices of one GPU, case C22), every (uuid, limit) pair survives and each GPU appears once.
func TestAllocateC19Property(t *testing.T) {
	rng := rand.New(rand.NewSource(19))
	for iter := 0; iter < 300; iter++ {
		n := 1 + rng.Intn(8)
		b := newTestBackend(8, 81559)
		mem := map[string]int64{}
		for i := range b.gpus { // GPUs of random sizes; the pod asks 100% of each
			b.gpus[i].MemoryMiB = 1 + rng.Int63n(81559)
			mem[b.gpus[i].UUID] = b.gpus[i].MemoryMiB
		}
		p, _ := newTestPlugin(t, testConfig(t.TempDir()), b)
		all := uuids(8)
		rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		chosen := all[:n]
		for _, u := range all[n:] {
			delete(mem, u)
		}
		p.Ledger().UpsertPod(testPod("p", t0, testNode, ctr{name: "c", gpus: chosen, pct: 100, memOn: mem}))
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
		got := positional(t, mustAlloc(t, p, list...))
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

// case C20 at the plugin alone: two pods with the same call key (1 slice) but different memory
// in flight together: the plugin refuses rather than guesses, naming both pods; once one pod is
// gone, the other's call gets its own limit.
func TestAllocateC20(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(1, 81559))
	big := testPod("big", t0, testNode, ctr{name: "c", mem: 24576, gpus: []string{"GPU-A"}})
	small := testPod("small", t0.Add(time.Second), testNode, ctr{name: "c", mem: 600, gpus: []string{"GPU-A"}})
	p.Ledger().UpsertPod(big)
	p.Ledger().UpsertPod(small)
	_, err := alloc(t, p, "GPU-A::0")
	if err == nil {
		t.Fatal("Allocate guessed between two confusable pods")
	}
	for _, s := range []string{"refusing to guess", "default/big", "default/small", "24576 MiB", "600 MiB", "C20"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	// Nothing was claimed by the refusal.
	if rec, _ := p.Ledger().ClaimedRecord(big.UID); len(rec.Containers) != 0 {
		t.Fatalf("refusal claimed %v", rec)
	}
	// The kubelet admitted small; big is deleted: small gets 600, never 24576.
	p.Ledger().DeletePod(big.UID)
	r := mustAlloc(t, p, "GPU-A::0")
	if r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "600m" {
		t.Fatalf("small got %q", r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"])
	}
	// Different call keys never wait for each other: a 2-GPU pod is served beside them.
	p2, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
	p2.Ledger().UpsertPod(big)
	p2.Ledger().UpsertPod(testPod("small", t0, testNode, ctr{name: "c", mem: 600, gpus: []string{"GPU-A"}}))
	p2.Ledger().UpsertPod(testPod("two", t0, testNode, ctr{name: "c", mem: 1000, gpus: []string{"GPU-A", "GPU-B"}}))
	if r := mustAlloc(t, p2, "GPU-B::1", "GPU-A::1"); r.Envs[device.EnvGPUMemoryMiB] != "2000" {
		t.Fatalf("two-GPU pod got %v", r.Envs)
	}
}

// A repeat call (kubelet at container start) gets the same answer; Allocate without
// GetPreferredAllocation works (all tests above call it without), and with it too.
func TestAllocateRepeatAndPreferred(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
	p.Ledger().UpsertPod(testPod("p", t0, testNode, ctr{name: "c", mem: 3000, gpus: []string{"GPU-B"}}))
	pr, _ := p.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: []string{"GPU-A::0", "GPU-A::1", "GPU-B::5", "GPU-B::2"}, AllocationSize: 1}}})
	if got := pr.ContainerResponses[0].DeviceIDs; len(got) != 1 || got[0] != "GPU-B::2" {
		t.Fatalf("preferred = %v, want [GPU-B::2]", got)
	}
	r1 := mustAlloc(t, p, "GPU-B::2")
	r2 := mustAlloc(t, p, "GPU-B::2")
	if fmt.Sprint(r1.Envs) != fmt.Sprint(r2.Envs) {
		t.Fatalf("repeat differs: %v vs %v", r1.Envs, r2.Envs)
	}
	// A new call for the same count with other IDs has no pod left.
	if _, err := alloc(t, p, "GPU-A::0"); err == nil || !strings.Contains(err.Error(), "no pod placed by hami-go on node node-1 waits for 1 device(s) of nvidia.com/gpu") {
		t.Fatalf("err = %v", err)
	}
}

// Interchangeable pods (same signature) may take each other's slots; PodResources reconcile
// rewrites the claimed records to the truth and the other pod gets the remaining slot.
func TestAllocateInterchangeableReconcile(t *testing.T) {
	var dirty []string
	p, _ := newTestPluginDirty(t, testConfig(t.TempDir()), newTestBackend(2, 81559), func(r device.PodRef) { dirty = append(dirty, r.Name) })
	a := testPod("a", t0, testNode, ctr{name: "c", mem: 5000, gpus: []string{"GPU-A"}})
	b := testPod("b", t0.Add(time.Second), testNode, ctr{name: "c", mem: 5000, gpus: []string{"GPU-B"}})
	p.Ledger().UpsertPod(a)
	p.Ledger().UpsertPod(b)
	// The kubelet admits b first with a slice of GPU-B: the slot whose plan matches is b's.
	if r := mustAlloc(t, p, "GPU-B::0"); r.Envs[gpuenv.EnvCUDAVisibleDevices] != "GPU-B" {
		t.Fatalf("got %v", r.Envs[gpuenv.EnvCUDAVisibleDevices])
	}
	// Then a with a slice of GPU-B too (kubelet ignored preference): a's slot (GPU-A).
	if r := mustAlloc(t, p, "GPU-B::1"); r.Envs[gpuenv.EnvCUDAVisibleDevices] != "GPU-A" {
		t.Fatalf("got %v", r.Envs[gpuenv.EnvCUDAVisibleDevices])
	}
	// Now a case where the slot taken is the other pod's: fresh pods c, d; kubelet admits d
	// with GPU-A slices but no plan matches: oldest (c) slot taken, reconcile moves it.
	p2, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
	c := testPod("c", t0, testNode, ctr{name: "x", mem: 5000, gpus: []string{"GPU-A"}})
	d := testPod("d", t0.Add(time.Second), testNode, ctr{name: "x", mem: 5000, gpus: []string{"GPU-A"}})
	p2.Ledger().UpsertPod(c)
	p2.Ledger().UpsertPod(d)
	mustAlloc(t, p2, "GPU-B::3") // really d
	changed := p2.Ledger().Reconcile([]ledger.ObservedContainer{{Namespace: "default", Pod: "d", Container: "x", IDs: []string{"GPU-B::3"}}})
	if len(changed) != 2 {
		t.Fatalf("reconcile changed %v, want c and d", changed)
	}
	rd, _ := p2.Ledger().ClaimedRecord(d.UID)
	rc, _ := p2.Ledger().ClaimedRecord(c.UID)
	if len(rd.Containers) != 1 || rd.Containers[0].SliceIDs[0] != "GPU-B::3" || len(rc.Containers) != 0 {
		t.Fatalf("after reconcile d=%v c=%v", rd, rc)
	}
	// c's Allocate now takes the remaining slot.
	if r := mustAlloc(t, p2, "GPU-B::4"); r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "5000m" {
		t.Fatalf("c got %v", r.Envs)
	}
	if rc, _ := p2.Ledger().ClaimedRecord(c.UID); len(rc.Containers) != 1 || rc.Containers[0].SliceIDs[0] != "GPU-B::4" {
		t.Fatalf("c record %v", rc)
	}
	sort.Strings(dirty)
	if strings.Join(dirty, ",") != "a,b" {
		t.Fatalf("dirty = %v", dirty)
	}
}

// Restart: a new plugin rebuilds claims from AnnoClaimed and PodResources; repeat calls get the
// same answers and nothing already handed out is handed out again.
func TestAllocateRestart(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
	a := testPod("a", t0, testNode, ctr{name: "c", mem: 1111, gpus: []string{"GPU-A"}})
	b := testPod("b", t0, testNode, ctr{name: "c", mem: 2222, gpus: []string{"GPU-B"}, cores: 20}, ctr{name: "d", mem: 3333, gpus: []string{"GPU-A"}})
	p.Ledger().UpsertPod(a)
	ra := mustAlloc(t, p, "GPU-A::0")
	rec, _ := p.Ledger().ClaimedRecord(a.UID)
	s, err := device.EncodeAllocation(rec)
	if err != nil {
		t.Fatal(err)
	}
	a.Annotations[device.AnnoClaimed] = s // the writer's work
	p.Ledger().UpsertPod(b)
	mustAlloc(t, p, "GPU-B::0")
	rb := mustAlloc(t, p, "GPU-A::1")
	// b's record was never written; the kubelet knows it.

	p2, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
	p2.Ledger().UpsertPod(a)
	p2.Ledger().UpsertPod(b)
	p2.Ledger().Reconcile([]ledger.ObservedContainer{
		{Namespace: "default", Pod: "b", Container: "c", IDs: []string{"GPU-B::0"}},
		{Namespace: "default", Pod: "b", Container: "d", IDs: []string{"GPU-A::1"}},
		{Namespace: "default", Pod: "a", Container: "c", IDs: []string{"GPU-A::0"}},
	})
	if r := mustAlloc(t, p2, "GPU-A::0"); fmt.Sprint(r.Envs) != fmt.Sprint(ra.Envs) {
		t.Fatalf("a after restart %v, before %v", r.Envs, ra.Envs)
	}
	if r := mustAlloc(t, p2, "GPU-A::1"); fmt.Sprint(r.Envs) != fmt.Sprint(rb.Envs) {
		t.Fatalf("b/d after restart %v, before %v", r.Envs, rb.Envs)
	}
	if _, err := alloc(t, p2, "GPU-B::5"); err == nil {
		t.Fatal("a slot was handed out twice after restart")
	}
}

// Bad input: unknown or malformed IDs and malformed annotations give clear errors.
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
	_, err := alloc(t, p, "GPU-A::0")
	for _, want := range []string{
		"no pod placed by hami-go on node node-1 waits for 1 device(s) of nvidia.com/gpu (pods not scheduled by hami-go-scheduler get no slice)",
		`default/bad: annotation hami-go.io/allocation-planned is malformed: allocation.version: "v9" is not supported`,
		"default/nosched has no hami-go.io/allocation-planned annotation",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
	// A malformed claimed record is ignored (planned used), not a crash.
	ok := testPod("ok", t0, testNode, ctr{name: "c", mem: 100, gpus: []string{"GPU-A"}})
	ok.Annotations[device.AnnoClaimed] = "{"
	p.Ledger().UpsertPod(ok)
	if r := mustAlloc(t, p, "GPU-A::0"); r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "100m" {
		t.Fatalf("ok = %v", r.Envs)
	}
}

// Allocate waits (bounded) for the informer to deliver the pod, then fails with a reason.
func TestAllocateWaitsForInformer(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.AllocateWait = 5 * time.Second
	p, clk := newTestPlugin(t, cfg, newTestBackend(1, 81559))
	type res struct {
		r   *pluginapi.ContainerAllocateResponse
		err error
	}
	done := make(chan res, 1)
	go func() { r, err := alloc(t, p, "GPU-A::0"); done <- res{r, err} }()
	waitFor(t, "Allocate waiting", clk.HasWaiters)
	p.Ledger().UpsertPod(testPod("late", t0, testNode, ctr{name: "c", mem: 777, gpus: []string{"GPU-A"}}))
	got := <-done
	if got.err != nil || got.r.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "777m" {
		t.Fatalf("late pod: %v %v", got.r, got.err)
	}
	clk.Step(5 * time.Second) // fire the first call's timer, so HasWaiters means the second call
	go func() { r, err := alloc(t, p, "GPU-A::1"); done <- res{r, err} }()
	waitFor(t, "Allocate waiting", clk.HasWaiters)
	clk.Step(5 * time.Second)
	got = <-done
	if got.err == nil || !strings.Contains(got.err.Error(), "(waited 5s)") {
		t.Fatalf("err = %v", got.err)
	}
}

// Ended pods are no candidates; their claims are forgotten. Nor are pods bound to another node.
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
			}
			if _, err := alloc(t, p, "GPU-A::0"); err == nil {
				t.Fatal("ended or foreign pod served")
			}
		})
	}
}

// The Allocate response of a two-container pod, logged so it can be quoted.
func TestAllocateResponseTwoContainers(t *testing.T) {
	tests := []struct {
		name string // Config.Enforcement
		// check checks the responses to the pod's two containers.
		check func(t *testing.T, r1, r2 *pluginapi.ContainerAllocateResponse)
	}{{
		name: gpuenv.EnforceHAMiCore,
		check: func(t *testing.T, r1, _ *pluginapi.ContainerAllocateResponse) {
			if r1.Envs["CUDA_DEVICE_MEMORY_LIMIT_0"] != "20000m" || r1.Envs["CUDA_DEVICE_MEMORY_LIMIT_1"] != "10000m" || r1.Envs[gpuenv.EnvCUDAVisibleDevices] != "GPU-B,GPU-A" || r1.Envs[device.EnvGPUMemoryMiB] != "30000" || r1.Envs[device.EnvGPUModel] != "H100" {
				t.Fatalf("hami-core container 1: %v", r1.Envs)
			}
			if len(r1.Mounts) != 2 || r1.Mounts[0].ContainerPath != gpuenv.HAMiContainerLibrary || r1.Mounts[1].ContainerPath != "/etc/ld.so.preload" {
				t.Fatalf("mounts %v", r1.Mounts)
			}
		},
	}, {
		name: gpuenv.EnforceMPS,
		check: func(t *testing.T, r1, r2 *pluginapi.ContainerAllocateResponse) {
			if r1.Envs[gpuenv.EnvMPSPinnedMemLimit] != "0=20000M,1=10000M" || r1.Envs[gpuenv.EnvMPSActiveThreadPct] != "30" || r2.Envs[gpuenv.EnvMPSPinnedMemLimit] != "0=4096M" || r1.Envs[gpuenv.EnvMPSPipeDirectory] != "/tmp/nvidia-mps" {
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
			p.Ledger().UpsertPod(testPod("ray-worker", t0, testNode,
				ctr{name: "ray", pct: 25, cores: 30, gpus: []string{"GPU-B", "GPU-A"}, memOn: map[string]int64{"GPU-A": 10000, "GPU-B": 20000}},
				ctr{name: "sidecar", mem: 4096, cores: 10, gpus: []string{"GPU-A"}}))
			r1 := mustAlloc(t, p, "GPU-A::0", "GPU-B::0")
			r2 := mustAlloc(t, p, "GPU-A::1")
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
	p.Ledger().UpsertPod(testPod("p", t0, testNode, ctr{name: "c", mem: 100, gpus: []string{"GPU-B", "GPU-A"}}))
	r := mustAlloc(t, p, "GPU-A::0", "GPU-B::0")
	if len(r.CdiDevices) != 2 || r.CdiDevices[0].Name != "hami-go.io/gpu=GPU-B" || r.CdiDevices[1].Name != "hami-go.io/gpu=GPU-A" {
		t.Fatalf("cdi = %v", r.CdiDevices)
	}
	if _, ok := r.Envs[gpuenv.EnvNVIDIAVisibleDevices]; ok {
		t.Fatal("cdi strategy sets NVIDIA_VISIBLE_DEVICES")
	}
	for k := range r.Envs {
		if strings.HasPrefix(k, "CUDA_DEVICE_") || strings.HasPrefix(k, "CUDA_MPS_") {
			t.Fatalf("none mode sets %s", k)
		}
	}
	if len(r.Mounts) != 0 {
		t.Fatalf("mounts %v", r.Mounts)
	}
}

// BenchmarkAllocate measures Allocate from memory with 200 pods in flight on one node (each a
// distinct call key or interchangeable), reporting p50/p99 in microseconds (target p99 <= 1 ms).
func BenchmarkAllocate(b *testing.B) {
	cfg := testConfig(b.TempDir())
	cfg.SplitCount = 100
	p, _ := newTestPlugin(b, cfg, newTestBackend(8, 81559))
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if i%benchInFlight == 0 {
			benchLedger(p)
		}
		id := device.SliceID(fmt.Sprintf("GPU-%c", 'A'+i%8), i%benchInFlight/8)
		b.StartTimer()
		s := time.Now()
		if _, err := alloc(b, p, id); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(s))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// benchInFlight is the number of pods in flight in the device plugin's benchmarks.
const benchInFlight = 200

// benchLedger gives p a new ledger with benchInFlight one-container pods ("p<j>", container
// "c", 300 MiB) planned on GPU-A..GPU-H in turn, none claimed, and returns them.
func benchLedger(p *Plugin) []*corev1.Pod {
	p.ledger = ledger.New(ledger.Config{Node: testNode, Names: p.cfg.Resources, Clock: p.opts.Clock, GPUMemory: p.inventoryMiB})
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

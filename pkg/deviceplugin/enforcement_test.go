package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/nri"
)

// Case C42 (issue 29): on a real backend the enforcement is a fact checked on the host. Without HAMi-core's
// library the inventory says so (the extender then places no new GPU pod on the node), and a
// container of a pod placed before is refused at creation with the reason, claiming nothing;
// once the library is there, the same container gets its plan. The fake backend simulates it.
func TestEnforcementFailClosed(t *testing.T) {
	cfg := testConfig(t.TempDir())
	b := newTestBackend(1, 81920)
	b.name = "nvml"
	p, _ := newTestPlugin(t, cfg, b)
	installed := false
	p.opts.FileExists = func(path string) bool { return installed && path == cfg.HAMiCoreLibrary }
	pod := testPod("p", t0, testNode, ctr{name: "main", mem: 1000, gpus: []string{"GPU-A"}})
	p.Ledger().UpsertPod(pod)

	inv := p.Inventory()
	if e := inv.Enforcement; e == nil || e.Ready || e.Mode != device.EnforcementHAMiCore || !strings.Contains(inv.Unenforced(), "HAMi-core library "+cfg.HAMiCoreLibrary+" not found") {
		t.Fatalf("inventory enforcement %+v, Unenforced %q; want hami-core not ready, naming the library", e, inv.Unenforced())
	}
	g := testNRIPlugin(t, p)
	c := nri.Container{PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name, Name: "main"}
	_, err := g.Decide(context.Background(), c, []string{device.EnvGPUUUIDs + "="})
	if err == nil || !strings.Contains(err.Error(), "the node's GPU enforcement (hami-core) is missing") {
		t.Fatalf("Decide without the library: %v; want refused, naming the enforcement", err)
	}
	if _, claimed, _ := p.Ledger().ContainerClaim(pod.UID, "main"); claimed {
		t.Fatal("a refused container claimed its plan")
	}

	installed = true
	if e := p.Inventory().Enforcement; !e.Ready || e.Reason != "" || e.Library != cfg.HAMiCoreLibrary {
		t.Fatalf("inventory enforcement with the library: %+v; want ready", e)
	}
	adj, err := g.Decide(context.Background(), c, []string{device.EnvGPUUUIDs + "="})
	if err != nil || len(adj.Env) == 0 {
		t.Fatalf("Decide with the library: %v, %v; want the plan's env", adj, err)
	}
	if len(adj.Mounts) == 0 || adj.Mounts[0] != (nri.Mount{Source: cfg.HAMiCoreLibrary, Destination: gpuenv.HAMiContainerLibrary, ReadOnly: true}) {
		t.Fatalf("plan mounts %+v; want the library installed after the refusal, read-only", adj.Mounts)
	}

	b2 := newTestBackend(1, 81920) // "fake"
	pf, _ := newTestPlugin(t, cfg, b2)
	if e := pf.Inventory().Enforcement; !e.Ready || !e.Simulated {
		t.Errorf("fake backend enforcement %+v; want ready and simulated", e)
	}
}

// Issue 36 item 4: the kubelet keeps a pod's Allocate answer for the pod's life, so mounts
// decided there would miss a library installed later (the chart's install finishing after the
// pod was admitted, a bring-your-own library) and give the container HAMi-core's limits with
// nothing to hold them. The plan brings the enforcement's mounts at the container's creation:
// the Allocate answer mounts nothing, and a container created after the library (and its
// preload file) appeared gets both, read-only. Between the enforcement check and the plan the
// library cannot go unnoticed either: a plan without the library is refused.
func TestPlanMountsTheLibraryPresentAtCreation(t *testing.T) {
	cfg := testConfig(t.TempDir())
	b := newTestBackend(1, 81920)
	b.name = "nvml"
	p, _ := newTestPlugin(t, cfg, b)
	preload := filepath.Join(filepath.Dir(cfg.HAMiCoreLibrary), gpuenv.HAMiPreloadFile)
	host := map[string]bool{}
	p.opts.FileExists = func(path string) bool { return host[path] }
	pod := testPod("late", t0, testNode, ctr{name: "main", mem: 1000, gpus: []string{"GPU-A"}})
	p.Ledger().UpsertPod(pod)
	p.canApplyPlans = func(bool) error { return nil }

	r, err := alloc(t, p, "GPU-A::0")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Mounts) != 0 {
		t.Fatalf("Allocate answer mounts %v; want none (the kubelet would keep them for the pod's life)", r.Mounts)
	}
	host[cfg.HAMiCoreLibrary], host[preload] = true, true // installed after Allocate
	var env []string
	for k, v := range r.Envs {
		env = append(env, k+"="+v)
	}
	c := nri.Container{PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name, Name: "main", Creating: true}
	adj, err := testNRIPlugin(t, p).Decide(context.Background(), c, env)
	if err != nil {
		t.Fatal(err)
	}
	want := []nri.Mount{
		{Source: cfg.HAMiCoreLibrary, Destination: gpuenv.HAMiContainerLibrary, ReadOnly: true},
		{Source: preload, Destination: gpuenv.ContainerPreloadPath, ReadOnly: true},
		{Source: gpuenv.HAMiOverrideEnvMask, Destination: gpuenv.HAMiOverrideEnv, ReadOnly: true},
	}
	if !reflect.DeepEqual(adj.Mounts, want) {
		t.Fatalf("plan mounts %+v\nwant %+v", adj.Mounts, want)
	}
	for _, e := range adj.Env {
		if e.Name == "LD_PRELOAD" {
			t.Fatalf("plan sets LD_PRELOAD=%q beside the preload file", e.Value)
		}
	}
}

// The library checked present by the enforcement but gone when the plan is built (a race with
// its removal): the container is refused, never given limits without the library.
func TestPlanRefusedWhenTheLibraryGoesBeforeTheMounts(t *testing.T) {
	cfg := testConfig(t.TempDir())
	// decide runs a container's creation on a new plugin whose host has the library for the
	// first present checks of it and not after; it returns how many checks of the library were
	// made and the error.
	decide := func(present int) (int, error) {
		b := newTestBackend(1, 81920)
		b.name = "nvml"
		p, _ := newTestPlugin(t, cfg, b)
		calls := 0
		p.opts.FileExists = func(path string) bool {
			if path != cfg.HAMiCoreLibrary {
				return false
			}
			calls++
			return calls <= present
		}
		pod := testPod("race", t0, testNode, ctr{name: "main", mem: 1000, gpus: []string{"GPU-A"}})
		p.Ledger().UpsertPod(pod)
		c := nri.Container{PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name, Name: "main", Creating: true}
		_, err := testNRIPlugin(t, p).Decide(context.Background(), c, []string{device.EnvGPUUUIDs + "="})
		return calls, err
	}
	checks, err := decide(1 << 30)
	if err != nil {
		t.Fatalf("Decide with the library: %v", err)
	}
	// The plan's own check is the last: the library goes just before it.
	_, err = decide(checks - 1)
	if err == nil || !strings.Contains(err.Error(), "HAMi-core library "+cfg.HAMiCoreLibrary+" is missing") {
		t.Fatalf("Decide: %v; want refused, naming the library", err)
	}
}

// Issue 29: with --hami-core-cache-dir, a container's plan gives it a writable directory of its
// own (named by its pod's UID and its name), created on the host before the container is, and
// mounted read-write at /usr/local/vgpu/cache through NRI; HAMi-core's shared cache file is in
// it, so a readOnlyRootFilesystem container's CUDA processes can create it.
func TestPlanGivesAWritableCacheDir(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.HAMiCacheDir = filepath.Join(t.TempDir(), "containers")
	p, _ := newTestPlugin(t, cfg, newTestBackend(1, 81920))
	pod := testPod("ro", t0, testNode, ctr{name: "main", mem: 1000, gpus: []string{"GPU-A"}})
	p.Ledger().UpsertPod(pod)
	adj, err := testNRIPlugin(t, p).Decide(context.Background(), nri.Container{PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name, Name: "main"},
		[]string{device.EnvGPUUUIDs + "="})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cfg.HAMiCacheDir, string(pod.UID)+"_main")
	// No library on this test's host: the /overrideEnv mask and the cache directory.
	if want := []nri.Mount{{Source: gpuenv.HAMiOverrideEnvMask, Destination: gpuenv.HAMiOverrideEnv, ReadOnly: true}, {Source: dir, Destination: "/usr/local/vgpu/cache"}}; !reflect.DeepEqual(adj.Mounts, want) {
		t.Errorf("mounts %+v, want %+v", adj.Mounts, want)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() || st.Mode().Perm() != 0o777 {
		t.Errorf("cache directory %s: %v, %v; want a directory with mode 0777", dir, st, err)
	}
	var cache string
	for _, e := range adj.Env {
		if e.Name == "CUDA_DEVICE_MEMORY_SHARED_CACHE" {
			cache = e.Value
		}
	}
	if want := "/usr/local/vgpu/cache/" + string(pod.UID) + "_main.cache"; cache != want {
		t.Errorf("CUDA_DEVICE_MEMORY_SHARED_CACHE = %q, want %q", cache, want)
	}
}

// case C56: a container the kubelet creates again (it exited, or was killed) starts with a fresh
// HAMi-core cache file: the file of its previous instance, whose slots still charge the killed
// processes' memory, is removed at the (re)creation, before the container starts; the cache
// directory stays, and other containers' files are left alone.
func TestC56PlanRemovesStaleCacheFileAtRecreation(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.HAMiCacheDir = filepath.Join(t.TempDir(), "containers")
	p, _ := newTestPlugin(t, cfg, newTestBackend(1, 81920))
	pod := testPod("restarts", t0, testNode, ctr{name: "main", mem: 1000, gpus: []string{"GPU-A"}}, ctr{name: "side", mem: 1000, gpus: []string{"GPU-A"}})
	p.Ledger().UpsertPod(pod)
	g := testNRIPlugin(t, p)
	createC := func(name string) {
		t.Helper()
		c := nri.Container{PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name, Name: name}
		if _, err := g.Decide(context.Background(), c, []string{device.EnvGPUUUIDs + "="}); err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
	}
	file := func(name string) string {
		n := string(pod.UID) + "_" + name
		return filepath.Join(cfg.HAMiCacheDir, n, n+".cache")
	}
	createC("main")
	createC("side")
	// The first instances ran CUDA processes: HAMi-core created and filled the files.
	for _, n := range []string{"main", "side"} {
		if err := os.WriteFile(file(n), []byte("slots of processes now killed"), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	createC("main") // main restarts
	if _, err := os.Stat(file("main")); !os.IsNotExist(err) {
		t.Errorf("the restarted container's stale cache file %s: %v; want it removed before the container starts", file("main"), err)
	}
	if st, err := os.Stat(filepath.Dir(file("main"))); err != nil || !st.IsDir() {
		t.Errorf("the cache directory is gone: %v", err)
	}
	if _, err := os.Stat(file("side")); err != nil {
		t.Errorf("the other container's cache file: %v; want it kept", err)
	}
	createC("main") // again, with no file there: fine
}

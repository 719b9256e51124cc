package dra

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/hami-go/hami-go/pkg/nri"
)

// Issue 29: a claim's HAMi-core cache directory is created at prepare and removed at unprepare;
// at start the directories of claims not prepared (unprepared while no driver ran) are removed,
// and a device-plugin container's ("<pod UID>_<container>") is left alone.
func TestClaimCacheDirLifecycle(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.HAMiCacheDir = filepath.Join(t.TempDir(), "containers")
	for _, n := range []string{"uid-stale", "uid-pod_main"} {
		if err := os.MkdirAll(filepath.Join(cfg.HAMiCacheDir, n), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(cfg.HAMiCacheDir, name))
		return err == nil
	}
	d, _ := newTestDriver(t, cfg, "dgxh100")
	if exists("uid-stale") || !exists("uid-pod_main") {
		t.Fatalf("after start: stale claim's %v, device-plugin container's %v; want only the container's kept", exists("uid-stale"), exists("uid-pod_main"))
	}
	c := testClaim("a", 4000, 0, result{device: "gpu-0", memMiB: 4000})
	if res := prepare(t, d, c)[c.UID]; res.Err != nil {
		t.Fatal(res.Err)
	}
	if !exists(string(c.UID)) {
		t.Fatal("no cache directory after prepare")
	}
	// A restarted driver keeps the directory of a claim it has prepared (checkpoint).
	newTestDriver(t, cfg, "dgxh100")
	if !exists(string(c.UID)) {
		t.Fatal("a restarted driver removed a prepared claim's cache directory")
	}
	obj := kubeletplugin.NamespacedObject{UID: c.UID}
	obj.Namespace, obj.Name = c.Namespace, c.Name
	if errs, err := d.UnprepareResourceClaims(bg, []kubeletplugin.NamespacedObject{obj}); err != nil || errs[c.UID] != nil {
		t.Fatal(errs, err)
	}
	if exists(string(c.UID)) {
		t.Error("the claim's cache directory is still there after unprepare")
	}
}

// case C56: a container the kubelet creates again (it exited) starts with a fresh HAMi-core
// cache file: at its creation (the NRI plugin's CreateContainer, nri.Container.Creating) the
// claim's file, whose slots still charge the killed processes' memory, is removed; the NRI
// plugin's check of a running container (Synchronize) removes nothing, and neither does the
// creation of a container whose claim another container shares (removing it would split their
// accounting).
func TestC56CacheFileFreshAtContainerCreation(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.HAMiCacheDir = filepath.Join(t.TempDir(), "containers")
	d, _ := newTestDriver(t, cfg, "dgxh100")
	c := testClaim("a", 4000, 0, result{device: "gpu-0", memMiB: 4000})
	if res := prepare(t, d, c)[c.UID]; res.Err != nil {
		t.Fatal(res.Err)
	}
	file := filepath.Join(cfg.HAMiCacheDir, string(c.UID), string(c.UID)+".cache")
	stale := func() {
		t.Helper()
		if err := os.WriteFile(file, []byte("slots of processes now killed"), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	gone := func() bool { _, err := os.Stat(file); return os.IsNotExist(err) }
	ctr := func(name string, creating bool) nri.Container {
		return nri.Container{PodUID: "pod-uid-a", PodNamespace: "default", PodName: "pod-a", Name: name,
			CDIDevices: []string{ClaimCDIDevice(c.UID)}, Creating: creating}
	}
	granted := func(n nri.Container) {
		t.Helper()
		if g, err := d.Granted(bg, n); err != nil || !g.GPU {
			t.Fatalf("Granted(%s) = %+v, %v", n, g, err)
		}
	}

	granted(ctr("main", true)) // first creation: no file yet
	stale()
	granted(ctr("main", false)) // running, checked at Synchronize
	if gone() {
		t.Fatal("checking the running container removed its cache file")
	}
	granted(ctr("main", true)) // the container restarts
	if !gone() {
		t.Fatal("the restarted container's stale cache file is still there; want it removed before the container starts")
	}
	if st, err := os.Stat(filepath.Dir(file)); err != nil || !st.IsDir() {
		t.Fatalf("the claim's cache directory is gone: %v", err)
	}

	// A second container of the pod uses the same claim: its file is shared from then on.
	stale()
	granted(ctr("side", true))
	granted(ctr("main", true))
	if gone() {
		t.Fatal("a shared claim's cache file was removed at a container's creation")
	}
}

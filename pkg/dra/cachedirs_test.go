package dra

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
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

package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// Issue 29: each GPU container's HAMi-core cache directory is removed when its pod is gone: at
// start for pods deleted while no agent ran, and at the pod's deletion. A DRA claim's directory
// (a bare UID) is the DRA driver's and is left alone.
func TestPodSyncRemovesCacheDirsOfPodsGone(t *testing.T) {
	a := testPod("a", t0, testNode, ctr{name: "c", mem: 1000, gpus: []string{"GPU-A"}})
	client := fake.NewClientset(a)
	dir := t.TempDir()
	names := []string{containerCacheName(a.UID, "c"), containerCacheName("uid-gone", "c"), "claim-uid"}
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(dir, n), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name))
		return err == nil
	}
	sync := NewPodSync(client, testNode, dir)
	p, _ := newTestPluginDirty(t, testConfig(t.TempDir()), newTestBackend(2, 81559), sync.Dirty)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := sync.Start(ctx, p.Ledger()); err != nil {
		t.Fatal(err)
	}
	if !exists(names[0]) || exists(names[1]) || !exists(names[2]) {
		t.Fatalf("after start: a's %v, the gone pod's %v, the claim's %v; want a's and the claim's kept, the gone pod's removed",
			exists(names[0]), exists(names[1]), exists(names[2]))
	}
	if err := client.CoreV1().Pods("default").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); exists(names[0]); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a's cache directory is still there 10 s after a was deleted")
		}
	}
	if !exists(names[2]) {
		t.Error("the claim's directory was removed")
	}
}

func TestPodOfCacheName(t *testing.T) {
	for _, tc := range []struct {
		name string
		uid  string
		ok   bool
	}{
		{containerCacheName("6f1c-22", "main"), "6f1c-22", true},
		{"3b2a9c1e-0f4d-4a7b-9a55-1c2d3e4f5a6b", "", false}, // a DRA claim's
		{"_main", "", false},
		{"uid_", "", false},
	} {
		if uid, ok := podOfCacheName(tc.name); ok != tc.ok || (ok && string(uid) != tc.uid) {
			t.Errorf("podOfCacheName(%q) = %q, %v; want %q, %v", tc.name, uid, ok, tc.uid, tc.ok)
		}
	}
}

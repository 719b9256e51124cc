package nodeagent

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The cache directories of ended containers are removed with their files; live ones, files and
// names of the other mode are left alone.
func TestSweepCacheDirs(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"uid-gone_main", "uid-live_main", "claim-uid"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, name+".cache"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "uid-gone_file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	removed, err := SweepCacheDirs(dir, func(name string) bool { return strings.HasPrefix(name, "uid-gone_") })
	if err != nil || !reflect.DeepEqual(removed, []string{"uid-gone_main"}) {
		t.Fatalf("SweepCacheDirs = %v, %v; want [uid-gone_main]", removed, err)
	}
	left, _ := os.ReadDir(dir)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	if !reflect.DeepEqual(names, []string{"claim-uid", "uid-gone_file", "uid-live_main"}) {
		t.Errorf("left %v", names)
	}
	if removed, err := SweepCacheDirs(filepath.Join(dir, "missing"), func(string) bool { return true }); err != nil || removed != nil {
		t.Errorf("missing dir: %v, %v; want nothing, no error", removed, err)
	}
}

func TestRemoveCacheDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "c", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := RemoveCacheDir(dir, "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "c")); !os.IsNotExist(err) {
		t.Errorf("c still there: %v", err)
	}
	if err := RemoveCacheDir(dir, "c"); err != nil {
		t.Errorf("removing a missing one: %v", err)
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/b"} {
		if err := RemoveCacheDir(dir, bad); err == nil || !strings.Contains(err.Error(), "is not a cache name") {
			t.Errorf("RemoveCacheDir(%q) = %v; want refused", bad, err)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("dir itself: %v", err)
	}
}

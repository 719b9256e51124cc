package imagebuild

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// entry is what a test reads back of one tar header and its content.
type entry struct {
	Type     byte
	Mode     int64
	Link     string
	Data     string
	Uid, Gid int
	Unix     int64
}

func layerEntries(t *testing.T, l v1.Layer) (names []string, byName map[string]entry) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	byName = map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names, byName
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		names = append(names, h.Name)
		byName[h.Name] = entry{h.Typeflag, h.Mode, h.Linkname, string(b), h.Uid, h.Gid, h.ModTime.Unix()}
	}
}

func TestLayerEntries(t *testing.T) {
	src := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(src, []byte("host bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Layer([]File{
		{Path: "/bin", Dir: true, Mode: 0o755},
		{Path: "/bin/prog", Mode: 0o755, Src: src},
		{Path: "/bin/sh", Link: "prog", Mode: 0o755},
		{Path: "/etc/motd", Mode: 0o644, Data: []byte("hello\n")},
		{Path: "/empty", Mode: 0o600},
	})
	if err != nil {
		t.Fatal(err)
	}
	names, got := layerEntries(t, l)
	if want := []string{"bin/", "bin/prog", "bin/sh", "etc/motd", "empty"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("entries %v, want %v (in the given order)", names, want)
	}
	want := map[string]entry{
		"bin/":     {Type: tar.TypeDir, Mode: 0o755},
		"bin/prog": {Type: tar.TypeReg, Mode: 0o755, Data: "host bytes"},
		"bin/sh":   {Type: tar.TypeSymlink, Mode: 0o777, Link: "prog"},
		"etc/motd": {Type: tar.TypeReg, Mode: 0o644, Data: "hello\n"},
		"empty":    {Type: tar.TypeReg, Mode: 0o600},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("entries\n%+v\nwant\n%+v", got, want)
	}
}

func TestLayerNamesUnreadableSource(t *testing.T) {
	_, err := Layer([]File{{Path: "/bin/prog", Mode: 0o755, Src: "/nonexistent/prog"}})
	if err == nil || !strings.Contains(err.Error(), "/bin/prog from /nonexistent/prog") {
		t.Fatalf("error %v, want it to name /bin/prog and /nonexistent/prog", err)
	}
}

func TestImageConfigAndReproducibleDigest(t *testing.T) {
	var digests []v1.Hash
	for range 2 {
		l, err := Layer([]File{{Path: "/x", Mode: 0o644, Data: []byte("x")}})
		if err != nil {
			t.Fatal(err)
		}
		img, err := Image([]v1.Layer{l}, v1.Config{Entrypoint: []string{"/x"}, Env: []string{"A=1"}})
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !cf.Created.Time.Equal(Epoch) {
			t.Errorf("os/arch/created %s/%s/%v, want linux/%s/%v", cf.OS, cf.Architecture, cf.Created.Time, runtime.GOARCH, Epoch)
		}
		if want := []string{"PATH=" + Path, "A=1"}; !reflect.DeepEqual(cf.Config.Env, want) {
			t.Errorf("env %v, want %v", cf.Config.Env, want)
		}
		if !reflect.DeepEqual(cf.Config.Entrypoint, []string{"/x"}) {
			t.Errorf("entrypoint %v", cf.Config.Entrypoint)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
	}
	if digests[0] != digests[1] {
		t.Errorf("digests differ: %s, %s", digests[0], digests[1])
	}
}

func TestWriteSeveralReferences(t *testing.T) {
	l, _ := Layer([]File{{Path: "/pause", Mode: 0o755, Data: []byte("p")}})
	img, err := Image([]v1.Layer{l}, v1.Config{Entrypoint: []string{"/pause"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "pause.tar")
	if err := Write(p, map[string]v1.Image{"registry.k8s.io/pause:3.10": img, "registry.k8s.io/pause:3.6": img}); err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	for _, ref := range []string{"registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.6"} {
		tag, _ := name.NewTag(ref)
		got, err := tarball.ImageFromPath(p, &tag)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if d, _ := got.Digest(); d != want {
			t.Errorf("%s: digest %s, want %s", ref, d, want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the output folder, want only pause.tar", len(entries))
	}
}

func TestWriteNamesBadReference(t *testing.T) {
	l, _ := Layer(nil)
	img, _ := Image([]v1.Layer{l}, v1.Config{})
	dir := t.TempDir()
	err := Write(filepath.Join(dir, "x.tar"), map[string]v1.Image{"docker.io/x:bad tag!": img})
	if err == nil || !strings.Contains(err.Error(), `image reference "docker.io/x:bad tag!"`) {
		t.Fatalf("error %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files written: %v", entries)
	}
}

func TestDirFiles(t *testing.T) {
	root := t.TempDir()
	for p, body := range map[string]string{"lib/libc.so.6": "libc", "usr/share/doc/c": "skip", "etc/a.conf": "a"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	// Modes set explicitly: the umask must not decide them.
	for p, m := range map[string]os.FileMode{"etc": 0o755, "lib": 0o755, "usr": 0o755, "usr/share": 0o755, "etc/a.conf": 0o640, "lib/libc.so.6": 0o640} {
		if err := os.Chmod(filepath.Join(root, p), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("lib/libc.so.6", filepath.Join(root, "ld.so")); err != nil {
		t.Fatal(err)
	}
	files, err := DirFiles(root, []string{"usr/share/doc"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]File{}
	for _, f := range files {
		got[f.Path] = f
	}
	want := map[string]File{
		"/etc":           {Path: "/etc", Mode: 0o755, Dir: true},
		"/etc/a.conf":    {Path: "/etc/a.conf", Mode: 0o640, Data: []byte("a")},
		"/ld.so":         {Path: "/ld.so", Mode: 0o777, Link: "lib/libc.so.6"},
		"/lib":           {Path: "/lib", Mode: 0o755, Dir: true},
		"/lib/libc.so.6": {Path: "/lib/libc.so.6", Mode: 0o640, Data: []byte("libc")},
		"/usr":           {Path: "/usr", Mode: 0o755, Dir: true},
		"/usr/share":     {Path: "/usr/share", Mode: 0o755, Dir: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("files\n%+v\nwant\n%+v", got, want)
	}
}

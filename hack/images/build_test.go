package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/hami-go/hami-go/hack/images/imagebuild"
)

// helloBinary builds testdata/hello statically (CGO_ENABLED=0) into a temp dir.
func helloBinary(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "hello")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/hello")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build testdata/hello: %v\n%s", err, b)
	}
	return out
}

// readImage loads the image tagged ref from a docker-archive tar.
func readImage(t *testing.T, path, ref string) v1.Image {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatalf("read %s as %s: %v", path, ref, err)
	}
	return img
}

// imageFiles returns every regular file and symlink of img's layers (later layers win) by path.
func imageFiles(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tar.Header{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			out["/"+strings.TrimSuffix(h.Name, "/")] = h
		}
		rc.Close()
	}
	return out
}

// fileContent reads one file of img's layers.
func fileContent(t *testing.T, img v1.Image, path string) []byte {
	t.Helper()
	layers, _ := img.Layers()
	var found []byte
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if "/"+h.Name == path {
				found, _ = io.ReadAll(tr)
			}
		}
		rc.Close()
	}
	return found
}

func TestBuildStaticImagesFromPrebuiltBinaries(t *testing.T) {
	bin := helloBinary(t)
	want, _ := os.ReadFile(bin)
	out := t.TempDir()
	cfg := DefaultConfig()
	cfg.Out = out
	cfg.Version = "9.8.7"
	cfg.Images = []string{"webhook", "scheduler-extender", "kube-scheduler-hami-go"}
	cfg.Prebuilt = map[string]string{"webhook": bin, "scheduler-extender": bin, "kube-scheduler-hami-go": bin}
	cfg.KubeSchedulerBin = bin
	written, err := Build(cfg, failRunner{t})
	if err != nil {
		t.Fatal(err)
	}
	wantWritten := []Written{
		{filepath.Join(out, "webhook.tar"), "index.docker.io/hami-go/webhook:9.8.7"},
		{filepath.Join(out, "scheduler-extender.tar"), "index.docker.io/hami-go/scheduler-extender:9.8.7"},
		{filepath.Join(out, "kube-scheduler-hami-go.tar"), "index.docker.io/hami-go/kube-scheduler-hami-go:9.8.7"},
		{filepath.Join(out, "kube-scheduler.tar"), "registry.k8s.io/kube-scheduler:v1.37.2"},
	}
	if len(written) != len(wantWritten) {
		t.Fatalf("written %v, want %v", written, wantWritten)
	}
	for i, w := range wantWritten {
		if written[i].Path != w.Path {
			t.Errorf("written[%d].Path = %s, want %s", i, written[i].Path, w.Path)
		}
		tag, _ := name.NewTag(written[i].Ref)
		wantTag, _ := name.NewTag(w.Ref)
		if tag.Name() != wantTag.Name() {
			t.Errorf("written[%d].Ref = %s, want %s", i, tag.Name(), wantTag.Name())
		}
	}

	for _, c := range []struct{ tar, ref, bin string }{
		{"webhook.tar", "docker.io/hami-go/webhook:9.8.7", "webhook"},
		{"scheduler-extender.tar", "docker.io/hami-go/scheduler-extender:9.8.7", "scheduler-extender"},
		// The chart's scheduler.plugin.image: command kube-scheduler-hami-go (on PATH).
		{"kube-scheduler-hami-go.tar", "docker.io/hami-go/kube-scheduler-hami-go:9.8.7", "kube-scheduler-hami-go"},
		{"kube-scheduler.tar", "registry.k8s.io/kube-scheduler:v1.37.2", "kube-scheduler"},
	} {
		t.Run(c.bin, func(t *testing.T) {
			img := readImage(t, filepath.Join(out, c.tar), c.ref)
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(cf.Config.Entrypoint, " "); got != "/usr/local/bin/"+c.bin {
				t.Errorf("entrypoint %q, want /usr/local/bin/%s", got, c.bin)
			}
			if cf.OS != "linux" || cf.Architecture == "" {
				t.Errorf("os/arch %s/%s", cf.OS, cf.Architecture)
			}
			if len(cf.Config.Env) != 1 || cf.Config.Env[0] != "PATH="+imagebuild.Path {
				t.Errorf("env %v", cf.Config.Env)
			}
			layers, _ := img.Layers()
			if len(layers) != 1 {
				t.Errorf("%d layers, want 1 (static binary on an empty base)", len(layers))
			}
			files := imageFiles(t, img)
			h := files["/usr/local/bin/"+c.bin]
			if h == nil || h.Mode&0o111 == 0 || h.Uid != 0 {
				t.Fatalf("/usr/local/bin/%s: header %+v", c.bin, h)
			}
			if got := fileContent(t, img, "/usr/local/bin/"+c.bin); !bytes.Equal(got, want) {
				t.Errorf("binary in the image: %d bytes, want the %d bytes built", len(got), len(want))
			}
			if h := files["/tmp"]; h == nil || h.Mode != 0o1777 {
				t.Errorf("/tmp: %+v, want mode 1777", h)
			}
			if p := string(fileContent(t, img, "/etc/passwd")); !strings.Contains(p, "nonroot:x:65532:65532") {
				t.Errorf("/etc/passwd %q lacks the nonroot user", p)
			}
		})
	}
}

// The build is reproducible: two builds of the same binary give the same image digest.
func TestBuildIsReproducible(t *testing.T) {
	bin := helloBinary(t)
	var digests []v1.Hash
	for range 2 {
		cfg := DefaultConfig()
		cfg.Out, cfg.Images, cfg.Prebuilt = t.TempDir(), []string{"webhook"}, map[string]string{"webhook": bin}
		if _, err := Build(cfg, failRunner{t}); err != nil {
			t.Fatal(err)
		}
		d, err := readImage(t, filepath.Join(cfg.Out, "webhook.tar"), "docker.io/hami-go/webhook:0.1.0").Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
	}
	if digests[0] != digests[1] {
		t.Errorf("digests differ: %s, %s", digests[0], digests[1])
	}
}

// The device plugin's dynamic image carries the libc6 package's files beneath the binary.
func TestDevicePluginGlibcLayerFromDeb(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb not installed")
	}
	// A stand-in libc6 package: the loader path, a library, a doc file the layer skips.
	pkg := t.TempDir()
	for p, body := range map[string]string{
		"DEBIAN/control":                         "Package: libc6\nVersion: 2.36-test\nArchitecture: all\nMaintainer: test <t@example.com>\nDescription: test\n",
		"lib/x86_64-linux-gnu/libc.so.6":         "fake libc",
		"etc/ld.so.conf.d/x86_64-linux-gnu.conf": "/usr/lib/x86_64-linux-gnu\n",
		"usr/share/doc/libc6/copyright":          "skip me",
		"lib64/.keep":                            "",
	} {
		if err := os.MkdirAll(filepath.Join(pkg, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../lib/x86_64-linux-gnu/libc.so.6", filepath.Join(pkg, "lib64", "ld-linux-x86-64.so.2")); err != nil {
		t.Fatal(err)
	}
	deb := filepath.Join(t.TempDir(), "libc6_2.36-test_all.deb")
	if b, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", pkg, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, b)
	}

	cfg := DefaultConfig()
	cfg.Out, cfg.Images, cfg.LibcDeb = t.TempDir(), []string{"device-plugin"}, deb
	cfg.Prebuilt = map[string]string{"device-plugin": helloBinary(t)}
	if _, err := Build(cfg, osRunner{}); err != nil {
		t.Fatal(err)
	}
	img := readImage(t, filepath.Join(cfg.Out, "device-plugin.tar"), "docker.io/hami-go/device-plugin:0.1.0")
	layers, _ := img.Layers()
	if len(layers) != 2 {
		t.Fatalf("%d layers, want 2 (glibc, binary)", len(layers))
	}
	files := imageFiles(t, img)
	if got := string(fileContent(t, img, "/lib/x86_64-linux-gnu/libc.so.6")); got != "fake libc" {
		t.Errorf("libc.so.6 = %q", got)
	}
	if h := files["/lib64/ld-linux-x86-64.so.2"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "../lib/x86_64-linux-gnu/libc.so.6" {
		t.Errorf("loader symlink: %+v", h)
	}
	if got := string(fileContent(t, img, "/etc/ld.so.conf")); got != "include /etc/ld.so.conf.d/*.conf\n" {
		t.Errorf("/etc/ld.so.conf = %q", got)
	}
	if _, ok := files["/usr/share/doc/libc6/copyright"]; ok {
		t.Error("docs of libc6 are in the image")
	}
	if _, ok := files["/usr/local/bin/device-plugin"]; !ok {
		t.Error("no /usr/local/bin/device-plugin")
	}
}

func TestConfigErrorsNameTheFlag(t *testing.T) {
	bin := helloBinary(t)
	for _, c := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.Images = []string{"webhok"} }, `--images: unknown image "webhok"`},
		{func(c *Config) { c.Out = "" }, "--out is empty"},
		{func(c *Config) { c.DevicePluginLink = "shared" }, `--device-plugin-link must be "dynamic" or "static", got "shared"`},
		{func(c *Config) { c.KubeSchedulerBin = "/nonexistent/kube-scheduler" }, `--kube-scheduler-bin "/nonexistent/kube-scheduler"`},
		{func(c *Config) { c.Prebuilt = map[string]string{"webhook": "/nonexistent/w"} }, "--prebuilt webhook=/nonexistent/w"},
		{func(c *Config) { c.Prebuilt = map[string]string{"hello": bin} }, `--prebuilt: unknown image "hello"`},
		{func(c *Config) { c.Version = "bad tag!" }, `--version "bad tag!"`},
	} {
		cfg := DefaultConfig()
		cfg.Out = t.TempDir()
		c.mutate(&cfg)
		_, err := Build(cfg, failRunner{t})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want it to contain %q", err, c.want)
		}
	}
}

// Binaries that are not prebuilt are built with go build: static without cgo, the device
// plugin and the DRA driver with cgo, statically linked in static mode; kube-scheduler-hami-go
// in its own module (go build -C, run in the repository root, output to an absolute path).
func TestBuildCommands(t *testing.T) {
	rec := &recordRunner{bin: helloBinary(t)}
	cfg := DefaultConfig()
	cfg.Out, cfg.DevicePluginLink = t.TempDir(), "static"
	if _, err := Build(cfg, rec); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"CGO_ENABLED=1 GOOS=linux CGO_CFLAGS=-Wno-deprecated-declarations | go build -trimpath -ldflags -s -w -linkmode external -extldflags -static -o * ./cmd/device-plugin",
		"CGO_ENABLED=0 GOOS=linux | go build -trimpath -ldflags -s -w -o * ./cmd/scheduler-extender",
		"CGO_ENABLED=0 GOOS=linux | go build -trimpath -ldflags -s -w -o * ./cmd/webhook",
		"CGO_ENABLED=1 GOOS=linux CGO_CFLAGS=-Wno-deprecated-declarations | go build -trimpath -ldflags -s -w -linkmode external -extldflags -static -o * ./cmd/dra-driver",
		"CGO_ENABLED=0 GOOS=linux | go build -C cmd/kube-scheduler-hami-go -trimpath -ldflags -s -w -o * .",
	}
	if strings.Join(rec.calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("commands:\n%s\nwant:\n%s", strings.Join(rec.calls, "\n"), strings.Join(want, "\n"))
	}
	for i, d := range rec.dirs {
		if d != cfg.RepoRoot {
			t.Errorf("command %d ran in %q, want the repository root %q", i, d, cfg.RepoRoot)
		}
	}
	if o := rec.outs[len(rec.outs)-1]; !filepath.IsAbs(o) {
		t.Errorf("kube-scheduler-hami-go -o %q: relative to cmd/kube-scheduler-hami-go under -C, want absolute", o)
	}
	if _, err := os.Stat(filepath.Join(cfg.Out, "kube-scheduler-hami-go.tar")); err != nil {
		t.Errorf("kube-scheduler-hami-go.tar: %v", err)
	}
}

// failRunner fails the test when a command would run.
type failRunner struct{ t *testing.T }

func (f failRunner) Run(dir string, env []string, name string, args ...string) error {
	f.t.Errorf("unexpected command %s %v", name, args)
	return errors.New("no commands in this test")
}

// recordRunner records go build calls and copies bin to the -o path instead of building.
type recordRunner struct {
	bin   string
	calls []string
	dirs  []string // each call's directory
	outs  []string // each call's -o
}

func (r *recordRunner) Run(dir string, env []string, name string, args ...string) error {
	var shown []string
	for i := 0; i < len(args); i++ {
		if args[i] == "-o" {
			b, err := os.ReadFile(r.bin)
			if err != nil {
				return err
			}
			if err := os.WriteFile(args[i+1], b, 0o755); err != nil {
				return err
			}
			r.outs = append(r.outs, args[i+1])
			shown = append(shown, "-o", "*")
			i++
			continue
		}
		shown = append(shown, args[i])
	}
	r.calls = append(r.calls, strings.Join(env, " ")+" | "+name+" "+strings.Join(shown, " "))
	r.dirs = append(r.dirs, dir)
	return nil
}

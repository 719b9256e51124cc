package main

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestBuildWritesImportableArchives(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-bin")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	// The glibc files are copied to their own path in the image: these stand in for the
	// loader and libc, one of them reached through a symlink as on Debian.
	loader, libc := filepath.Join(dir, "lib64", "ld-test.so.2"), filepath.Join(dir, "lib", "libc-test.so.6")
	for _, p := range []string{loader, libc + ".real"} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("elf"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(libc+".real", libc); err != nil {
		t.Fatal(err)
	}
	written, err := Build(Config{Out: out, WorkloadBin: bin, BashBin: bin, BusyboxBin: bin, GetenvBin: bin,
		CudaprobeBin: bin, GlibcFiles: []string{loader, libc}, HAMiCoreLib: bin, HAMiCoreTag: "8f3a89c67b03", Version: "0.1.0", RayVersion: "2.46.0"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(out, "pause.tar"), filepath.Join(out, "workload.tar"), filepath.Join(out, "workload-imageenv.tar"), filepath.Join(out, "hamicore.tar")}; strings.Join(written, " ") != strings.Join(want, " ") {
		t.Fatalf("written %v, want %v (kube-scheduler.tar is hack/images')", written, want)
	}
	for _, tc := range []struct {
		file, tag  string
		wantFiles  []string
		entrypoint string
	}{
		{"pause.tar", "registry.k8s.io/pause:3.10", []string{"pause"}, "/pause"},
		{"pause.tar", "registry.k8s.io/pause:3.6", []string{"pause"}, "/pause"},
		{"workload.tar", "docker.io/rayproject/ray:2.46.0", []string{"bin/bash", "bin/ray", "bin/wget", "bin/sh", "bin/envdump", "bin/workload"}, ""},
		{"workload.tar", "docker.io/hami-go/workload:0.1.0", []string{"bin/busybox", "bin/getenv", "bin/cudaprobe",
			strings.TrimPrefix(loader, "/"), strings.TrimPrefix(libc, "/"), "etc/ld.so.conf", "usr/lib/x86_64-linux-gnu/"}, ""},
		{"workload-imageenv.tar", "docker.io/hami-go/workload-imageenv:0.1.0", []string{"bin/getenv", "bin/sh"}, ""},
		{"hamicore.tar", HAMiCoreRepo + ":8f3a89c67b03", []string{"k8s-vgpu/lib/nvidia/libvgpu.so.8f3a89c67b03"}, ""},
	} {
		tag, _ := name.NewTag(tc.tag)
		img, err := tarball.ImageFromPath(filepath.Join(out, tc.file), &tag)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.file, tc.tag, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture == "" || !strings.HasPrefix(cf.Config.Env[0], "PATH=") {
			t.Fatalf("%s config %+v", tc.tag, cf)
		}
		if wantEnv := tc.file == "workload-imageenv.tar"; wantEnv != (len(cf.Config.Env) == 2 && cf.Config.Env[1] == ImageEnv) {
			t.Fatalf("%s env %q", tc.tag, cf.Config.Env)
		}
		if got := strings.Join(cf.Config.Entrypoint, " "); got != tc.entrypoint {
			t.Fatalf("%s entrypoint %q, want %q", tc.tag, got, tc.entrypoint)
		}
		layers, _ := img.Layers()
		if len(layers) != 1 {
			t.Fatalf("%s: %d layers", tc.tag, len(layers))
		}
		rc, _ := layers[0].Uncompressed()
		names := map[string]bool{}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names[h.Name] = true
		}
		rc.Close()
		for _, f := range tc.wantFiles {
			if !names[f] {
				keys := make([]string, 0, len(names))
				for k := range names {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				t.Fatalf("%s lacks %s; has %v", tc.tag, f, keys)
			}
		}
	}
}

func TestBuildNamesMissingInput(t *testing.T) {
	_, err := Build(Config{Out: t.TempDir(), WorkloadBin: "/nonexistent/workload", BashBin: "/bin/sh", BusyboxBin: "/bin/sh"})
	if err == nil || !strings.Contains(err.Error(), `--workload-bin "/nonexistent/workload"`) {
		t.Fatalf("error %v", err)
	}
}

// A version that makes no image tag is refused before any tar is written (it used to panic).
func TestBuildNamesBadVersion(t *testing.T) {
	out := t.TempDir()
	_, err := Build(Config{Out: out, WorkloadBin: "/bin/sh", BashBin: "/bin/sh", BusyboxBin: "/bin/sh", Version: "bad tag!", RayVersion: "2.46.0"})
	if err == nil || !strings.Contains(err.Error(), `--version: "docker.io/hami-go/workload:bad tag!" is not an image reference`) {
		t.Fatalf("error %v", err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("%d files written: %v", len(entries), entries)
	}
}

// A missing cudaprobe or glibc file is an error naming the flag and the path, before any tar.
func TestBuildNamesMissingCudaprobeInput(t *testing.T) {
	out := t.TempDir()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{CudaprobeBin: "/nonexistent/cudaprobe"}, `--cudaprobe-bin "/nonexistent/cudaprobe"`},
		{Config{CudaprobeBin: "/bin/sh", GlibcFiles: []string{"/nonexistent/libc.so.6"}}, `glibc file "/nonexistent/libc.so.6"`},
		{Config{HAMiCoreLib: "/nonexistent/libvgpu.so", HAMiCoreTag: "x"}, `--hamicore-lib "/nonexistent/libvgpu.so"`},
		{Config{HAMiCoreLib: "/bin/sh", HAMiCoreTag: "bad tag"}, `--hamicore-tag "bad tag"`},
	} {
		tc.cfg.Out, tc.cfg.WorkloadBin, tc.cfg.BashBin, tc.cfg.BusyboxBin = out, "/bin/sh", "/bin/sh", "/bin/sh"
		tc.cfg.Version, tc.cfg.RayVersion = "0.1.0", "2.46.0"
		if _, err := Build(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want it to name %s", err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "workload.tar")); err == nil {
		t.Errorf("workload.tar written despite the error")
	}
}

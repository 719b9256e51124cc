package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDropTestSubdir(t *testing.T) {
	in := "add_subdirectory(src)\nadd_subdirectory(test)\n\nif (BUILD_DOCKER STREQUAL true)\n    add_subdirectory(dockerfiles)\nendif()"
	got, ok := dropTestSubdir(in)
	if !ok || got != "add_subdirectory(src)\n\nif (BUILD_DOCKER STREQUAL true)\n    add_subdirectory(dockerfiles)\nendif()" {
		t.Fatalf("dropTestSubdir = %v %q", ok, got)
	}
	if _, ok := dropTestSubdir("add_subdirectory(src)\n"); ok {
		t.Fatal("dropped a line that is not there")
	}
}

// fakeCUDA makes a CUDA toolkit folder with bin/nvcc and the libcuda.so stub.
func fakeCUDA(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	for _, f := range []string{"bin/nvcc", "lib64/stubs/libcuda.so", "lib64/stubs/libnvidia-ml.so"} {
		_ = os.MkdirAll(filepath.Join(home, filepath.Dir(f)), 0o755)
		if err := os.WriteFile(filepath.Join(home, f), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

// fakeSrc makes a staged HAMi-core source.
func fakeSrc(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	_ = os.MkdirAll(filepath.Join(src, "src"), 0o755)
	_ = os.WriteFile(filepath.Join(src, "CMakeLists.txt"), []byte("project(libvgpu)\nadd_subdirectory(src)\nadd_subdirectory(test)\n"), 0o644)
	_ = os.WriteFile(filepath.Join(src, "src", "libvgpu.c"), []byte("int x;\n"), 0o644)
	_ = os.WriteFile(filepath.Join(src, hamiCoreCommitFile), []byte("8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811\n"), 0o644)
	return src
}

func TestBuildHAMiCoreSkips(t *testing.T) {
	out := outDir(t)
	c := hamiCoreConfig{Src: filepath.Join(t.TempDir(), "none"), BuildDir: t.TempDir(), CMake: "cmake", NVCC: "nvcc", CUDAHome: filepath.Join(t.TempDir(), "cuda")}
	if b := buildHAMiCore(context.Background(), (&fakeHost{}).host(), out, c); b.Status != Skip || !strings.Contains(b.Reason, "no HAMi-core source in the stage") {
		t.Fatalf("no source: %+v", b)
	}
	if b, err := readHAMiCoreBuild(out); err != nil || b.Status != Skip {
		t.Fatalf("raw/hami-core-build.json = %+v, %v", b, err)
	}
	c.Src = fakeSrc(t)
	if b := buildHAMiCore(context.Background(), (&fakeHost{}).host(), out, c); b.Status != Skip || b.Reason != "cmake not found in PATH: cannot build HAMi-core" {
		t.Fatalf("no cmake: %+v", b)
	}
	f := &fakeHost{path: map[string]bool{"cmake": true}}
	if b := buildHAMiCore(context.Background(), f.host(), out, c); b.Status != Skip || !strings.Contains(b.Reason, "nvcc not found in PATH nor in") {
		t.Fatalf("no nvcc: %+v", b)
	}
	c.CUDAHome = fakeCUDA(t)
	_ = os.Remove(filepath.Join(c.CUDAHome, "lib64", "stubs", "libcuda.so"))
	if b := buildHAMiCore(context.Background(), f.host(), out, c); b.Status != Fail || !strings.Contains(b.Reason, "no libcuda.so stub") {
		t.Fatalf("no stub: %+v", b)
	}
}

func TestBuildHAMiCore(t *testing.T) {
	out := outDir(t)
	c := hamiCoreConfig{Src: fakeSrc(t), BuildDir: t.TempDir(), CMake: "cmake", NVCC: "nvcc", CUDAHome: fakeCUDA(t)}
	f := &fakeHost{path: map[string]bool{"cmake": true}, answers: map[string]fakeAnswer{
		"cmake -S":      {stdout: "-- Configuring done\n"},
		"cmake --build": {stdout: "[100%] Built target vgpu\n"},
	}}
	f.onRun = func(key string, _ []string) {
		if key == "cmake --build" {
			_ = os.MkdirAll(filepath.Join(c.BuildDir, "build"), 0o755)
			_ = os.WriteFile(filepath.Join(c.BuildDir, "build", "libvgpu.so"), nil, 0o644)
		}
	}
	b := buildHAMiCore(context.Background(), f.host(), out, c)
	stubs := filepath.Join(c.CUDAHome, "lib64", "stubs")
	if b.Status != Pass || b.Library != filepath.Join(c.BuildDir, "build", "libvgpu.so") || b.Stubs != stubs || b.Commit != "8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811" {
		t.Fatalf("build = %+v", b)
	}
	top, _ := os.ReadFile(filepath.Join(c.BuildDir, "src", "CMakeLists.txt"))
	if strings.Contains(string(top), "add_subdirectory(test)") || !strings.Contains(string(top), "add_subdirectory(src)") {
		t.Fatalf("copied CMakeLists.txt =\n%s", top)
	}
	if orig, _ := os.ReadFile(filepath.Join(c.Src, "CMakeLists.txt")); !strings.Contains(string(orig), "add_subdirectory(test)") {
		t.Fatal("the staged source was changed")
	}
	if env := strings.Join(f.envs["cmake -S"], " "); !strings.Contains(env, "CUDA_HOME="+c.CUDAHome) {
		t.Fatalf("cmake env = %q", env)
	}
	log := readRaw(out, "hami-core-build.log")
	for _, want := range []string{"-DCMAKE_POLICY_VERSION_MINIMUM=3.5", "-DCMAKE_SHARED_LINKER_FLAGS=-L" + stubs, "-DHOOK_MEMINFO_ENABLE=1",
		"--target vgpu", "Built target vgpu"} {
		if !strings.Contains(log, want) {
			t.Errorf("build log lacks %q:\n%s", want, log)
		}
	}
	// A failing build fails with the log's tail.
	f.answers["cmake --build"] = fakeAnswer{stderr: "memory.c:12: error: unknown type name 'CUdeviceptr'\n", err: os.ErrInvalid}
	f.onRun = nil
	c.BuildDir = t.TempDir()
	b = buildHAMiCore(context.Background(), f.host(), out, c)
	if b.Status != Fail || !strings.Contains(b.Reason, "HAMi-core build failed") || !strings.Contains(b.Reason, "unknown type name 'CUdeviceptr'") {
		t.Fatalf("failing build = %+v", b)
	}
}

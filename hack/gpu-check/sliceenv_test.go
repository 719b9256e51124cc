package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

const testUUID = "GPU-8f6c1a2b-0000-1111-2222-333344445555"

// The env the isolation check runs with is pkg/gpuenv's for a 4000 MiB / 30% grant, with the
// container paths turned into host paths.
func TestSliceEnvHAMiCore(t *testing.T) {
	lib := "/tmp/hami-go-isolation.x/hami-core/build/libvgpu.so"
	exists := func(p string) bool { return p == lib }
	e := sliceEnv(sliceSpec{Enforcement: "hami-core", UUID: testUUID, Model: "NVIDIA H200", Library: lib}, exists)
	want := map[string]string{
		"CUDA_VISIBLE_DEVICES":            testUUID,
		"NVIDIA_VISIBLE_DEVICES":          testUUID,
		"CUDA_DEVICE_MEMORY_LIMIT_0":      "4000m",
		"CUDA_DEVICE_SM_LIMIT":            "30",
		"CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/hami-go-gpu-check.cache",
		"LD_PRELOAD":                      "/usr/local/vgpu/libvgpu.so",
	}
	for k, v := range want {
		if e.Env[k] != v {
			t.Errorf("gpuenv %s = %q, want %q", k, e.Env[k], v)
		}
	}
	if _, ok := e.Env["CUDA_OVERSUBSCRIBE"]; ok {
		t.Errorf("CUDA_OVERSUBSCRIBE set without memory scaling: %v", e.Env)
	}
	host := hostEnv(e, "/tmp/w/steps.cache")
	if host["LD_PRELOAD"] != lib || host["CUDA_DEVICE_MEMORY_SHARED_CACHE"] != "/tmp/w/steps.cache" ||
		host["CUDA_DEVICE_MEMORY_LIMIT_0"] != "4000m" || host["CUDA_DEVICE_SM_LIMIT"] != "30" || len(host) != len(e.Env) {
		t.Fatalf("host env = %v", host)
	}
	lines := envLines(host)
	if !strings.HasPrefix(lines, "CUDA_DEVICE_MEMORY_LIMIT_0=4000m\nCUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/w/steps.cache\nCUDA_DEVICE_SM_LIMIT=30\n") ||
		!strings.Contains(lines, "\nLD_PRELOAD="+lib+"\n") || !strings.HasSuffix(lines, "\n") {
		t.Fatalf("env lines =\n%s", lines)
	}
	// Without the library (the build failed) no preload is set.
	if e := sliceEnv(sliceSpec{Enforcement: "hami-core", UUID: testUUID, Library: lib}, func(string) bool { return false }); e.Env["LD_PRELOAD"] != "" {
		t.Fatalf("LD_PRELOAD without the library: %v", e.Env)
	}
}

func TestSliceEnvMPS(t *testing.T) {
	e := sliceEnv(sliceSpec{Enforcement: "mps", UUID: testUUID, MPSPipeDir: "/tmp/hami-go-mps.x"}, fileExists)
	host := hostEnv(e, "")
	for k, v := range map[string]string{
		"CUDA_VISIBLE_DEVICES":              testUUID,
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=4000M",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
		"CUDA_MPS_PIPE_DIRECTORY":           "/tmp/hami-go-mps.x",
	} {
		if host[k] != v {
			t.Errorf("%s = %q, want %q", k, host[k], v)
		}
	}
	if _, ok := host["CUDA_DEVICE_MEMORY_SHARED_CACHE"]; ok {
		t.Errorf("MPS env has HAMi-core's cache: %v", host)
	}
}

// gpucheck slice-env prints the env as KEY=VALUE lines.
func TestSliceEnvCommand(t *testing.T) {
	var o, e bytes.Buffer
	rc := run(context.Background(), []string{"slice-env", "--out", t.TempDir(), "--uuid", testUUID}, (&fakeHost{}).host(), t.TempDir(), &o, &e)
	if rc != 0 || !strings.Contains(o.String(), "CUDA_DEVICE_MEMORY_LIMIT_0=4000m\n") || !strings.Contains(o.String(), "\nCUDA_DEVICE_SM_LIMIT=30\n") {
		t.Fatalf("rc %d, stdout:\n%s\nstderr: %s", rc, o.String(), e.String())
	}
}

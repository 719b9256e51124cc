package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

const testUUID = "GPU-8f6c1a2b-0000-1111-2222-333344445555"

// The env the isolation check runs with is pkg/gpuenv's for a 4000 MiB / 30% grant (no
// CUDA_VISIBLE_DEVICES, the GPU's own compute limit, PCI order), with the container paths turned
// into host paths and the process pinned to the slice's GPU by its host ordinal.
func TestSliceEnvHAMiCore(t *testing.T) {
	lib := "/tmp/hami-go-isolation.x/hami-core/build/libvgpu.so"
	exists := func(p string) bool { return p == lib }
	e := sliceEnv(sliceSpec{Enforcement: "hami-core", UUID: testUUID, Model: "NVIDIA H200", Library: lib}, exists)
	want := map[string]string{
		"HAMI_GO_GPU_UUIDS":               testUUID,
		"NVIDIA_VISIBLE_DEVICES":          testUUID,
		"CUDA_DEVICE_ORDER":               "PCI_BUS_ID",
		"CUDA_DEVICE_MEMORY_LIMIT_0":      "4000m",
		"CUDA_DEVICE_SM_LIMIT_0":          "30",
		"CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/hami-go-gpu-check.cache",
		"LD_PRELOAD":                      "/usr/local/vgpu/libvgpu.so",
	}
	for k, v := range want {
		if e.Env[k] != v {
			t.Errorf("gpuenv %s = %q, want %q", k, e.Env[k], v)
		}
	}
	for _, k := range []string{"CUDA_OVERSUBSCRIBE", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_SM_LIMIT"} {
		if _, ok := e.Env[k]; ok {
			t.Errorf("%s set in the container env: %v", k, e.Env)
		}
	}
	host := hostEnv(e, "/tmp/w/steps.cache")
	if host["LD_PRELOAD"] != lib || host["CUDA_DEVICE_MEMORY_SHARED_CACHE"] != "/tmp/w/steps.cache" ||
		host["CUDA_DEVICE_MEMORY_LIMIT_0"] != "4000m" || host["CUDA_DEVICE_SM_LIMIT_0"] != "30" || host["CUDA_VISIBLE_DEVICES"] != "0" ||
		host["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID" || len(host) != len(e.Env)+1 {
		t.Fatalf("host env = %v", host)
	}
	lines := envLines(host)
	if !strings.HasPrefix(lines, "CUDA_DEVICE_MEMORY_LIMIT_0=4000m\nCUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/w/steps.cache\nCUDA_DEVICE_ORDER=PCI_BUS_ID\nCUDA_DEVICE_SM_LIMIT_0=30\nCUDA_VISIBLE_DEVICES=0\n") ||
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
		"HAMI_GO_GPU_UUIDS":                 testUUID,
		"CUDA_VISIBLE_DEVICES":              "0", // the host ordinal of the slice's GPU
		"CUDA_DEVICE_ORDER":                 "PCI_BUS_ID",
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=4000M",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
		"CUDA_MPS_PIPE_DIRECTORY":           "/tmp/hami-go-mps.x",
	} {
		if host[k] != v {
			t.Errorf("%s = %q, want %q", k, host[k], v)
		}
	}
	for _, k := range []string{"CUDA_DEVICE_MEMORY_SHARED_CACHE", "CUDA_VISIBLE_DEVICES"} {
		if _, ok := e.Env[k]; ok {
			t.Errorf("MPS container env has %s: %v", k, e.Env)
		}
	}
}

// gpucheck slice-env prints the env as KEY=VALUE lines.
func TestSliceEnvCommand(t *testing.T) {
	var o, e bytes.Buffer
	rc := run(context.Background(), []string{"slice-env", "--out", t.TempDir(), "--uuid", testUUID}, (&fakeHost{}).host(), t.TempDir(), &o, &e)
	if rc != 0 || !strings.Contains(o.String(), "CUDA_DEVICE_MEMORY_LIMIT_0=4000m\n") || !strings.Contains(o.String(), "\nCUDA_DEVICE_SM_LIMIT_0=30\n") ||
		strings.Contains(o.String(), "CUDA_VISIBLE_DEVICES=") {
		t.Fatalf("rc %d, stdout:\n%s\nstderr: %s", rc, o.String(), e.String())
	}
}

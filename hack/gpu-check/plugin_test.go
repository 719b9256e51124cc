package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPluginCheck(t *testing.T) {
	out := outDir(t)
	vals := []Value{eq("Allocate CUDA_VISIBLE_DEVICES", "GPU-a", "GPU-a"), eq("Allocate CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=4000M", "0=4000M")}
	f := &fakeHost{answers: map[string]fakeAnswer{"deviceplugin.test -test.run": {stdout: "=== RUN   TestGPUCheckNVML\n--- PASS: TestGPUCheckNVML (2.5s)\nPASS\n"}}}
	f.onRun = func(string, []string) {
		b, _ := json.Marshal(vals)
		_ = os.WriteFile(filepath.Join(rawDir(out), "device-plugin-values.json"), b, 0o644)
	}
	r := pluginCheck(context.Background(), f.host(), out, "/stage/bin/deviceplugin.test", "/tmp/hami-go-mps.x")
	if r.Status != Pass || len(r.Values) != 2 {
		t.Fatalf("plugin = %s (%s), want pass with 2 values", r.Status, r.Reason)
	}
	env := strings.Join(f.envs["deviceplugin.test -test.run"], " ")
	if env != "HAMI_GO_GPU_CHECK=1 HAMI_GO_GPU_CHECK_OUT="+rawDir(out)+" HAMI_GO_GPU_CHECK_MPS_PIPE_DIR=/tmp/hami-go-mps.x" {
		t.Fatalf("test env = %q", env)
	}
	if !strings.Contains(readRaw(out, "device-plugin.log"), "--- PASS") {
		t.Fatal("raw/device-plugin.log not written")
	}

	// The values all match but the test binary failed (e.g. a t.Fatal before a value).
	f.answers["deviceplugin.test -test.run"] = fakeAnswer{stdout: "--- FAIL: TestGPUCheckNVML\n    no registration within 10s\n", err: errors.New("exit status 1")}
	r = pluginCheck(context.Background(), f.host(), out, "deviceplugin.test", "/p")
	if r.Status != Fail || !strings.Contains(r.Reason, "exit status 1") || !strings.Contains(r.Reason, "no registration") {
		t.Fatalf("failed binary: %s (%s)", r.Status, r.Reason)
	}

	// The test skipped (HAMI_GO_GPU_CHECK not seen): a failure, not a pass.
	f.answers["deviceplugin.test -test.run"] = fakeAnswer{stdout: "--- SKIP: TestGPUCheckNVML\n"}
	if r = pluginCheck(context.Background(), f.host(), out, "deviceplugin.test", "/p"); r.Status != Fail || !strings.HasPrefix(r.Reason, "the test skipped") {
		t.Fatalf("skipped test: %s (%s)", r.Status, r.Reason)
	}

	// No values file at all.
	f.onRun = nil
	_ = os.Remove(filepath.Join(rawDir(out), "device-plugin-values.json"))
	f.answers["deviceplugin.test -test.run"] = fakeAnswer{stderr: "error while loading shared libraries", err: errors.New("exit status 127")}
	if r = pluginCheck(context.Background(), f.host(), out, "deviceplugin.test", "/p"); r.Status != Fail || !strings.Contains(r.Reason, "no values") ||
		!strings.Contains(r.Reason, "exit status 127") {
		t.Fatalf("no values: %s (%s)", r.Status, r.Reason)
	}
}

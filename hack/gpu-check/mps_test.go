package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func rateResult(tflops float64) pyResult {
	r := pyResult{Mode: "rate"}
	r.Rate = &struct {
		TFLOPS float64 `json:"tflops"`
		Iters  int     `json:"iters"`
	}{TFLOPS: tflops, Iters: 100}
	return r
}

func TestEvalMPSEnforced(t *testing.T) {
	alloc := pyResult{Mode: "alloc", Within: &pyAlloc{MiB: 3000, OK: true},
		Beyond: &pyAlloc{MiB: 6000, Error: "OutOfMemoryError: CUDA out of memory. Tried to allocate 5.86 GiB"}}
	vals := evalMPS(alloc, rateResult(180.5), rateResult(640.2), "123456\n")
	if len(vals) != 4 {
		t.Fatalf("%d values, want 4", len(vals))
	}
	for _, v := range vals {
		if !v.OK {
			t.Errorf("%+v differs, want every value ok", v)
		}
	}
	if vals[3].Got != "0.28 (180.5 / 640.2 TFLOPS)" || vals[2].Got != "123456" {
		t.Fatalf("ratio %q, server %q", vals[3].Got, vals[2].Got)
	}
}

func TestEvalMPSNotEnforced(t *testing.T) {
	alloc := pyResult{Mode: "alloc", Within: &pyAlloc{MiB: 3000, OK: true}, Beyond: &pyAlloc{MiB: 6000, OK: true}}
	vals := evalMPS(alloc, rateResult(600), rateResult(640), "")
	for i, want := range []bool{true, false, false, false} {
		if vals[i].OK != want {
			t.Errorf("value %d %+v: ok = %v, want %v", i, vals[i], vals[i].OK, want)
		}
	}
	if vals[1].Got != "succeeds" || vals[2].Got != "none" || !strings.HasPrefix(vals[3].Got, "0.94 ") {
		t.Fatalf("values = %+v", vals)
	}
	// A failure that is not out-of-memory does not count as enforcement.
	alloc.Beyond = &pyAlloc{MiB: 6000, Error: "RuntimeError: CUDA error: an illegal memory access"}
	if v := evalMPS(alloc, rateResult(1), rateResult(4), "1")[1]; v.OK {
		t.Fatalf("a non-OOM failure passed: %+v", v)
	}
	// A client that crashed reports its error.
	v := evalMPS(pyResult{Error: "Traceback\nRuntimeError: No CUDA GPUs are available"}, rateResult(1), pyResult{Error: "no result"}, "1")
	if v[0].OK || v[0].Got != "error: Traceback\nRuntimeError: No CUDA GPUs are available" || v[3].OK || v[3].Got != "100% client: no result" {
		t.Fatalf("crashed clients: %+v", v)
	}
}

func TestMPSCheckSkips(t *testing.T) {
	out := outDir(t)
	cfg := mpsConfig{Control: "nvidia-cuda-mps-control", Python: "python3", Script: "mps_check.py", SMI: "nvidia-smi", PipeDir: "/tmp/p"}
	r := mpsCheck(context.Background(), (&fakeHost{}).host(), out, cfg)
	if r.Status != Skip || !strings.Contains(r.Reason, "no Allocate env") {
		t.Fatalf("without the Allocate env: %s (%s)", r.Status, r.Reason)
	}
	env, _ := json.Marshal(map[string]string{"HAMI_GO_GPU_UUIDS": "GPU-a", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25"})
	if err := os.WriteFile(filepath.Join(rawDir(out), "allocate-env.json"), env, 0o644); err != nil {
		t.Fatal(err)
	}
	r = mpsCheck(context.Background(), (&fakeHost{}).host(), out, cfg)
	if r.Status != Skip || r.Reason != "nvidia-cuda-mps-control not found in PATH: MPS is not installed here" {
		t.Fatalf("without MPS: %s (%s)", r.Status, r.Reason)
	}
	f := &fakeHost{path: map[string]bool{"nvidia-cuda-mps-control": true}, answers: map[string]fakeAnswer{
		"python3 -c":                          {stdout: "2.5.1 12.4 True"},
		"nvidia-smi --query-gpu=compute_mode": {stdout: "Prohibited\n"},
	}}
	r = mpsCheck(context.Background(), f.host(), out, cfg)
	if r.Status != Skip || !strings.Contains(r.Reason, `compute mode "Prohibited"`) {
		t.Fatalf("prohibited: %s (%s)", r.Status, r.Reason)
	}
	for _, c := range f.calls {
		if strings.HasPrefix(c, "nvidia-cuda-mps-control") || strings.HasPrefix(c, "nvidia-smi -c") {
			t.Fatalf("ran %q in Prohibited mode, want nothing that starts MPS or changes the mode", c)
		}
	}
}

// The daemon starts with the private pipe and log folders; clients run with the Allocate env
// file; a daemon that cannot start is reported with its log.
func TestMPSCheckRuns(t *testing.T) {
	out := outDir(t)
	env, _ := json.Marshal(map[string]string{"HAMI_GO_GPU_UUIDS": "GPU-a"})
	_ = os.WriteFile(filepath.Join(rawDir(out), "allocate-env.json"), env, 0o644)
	cfg := mpsConfig{Control: "nvidia-cuda-mps-control", Python: "python3", Script: "mps_check.py", SMI: "nvidia-smi", PipeDir: "/tmp/p"}
	write := func(name string, v any) {
		b, _ := json.Marshal(v)
		_ = os.WriteFile(filepath.Join(rawDir(out), name), b, 0o644)
	}
	f := &fakeHost{path: map[string]bool{"nvidia-cuda-mps-control": true}, answers: map[string]fakeAnswer{
		"python3 -c":                          {stdout: "2.5.1 12.4 True"},
		"nvidia-smi --query-gpu=compute_mode": {stdout: "Default\n"},
		"nvidia-cuda-mps-control -d":          {},
		"sh -c":                               {stdout: "4242\n"},
		"python3 mps_check.py":                {},
	}}
	n := 0
	f.onRun = func(key string, _ []string) {
		if key != "python3 mps_check.py" {
			return
		}
		n++
		switch n {
		case 1:
			write("mps-alloc.json", pyResult{Within: &pyAlloc{MiB: 3000, OK: true}, Beyond: &pyAlloc{MiB: 6000, Error: "CUDA out of memory"}})
		case 2:
			write("mps-rate25.json", rateResult(100))
		case 3:
			write("mps-rate100.json", rateResult(400))
		}
	}
	r := mpsCheck(context.Background(), f.host(), out, cfg)
	if r.Status != Pass || len(r.Values) != 5 {
		t.Fatalf("mps = %s (%s) %+v, want pass with 5 values", r.Status, r.Reason, r.Values)
	}
	denv := strings.Join(f.envs["nvidia-cuda-mps-control -d"], " ")
	if denv != "CUDA_MPS_PIPE_DIRECTORY=/tmp/p CUDA_MPS_LOG_DIRECTORY="+filepath.Join(rawDir(out), "mps-log") {
		t.Fatalf("daemon env = %q", denv)
	}
	if got := readRaw(out, "mps-servers.txt"); got != "4242" {
		t.Fatalf("raw/mps-servers.txt = %q", got)
	}

	f.answers["nvidia-cuda-mps-control -d"] = fakeAnswer{stderr: "An instance of this daemon is already running", err: os.ErrExist}
	_ = os.WriteFile(filepath.Join(rawDir(out), "mps-log", "control.log"), []byte("[2026-12-01] Failed to start\n"), 0o644)
	r = mpsCheck(context.Background(), f.host(), out, cfg)
	if r.Status != Skip || !strings.Contains(r.Reason, "MPS cannot start here") || !strings.Contains(r.Reason, "already running") ||
		!strings.Contains(r.Reason, "Failed to start") {
		t.Fatalf("daemon failing: %s (%s), want skip with its message and log", r.Status, r.Reason)
	}
}

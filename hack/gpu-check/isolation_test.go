package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Outputs as isolation_probe.py writes them under HAMi-core.
const (
	probeStepsJSON = `{"mode": "steps", "env": {"HAMI_GO_GPU_UUIDS": "%UUID%", "CUDA_VISIBLE_DEVICES": "0", "LD_PRELOAD": "/w/libvgpu.so",
 "CUDA_DEVICE_MEMORY_LIMIT_0": "4000m", "CUDA_DEVICE_SM_LIMIT_0": "30", "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/w/steps.cache"},
 "libvgpu": ["/w/libvgpu.so"], "torch": "2.5.1", "device": "NVIDIA H200", "memGetInfoMiB": {"api": "torch.cuda.mem_get_info", "free": 4000, "total": 4000},
 "steps": [{"mib": 1000, "ok": true}, {"mib": 2000, "ok": true}, {"mib": 3000, "ok": true}, {"mib": 3900, "ok": true},
  {"mib": 4100, "ok": false, "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 3.91 GiB"},
  {"mib": 5000, "ok": false, "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 4.88 GiB."}]}`
	probeSharedJSON = `{"mode": "shared", "first": {"mib": 2500, "ok": true}, "memGetInfoMiB": {"api": "torch.cuda.mem_get_info", "free": 1500, "total": 4000},
 "second": {"mib": 2500, "ok": false, "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.44 GiB."}}`
	probeLimitedJSON = `{"mode": "rate", "rate": {"n": 8192, "iters": 3000, "seconds": 30.01, "tflops": 201.5}}`
	probeRefJSON     = `{"mode": "rate", "rate": {"n": 8192, "iters": 4000, "seconds": 10.0, "tflops": 650.0}}`
)

// testInfo is build.sh's record when the source lacks the shipped commit.
var testInfo = hamiCoreInfo{ShippedCommit: "b216ba1be1b8e21488d1c7370ed3357b3049aad1", ShippedImage: "docker.io/projecthami/hamicore:v2.10.0",
	StagedCommit: "8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811", StagedFrom: "/work/.mirror/Project-HAMi+HAMi-core/repo"}

func hamiEnv() map[string]string {
	return map[string]string{"HAMI_GO_GPU_UUIDS": testUUID, "CUDA_VISIBLE_DEVICES": "0", "LD_PRELOAD": "/w/libvgpu.so", "CUDA_DEVICE_MEMORY_LIMIT_0": "4000m",
		"CUDA_DEVICE_SM_LIMIT_0": "30", "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/w/steps.cache"}
}

func parseProbe(t *testing.T, s string) probeOut {
	t.Helper()
	var p probeOut
	if err := json.Unmarshal([]byte(strings.ReplaceAll(s, "%UUID%", testUUID)), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func enforcedProbes(t *testing.T) isoProbes {
	return isoProbes{Steps: parseProbe(t, probeStepsJSON), Shared: parseProbe(t, probeSharedJSON),
		Limited: parseProbe(t, probeLimitedJSON), Ref: parseProbe(t, probeRefJSON)}
}

func TestEvalIsolationEnforced(t *testing.T) {
	vals, row := evalIsolation(enforcedProbes(t), hamiEnv(), false)
	for _, v := range vals {
		if !v.OK {
			t.Errorf("%+v differs, want every value ok", v)
		}
	}
	if len(vals) != 12 {
		t.Fatalf("%d values, want 12: %+v", len(vals), vals)
	}
	if v := mappedValue("steps client", enforcedProbes(t).Steps); !v.OK || v.Got != "yes: /w/libvgpu.so" {
		t.Fatalf("mapped = %+v", v)
	}
	want := isolationRow{LimitMiB: 4000, LargestOKMiB: 3900, FirstFailedMiB: 4100,
		Error:      "OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 3.91 GiB",
		SMShare:    "0.31 (201.5 TFLOPS over 30 s / 650.0 TFLOPS over 10 s)",
		MemoryView: "torch.cuda.mem_get_info: total 4000 MiB, free 4000 MiB (the limit's view)"}
	if row != want {
		t.Fatalf("row = %+v\nwant  %+v", row, want)
	}
}

func TestEvalIsolationNotEnforced(t *testing.T) {
	p := enforcedProbes(t)
	// No preload: every step succeeds and the whole GPU shows.
	p.Steps.Env["LD_PRELOAD"] = ""
	for i := range p.Steps.Steps {
		p.Steps.Steps[i] = probeAlloc{MiB: p.Steps.Steps[i].MiB, OK: true}
	}
	p.Steps.MemInfo = &memView{API: "torch.cuda.mem_get_info", Free: 142000, Total: 143156}
	p.Shared.Second = &probeAlloc{MiB: 2500, OK: true}
	p.Limited = probeOut{Error: "no result (the client timed out or crashed; see its .err file)"}
	vals, row := evalIsolation(p, hamiEnv(), false)
	bad := map[string]bool{}
	for _, v := range vals {
		if !v.OK {
			bad[v.What] = true
		}
	}
	for _, w := range []string{"client env LD_PRELOAD", "allocate 4100 MiB past the 4000 MiB limit",
		"second client allocates 2500 MiB meanwhile (one 4000 MiB limit for both)"} {
		if !bad[w] {
			t.Errorf("%q passed, want it to differ; differing: %v", w, bad)
		}
	}
	if len(bad) != 3 {
		t.Errorf("differing %v, want exactly 3 (the SM share and memory view are report-only)", bad)
	}
	if row.LargestOKMiB != 5000 || row.FirstFailedMiB != 0 || !strings.Contains(row.MemoryView, "whole GPU") ||
		!strings.HasPrefix(row.SMShare, "limited client: no result") {
		t.Fatalf("row = %+v", row)
	}
	// A failure that is not out-of-memory is no enforcement.
	p = enforcedProbes(t)
	p.Steps.Steps[4].Error = "RuntimeError: CUDA error: an illegal memory access was encountered"
	vals, _ = evalIsolation(p, hamiEnv(), false)
	for _, v := range vals {
		if strings.HasPrefix(v.What, "allocate 4100") && v.OK {
			t.Fatalf("a non-OOM failure passed: %+v", v)
		}
	}
	// MPS limits each client: two clients together is report-only.
	p = enforcedProbes(t)
	p.Shared.Second = &probeAlloc{MiB: 2500, OK: true}
	p.Steps.Env = map[string]string{"HAMI_GO_GPU_UUIDS": testUUID, "CUDA_VISIBLE_DEVICES": "0", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4000M",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30", "CUDA_MPS_PIPE_DIRECTORY": "/tmp/p"}
	vals, _ = evalIsolation(p, p.Steps.Env, true)
	for _, v := range vals {
		if !v.OK {
			t.Errorf("mps: %+v differs", v)
		}
	}
}

// isoHost fakes nvidia-smi, python3 and the probe clients: the n-th client writes outs[n] as
// raw/<prefix>-<labels[n]>.json; envs collects each client's env.
func isoHost(out, prefix string, labels []string, envs *[][]string, outs ...string) *fakeHost {
	f := &fakeHost{path: map[string]bool{"nvidia-cuda-mps-control": true}, answers: map[string]fakeAnswer{
		"python3 -c": {stdout: "2.5.1 12.4 True"},
		"nvidia-smi --query-gpu=" + smiQueryFields: {stdout: "0, " + testUUID + ", NVIDIA H200, 143771, 00000000:19:00.0, 9.0, 570.86.15\n"},
		"nvidia-smi --query-gpu=compute_mode":      {stdout: "Default\n"},
		"nvidia-cuda-mps-control -d":               {},
		"sh -c":                                    {stdout: "4242\n"},
		"python3 isolation_probe.py":               {},
	}}
	n := 0
	f.onRun = func(key string, env []string) {
		if key != "python3 isolation_probe.py" || n >= len(outs) {
			return
		}
		if envs != nil {
			*envs = append(*envs, env)
		}
		_ = os.WriteFile(filepath.Join(rawDir(out), prefix+"-"+labels[n]+".json"), []byte(strings.ReplaceAll(outs[n], "%UUID%", testUUID)), 0o644)
		n++
	}
	return f
}

func writeBuild(t *testing.T, out string, b hamiCoreBuild) {
	t.Helper()
	j, _ := json.Marshal(b)
	if err := os.WriteFile(filepath.Join(rawDir(out), "hami-core-build.json"), j, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestIsolationCheck(t *testing.T) {
	out := outDir(t)
	work := t.TempDir()
	c := isoConfig{Python: "python3", Script: "isolation_probe.py", SMI: "nvidia-smi", WorkDir: work, SMSeconds: 30, RefSeconds: 10}
	if r := isolationCheck(context.Background(), (&fakeHost{}).host(), out, c); r.Status != Fail || !strings.Contains(r.Reason, "no HAMi-core build result") {
		t.Fatalf("without a build: %s (%s)", r.Status, r.Reason)
	}
	writeBuild(t, out, hamiCoreBuild{Status: Skip, Reason: "cmake not found in PATH: cannot build HAMi-core"})
	if r := isolationCheck(context.Background(), (&fakeHost{}).host(), out, c); r.Status != Skip || r.Reason != "HAMi-core build: cmake not found in PATH: cannot build HAMi-core" {
		t.Fatalf("build skipped: %s (%s)", r.Status, r.Reason)
	}
	writeBuild(t, out, hamiCoreBuild{Status: Fail, Reason: "HAMi-core build failed: exit status 2; log tail: error: cuda.h: No such file"})
	if r := isolationCheck(context.Background(), (&fakeHost{}).host(), out, c); r.Status != Fail || !strings.Contains(r.Reason, "cuda.h") {
		t.Fatalf("build failed: %s (%s)", r.Status, r.Reason)
	}
	built := filepath.Join(t.TempDir(), "libvgpu.so")
	_ = os.WriteFile(built, []byte("ELF"), 0o644)
	writeBuild(t, out, withVersion(hamiCoreBuild{Status: Pass, Library: built, Commit: "8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811"}, testInfo))
	// The library is staged beside gpuenv's preload file; without unshare here, the preload file
	// is removed and gpuenv's env has LD_PRELOAD (the fallback, said in the result).
	lib := filepath.Join(work, "vgpu-isolation", "libvgpu.so")
	steps := strings.ReplaceAll(strings.ReplaceAll(probeStepsJSON, "/w/libvgpu.so", lib), "/w/steps.cache", filepath.Join(work, "steps.cache"))
	var envs [][]string
	f := isoHost(out, "isolation", []string{"steps", "shared", "ref", "limited"}, &envs, steps, probeSharedJSON, probeRefJSON, probeLimitedJSON)
	r := isolationCheck(context.Background(), f.host(), out, c)
	if r.Status != Pass || r.Isolation == nil || r.Isolation.Check != "isolation" || r.Isolation.LargestOKMiB != 3900 ||
		!strings.HasPrefix(r.Isolation.SMShare, "0.31 ") {
		t.Fatalf("isolation = %s (%s) %+v %+v", r.Status, r.Reason, r.Values, r.Isolation)
	}
	// Not the shipped version: the pass says so; the fallback is said, never silent.
	if want := "limits hold for this build only: HAMi-core: NOT the shipped version: built here from 8f3a89c67b03, but the chart's " +
		"docker.io/projecthami/hamicore:v2.10.0 = HAMi-core b216ba1be1b8: these results hold for 8f3a89c67b03, not for the shipped library"; r.Reason != want {
		t.Errorf("reason = %q\nwant     %q", r.Reason, want)
	}
	if v, _ := valueByWhat(r.Values, preloadMechanism); v.Got != "LD_PRELOAD (fallback: unshare not found in PATH)" || !v.OK {
		t.Errorf("mechanism = %+v", v)
	}
	if v, _ := valueByWhat(r.Values, "env -i client (PATH, HOME and the limits only)"); !strings.HasPrefix(v.Got, "not run: env -i drops LD_PRELOAD") {
		t.Errorf("env -i = %+v", v)
	}
	if r.Isolation.Preload != "LD_PRELOAD (fallback: unshare not found in PATH)" || !strings.HasPrefix(r.Isolation.HAMiCore, "HAMi-core: NOT the shipped version") {
		t.Errorf("row = %+v", r.Isolation)
	}
	if len(envs) != 4 || strings.Join(envs[2], " ") != "CUDA_VISIBLE_DEVICES="+testUUID {
		t.Fatalf("client envs = %q, want the unlimited reference (the GPU only) third", envs)
	}
	// Each group of clients has its own cache file; the two shared clients one.
	for i, want := range []string{"steps.cache", "shared.cache", "", "limited.cache"} {
		if env := strings.Join(envs[i], " "); !strings.Contains(env, "CUDA_DEVICE_SM_LIMIT_0=30") && want != "" ||
			!strings.Contains(env, "CUDA_DEVICE_MEMORY_SHARED_CACHE="+filepath.Join(work, want)) && want != "" {
			t.Errorf("client %d env = %q, want the slice with cache %s", i, env, want)
		}
	}
	if got := readRaw(out, "isolation.env"); !strings.Contains(got, "LD_PRELOAD=/usr/local/vgpu/libvgpu.so\n") || !strings.Contains(got, "CUDA_DEVICE_MEMORY_LIMIT_0=4000m") {
		t.Fatalf("raw/isolation.env (gpuenv's) =\n%s", got)
	}
	if got := readRaw(out, "isolation-host.env"); !strings.Contains(got, "LD_PRELOAD="+lib+"\n") {
		t.Fatalf("raw/isolation-host.env =\n%s", got)
	}
}

func TestIsolationMPSCheck(t *testing.T) {
	out := outDir(t)
	pipe := t.TempDir()
	c := isoConfig{Python: "python3", Script: "isolation_probe.py", SMI: "nvidia-smi", WorkDir: t.TempDir(), SMSeconds: 30, RefSeconds: 10,
		MPS: mpsConfig{Control: "nvidia-cuda-mps-control", PipeDir: pipe}}
	if r := isolationMPSCheck(context.Background(), (&fakeHost{}).host(), out, c); r.Status != Skip || !strings.Contains(r.Reason, "MPS is not installed") {
		t.Fatalf("without MPS: %s (%s)", r.Status, r.Reason)
	}
	mpsSteps := `{"mode": "steps", "env": {"HAMI_GO_GPU_UUIDS": "%UUID%", "CUDA_VISIBLE_DEVICES": "0", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4000M",
 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30", "CUDA_MPS_PIPE_DIRECTORY": "` + pipe + `"},
 "memGetInfoMiB": {"api": "torch.cuda.mem_get_info", "free": 3990, "total": 4000},
 "steps": [{"mib": 3000, "ok": true}, {"mib": 3900, "ok": false, "error": "OutOfMemoryError: CUDA out of memory."},
  {"mib": 4100, "ok": false, "error": "OutOfMemoryError: CUDA out of memory."}]}`
	mpsShared := `{"mode": "shared", "first": {"mib": 2500, "ok": true}, "second": {"mib": 2500, "ok": true}}`
	// The unlimited rate of the isolation check is reused: three clients only.
	_ = os.WriteFile(filepath.Join(rawDir(out), "isolation-ref.json"), []byte(probeRefJSON), 0o644)
	f := isoHost(out, "isolation-mps", []string{"steps", "shared", "limited"}, nil, mpsSteps, mpsShared, probeLimitedJSON)
	r := isolationMPSCheck(context.Background(), f.host(), out, c)
	if r.Status != Pass || r.Isolation == nil || r.Isolation.FirstFailedMiB != 3900 || !strings.HasPrefix(r.Isolation.SMShare, "0.31 ") {
		t.Fatalf("isolation-mps = %s (%s) %+v %+v", r.Status, r.Reason, r.Values, r.Isolation)
	}
	if denv := strings.Join(f.envs["nvidia-cuda-mps-control -d"], " "); !strings.Contains(denv, "CUDA_MPS_PIPE_DIRECTORY="+pipe) {
		t.Fatalf("daemon env = %q", denv)
	}
	// A daemon that cannot start skips the check with its message.
	f = isoHost(out, "isolation-mps", nil, nil)
	f.answers["nvidia-cuda-mps-control -d"] = fakeAnswer{stderr: "cannot start", err: os.ErrPermission}
	if r := isolationMPSCheck(context.Background(), f.host(), out, c); r.Status != Skip || !strings.Contains(r.Reason, "MPS cannot start here") {
		t.Fatalf("daemon failing: %s (%s)", r.Status, r.Reason)
	}
}

// summary.txt's isolation table: one row per isolation check, a check without a row by status.
func TestIsolationTable(t *testing.T) {
	_, row := evalIsolation(enforcedProbes(t), hamiEnv(), false)
	row.Check = "isolation"
	row.HAMiCore = withVersion(hamiCoreBuild{Commit: "8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811"}, testInfo).Version
	row.Preload = "/etc/ld.so.preload: an overlay on /etc in a private mount namespace (unshare), the host's /etc untouched"
	_, rows2 := eval2GPU(parseProbe(t, probeDevicesJSON), env2GPU(), [2]string{testUUID, testUUID2})
	txt := Summary{Overall: Pass, Checks: []Result{{Name: "preflight", Status: Pass}, {Name: "isolation", Status: Pass, Isolation: &row},
		{Name: "isolation-2gpu", Status: Pass, IsolationGPUs: rows2},
		{Name: "isolation-mps", Status: Skip, Reason: "MPS cannot start here"}}}.text()
	for _, want := range []string{
		"isolation: one 4000 MiB / 30% slice on GPU 0 with pkg/gpuenv's env (isolation-2gpu: GPU 0 3000 MiB, GPU 1 5000 MiB in one process)\n",
		"  isolation-2gpu GPU 0  3000       2000            3100              OutOfMemoryError: CUDA out of memory. Tried to allocate 3.03 ",
		"  isolation-2gpu GPU 1  5000       4000            5100              OutOfMemoryError: CUDA out of memory. Tried to allocate 4.98 ",
		"\n  HAMi-core: NOT the shipped version: built here from 8f3a89c67b03, but the chart's docker.io/projecthami/hamicore:v2.10.0 = HAMi-core b216ba1be1b8: " +
			"these results hold for 8f3a89c67b03, not for the shipped library\n",
		"\n  preload (isolation): /etc/ld.so.preload: an overlay on /etc in a private mount namespace (unshare), the host's /etc untouched\n",
		"  check                 limit MiB  largest ok MiB  first failed MiB  error ",
		"  isolation             4000       3900            4100              OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00  0.31 (201.5 TFLOPS over 30 s / 650.0 TFLOPS over 10 s)  torch.cuda.mem_get_info: total 4000 MiB, free 4000 MiB (the limit's view)\n",
		"  isolation-mps         -          -               -                 skip ",
	} {
		if !strings.Contains(txt, want) {
			t.Errorf("summary.txt lacks %q:\n%s", want, txt)
		}
	}
	if got := isolationTable([]Result{{Name: "preflight"}}); got != "" {
		t.Fatalf("table without isolation checks = %q", got)
	}
}

func TestPreloadValue(t *testing.T) {
	for out, want := range map[string]string{
		"[HAMI-core Msg(4242:140:libvgpu.c:911)]: Initialized\n":                                                             "yes: [HAMI-core Msg(4242:140:libvgpu.c:911)]: Initialized",
		"ERROR: ld.so: object '/w/libvgpu.so' from LD_PRELOAD cannot be preloaded (wrong ELF class: ELFCLASS32): ignored.\n": "ld.so: ERROR: ld.so: object '/w/libvgpu.so' from LD_PRELOAD cannot be preloaded (wrong ELF class: ELFCLASS32): ignored.",
		"\nexit: <nil>\n": "no HAMi-core message",
	} {
		if v := preloadValue(out); v.Got != want || !v.OK {
			t.Errorf("preloadValue(%q) = %+v, want %q", out, v, want)
		}
	}
}

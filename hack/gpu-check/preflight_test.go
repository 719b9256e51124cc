package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The skip path: no nvidia-smi means no GPU; every check is recorded as skipped with the reason.
func TestPreflightWithoutNVIDIASMI(t *testing.T) {
	f := &fakeHost{}
	out := t.TempDir()
	r, st := preflight(context.Background(), f.host(), out, "nvidia-smi", nil)
	if st != noGPU || r.Status != Skip || r.Reason != "no NVIDIA GPU here: nvidia-smi not found in PATH" {
		t.Fatalf("preflight = %v, %s (%s); want noGPU, skip, nvidia-smi not found", st, r.Status, r.Reason)
	}
	if len(f.calls) != 0 {
		t.Fatalf("ran %v without nvidia-smi, want nothing", f.calls)
	}
}

func TestPreflightDriverNotLoaded(t *testing.T) {
	f := &fakeHost{path: map[string]bool{"nvidia-smi": true}, answers: map[string]fakeAnswer{
		"nvidia-smi -L": {stdout: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", err: errors.New("exit status 9")},
	}}
	out := t.TempDir()
	r, st := preflight(context.Background(), f.host(), out, "nvidia-smi", nil)
	if st != noGPU || r.Status != Skip || !strings.Contains(r.Reason, "exit status 9") || !strings.Contains(r.Reason, "couldn't communicate") {
		t.Fatalf("preflight = %v, %s (%s); want noGPU, skip with the exit status and nvidia-smi's message", st, r.Status, r.Reason)
	}
	if got := readRaw(out, "nvidia-smi-L.txt"); !strings.HasPrefix(got, "NVIDIA-SMI has failed") {
		t.Fatalf("raw/nvidia-smi-L.txt = %q", got)
	}
}

// glibcHost lists one GPU and reports glibc version v through getconf.
func glibcHost(v string) *fakeHost {
	return &fakeHost{path: map[string]bool{"nvidia-smi": true}, answers: map[string]fakeAnswer{
		"nvidia-smi -L":            {stdout: "GPU 0: NVIDIA H200 (UUID: GPU-3a1d5e6f-0000-1111-2222-333344445555)\n"},
		"getconf GNU_LIBC_VERSION": {stdout: "glibc " + v + "\n"},
	}}
}

// dynamicELF is a dynamically linked system binary importing GLIBC_ symbol versions.
func dynamicELF(t *testing.T) string {
	for _, p := range []string{"/bin/ls", "/usr/bin/env", "/bin/sh"} {
		if v, _, err := requiredGLIBC([]string{p}); err == nil && v != "" {
			return p
		}
	}
	t.Skip("no dynamically linked glibc binary on this machine")
	return ""
}

func TestPreflightGLIBC(t *testing.T) {
	bin := dynamicELF(t)
	need, _, _ := requiredGLIBC([]string{bin})
	r, st := preflight(context.Background(), glibcHost("2.17").host(), t.TempDir(), "nvidia-smi", []string{bin})
	if st != cgoUnusable || r.Status != Fail || !strings.Contains(r.Reason, "glibc 2.17 here is older than "+need) {
		t.Fatalf("glibc 2.17: %v, %s (%s); want cgoUnusable, fail naming 2.17 and %s", st, r.Status, r.Reason, need)
	}
	r, st = preflight(context.Background(), glibcHost("2.99").host(), t.TempDir(), "nvidia-smi", []string{bin})
	if st != ready || r.Status != Pass || len(r.Values) != 3 || r.Values[1].Got != "1" || r.Values[2].Got != "2.99" {
		t.Fatalf("glibc 2.99: %v, %s (%s) %+v; want ready, pass, 1 GPU, 2.99", st, r.Status, r.Reason, r.Values)
	}
}

func TestMachineGLIBCFallsBackToLdd(t *testing.T) {
	f := &fakeHost{answers: map[string]fakeAnswer{"ldd --version": {stdout: "ldd (Ubuntu GLIBC 2.35-0ubuntu3.8) 2.35\nCopyright"}}}
	if v, err := machineGLIBC(context.Background(), f.host()); v != "2.35" || err != nil {
		t.Fatalf("machineGLIBC = %q, %v; want 2.35", v, err)
	}
	f = &fakeHost{answers: map[string]fakeAnswer{"ldd --version": {stdout: "musl libc (x86_64)\nVersion 1.2.4"}}}
	if v, err := machineGLIBC(context.Background(), f.host()); err == nil {
		t.Fatalf("machineGLIBC on musl = %q, want an error", v)
	}
}

func TestRequiredGLIBC(t *testing.T) {
	bin := dynamicELF(t)
	v, file, err := requiredGLIBC([]string{bin})
	if err != nil || compareVersions(v, "2.2.5") <= 0 || file != filepath.Base(bin) {
		t.Fatalf("requiredGLIBC(%s) = %q, %q, %v; want a version above 2.2.5 from %s", bin, v, file, err, filepath.Base(bin))
	}
	notELF := filepath.Join(t.TempDir(), "run.sh")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := requiredGLIBC([]string{bin, notELF}); err == nil || !strings.Contains(err.Error(), notELF) {
		t.Fatalf("requiredGLIBC of a script = %v, want an error naming it", err)
	}
}

func TestCompareVersions(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"2.34", "2.4", 1}, {"2.34", "2.34", 0}, {"2.3.4", "2.34", -1}, {"2.35", "2.34", 1}, {"2", "2.0", 0}} {
		if got := compareVersions(c.a, c.b); got != c.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestCountListedGPUs(t *testing.T) {
	s := "GPU 0: NVIDIA H200 (UUID: GPU-a)\nGPU 1: NVIDIA H200 (UUID: GPU-b)\n  MIG 1g.18gb Device 0: (UUID: MIG-c)\nNo devices found\n"
	if n := countListedGPUs(s); n != 2 {
		t.Fatalf("countListedGPUs = %d, want 2", n)
	}
}

// A stage whose cgo binaries cannot be read (not unpacked) stops the NVML checks with that reason.
func TestPreflightUnreadableBinaries(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nvml-probe")
	r, st := preflight(context.Background(), glibcHost("2.35").host(), t.TempDir(), "nvidia-smi", []string{missing})
	if st != cgoUnusable || r.Status != Fail || !strings.HasPrefix(r.Reason, "cannot read the staged cgo binaries: ") || !strings.Contains(r.Reason, missing) {
		t.Fatalf("preflight = %v, %s (%s); want a failure naming %s", st, r.Status, r.Reason, missing)
	}
}

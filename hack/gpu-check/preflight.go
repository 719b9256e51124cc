package main

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// host is how the checks reach the machine; tests replace it.
type host struct {
	// lookPath finds a command in PATH (exec.LookPath).
	lookPath func(file string) (string, error)
	// run runs a command with env added to this process's environment ("K=V" entries) and
	// returns its stdout and stderr; ctx bounds it.
	run func(ctx context.Context, env []string, name string, args ...string) (stdout, stderr []byte, err error)
}

// readiness is what preflight found: whether the other checks can run.
type readiness int

const (
	// ready: a GPU is listed and the cgo binaries can run.
	ready readiness = iota
	// noGPU: nvidia-smi is missing or lists no GPU; every check is skipped.
	noGPU
	// cgoUnusable: a GPU is there but the cgo binaries cannot run: the machine's glibc is older
	// than they need, or they cannot be read.
	cgoUnusable
)

// smiTimeout bounds each nvidia-smi call.
const smiTimeout = 20 * time.Second

// preflight checks that smi (the nvidia-smi command) exists and lists a GPU, and that the
// machine's glibc is at least the newest GLIBC_x.y symbol version the staged cgo binaries in
// cgoBins import. It writes nvidia-smi -L's output to raw/nvidia-smi-L.txt.
func preflight(ctx context.Context, h host, out, smi string, cgoBins []string) (Result, readiness) {
	r := Result{Name: "preflight", Raw: []string{"raw/nvidia-smi-L.txt"}}
	path, err := h.lookPath(smi)
	if err != nil {
		r.Status, r.Reason = Skip, fmt.Sprintf("no NVIDIA GPU here: %s not found in PATH", smi)
		r.Values = []Value{{What: "nvidia-smi in PATH", Want: "found", Got: "not found", OK: false}}
		r.Raw = nil
		return r, noGPU
	}
	r.Values = append(r.Values, Value{What: "nvidia-smi in PATH", Want: "found", Got: path, OK: true})
	cctx, cancel := context.WithTimeout(ctx, smiTimeout)
	defer cancel()
	list, stderr, err := h.run(cctx, nil, smi, "-L")
	list = append(list, stderr...)
	_ = os.MkdirAll(rawDir(out), 0o755)
	_ = os.WriteFile(filepath.Join(rawDir(out), "nvidia-smi-L.txt"), list, 0o644)
	n := countListedGPUs(string(list))
	r.Values = append(r.Values, Value{What: "GPUs listed by nvidia-smi -L", Want: ">= 1", Got: strconv.Itoa(n), OK: err == nil && n > 0})
	if err != nil || n == 0 {
		why := "lists no GPU"
		if err != nil {
			why = fmt.Sprintf("failed (%v)", err)
		}
		r.Status = Skip
		r.Reason = fmt.Sprintf("no NVIDIA GPU here: %s -L %s: %s", smi, why, tail(strings.TrimSpace(string(list)), 3))
		return r, noGPU
	}

	have, herr := machineGLIBC(ctx, h)
	need, needBy, nerr := requiredGLIBC(cgoBins)
	v := Value{What: "glibc (the cgo binaries were linked on the staging machine)", Want: ">= " + need, Got: have}
	switch {
	case nerr != nil:
		v.Got, v.Note = have, "cannot read the staged binaries: "+nerr.Error()
	case herr != nil:
		v.Got, v.Note = "unknown", herr.Error()
	case need == "":
		v.OK, v.Want, v.Note = true, "any", "the staged binaries import no GLIBC_ symbol versions"
	default:
		v.OK = compareVersions(have, need) >= 0
		v.Note = "needed by " + needBy
	}
	r.Values = append(r.Values, v)
	if nerr != nil {
		r.Status, r.Reason = Fail, "cannot read the staged cgo binaries: "+nerr.Error()
		return r, cgoUnusable
	}
	if !v.OK {
		r.Status = Fail
		r.Reason = fmt.Sprintf("glibc %s here is older than %s, which the cgo binaries need (%s): "+
			"rebuild the stage on a machine with glibc <= %s (hack/gpu-check/README.md)", v.Got, need, v.Note, v.Got)
		return r, cgoUnusable
	}
	r.Status = Pass
	return r, ready
}

// countListedGPUs counts the "GPU <i>: <name> (UUID: …)" lines of nvidia-smi -L output.
func countListedGPUs(s string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "GPU ") && strings.Contains(l, "UUID:") {
			n++
		}
	}
	return n
}

// machineGLIBC returns the machine's glibc version ("2.35") from `getconf GNU_LIBC_VERSION`
// ("glibc 2.35"), else from the last field of `ldd --version`'s first line.
func machineGLIBC(ctx context.Context, h host) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if b, _, err := h.run(cctx, nil, "getconf", "GNU_LIBC_VERSION"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 && f[0] == "glibc" {
			return f[1], nil
		}
	}
	b, _, err := h.run(cctx, nil, "ldd", "--version")
	if err != nil {
		return "", fmt.Errorf("neither getconf GNU_LIBC_VERSION nor ldd --version answered: %v", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(first)
	if len(f) == 0 || !strings.Contains(strings.ToLower(first), "glibc") && !strings.Contains(strings.ToLower(first), "gnu libc") {
		return "", fmt.Errorf("ldd --version does not name glibc: %q", first)
	}
	return f[len(f)-1], nil
}

// requiredGLIBC returns the newest GLIBC_<version> symbol version the ELF files import, and the
// file that needs it; "" when none imports one (static binaries).
func requiredGLIBC(files []string) (version, file string, err error) {
	for _, p := range files {
		f, err := elf.Open(p)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", p, err)
		}
		syms, err := f.ImportedSymbols()
		f.Close()
		if err != nil {
			return "", "", fmt.Errorf("%s: reading imported symbols: %w", p, err)
		}
		for _, s := range syms {
			v, ok := strings.CutPrefix(s.Version, "GLIBC_")
			if !ok || v == "" || v[0] < '0' || v[0] > '9' {
				continue
			}
			if version == "" || compareVersions(v, version) > 0 {
				version, file = v, filepath.Base(p)
			}
		}
	}
	return version, file, nil
}

// compareVersions compares dotted numeric versions ("2.34" < "2.4" is false): -1, 0 or 1.
// A non-numeric component compares as 0.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// skipAll records every check after preflight as skipped with reason.
func skipAll(out, reason string) error {
	for _, n := range checkNames {
		if n == "preflight" {
			continue
		}
		if err := writeResult(out, Result{Name: n, Status: Skip, Reason: reason}); err != nil {
			return err
		}
	}
	return nil
}

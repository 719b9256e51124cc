package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// isoProbeBound bounds all of one isolation check's clients together.
const isoProbeBound = 90 * time.Second

// isoConfig names the commands, files and folders of the isolation checks.
type isoConfig struct {
	// Python is python3 with PyTorch; Script is isolation_probe.py.
	Python, Script string
	// SMI is nvidia-smi.
	SMI string
	// WorkDir is a private folder for the HAMi-core cache files.
	WorkDir string
	// SMSeconds is how long the limited rate client runs; RefSeconds the unlimited one.
	SMSeconds, RefSeconds float64
	// MPS names the MPS daemon (isolation-mps).
	MPS mpsConfig
	// HostPreload is the host's /etc/ld.so.preload, which the preload namespace must leave as
	// it was ("" = /etc/ld.so.preload).
	HostPreload string
}

// hostPreload is c.HostPreload or the host's /etc/ld.so.preload.
func (c isoConfig) hostPreload() string { return orText(c.HostPreload, gpuenv.ContainerPreloadPath) }

// isoRunner runs the probe clients of one check under the isoProbeBound.
type isoRunner struct {
	ctx  context.Context
	h    host
	out  string
	c    isoConfig
	name string // the check's name: the prefix of its raw files
	// pre runs the HAMi-core clients with /etc/ld.so.preload (zero: as they are).
	pre preloader
	// envI, when set, are env's arguments (-i and the entries kept): the client runs under it.
	envI []string
}

// probe runs isolation_probe.py in mode with env (host env, "K=V"), writing
// raw/<check>-<label>.json and .err; it is not started when the bound is spent.
func (r isoRunner) probe(label string, timeout time.Duration, env []string, args ...string) probeOut {
	outFile := filepath.Join(rawDir(r.out), r.name+"-"+label+".json")
	if r.ctx.Err() != nil {
		return readProbe(outFile, fmt.Sprintf("not run: the %s bound of the check's clients was spent", isoProbeBound))
	}
	cctx, cancel := context.WithTimeout(r.ctx, timeout)
	defer cancel()
	a := append([]string{r.c.Script, "--out", outFile}, args...)
	name, a := r.pre.wrap(r.c.Python, a)
	if r.envI != nil {
		// env -i empties the client's env but for envI (PATH, HOME, the limits).
		name, a = r.pre.wrap("env", append(append(append([]string{}, r.envI...), r.c.Python), append([]string{r.c.Script, "--out", outFile}, args...)...))
		env = nil
	}
	o, e, err := r.h.run(cctx, env, name, a...)
	errText := append(append(o, e...), []byte(fmt.Sprintf("\nexit: %v\n", err))...)
	_ = os.WriteFile(filepath.Join(rawDir(r.out), r.name+"-"+label+".err"), errText, 0o644)
	return readProbe(outFile, "")
}

// gpu0 returns GPU 0's UUID and name from nvidia-smi.
func gpu0(ctx context.Context, h host, smi string) (uuid, name string, err error) {
	cctx, cancel := context.WithTimeout(ctx, smiTimeout)
	defer cancel()
	o, e, err := h.run(cctx, nil, smi, "--query-gpu="+smiQueryFields, "--format=csv,noheader,nounits", "-i", "0")
	if err != nil {
		return "", "", fmt.Errorf("nvidia-smi --query-gpu -i 0: %v: %s", err, tail(string(e), 3))
	}
	rows, err := parseSMIQuery(string(o))
	if err != nil || len(rows) == 0 {
		return "", "", fmt.Errorf("nvidia-smi --query-gpu -i 0 listed no GPU (%v)", err)
	}
	return rows[0].UUID, rows[0].Name, nil
}

// torchUsable says why python3 with PyTorch cannot run here, "" when it can.
func torchUsable(ctx context.Context, h host, out, python string) string {
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	o, e, err := h.run(cctx, nil, python, "-c", "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())")
	_ = os.WriteFile(filepath.Join(rawDir(out), "python-torch.txt"), append(o, e...), 0o644)
	if err != nil {
		return fmt.Sprintf("python3 with PyTorch is not usable here: %v: %s", err, tail(string(e), 3))
	}
	return ""
}

// isolationCheck proves HAMi-core's isolation on GPU 0 with the env hami-go gives a container
// of a 4000 MiB / 30% slice (sliceEnv, hami-core enforcement), libvgpu.so from buildHAMiCore
// (raw/hami-core-build.json) preloaded as the chart preloads it, through /etc/ld.so.preload
// (setupPreload; LD_PRELOAD where that cannot be, said in the result): the steps client, two
// clients sharing one cache file, a steps client under env -i, and the rate client with and
// without the SM limit (the unlimited one, no enforcement at all, is raw/isolation-ref.json,
// which isolation-mps reuses).
func isolationCheck(ctx context.Context, h host, out string, c isoConfig) Result {
	r := Result{Name: "isolation", Raw: []string{"raw/hami-core-build.json", "raw/hami-core-build.log", "raw/isolation.env", "raw/isolation-host.env",
		"raw/isolation-preload.txt", "raw/isolation-steps.json", "raw/isolation-steps.err", "raw/isolation-shared.json", "raw/isolation-envi.json",
		"raw/isolation-envi.err", "raw/isolation-limited.json", "raw/isolation-ref.json"}}
	b, ok := hamiCoreReady(ctx, h, out, c, &r)
	if !ok {
		return r
	}
	uuid, model, err := gpu0(ctx, h, c.SMI)
	if err != nil {
		r.Status, r.Reason = Fail, err.Error()
		return r
	}
	lib, pre, preVals, err := setupPreload(ctx, h, out, r.Name, filepath.Join(c.WorkDir, "vgpu-"+r.Name), b.Library, c.hostPreload())
	if err != nil {
		r.Status, r.Reason = Fail, "staging libvgpu.so and its preload file: "+err.Error()
		return r
	}
	e := sliceEnv(sliceSpec{Enforcement: gpuenv.EnforceHAMiCore, UUID: uuid, Model: model, Library: lib}, fileExists)
	cache := func(n string) map[string]string { return hostEnv(e, filepath.Join(c.WorkDir, n+".cache")) }
	writeSliceEnv(out, "isolation", e, cache("steps"))
	pctx, cancel := context.WithTimeout(ctx, isoProbeBound)
	defer cancel()
	run := isoRunner{ctx: pctx, h: h, out: out, c: c, name: "isolation", pre: pre}
	p := isoProbes{
		Steps:  run.probe("steps", 60*time.Second, envList(cache("steps")), "--mode", "steps", "--steps", isoSteps),
		Shared: run.probe("shared", 60*time.Second, envList(cache("shared")), "--mode", "shared", "--mib", strconv.Itoa(isoSharedMiB)),
	}
	var envI probeOut
	if pre.File != "" {
		ri := run
		ri.envI = envIArgs(cache("envi"))
		envI = ri.probe("envi", 60*time.Second, nil, "--mode", "steps", "--steps", isoSteps)
	}
	// The reference first, with no enforcement at all: a limiter that never lets a kernel
	// through costs only its own client.
	bare := run
	bare.pre = preloader{}
	p.Ref = bare.rate("ref", []string{gpuenv.EnvCUDAVisibleDevices + "=" + uuid}, c.RefSeconds)
	p.Limited = run.rate("limited", envList(cache("limited")), c.SMSeconds)
	vals, row := evalIsolation(p, cache("steps"), false)
	row.Check, row.HAMiCore, row.Preload = r.Name, b.Version, preVals[0].Got
	vals = append(vals, mappedValue("steps client", p.Steps), evalEnvI(envI, pre))
	if pre.File != "" {
		vals = append(vals, evalEnvISteps(envI)...)
	}
	r.Values = append(append(append(preVals, vals...), preloadValue(readRaw(out, "isolation-steps.err"))), versionValue(b))
	r.Isolation = &row
	r.finish()
	notShipped(&r, b)
	return r
}

// hamiCoreReady reads the hami-core-build result and checks PyTorch: on false, r says why the
// check cannot run.
func hamiCoreReady(ctx context.Context, h host, out string, c isoConfig, r *Result) (hamiCoreBuild, bool) {
	b, err := readHAMiCoreBuild(out)
	switch {
	case err != nil:
		r.Status, r.Reason = Fail, "no HAMi-core build result (raw/hami-core-build.json): "+err.Error()
		return b, false
	case b.Status != Pass:
		r.Status, r.Reason = b.Status, "HAMi-core build: "+b.Reason
		return b, false
	}
	if why := torchUsable(ctx, h, out, c.Python); why != "" {
		r.Status, r.Reason = Skip, why
		return b, false
	}
	return b, true
}

// versionValue says which HAMi-core the results hold for (report-only; summary.txt prints
// b.Version under the isolation table).
func versionValue(b hamiCoreBuild) Value {
	return Value{What: "HAMi-core version tested", Want: "report-only (the shipped one: " + orText(short(b.ShippedCommit), "unknown") + ")", Got: b.Version, OK: true}
}

// notShipped puts into a passing r's reason that the library was not the shipped version, so
// that the pass is not read as proof for the shipped library.
func notShipped(r *Result, b hamiCoreBuild) {
	if r.Status == Pass && !b.Shipped {
		r.Reason = "limits hold for this build only: " + b.Version
	}
}

// mappedValue says whether libvgpu.so was mapped in a client (its /proc/self/maps).
func mappedValue(who string, p probeOut) Value {
	v := Value{What: who + ": libvgpu.so mapped in the process (/proc/self/maps)", Want: "yes"}
	switch {
	case len(p.Libvgpu) > 0:
		v.Got, v.OK = "yes: "+strings.Join(p.Libvgpu, " "), true
	case p.Error != "":
		v.Got = "client error: " + firstLine(tail(p.Error, 1))
	default:
		v.Got = "no"
	}
	if p.PreloadFile != "" {
		v.Note = "its /etc/ld.so.preload: " + p.PreloadFile
	}
	return v
}

// evalEnvI is the env -i client's first value: HAMi-core mapped in a process whose env was
// emptied (only /etc/ld.so.preload can have put it there), or why the client did not run.
func evalEnvI(p probeOut, pre preloader) Value {
	if pre.File == "" {
		return Value{What: "env -i client (PATH, HOME and the limits only)", Want: "report-only", OK: true,
			Got: "not run: env -i drops LD_PRELOAD, and /etc/ld.so.preload cannot be used here (" + pre.Why + ")"}
	}
	v := mappedValue("env -i client (PATH, HOME and the limits only)", p)
	if p.Env != nil && p.Env["LD_PRELOAD"] != "" {
		v.OK, v.Got = false, "LD_PRELOAD="+p.Env["LD_PRELOAD"]+" reached the env -i client"
	}
	return v
}

// evalEnvISteps: the env -i client's limit holds (within succeeds, past fails out of memory).
func evalEnvISteps(p probeOut) []Value {
	within := Value{What: fmt.Sprintf("env -i client allocates %d MiB within the %d MiB limit", isoWithinMiB, sliceMemoryMiB), Want: "succeeds",
		Got: allocText(stepAt(p, isoWithinMiB), p)}
	within.OK = within.Got == "succeeds"
	past := stepAt(p, isoPastMiB)
	beyond := Value{What: fmt.Sprintf("env -i client allocates %d MiB past the %d MiB limit", isoPastMiB, sliceMemoryMiB), Want: "fails: CUDA out of memory",
		Got: allocText(past, p)}
	beyond.OK = past != nil && !past.OK && isOOM(past.Error)
	return []Value{within, beyond}
}

// rate runs the rate client for seconds (plus start-up time).
func (r isoRunner) rate(label string, env []string, seconds float64) probeOut {
	return r.probe(label, time.Duration(seconds*float64(time.Second))+45*time.Second, env,
		"--mode", "rate", "--seconds", strconv.FormatFloat(seconds, 'f', -1, 64))
}

// isolationMPSCheck runs the same clients as isolationCheck with the env of MPS enforcement
// (the MPS daemon of the mps check, started here when that check did not), reusing the unlimited
// rate of raw/isolation-ref.json when there is one. MPS limits each client: the shared clients
// are report-only.
func isolationMPSCheck(ctx context.Context, h host, out string, c isoConfig) Result {
	r := Result{Name: "isolation-mps", Raw: []string{"raw/isolation-mps.env", "raw/isolation-mps-steps.json", "raw/isolation-mps-shared.json",
		"raw/isolation-mps-limited.json", "raw/isolation-mps-ref.json", "raw/isolation-mps-start.txt"}}
	if _, err := h.lookPath(c.MPS.Control); err != nil {
		r.Status, r.Reason = Skip, c.MPS.Control+" not found in PATH: MPS is not installed here"
		return r
	}
	if why := torchUsable(ctx, h, out, c.Python); why != "" {
		r.Status, r.Reason = Skip, why
		return r
	}
	uuid, model, err := gpu0(ctx, h, c.SMI)
	if err != nil {
		r.Status, r.Reason = Fail, err.Error()
		return r
	}
	if _, why := mpsComputeMode(ctx, h, c.SMI, uuid); why != "" {
		r.Status, r.Reason = Skip, why
		return r
	}
	if _, why := startMPS(ctx, h, out, c.MPS, "isolation-mps-start.txt"); why != "" {
		r.Status, r.Reason = Skip, why
		return r
	}
	e := sliceEnv(sliceSpec{Enforcement: gpuenv.EnforceMPS, UUID: uuid, Model: model, MPSPipeDir: c.MPS.PipeDir}, fileExists)
	env := hostEnv(e, "")
	writeSliceEnv(out, "isolation-mps", e, env)
	pctx, cancel := context.WithTimeout(ctx, isoProbeBound)
	defer cancel()
	run := isoRunner{ctx: pctx, h: h, out: out, c: c, name: "isolation-mps"}
	p := isoProbes{
		Steps:  run.probe("steps", 60*time.Second, envList(env), "--mode", "steps", "--steps", isoSteps),
		Shared: run.probe("shared", 60*time.Second, envList(env), "--mode", "shared", "--mib", strconv.Itoa(isoSharedMiB)),
	}
	if p.Ref = readProbe(filepath.Join(rawDir(out), "isolation-ref.json"), ""); p.Ref.Rate == nil {
		unlimited := map[string]string{}
		for k, v := range env {
			if k != gpuenv.EnvMPSActiveThreadPct {
				unlimited[k] = v
			}
		}
		p.Ref = run.rate("ref", envList(unlimited), c.RefSeconds)
	}
	p.Limited = run.rate("limited", envList(env), c.SMSeconds)
	vals, row := evalIsolation(p, env, true)
	row.Check = r.Name
	r.Values, r.Isolation = vals, &row
	r.finish()
	return r
}

// mpsComputeMode reads the GPU's compute mode (never changes it) and says why MPS clients cannot
// run in it, "" when they can.
func mpsComputeMode(ctx context.Context, h host, smi, uuid string) (mode, why string) {
	cctx, cancel := context.WithTimeout(ctx, smiTimeout)
	defer cancel()
	o, e, err := h.run(cctx, nil, smi, "--query-gpu=compute_mode", "--format=csv,noheader", "-i", uuid)
	mode = strings.TrimSpace(string(o))
	if err != nil || (mode != "Default" && mode != "Exclusive_Process") {
		return mode, fmt.Sprintf("compute mode %q (%v %s): MPS clients cannot run and the check does not change it", mode, err, strings.TrimSpace(string(e)))
	}
	return mode, ""
}

// fileExists reports whether path exists on this machine.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

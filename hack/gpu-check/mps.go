package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hami-go/hami-go/pkg/device"
)

// The slice the MPS check enforces: the device-plugin check plans a pod with these limits.
const (
	// mpsLimitMiB is the slice's memory limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), MiB.
	mpsLimitMiB = 4000
	// mpsWithinMiB is an allocation inside the limit, which must succeed, MiB.
	mpsWithinMiB = 3000
	// mpsBeyondMiB is an allocation beyond the limit, which must fail, MiB.
	mpsBeyondMiB = 6000
	// mpsMaxRateRatio is the largest matmul rate at 25% active threads, as a fraction of the
	// rate at 100%, that counts as enforced (expected about 0.25-0.35).
	mpsMaxRateRatio = 0.5
)

// mpsConfig names the commands and folders of the MPS check.
type mpsConfig struct {
	// Control is nvidia-cuda-mps-control.
	Control string
	// Python is python3 (with PyTorch).
	Python string
	// Script is mps_check.py.
	Script string
	// SMI is nvidia-smi.
	SMI string
	// PipeDir is the private CUDA_MPS_PIPE_DIRECTORY (the device-plugin check handed it out).
	PipeDir string
}

// pyAlloc is one allocation attempt of mps_check.py.
type pyAlloc struct {
	MiB   int    `json:"mib"`
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

// pyResult is mps_check.py's output.
type pyResult struct {
	Mode   string            `json:"mode"`
	Env    map[string]string `json:"env"`
	Device string            `json:"device"`
	Within *pyAlloc          `json:"within"`
	Beyond *pyAlloc          `json:"beyond"`
	Rate   *struct {
		TFLOPS float64 `json:"tflops"`
		Iters  int     `json:"iters"`
	} `json:"rate"`
	Error string `json:"error"`
}

// readPy reads a mps_check.py output file; a missing or unreadable one is an error result.
func readPy(path string) pyResult {
	b, err := os.ReadFile(path)
	if err != nil {
		return pyResult{Error: "no result (the client timed out or crashed; see its .err file)"}
	}
	var r pyResult
	if err := json.Unmarshal(b, &r); err != nil {
		return pyResult{Error: fmt.Sprintf("%s is not JSON: %v", filepath.Base(path), err)}
	}
	return r
}

// evalMPS compares what the MPS clients saw with the 4000 MiB, 25% slice: the allocation within
// the limit succeeded, the one beyond it failed for lack of memory, an MPS server served the
// clients (serverList: get_server_list's output) and the 25% rate is at most mpsMaxRateRatio of
// the 100% rate.
func evalMPS(alloc, rate25, rate100 pyResult, serverList string) []Value {
	allocText := func(a *pyAlloc, r pyResult) string {
		switch {
		case r.Error != "":
			return "error: " + tail(r.Error, 2)
		case a == nil:
			return "not tried"
		case a.OK:
			return "succeeds"
		default:
			return "fails: " + a.Error
		}
	}
	within := Value{What: fmt.Sprintf("allocate %d MiB within the %d MiB limit", mpsWithinMiB, mpsLimitMiB), Want: "succeeds", Got: allocText(alloc.Within, alloc)}
	within.OK = within.Got == "succeeds"
	beyond := Value{What: fmt.Sprintf("allocate %d MiB beyond the %d MiB limit", mpsBeyondMiB, mpsLimitMiB), Want: "fails: out of memory", Got: allocText(alloc.Beyond, alloc)}
	beyond.OK = alloc.Error == "" && alloc.Beyond != nil && !alloc.Beyond.OK && strings.Contains(strings.ToLower(alloc.Beyond.Error), "out of memory")
	srv := Value{What: "MPS server serving the clients (get_server_list)", Want: "a server PID", Got: strings.TrimSpace(serverList)}
	if srv.Got == "" {
		srv.Got = "none"
	}
	_, err := strconv.Atoi(strings.Fields(srv.Got + " x")[0])
	srv.OK = err == nil
	ratio := Value{What: "matmul rate at 25% / 100% active threads", Want: fmt.Sprintf("<= %.2f", mpsMaxRateRatio),
		Note: "bf16 8192x8192 matmul; expected about 0.25-0.35"}
	switch {
	case rate25.Error != "" || rate25.Rate == nil:
		ratio.Got = "25% client: " + orText(tail(rate25.Error, 2), "no rate")
	case rate100.Error != "" || rate100.Rate == nil:
		ratio.Got = "100% client: " + orText(tail(rate100.Error, 2), "no rate")
	case rate100.Rate.TFLOPS <= 0 || rate25.Rate.TFLOPS <= 0:
		ratio.Got = fmt.Sprintf("rates %.1f / %.1f TFLOPS", rate25.Rate.TFLOPS, rate100.Rate.TFLOPS)
	default:
		r := rate25.Rate.TFLOPS / rate100.Rate.TFLOPS
		ratio.Got = fmt.Sprintf("%.2f (%.1f / %.1f TFLOPS)", r, rate25.Rate.TFLOPS, rate100.Rate.TFLOPS)
		ratio.OK = r <= mpsMaxRateRatio
	}
	return []Value{within, beyond, srv, ratio}
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// startMPS starts the MPS control daemon (pipe c.PipeDir, log raw/mps-log; its output in
// raw/<startFile>) unless one already made its pipes there, and waits until it answers. It returns
// a function that sends the daemon one command, or why MPS cannot start here.
func startMPS(ctx context.Context, h host, out string, c mpsConfig, startFile string) (ctl func(cmd string) (string, error), why string) {
	logDir := filepath.Join(rawDir(out), "mps-log")
	_ = os.MkdirAll(logDir, 0o755)
	denv := []string{"CUDA_MPS_PIPE_DIRECTORY=" + c.PipeDir, "CUDA_MPS_LOG_DIRECTORY=" + logDir}
	run := func(args ...string) ([]byte, []byte, error) {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return h.run(cctx, denv, args[0], args[1:]...)
	}
	ctl = func(cmd string) (string, error) {
		o, e, err := run("sh", "-c", "echo "+cmd+` | exec "$0"`, c.Control)
		return strings.TrimSpace(string(o) + string(e)), err
	}
	var o, e []byte
	var err error
	if entries, _ := os.ReadDir(c.PipeDir); len(entries) > 0 {
		o = []byte("a daemon already made its pipes in " + c.PipeDir + "; not started again\n")
	} else {
		o, e, err = run(c.Control, "-d")
	}
	_ = os.WriteFile(filepath.Join(rawDir(out), startFile), append(o, e...), 0o644)
	reach := err
	for i := 0; err == nil && i < 10; i++ {
		if _, reach = ctl("get_server_list"); reach == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil || reach != nil {
		return nil, fmt.Sprintf("MPS cannot start here: %s -d: %v, control: %v; %s; control.log: %s", c.Control, err, reach,
			strings.TrimSpace(string(o)+string(e)), tail(readRaw(out, "mps-log/control.log"), 5))
	}
	return ctl, ""
}

// mpsCheck runs the MPS enforcement check: with the Allocate env of the device-plugin check
// (raw/allocate-env.json) it starts the MPS control daemon (pipe c.PipeDir, log raw/mps-log;
// the compute mode is read, never changed), runs the allocation client, lists the MPS servers,
// and runs the rate client at 25% and at 100% active threads. run.sh quits the daemon.
func mpsCheck(ctx context.Context, h host, out string, c mpsConfig) Result {
	r := Result{Name: "mps", Raw: []string{"raw/mps-start.txt", "raw/mps-log/", "raw/mps-alloc.json", "raw/mps-rate25.json", "raw/mps-rate100.json", "raw/mps-servers.txt"}}
	raw := rawDir(out)
	_ = os.MkdirAll(raw, 0o755)
	envFile := filepath.Join(raw, "allocate-env.json")
	var env map[string]string
	if b, err := os.ReadFile(envFile); err != nil || json.Unmarshal(b, &env) != nil || env[device.EnvGPUUUIDs] == "" {
		r.Status, r.Reason = Skip, "no Allocate env: the device-plugin check wrote no usable raw/allocate-env.json"
		return r
	}
	if _, err := h.lookPath(c.Control); err != nil {
		r.Status, r.Reason = Skip, c.Control+" not found in PATH: MPS is not installed here"
		return r
	}
	save := func(name string, parts ...[]byte) {
		var all []byte
		for _, p := range parts {
			all = append(all, p...)
		}
		_ = os.WriteFile(filepath.Join(raw, name), all, 0o644)
	}
	run := func(timeout time.Duration, env []string, name string, args ...string) ([]byte, []byte, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return h.run(cctx, env, name, args...)
	}
	if why := torchUsable(ctx, h, out, c.Python); why != "" {
		r.Status, r.Reason = Skip, why
		return r
	}
	mode, why := mpsComputeMode(ctx, h, c.SMI, env[device.EnvGPUUUIDs])
	r.Values = append(r.Values, Value{What: "compute mode (read, never changed)", Want: "Default or Exclusive_Process", Got: mode, OK: why == ""})
	if why != "" {
		r.Status, r.Reason = Skip, why
		return r
	}
	ctl, why := startMPS(ctx, h, out, c, "mps-start.txt")
	if why != "" {
		r.Status, r.Reason = Skip, why
		return r
	}
	py := func(timeout time.Duration, name string, args ...string) pyResult {
		outFile := filepath.Join(raw, name+".json")
		a := append([]string{c.Script, "--env", envFile, "--out", outFile}, args...)
		o, e, err := run(timeout, nil, c.Python, a...)
		save(name+".err", o, e, []byte(fmt.Sprintf("\nexit: %v\n", err)))
		return readPy(outFile)
	}
	alloc := py(90*time.Second, "mps-alloc", "--mode", "alloc", "--within-mib", strconv.Itoa(mpsWithinMiB), "--beyond-mib", strconv.Itoa(mpsBeyondMiB))
	servers, _ := ctl("get_server_list")
	save("mps-servers.txt", []byte(servers+"\n"))
	rate25 := py(60*time.Second, "mps-rate25", "--mode", "rate", "--seconds", "3")
	rate100 := py(60*time.Second, "mps-rate100", "--mode", "rate", "--seconds", "3", "--threads", "100")
	r.Values = append(r.Values, evalMPS(alloc, rate25, rate100, servers)...)
	r.finish()
	return r
}

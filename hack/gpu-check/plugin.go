package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// pluginTimeout bounds the device-plugin test binary.
const pluginTimeout = 90 * time.Second

// pluginCheck runs pkg/deviceplugin's TestGPUCheckNVML from the test binary testBin with
// HAMI_GO_GPU_CHECK=1, writing its log to raw/device-plugin.log and its values and Allocate env
// to raw/ (device-plugin-values.json, allocate-env.json). pipeDir is the MPS pipe directory the
// plugin hands out.
func pluginCheck(ctx context.Context, h host, out, testBin, pipeDir string) Result {
	r := Result{Name: "device-plugin", Raw: []string{"raw/device-plugin.log", "raw/device-plugin-values.json", "raw/allocate-env.json"}}
	raw := rawDir(out)
	_ = os.MkdirAll(raw, 0o755)
	cctx, cancel := context.WithTimeout(ctx, pluginTimeout)
	defer cancel()
	env := []string{"HAMI_GO_GPU_CHECK=1", "HAMI_GO_GPU_CHECK_OUT=" + raw, "HAMI_GO_GPU_CHECK_MPS_PIPE_DIR=" + pipeDir}
	o, e, err := h.run(cctx, env, testBin, "-test.run", "^TestGPUCheckNVML$", "-test.v", "-test.count=1",
		"-test.timeout", (pluginTimeout - 10*time.Second).String())
	log := append(o, e...)
	_ = os.WriteFile(filepath.Join(raw, "device-plugin.log"), log, 0o644)
	r.Values, r.Reason = readValues(filepath.Join(raw, "device-plugin-values.json"))
	if r.Reason != "" {
		r.Status = Fail
		r.Reason += fmt.Sprintf("; test binary: %v; log: %s", errOrOK(err), tail(string(log), 8))
		return r
	}
	r.finish()
	if strings.Contains(string(log), "--- SKIP") {
		r.Status, r.Reason = Fail, "the test skipped: "+tail(string(log), 3)
	}
	if err != nil && r.Status == Pass {
		r.Status, r.Reason = Fail, fmt.Sprintf("test binary: %v; log: %s", err, tail(string(log), 8))
	}
	return r
}

// readValues reads a JSON list of Values; reason is non-empty when it cannot.
func readValues(path string) ([]Value, string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "no values: " + err.Error()
	}
	var vs []Value
	if err := json.Unmarshal(b, &vs); err != nil {
		return nil, fmt.Sprintf("%s is not a JSON list of values: %v", filepath.Base(path), err)
	}
	return vs, ""
}

func errOrOK(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

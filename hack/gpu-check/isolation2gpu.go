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

// twoGPUGrant is one GPU of the isolation-2gpu slice: its limit and the allocations tried on it,
// one within the limit and one past it. GPU 1's within-step is above GPU 0's limit, so a client
// that applied GPU 0's limit to both GPUs (HAMi-core#319: CUDA_VISIBLE_DEVICES parsed with atoi)
// fails it.
type twoGPUGrant struct {
	LimitMiB, WithinMiB, PastMiB int
}

// twoGPUGrants are the isolation-2gpu slice's GPUs 0 and 1 (nvidia-smi's, in PCI order).
var twoGPUGrants = [2]twoGPUGrant{{LimitMiB: 3000, WithinMiB: 2000, PastMiB: 3100}, {LimitMiB: 5000, WithinMiB: 4000, PastMiB: 5100}}

// twoGPUPlan is isolation_probe.py's --device-steps for twoGPUGrants.
func twoGPUPlan() string {
	var p []string
	for i, g := range twoGPUGrants {
		p = append(p, fmt.Sprintf("%d:%d,%d", i, g.WithinMiB, g.PastMiB))
	}
	return strings.Join(p, ";")
}

// isolation2GPUCheck checks HAMi-core's per-GPU limits in one process holding two GPUs: the env
// of pkg/gpuenv.Build for two grants (GPU 0 3000 MiB, GPU 1 5000 MiB, 30% each; PCI order), the
// process pinned to both with CUDA_VISIBLE_DEVICES=0,1, libvgpu.so preloaded as in isolation.
// On each GPU the within-step must succeed and the past-step fail out of memory. Skipped on a
// machine with one GPU.
func isolation2GPUCheck(ctx context.Context, h host, out string, c isoConfig) Result {
	r := Result{Name: "isolation-2gpu", Raw: []string{"raw/isolation-2gpu.env", "raw/isolation-2gpu-host.env", "raw/isolation-2gpu-preload.txt",
		"raw/isolation-2gpu-devices.json", "raw/isolation-2gpu-devices.err", "raw/isolation-2gpu-smi.csv"}}
	b, ok := hamiCoreReady(ctx, h, out, c, &r)
	if !ok {
		return r
	}
	cctx, cancel := context.WithTimeout(ctx, smiTimeout)
	o, e, err := h.run(cctx, nil, c.SMI, "--query-gpu="+smiQueryFields, "--format=csv,noheader,nounits")
	cancel()
	saveRaw(out, "isolation-2gpu-smi.csv", o)
	if err != nil {
		r.Status, r.Reason = Fail, fmt.Sprintf("nvidia-smi --query-gpu: %v: %s", err, tail(string(e), 3))
		return r
	}
	rows, err := parseSMIQuery(string(o))
	if err != nil {
		r.Status, r.Reason = Fail, err.Error()
		return r
	}
	if len(rows) < 2 {
		r.Status, r.Reason = Skip, fmt.Sprintf("needs two GPUs: nvidia-smi lists %d here", len(rows))
		return r
	}
	var grants []gpuenv.Grant
	for i, g := range twoGPUGrants {
		grants = append(grants, gpuenv.Grant{UUID: rows[i].UUID, PCIBusID: rows[i].BusID, MemoryMiB: int64(g.LimitMiB), CoresPercent: sliceCoresPercent})
	}
	lib, pre, preVals, err := setupPreload(ctx, h, out, r.Name, filepath.Join(c.WorkDir, "vgpu-"+r.Name), b.Library, c.hostPreload())
	if err != nil {
		r.Status, r.Reason = Fail, "staging libvgpu.so and its preload file: "+err.Error()
		return r
	}
	e2 := sliceEnv(sliceSpec{Enforcement: gpuenv.EnforceHAMiCore, Model: rows[0].Name, Library: lib, Grants: grants}, fileExists)
	env := hostEnvOn(e2, filepath.Join(c.WorkDir, "2gpu.cache"), "0,1")
	writeSliceEnv(out, r.Name, e2, env)
	pctx, pcancel := context.WithTimeout(ctx, isoProbeBound)
	defer pcancel()
	run := isoRunner{ctx: pctx, h: h, out: out, c: c, name: r.Name, pre: pre}
	p := run.probe("devices", 60*time.Second, envList(env), "--mode", "devices", "--device-steps", twoGPUPlan())
	vals, rows2 := eval2GPU(p, env, [2]string{rows[0].UUID, rows[1].UUID})
	for i := range rows2 {
		rows2[i].HAMiCore, rows2[i].Preload = b.Version, preVals[0].Got
	}
	r.Values = append(append(preVals, vals...), versionValue(b))
	r.IsolationGPUs = rows2
	r.finish()
	notShipped(&r, b)
	return r
}

// eval2GPU compares the devices client's output with twoGPUGrants and env (the host env it ran
// with): the env's per-GPU limits, libvgpu.so mapped, two devices seen, and on each GPU its own
// limit. It returns the values and one table row per GPU.
func eval2GPU(p probeOut, env map[string]string, uuids [2]string) ([]Value, []isolationRow) {
	var vals []Value
	for _, k := range []string{"HAMI_GO_GPU_UUIDS", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LD_PRELOAD",
		"CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_MEMORY_LIMIT_1", "CUDA_DEVICE_SM_LIMIT_0", "CUDA_DEVICE_SM_LIMIT_1"} {
		got := "(client gave no env)"
		if p.Env != nil {
			got = p.Env[k]
		}
		vals = append(vals, eq("client env "+k, env[k], got))
	}
	for i, g := range twoGPUGrants {
		vals = append(vals, eq(fmt.Sprintf("gpuenv's CUDA_DEVICE_MEMORY_LIMIT_%d (GPU %d, %s)", i, i, uuids[i]), strconv.Itoa(g.LimitMiB)+"m",
			env[gpuenv.EnvHAMiMemoryLimitPrefix+strconv.Itoa(i)]))
	}
	vals = append(vals, mappedValue("devices client", p))
	count := eq("CUDA devices the client sees", "2", strconv.Itoa(p.DeviceCount))
	if p.Error != "" {
		count.Got = "client error: " + firstLine(tail(p.Error, 1))
	}
	vals = append(vals, count)
	var rows []isolationRow
	for i, g := range twoGPUGrants {
		var d probeDevice
		for _, x := range p.Devices {
			if x.Device == i {
				d = x
			}
		}
		dp := probeOut{Steps: d.Steps, Error: d.Error}
		if d.Error == "" && p.Error != "" {
			dp.Error = p.Error
		}
		within := Value{What: fmt.Sprintf("GPU %d: allocate %d MiB within its %d MiB limit", i, g.WithinMiB, g.LimitMiB), Want: "succeeds",
			Got: allocText(stepAt(dp, g.WithinMiB), dp)}
		within.OK = within.Got == "succeeds"
		if i == 1 {
			within.Note = fmt.Sprintf("above GPU 0's %d MiB: fails where GPU 1 got GPU 0's limit (HAMi-core#319)", twoGPUGrants[0].LimitMiB)
		}
		past := stepAt(dp, g.PastMiB)
		beyond := Value{What: fmt.Sprintf("GPU %d: allocate %d MiB past its %d MiB limit", i, g.PastMiB, g.LimitMiB), Want: "fails: CUDA out of memory",
			Got: allocText(past, dp)}
		beyond.OK = past != nil && !past.OK && isOOM(past.Error)
		row := stepsRow(probeOut{Steps: d.Steps, MemInfo: d.MemInfo, Error: dp.Error}, g.LimitMiB)
		row.Check = fmt.Sprintf("isolation-2gpu GPU %d", i)
		view := Value{What: fmt.Sprintf("GPU %d: memory view the client read", i), Want: fmt.Sprintf("report-only (the limit's view: total %d MiB)", g.LimitMiB),
			Got: row.MemoryView, OK: true}
		vals = append(vals, within, beyond, view)
		rows = append(rows, row)
	}
	return vals, rows
}

// saveRaw writes b to raw/<name>.
func saveRaw(out, name string, b []byte) {
	_ = os.WriteFile(filepath.Join(rawDir(out), name), b, 0o644)
}

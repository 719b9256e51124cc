package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The isolation probes (isolation_probe.py).
const (
	// isoSteps are the allocations the steps client tries in turn, MiB.
	isoSteps = "1000,2000,3000,3900,4100,5000"
	// isoWithinMiB is the step inside the limit that must succeed (headroom for what the
	// enforcer counts besides the allocation).
	isoWithinMiB = 3000
	// isoPastMiB is the first step past the limit; it must fail with CUDA's out-of-memory error.
	isoPastMiB = 4100
	// isoSharedMiB is what each of two clients allocates under one limit (2 x 2500 > 4000).
	isoSharedMiB = 2500
)

// probeAlloc is one allocation attempt of isolation_probe.py.
type probeAlloc struct {
	MiB   int    `json:"mib"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// probeDevice is the devices mode's record of one CUDA device.
type probeDevice struct {
	Device  int          `json:"device"`
	Name    string       `json:"name"`
	MemInfo *memView     `json:"memGetInfoMiB"`
	Steps   []probeAlloc `json:"steps"`
	Error   string       `json:"error"`
}

// memView is what the client read as device memory (torch.cuda.mem_get_info), MiB.
type memView struct {
	API   string `json:"api"`
	Free  int    `json:"free"`
	Total int    `json:"total"`
}

// probeOut is isolation_probe.py's output.
type probeOut struct {
	Mode    string            `json:"mode"`
	Env     map[string]string `json:"env"`
	Device  string            `json:"device"`
	MemInfo *memView          `json:"memGetInfoMiB"`
	Steps   []probeAlloc      `json:"steps"`
	First   *probeAlloc       `json:"first"`
	Second  *probeAlloc       `json:"second"`
	// Libvgpu are the libvgpu paths mapped in the client (/proc/self/maps); PreloadFile is its
	// /etc/ld.so.preload ("" = none).
	Libvgpu     []string `json:"libvgpu"`
	PreloadFile string   `json:"preloadFile"`
	// DeviceCount and Devices are the devices mode's: CUDA devices seen and the steps on each.
	DeviceCount int           `json:"deviceCount"`
	Devices     []probeDevice `json:"devices"`
	Rate        *struct {
		TFLOPS  float64 `json:"tflops"`
		Iters   int     `json:"iters"`
		Seconds float64 `json:"seconds"`
	} `json:"rate"`
	Error string `json:"error"`
}

// readProbe reads a probe's output file; a missing or unreadable one is an error result with why.
func readProbe(path, why string) probeOut {
	b, err := os.ReadFile(path)
	if err != nil {
		if why == "" {
			why = "the client timed out or crashed; see its .err file"
		}
		return probeOut{Error: "no result (" + why + ")"}
	}
	var p probeOut
	if err := json.Unmarshal(b, &p); err != nil {
		return probeOut{Error: fmt.Sprintf("%s is not JSON: %v", filepath.Base(path), err)}
	}
	return p
}

// isOOM reports whether an allocation error is CUDA's out-of-memory error (torch's
// OutOfMemoryError "CUDA out of memory", or CUDA_ERROR_OUT_OF_MEMORY's "out of memory").
func isOOM(msg string) bool { return strings.Contains(strings.ToLower(msg), "out of memory") }

// isolationRow is one line of summary.txt's isolation table.
type isolationRow struct {
	// Check is the check's name.
	Check string `json:"check"`
	// LimitMiB is the slice's memory limit.
	LimitMiB int `json:"limitMiB"`
	// LargestOKMiB is the largest step that succeeded (0: none); FirstFailedMiB the first that
	// failed (0: none) and Error its error.
	LargestOKMiB   int    `json:"largestOkMiB"`
	FirstFailedMiB int    `json:"firstFailedMiB"`
	Error          string `json:"error,omitempty"`
	// SMShare is the measured throughput under the compute limit over the unlimited one.
	SMShare string `json:"smShare"`
	// MemoryView says which memory view the client read and what it showed.
	MemoryView string `json:"memoryView"`
	// Preload says how libvgpu.so reached the clients (HAMi-core checks).
	Preload string `json:"preload,omitempty"`
	// HAMiCore says which HAMi-core was tested and whether it is the shipped one.
	HAMiCore string `json:"hamiCore,omitempty"`
}

// stepsRow fills the allocation columns from the steps client.
func stepsRow(p probeOut, limit int) isolationRow {
	row := isolationRow{LimitMiB: limit, MemoryView: memoryView(p.MemInfo, limit)}
	for _, s := range p.Steps {
		if s.OK && s.MiB > row.LargestOKMiB {
			row.LargestOKMiB = s.MiB
		}
		if !s.OK && row.FirstFailedMiB == 0 {
			row.FirstFailedMiB, row.Error = s.MiB, firstLine(s.Error)
		}
	}
	if p.Error != "" {
		row.Error = "client error: " + firstLine(tail(p.Error, 1))
	}
	return row
}

// memoryView describes what the client read: the limit as total is the enforcer's view (HAMi-core
// hooks cuMemGetInfo; MPS reports the pinned limit), anything else the whole GPU's.
func memoryView(m *memView, limit int) string {
	if m == nil {
		return "not read"
	}
	whose := "the whole GPU's view (not the limit)"
	if m.Total <= limit && m.Total >= limit-64 {
		whose = "the limit's view"
	}
	return fmt.Sprintf("%s: total %d MiB, free %d MiB (%s)", m.API, m.Total, m.Free, whose)
}

// firstLine is the first non-empty line of s, at most 160 characters.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return truncateString(l, 160)
		}
	}
	return ""
}

// allocText says how an allocation went: "succeeds", "fails: <error>", or why it was not tried.
func allocText(a *probeAlloc, p probeOut) string {
	switch {
	case a != nil && a.OK:
		return "succeeds"
	case a != nil:
		return "fails: " + firstLine(a.Error)
	case p.Error != "":
		return "client error: " + firstLine(tail(p.Error, 1))
	}
	return "not tried"
}

// stepAt is the steps client's attempt at mib, nil when not tried.
func stepAt(p probeOut, mib int) *probeAlloc {
	for i := range p.Steps {
		if p.Steps[i].MiB == mib {
			return &p.Steps[i]
		}
	}
	return nil
}

// smShare compares the rate under the compute limit with the unlimited reference; it is
// report-only (HAMi-core's limiter reads NVML process utilization, which a sandbox may not give).
func smShare(limited, ref probeOut, what string) (Value, string) {
	v := Value{What: what, Want: fmt.Sprintf("report-only (expected about %.2f)", float64(sliceCoresPercent)/100), OK: true,
		Note: "bf16 8192x8192 matmul loop; the SM limit is not enforced everywhere (HAMi-core needs NVML process utilization)"}
	switch {
	case limited.Error != "" || limited.Rate == nil:
		v.Got = "limited client: " + orText(firstLine(tail(limited.Error, 1)), "no rate")
	case ref.Error != "" || ref.Rate == nil:
		v.Got = "reference client: " + orText(firstLine(tail(ref.Error, 1)), "no rate")
	case ref.Rate.TFLOPS <= 0:
		v.Got = fmt.Sprintf("reference rate %.1f TFLOPS", ref.Rate.TFLOPS)
	default:
		v.Got = fmt.Sprintf("%.2f (%.1f TFLOPS over %.0f s / %.1f TFLOPS over %.0f s)", limited.Rate.TFLOPS/ref.Rate.TFLOPS,
			limited.Rate.TFLOPS, limited.Rate.Seconds, ref.Rate.TFLOPS, ref.Rate.Seconds)
	}
	return v, v.Got
}

// isoProbes are the outputs of one isolation check's clients.
type isoProbes struct {
	Steps, Shared, Limited, Ref probeOut
}

// evalIsolation compares what the clients saw with the slice (env: the host env they ran with;
// mps: MPS enforcement, whose limits are per client). It returns the values and the table row.
func evalIsolation(p isoProbes, env map[string]string, mps bool) ([]Value, isolationRow) {
	var vals []Value
	limitKeys := []string{"CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_SM_LIMIT_0", "CUDA_DEVICE_MEMORY_SHARED_CACHE", "LD_PRELOAD"}
	smWhat := fmt.Sprintf("matmul rate at CUDA_DEVICE_SM_LIMIT_0=%d / unlimited", sliceCoresPercent)
	if mps {
		limitKeys = []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PIPE_DIRECTORY"}
		smWhat = fmt.Sprintf("matmul rate at CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d / unlimited", sliceCoresPercent)
	}
	// HAMI_GO_GPU_UUIDS names the slice's GPU; CUDA_VISIBLE_DEVICES is hostEnv's pin to it.
	for _, k := range append([]string{"HAMI_GO_GPU_UUIDS", "CUDA_VISIBLE_DEVICES"}, limitKeys...) {
		got := "(client gave no env)"
		if p.Steps.Env != nil {
			got = p.Steps.Env[k]
		}
		vals = append(vals, eq("client env "+k, env[k], got))
	}
	within := Value{What: fmt.Sprintf("allocate %d MiB within the %d MiB limit", isoWithinMiB, sliceMemoryMiB), Want: "succeeds",
		Got: allocText(stepAt(p.Steps, isoWithinMiB), p.Steps)}
	within.OK = within.Got == "succeeds"
	past := stepAt(p.Steps, isoPastMiB)
	beyond := Value{What: fmt.Sprintf("allocate %d MiB past the %d MiB limit", isoPastMiB, sliceMemoryMiB), Want: "fails: CUDA out of memory",
		Got: allocText(past, p.Steps)}
	beyond.OK = past != nil && !past.OK && isOOM(past.Error)
	row := stepsRow(p.Steps, sliceMemoryMiB)
	view := Value{What: "memory view the client read", Want: fmt.Sprintf("report-only (the limit's view: total %d MiB)", sliceMemoryMiB),
		Got: row.MemoryView, OK: true}
	vals = append(vals, within, beyond, view)
	first := Value{What: fmt.Sprintf("first client allocates and holds %d MiB", isoSharedMiB), Want: "succeeds", Got: allocText(p.Shared.First, p.Shared)}
	first.OK = first.Got == "succeeds"
	second := Value{What: fmt.Sprintf("second client allocates %d MiB meanwhile (one %d MiB limit for both)", isoSharedMiB, sliceMemoryMiB),
		Want: "fails: CUDA out of memory", Got: allocText(p.Shared.Second, p.Shared)}
	second.OK = p.Shared.Second != nil && !p.Shared.Second.OK && isOOM(p.Shared.Second.Error)
	if mps {
		second.Want, second.OK = "report-only (MPS limits each client, not the pair)", true
	}
	vals = append(vals, first, second)
	sm, share := smShare(p.Limited, p.Ref, smWhat)
	row.SMShare = share
	return append(vals, sm), row
}

// preloadValue says whether HAMi-core was loaded into the steps client, from the client's output
// (stderr): HAMi-core's own messages ("[HAMI-core Msg(...)]: Initialized") or ld.so's refusal
// to preload. Report-only: HAMi-core's log level may hide its messages.
func preloadValue(clientOutput string) Value {
	v := Value{What: "libvgpu.so loaded into the client (its stderr)", Want: "report-only (HAMi-core's messages)", OK: true, Got: "no HAMi-core message"}
	for _, l := range strings.Split(clientOutput, "\n") {
		switch {
		case strings.Contains(l, "cannot be preloaded"):
			return Value{What: v.What, Want: v.Want, OK: true, Got: "ld.so: " + truncateString(strings.TrimSpace(l), 160)}
		case strings.Contains(l, "HAMI-core") && v.Got == "no HAMi-core message":
			v.Got = "yes: " + truncateString(strings.TrimSpace(l), 160)
		}
	}
	return v
}

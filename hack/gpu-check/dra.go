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
)

// draTimeout bounds the DRA test binary (discovery, the slice and one Prepare: seconds).
const draTimeout = 60 * time.Second

// Names the DRA driver publishes (pkg/draapi and the standard attributes of
// k8s.io/dynamic-resource-allocation/deviceattribute; dra_test.go checks they are the same).
// gpucheck does not import them, to stay small.
const (
	draAttrUUID              = "uuid"
	draAttrIndex             = "index"
	draAttrProductName       = "productName"
	draAttrComputeCapability = "computeCapability"
	draAttrDriverVersion     = "driverVersion"
	draAttrCUDAVersion       = "cudaDriverVersion"
	draAttrPCIBusID          = "resource.kubernetes.io/pciBusID"
	draAttrNUMANode          = "resource.kubernetes.io/numaNode"
	draCapMemory             = "memory"
	draCapCores              = "cores"
	draCapSharers            = "sharers"
	draProductNameMax        = 64 // resourceapi.DeviceAttributeMaxValueLength
)

// draDevice is one published device as pkg/dra's TestGPUCheckDRA writes it: attributes as
// strings, capacities as integers (memory bytes, cores percent, sharers count).
type draDevice struct {
	Name       string            `json:"name"`
	Attributes map[string]string `json:"attributes"`
	Capacity   map[string]string `json:"capacity"`
	Taints     int               `json:"taints"`
}

// draReport is raw/dra-driver.json, written by TestGPUCheckDRA (pkg/dra/gpucheck_test.go,
// gpuCheckReport).
type draReport struct {
	Error        string            `json:"error"`
	SplitCount   int               `json:"splitCount"`
	Devices      []draDevice       `json:"devices"`
	Prepared     string            `json:"prepared"`
	MemoryMiB    int64             `json:"memoryMiB"`
	Cores        int64             `json:"cores"`
	PrepareError string            `json:"prepareError"`
	CDIDevices   []string          `json:"cdiDevices"`
	Env          map[string]string `json:"env"`
}

// semVer turns a dotted version ("9.0", "535.104.05", "12.4") into the form of a DRA
// VersionValue attribute ("9.0.0", "535.104.5", "12.4.0"), as pkg/dra.SemVer; the input
// unchanged when it is not 1 to 3 numbers.
func semVer(v string) string {
	parts := strings.Split(v, ".")
	if v == "" || len(parts) > 3 {
		return v
	}
	out := []string{"0", "0", "0"}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return v
		}
		out[i] = strconv.FormatUint(n, 10)
	}
	return strings.Join(out, ".")
}

// compareDRA compares the devices and the prepared claim of rep with nvidia-smi's rows, the
// CUDA version of its header and sysfs's NUMA nodes in sysfsDir, GPU by GPU (matched by the
// uuid attribute). Memory capacity is memory.total × 1 MiB bytes (no reserved memory, scaling
// 1); the prepared claim's CDI env must name the GPU's UUID (HAMI_GO_GPU_UUIDS; no
// CUDA_VISIBLE_DEVICES: the container sees only its own GPUs) and carry the HAMi-core limits of
// its CUDA ordinal 0 (CUDA_DEVICE_MEMORY_LIMIT_0 = "<MiB>m", CUDA_DEVICE_SM_LIMIT_0 = the percent).
func compareDRA(rows []smiGPU, smiCUDA string, rep draReport, sysfsDir string) []Value {
	vals := []Value{
		eq("test steps", "ok", orOK(rep.Error)),
		eq("device count", strconv.Itoa(len(rows)), strconv.Itoa(len(rep.Devices))),
	}
	byUUID := map[string]draDevice{}
	for _, d := range rep.Devices {
		byUUID[d.Attributes[draAttrUUID]] = d
	}
	preparedUUID := ""
	for _, r := range rows {
		d, ok := byUUID[r.UUID]
		if !ok {
			vals = append(vals, Value{What: r.UUID + " published", Want: "yes", Got: "no"})
			continue
		}
		if d.Name == rep.Prepared {
			preparedUUID = r.UUID
		}
		p := r.UUID + " "
		a, c := d.Attributes, d.Capacity
		bus := normalizeBusID(r.BusID)
		vals = append(vals,
			eq(p+"device name", "gpu-"+r.Index, d.Name),
			eq(p+"attribute "+draAttrIndex, r.Index, a[draAttrIndex]),
			eq(p+"attribute "+draAttrProductName, truncateString(r.Name, draProductNameMax), a[draAttrProductName]),
			memCapacity(p, r.MemoryMiB, c[draCapMemory]),
			eq(p+"capacity "+draCapCores, "100", c[draCapCores]),
			eq(p+"capacity "+draCapSharers, strconv.Itoa(rep.SplitCount), c[draCapSharers]),
			Value{What: p + "attribute " + draAttrPCIBusID, Want: bus, Got: a[draAttrPCIBusID], OK: bus == a[draAttrPCIBusID],
				Note: "nvidia-smi " + r.BusID + " in sysfs form"},
			Value{What: p + "attribute " + draAttrComputeCapability, Want: semVer(r.ComputeCap), Got: a[draAttrComputeCapability],
				OK: semVer(r.ComputeCap) == a[draAttrComputeCapability], Note: "nvidia-smi " + r.ComputeCap + " as a semantic version"},
			Value{What: p + "attribute " + draAttrDriverVersion, Want: semVer(r.DriverVersion), Got: a[draAttrDriverVersion],
				OK: semVer(r.DriverVersion) == a[draAttrDriverVersion], Note: "nvidia-smi " + r.DriverVersion + " as a semantic version"},
			Value{What: p + "attribute " + draAttrCUDAVersion, Want: semVer(smiCUDA), Got: a[draAttrCUDAVersion],
				OK: smiCUDA != "" && semVer(smiCUDA) == a[draAttrCUDAVersion], Note: "nvidia-smi header CUDA Version " + smiCUDA},
			draNUMAValue(p, sysfsDir, r.BusID, a),
			eq(p+"taints", "0", strconv.Itoa(d.Taints)),
		)
	}
	if rep.Prepared == "" { // the test failed before Prepare: no claim values to compare
		return append(vals, Value{What: "Prepare", Want: "run", Got: "not reached"})
	}
	vals = append(vals,
		eq("Prepare error", "none", orNone1(rep.PrepareError)),
		eq("Prepare: the claim's GPU "+rep.Prepared+" is one nvidia-smi lists", "yes", yesNo(preparedUUID != "")),
		eq("CDI HAMI_GO_GPU_UUIDS", preparedUUID, rep.Env["HAMI_GO_GPU_UUIDS"]),
		eq("CDI CUDA_VISIBLE_DEVICES (never set)", "", rep.Env["CUDA_VISIBLE_DEVICES"]),
		eq("CDI CUDA_DEVICE_MEMORY_LIMIT_0", strconv.FormatInt(rep.MemoryMiB, 10)+"m", rep.Env["CUDA_DEVICE_MEMORY_LIMIT_0"]),
		eq("CDI CUDA_DEVICE_SM_LIMIT_0", strconv.FormatInt(rep.Cores, 10), rep.Env["CUDA_DEVICE_SM_LIMIT_0"]),
	)
	return vals
}

// memCapacity compares the memory capacity (bytes) with nvidia-smi's memory.total (MiB) × 1 MiB.
func memCapacity(prefix, smiMiB, got string) Value {
	v := Value{What: prefix + "capacity " + draCapMemory + " (bytes)", Got: got, Note: "nvidia-smi memory.total " + smiMiB + " MiB × 1048576"}
	n, err := strconv.ParseInt(smiMiB, 10, 64)
	if err != nil {
		v.Want, v.Note = "a number of MiB", "nvidia-smi memory.total "+strconv.Quote(smiMiB)+": "+err.Error()
		return v
	}
	v.Want = strconv.FormatInt(n<<20, 10)
	v.OK = v.Want == got
	return v
}

// draNUMAValue compares the numaNode attribute with sysfs's numa_node: sysfs -1 (no
// affinity) wants no attribute (the deviceattribute package's rule), else the same node.
func draNUMAValue(prefix, dir, busID string, attrs map[string]string) Value {
	got, has := attrs[draAttrNUMANode]
	if !has {
		got = "absent"
	}
	v := Value{What: prefix + "attribute " + draAttrNUMANode, Got: got}
	n, err := sysfsNUMA(dir, busID)
	switch {
	case err != nil:
		v.Want, v.Note = "readable", "sysfs: "+err.Error()
	case n < 0:
		v.Want, v.OK = "absent", !has
		v.Note = "sysfs shows no NUMA affinity (-1)"
	default:
		v.Want = strconv.Itoa(n)
		v.OK = v.Want == got
		v.Note = "from " + filepath.Join(dir, normalizeBusID(busID), "numa_node")
	}
	return v
}

func truncateString(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func orOK(s string) string {
	if s == "" {
		return "ok"
	}
	return s
}

func orNone1(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// draCheck runs nvidia-smi (query and table, saved as raw/dra-nvidia-smi-query.csv and
// raw/dra-nvidia-smi.txt) and pkg/dra's TestGPUCheckDRA from the test binary testBin with
// HAMI_GO_GPU_CHECK=1 (log raw/dra-driver.log; it writes raw/dra-driver.json,
// raw/dra-resourceslice-devices.json and raw/dra-cdi-spec.json), then compares (compareDRA).
func draCheck(ctx context.Context, h host, out, smi, testBin, sysfsDir string) Result {
	r := Result{Name: "dra-driver", Raw: []string{"raw/dra-driver.log", "raw/dra-driver.json", "raw/dra-resourceslice-devices.json",
		"raw/dra-cdi-spec.json", "raw/dra-nvidia-smi-query.csv", "raw/dra-nvidia-smi.txt"}}
	raw := rawDir(out)
	_ = os.MkdirAll(raw, 0o755)
	smiRun := func(file string, args ...string) ([]byte, error) {
		cctx, cancel := context.WithTimeout(ctx, smiTimeout)
		defer cancel()
		o, e, err := h.run(cctx, nil, smi, args...)
		_ = os.WriteFile(filepath.Join(raw, file), append(o, e...), 0o644)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %v: %s", filepath.Base(smi), strings.Join(args, " "), err, tail(string(e), 5))
		}
		return o, nil
	}
	csvOut, err := smiRun("dra-nvidia-smi-query.csv", "--query-gpu="+smiQueryFields, "--format=csv,noheader,nounits")
	if err != nil {
		r.Status, r.Reason = Fail, err.Error()
		return r
	}
	rows, err := parseSMIQuery(string(csvOut))
	if err != nil {
		r.Status, r.Reason = Fail, err.Error()
		return r
	}
	table, err := smiRun("dra-nvidia-smi.txt")
	if err != nil {
		r.Status, r.Reason = Fail, err.Error()
		return r
	}

	reportPath := filepath.Join(raw, "dra-driver.json")
	_ = os.Remove(reportPath) // a report left by an earlier run must not pass this one
	cctx, cancel := context.WithTimeout(ctx, draTimeout)
	defer cancel()
	env := []string{"HAMI_GO_GPU_CHECK=1", "HAMI_GO_GPU_CHECK_OUT=" + raw}
	o, e, err := h.run(cctx, env, testBin, "-test.run", "^TestGPUCheckDRA$", "-test.v", "-test.count=1",
		"-test.timeout", (draTimeout - 10*time.Second).String())
	log := append(o, e...)
	_ = os.WriteFile(filepath.Join(raw, "dra-driver.log"), log, 0o644)
	if strings.Contains(string(log), "--- SKIP") {
		r.Status, r.Reason = Fail, "the test skipped: "+tail(string(log), 3)
		return r
	}
	rep, reason := readDRAReport(reportPath)
	if reason != "" {
		r.Status = Fail
		r.Reason = fmt.Sprintf("%s; test binary: %v; log: %s", reason, errOrOK(err), tail(string(log), 8))
		return r
	}
	r.Values = compareDRA(rows, parseSMICUDAVersion(string(table)), rep, sysfsDir)
	r.finish()
	if err != nil && r.Status == Pass {
		r.Status, r.Reason = Fail, fmt.Sprintf("test binary: %v; log: %s", err, tail(string(log), 8))
	}
	return r
}

// readDRAReport reads raw/dra-driver.json; reason is non-empty when it cannot.
func readDRAReport(path string) (draReport, string) {
	var rep draReport
	b, err := os.ReadFile(path)
	if err != nil {
		return rep, "no DRA report: " + err.Error()
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return rep, fmt.Sprintf("%s is not the DRA report JSON: %v", filepath.Base(path), err)
	}
	return rep, ""
}

package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// smiQueryFields are the nvidia-smi --query-gpu fields discovery compares (nvidia-smi
// --help-query-gpu): memory.total is in MiB with nounits, pci.bus_id is "00000000:19:00.0".
const smiQueryFields = "index,uuid,name,memory.total,pci.bus_id,compute_cap,driver_version"

// smiGPU is one row of nvidia-smi --query-gpu=smiQueryFields --format=csv,noheader,nounits.
type smiGPU struct {
	Index, UUID, Name, MemoryMiB, BusID, ComputeCap, DriverVersion string
}

// parseSMIQuery parses nvidia-smi's CSV rows (no header, no units) of smiQueryFields. It fails
// on a row with another number of fields, naming the row.
func parseSMIQuery(s string) ([]smiGPU, error) {
	r := csv.NewReader(strings.NewReader(s))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi --query-gpu output is not CSV: %w", err)
	}
	want := len(strings.Split(smiQueryFields, ","))
	var out []smiGPU
	for i, f := range recs {
		if len(f) == 1 && strings.TrimSpace(f[0]) == "" {
			continue
		}
		if len(f) != want {
			return nil, fmt.Errorf("nvidia-smi --query-gpu row %d has %d fields, want %d (%s): %q", i+1, len(f), want, smiQueryFields, strings.Join(f, ","))
		}
		for j := range f {
			f[j] = strings.TrimSpace(f[j])
		}
		out = append(out, smiGPU{Index: f[0], UUID: f[1], Name: f[2], MemoryMiB: f[3], BusID: f[4], ComputeCap: f[5], DriverVersion: f[6]})
	}
	return out, nil
}

// cudaVersionRE finds the CUDA version in nvidia-smi's table header
// ("| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |").
var cudaVersionRE = regexp.MustCompile(`CUDA Version:\s*([0-9]+(?:\.[0-9]+)*)`)

// parseSMICUDAVersion returns the CUDA version of nvidia-smi's header, "" when absent.
func parseSMICUDAVersion(s string) string {
	m := cudaVersionRE.FindStringSubmatch(s)
	if m == nil {
		return ""
	}
	return m[1]
}

// normalizeBusID turns a PCI bus id into sysfs form: lower case, a 4-digit domain
// ("00000000:9A:00.0" from nvidia-smi or NVML -> "0000:9a:00.0").
func normalizeBusID(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	if dom, rest, ok := strings.Cut(id, ":"); ok && len(dom) > 4 && strings.Trim(dom[:len(dom)-4], "0") == "" {
		id = dom[len(dom)-4:] + ":" + rest
	}
	return id
}

// probeGPU is the part of a device.GPU (as nvml-probe prints it) discovery compares; gpucheck
// does not import pkg/device, to stay small.
type probeGPU struct {
	UUID      string `json:"uuid"`
	Index     int    `json:"index"`
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memoryMiB"`
	NUMANode  int    `json:"numaNode"`
	PCIBusID  string `json:"pciBusID"`
}

// probeReport is the part of hack/nvml-probe's JSON report discovery compares.
type probeReport struct {
	Backend  string     `json:"backend"`
	GPUs     []probeGPU `json:"gpus"`
	Versions *struct {
		DriverVersion     string            `json:"driverVersion"`
		CUDADriverVersion string            `json:"cudaDriverVersion"`
		ComputeCapability map[string]string `json:"computeCapability"`
	} `json:"versions"`
	Failures []string `json:"failures"`
	// Minors are pkg/nvml's minor numbers by UUID (device.GPU.Minor, nvmlDeviceGetMinorNumber):
	// the device node is /dev/nvidia<minor>. nil: the probe reported none.
	Minors map[string]int `json:"minors"`
}

// discoveryDirs are the host folders discovery reads besides nvidia-smi and nvml-probe.
type discoveryDirs struct {
	// SysfsPCI is /sys/bus/pci/devices (NUMA nodes).
	SysfsPCI string
	// ProcGPUs is /proc/driver/nvidia/gpus: the driver's own view of each GPU, by PCI bus id.
	ProcGPUs string
	// Dev is /dev (the GPUs' device nodes).
	Dev string
}

// driverMinor reads the "Device Minor:" line of <procGPUs>/<bus id in sysfs form>/information,
// the NVIDIA driver's own record of the GPU's minor number.
func driverMinor(procGPUs, busID string) (int, error) {
	path := filepath.Join(procGPUs, normalizeBusID(busID), "information")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "Device Minor" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("%s: Device Minor %q: %w", path, strings.TrimSpace(v), err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s has no \"Device Minor:\" line", path)
}

// minorValues compares pkg/nvml's minor number of a GPU with the driver's
// (/proc/driver/nvidia/gpus/<bus id>/information) and checks its device node /dev/nvidia<minor>
// exists (the driver's minor; pkg/nvml's where the driver's cannot be read).
func minorValues(prefix string, d discoveryDirs, busID string, minors map[string]int, uuid string) []Value {
	got, ok := minors[uuid]
	gotText := strconv.Itoa(got)
	if !ok {
		gotText = "not reported by nvml-probe"
	}
	v := Value{What: prefix + "minor number (device node /dev/nvidia<minor>)", Got: gotText}
	want, err := driverMinor(d.ProcGPUs, busID)
	node := got
	if err != nil {
		v.Want, v.Note = "readable", "driver: "+err.Error()
	} else {
		v.Want, v.OK, node = strconv.Itoa(want), ok && want == got, want
		v.Note = "from " + filepath.Join(d.ProcGPUs, normalizeBusID(busID), "information")
	}
	vals := []Value{v}
	if err == nil || ok {
		path := filepath.Join(d.Dev, "nvidia"+strconv.Itoa(node))
		n := Value{What: prefix + "device node " + path, Want: "a character device"}
		switch fi, serr := os.Stat(path); {
		case serr != nil:
			n.Got = "missing: " + serr.Error()
		case fi.Mode()&os.ModeCharDevice == 0:
			n.Got = "not a character device (" + fi.Mode().String() + ")"
		default:
			n.Got, n.OK = "a character device", true
		}
		vals = append(vals, n)
	}
	return vals
}

// sysfsNUMA reads <dir>/<bus id in sysfs form>/numa_node (-1 = no NUMA affinity).
func sysfsNUMA(dir, busID string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, normalizeBusID(busID), "numa_node"))
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("numa_node of %s: %w", busID, err)
	}
	return n, nil
}

// compareDiscovery compares pkg/nvml's view (probe) with nvidia-smi's rows, the CUDA version of
// its header, the NUMA nodes in sysfs and the driver's minor numbers and device nodes (dirs),
// GPU by GPU (matched by UUID).
func compareDiscovery(rows []smiGPU, smiCUDA string, probe probeReport, dirs discoveryDirs) []Value {
	vals := []Value{
		eq("nvml-probe failures", "none", strings.Join(orNone(probe.Failures), "; ")),
		eq("nvml-probe backend", "nvml", probe.Backend),
		eq("GPU count", strconv.Itoa(len(rows)), strconv.Itoa(len(probe.GPUs))),
	}
	byUUID := map[string]probeGPU{}
	for _, g := range probe.GPUs {
		byUUID[g.UUID] = g
	}
	var vers struct{ driver, cuda string }
	cc := map[string]string{}
	if probe.Versions != nil {
		vers.driver, vers.cuda, cc = probe.Versions.DriverVersion, probe.Versions.CUDADriverVersion, probe.Versions.ComputeCapability
	}
	for i, r := range rows {
		if i == 0 {
			vals = append(vals, eq("driver version", r.DriverVersion, vers.driver), eq("CUDA version", smiCUDA, vers.cuda))
		} else if r.DriverVersion != rows[0].DriverVersion {
			vals = append(vals, eq(r.UUID+" driver version", rows[0].DriverVersion, r.DriverVersion))
		}
		g, ok := byUUID[r.UUID]
		if !ok {
			vals = append(vals, Value{What: r.UUID + " found by pkg/nvml", Want: "yes", Got: "no", OK: false})
			continue
		}
		p := r.UUID + " "
		vals = append(vals,
			eq(p+"index", r.Index, strconv.Itoa(g.Index)),
			eq(p+"name", r.Name, g.Model),
			eq(p+"memory.total (MiB)", r.MemoryMiB, strconv.FormatInt(g.MemoryMiB, 10)),
			Value{What: p + "pci.bus_id", Want: r.BusID, Got: g.PCIBusID, OK: normalizeBusID(r.BusID) == normalizeBusID(g.PCIBusID),
				Note: "compared in sysfs form " + normalizeBusID(r.BusID)},
			eq(p+"compute capability", r.ComputeCap, cc[r.UUID]),
			numaValue(p, dirs.SysfsPCI, r.BusID, g.NUMANode),
		)
		vals = append(vals, minorValues(p, dirs, r.BusID, probe.Minors, r.UUID)...)
	}
	return vals
}

// numaValue compares the NUMA node pkg/nvml found with sysfs's numa_node of the GPU (nvidia-smi
// --query-gpu does not show it). sysfs -1 (no affinity) accepts NVML's -1 or a node NVML knows.
func numaValue(prefix, dir, busID string, got int) Value {
	v := Value{What: prefix + "NUMA node", Got: strconv.Itoa(got)}
	n, err := sysfsNUMA(dir, busID)
	switch {
	case err != nil:
		v.Want, v.Note = "readable", "sysfs: "+err.Error()
	case n < 0:
		v.Want, v.OK = "-1", true
		v.Note = "sysfs shows no NUMA affinity (" + filepath.Join(dir, normalizeBusID(busID), "numa_node") + ")"
	default:
		v.Want, v.OK = strconv.Itoa(n), n == got
		v.Note = "from " + filepath.Join(dir, normalizeBusID(busID), "numa_node")
	}
	return v
}

func orNone(s []string) []string {
	if len(s) == 0 {
		return []string{"none"}
	}
	return s
}

// discoveryTimeout bounds nvml-probe (it watches XIDs for 2 s).
const discoveryTimeout = 60 * time.Second

// discovery runs nvidia-smi (query and table) and nvml-probe, saves their outputs under raw/
// and compares them (compareDiscovery).
func discovery(ctx context.Context, h host, out, smi, probeBin string, dirs discoveryDirs) Result {
	r := Result{Name: "discovery", Raw: []string{"raw/nvidia-smi-query.csv", "raw/nvidia-smi.txt", "raw/nvml-probe.json", "raw/nvml-probe.err"}}
	save := func(name string, b []byte) { _ = os.WriteFile(filepath.Join(rawDir(out), name), b, 0o644) }
	_ = os.MkdirAll(rawDir(out), 0o755)
	runSaved := func(timeout time.Duration, stdoutFile, stderrFile, name string, args ...string) ([]byte, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		o, e, err := h.run(cctx, nil, name, args...)
		save(stdoutFile, o)
		if stderrFile != "" {
			save(stderrFile, e)
		} else if len(e) > 0 {
			save(stdoutFile, append(o, e...))
		}
		if err != nil {
			return o, fmt.Errorf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), err, tail(string(e), 5))
		}
		return o, nil
	}
	csvOut, err := runSaved(smiTimeout, "nvidia-smi-query.csv", "", smi, "--query-gpu="+smiQueryFields, "--format=csv,noheader,nounits")
	if err != nil {
		r.Status, r.Reason = Fail, err.Error()
		return r
	}
	rows, err := parseSMIQuery(string(csvOut))
	if err != nil {
		r.Status, r.Reason = Fail, err.Error()
		return r
	}
	table, err := runSaved(smiTimeout, "nvidia-smi.txt", "", smi)
	if err != nil {
		r.Status, r.Reason = Fail, err.Error()
		return r
	}
	probeOut, perr := runSaved(discoveryTimeout, "nvml-probe.json", "nvml-probe.err", probeBin, "--watch=2s")
	var probe probeReport
	if err := json.Unmarshal(probeOut, &probe); err != nil {
		r.Status = Fail
		r.Reason = fmt.Sprintf("nvml-probe gave no report (%v); %v", err, perr)
		return r
	}
	r.Values = compareDiscovery(rows, parseSMICUDAVersion(string(table)), probe, dirs)
	r.finish()
	return r
}

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// smiH200 is nvidia-smi --query-gpu=smiQueryFields --format=csv,noheader,nounits on a 2-GPU
// H200 machine (the format nvidia-smi 550 prints).
const smiH200 = `0, GPU-3a1d5e6f-0000-1111-2222-333344445555, NVIDIA H200, 143771, 00000000:19:00.0, 9.0, 550.54.15
1, GPU-9b8c7d6e-aaaa-bbbb-cccc-ddddeeeeffff, NVIDIA H200, 143771, 00000000:9A:00.0, 9.0, 550.54.15
`

// smiTable is the head of nvidia-smi's table.
const smiTable = `Tue Dec  1 05:30:00 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
`

func TestParseSMIQuery(t *testing.T) {
	rows, err := parseSMIQuery(smiH200)
	if err != nil {
		t.Fatal(err)
	}
	want := smiGPU{Index: "1", UUID: "GPU-9b8c7d6e-aaaa-bbbb-cccc-ddddeeeeffff", Name: "NVIDIA H200", MemoryMiB: "143771",
		BusID: "00000000:9A:00.0", ComputeCap: "9.0", DriverVersion: "550.54.15"}
	if len(rows) != 2 || rows[1] != want || rows[0].BusID != "00000000:19:00.0" {
		t.Fatalf("rows = %+v, want 2 with row 1 = %+v", rows, want)
	}
	if _, err := parseSMIQuery("0, GPU-x, NVIDIA H200, 143771\n"); err == nil || !strings.Contains(err.Error(), "row 1 has 4 fields, want 7") {
		t.Fatalf("short row: err = %v, want one naming row 1 and the field counts", err)
	}
	if rows, err := parseSMIQuery("\n"); err != nil || len(rows) != 0 {
		t.Fatalf("empty output = %v, %v; want no rows", rows, err)
	}
}

func TestParseSMICUDAVersion(t *testing.T) {
	if v := parseSMICUDAVersion(smiTable); v != "12.4" {
		t.Fatalf("CUDA version = %q, want 12.4", v)
	}
	if v := parseSMICUDAVersion("| NVIDIA-SMI 570.86.10   Driver Version: 570.86.10   CUDA Version: 12.8  |"); v != "12.8" {
		t.Fatalf("CUDA version = %q, want 12.8", v)
	}
	if v := parseSMICUDAVersion("no header"); v != "" {
		t.Fatalf("CUDA version of no header = %q, want empty", v)
	}
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:9A:00.0": "0000:9a:00.0", // nvidia-smi and NVML
		"0000:19:00.0":     "0000:19:00.0", // sysfs
		"00000001:3B:00.0": "0001:3b:00.0",
		" 0000:AB:00.1 ":   "0000:ab:00.1",
	} {
		if got := normalizeBusID(in); got != want {
			t.Errorf("normalizeBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

// sysfsFixture writes numa_node files for bus ids (sysfs form) into a temporary folder.
func sysfsFixture(t *testing.T, nodes map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for id, n := range nodes {
		if err := os.MkdirAll(filepath.Join(dir, id), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, id, "numa_node"), []byte(n+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// driverFixture is the driver's side of smiH200's GPUs: /proc/driver/nvidia/gpus/<bus id>/information
// with their minor numbers (GPU 0 has minor 1 and GPU 1 minor 0: the minor need not be the
// index, case C53), and a /dev with nvidia0 and nvidia1 (links to /dev/null, a character device).
func driverFixture(t *testing.T, sysfs string) discoveryDirs {
	t.Helper()
	d := discoveryDirs{SysfsPCI: sysfs, ProcGPUs: t.TempDir(), Dev: t.TempDir()}
	for id, minor := range map[string]string{"0000:19:00.0": "1", "0000:9a:00.0": "0"} {
		_ = os.MkdirAll(filepath.Join(d.ProcGPUs, id), 0o755)
		info := "Model: \t\t NVIDIA H200\nIRQ:   \t\t 123\nBus Location: \t " + id + "\nDevice Minor: \t " + minor + "\nGPU Excluded:\t No\n"
		if err := os.WriteFile(filepath.Join(d.ProcGPUs, id, "information"), []byte(info), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/dev/null", filepath.Join(d.Dev, "nvidia"+minor)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// probeH200 is nvml-probe's view matching smiH200 (NVML prints the bus id with an 8-digit domain).
func probeH200() probeReport {
	p := probeReport{Backend: "nvml", GPUs: []probeGPU{
		{UUID: "GPU-3a1d5e6f-0000-1111-2222-333344445555", Index: 0, Model: "NVIDIA H200", MemoryMiB: 143771, NUMANode: 0, PCIBusID: "00000000:19:00.0"},
		{UUID: "GPU-9b8c7d6e-aaaa-bbbb-cccc-ddddeeeeffff", Index: 1, Model: "NVIDIA H200", MemoryMiB: 143771, NUMANode: 1, PCIBusID: "0000:9A:00.0"},
	}, Minors: map[string]int{"GPU-3a1d5e6f-0000-1111-2222-333344445555": 1, "GPU-9b8c7d6e-aaaa-bbbb-cccc-ddddeeeeffff": 0}}
	p.Versions = &struct {
		DriverVersion     string            `json:"driverVersion"`
		CUDADriverVersion string            `json:"cudaDriverVersion"`
		ComputeCapability map[string]string `json:"computeCapability"`
	}{DriverVersion: "550.54.15", CUDADriverVersion: "12.4", ComputeCapability: map[string]string{
		"GPU-3a1d5e6f-0000-1111-2222-333344445555": "9.0", "GPU-9b8c7d6e-aaaa-bbbb-cccc-ddddeeeeffff": "9.0"}}
	return p
}

func valueByWhat(vals []Value, suffix string) (Value, bool) {
	for _, v := range vals {
		if strings.HasSuffix(v.What, suffix) {
			return v, true
		}
	}
	return Value{}, false
}

func TestCompareDiscoveryEqual(t *testing.T) {
	rows, err := parseSMIQuery(smiH200)
	if err != nil {
		t.Fatal(err)
	}
	sys := sysfsFixture(t, map[string]string{"0000:19:00.0": "0", "0000:9a:00.0": "1"})
	dirs := driverFixture(t, sys)
	vals := compareDiscovery(rows, "12.4", probeH200(), dirs)
	// 3 overall + driver + CUDA + 8 per GPU x 2.
	if len(vals) != 21 {
		t.Fatalf("%d values, want 21: %+v", len(vals), vals)
	}
	u0 := rows[0].UUID + " "
	if v, _ := valueByWhat(vals, u0+"minor number (device node /dev/nvidia<minor>)"); v.Want != "1" || v.Got != "1" {
		t.Errorf("GPU 0 minor = %+v, want the driver's 1", v)
	}
	if v, _ := valueByWhat(vals, u0+"device node "+filepath.Join(dirs.Dev, "nvidia1")); v.Got != "a character device" {
		t.Errorf("GPU 0 device node = %+v", v)
	}
	for _, v := range vals {
		if !v.OK {
			t.Errorf("value %+v differs, want all equal", v)
		}
	}
	r := Result{Values: vals}
	r.finish()
	if r.Status != Pass {
		t.Fatalf("status %s (%s), want pass", r.Status, r.Reason)
	}
}

func TestCompareDiscoveryFindsDifferences(t *testing.T) {
	rows, _ := parseSMIQuery(smiH200)
	p := probeH200()
	p.GPUs[0].MemoryMiB = 143360        // NVML rounding differs from nvidia-smi
	p.GPUs[0].PCIBusID = "0000:1A:00.0" // another device
	p.GPUs[0].NUMANode = 1              // sysfs says 0
	p.GPUs = p.GPUs[:1]                 // GPU 1 not found
	p.Versions.CUDADriverVersion = "12.2"
	p.Failures = []string{"watch XIDs: boom"}
	sys := sysfsFixture(t, map[string]string{"0000:19:00.0": "0"})
	vals := compareDiscovery(rows, "12.4", p, driverFixture(t, sys))
	differ := map[string]bool{}
	for _, v := range vals {
		if !v.OK {
			differ[v.What] = true
		}
	}
	u0, u1 := rows[0].UUID+" ", rows[1].UUID+" "
	for _, w := range []string{"nvml-probe failures", "GPU count", "CUDA version", u0 + "memory.total (MiB)", u0 + "pci.bus_id",
		u0 + "NUMA node", u1 + "found by pkg/nvml"} {
		if !differ[w] {
			t.Errorf("%q not reported as differing; differing: %v", w, differ)
		}
	}
	for _, w := range []string{"driver version", u0 + "name", u0 + "index", u0 + "compute capability"} {
		if differ[w] {
			t.Errorf("%q reported as differing, want equal", w)
		}
	}
	if len(differ) != 7 {
		t.Errorf("%d values differ, want 7: %v", len(differ), differ)
	}
}

// The minor numbers: pkg/nvml's against the driver's "Device Minor:", and /dev/nvidia<minor>.
func TestMinorValues(t *testing.T) {
	dirs := driverFixture(t, t.TempDir())
	u := "GPU-3a1d5e6f-0000-1111-2222-333344445555"
	// pkg/nvml took the index (0) for the minor (1): differs, and the node checked is the driver's.
	vals := minorValues("", dirs, "00000000:19:00.0", map[string]int{u: 0}, u)
	if len(vals) != 2 || vals[0].OK || vals[0].Want != "1" || vals[0].Got != "0" || !vals[1].OK || vals[1].What != "device node "+filepath.Join(dirs.Dev, "nvidia1") {
		t.Fatalf("minor 0 vs driver's 1: %+v", vals)
	}
	// An older nvml-probe without minors.
	if vals := minorValues("", dirs, "00000000:19:00.0", nil, u); vals[0].OK || vals[0].Got != "not reported by nvml-probe" {
		t.Fatalf("no minors: %+v", vals)
	}
	// The device node missing.
	_ = os.Remove(filepath.Join(dirs.Dev, "nvidia1"))
	if vals := minorValues("", dirs, "00000000:19:00.0", map[string]int{u: 1}, u); !vals[0].OK || vals[1].OK || !strings.HasPrefix(vals[1].Got, "missing: ") {
		t.Fatalf("no /dev/nvidia1: %+v", vals)
	}
	// A regular file is not a device node.
	_ = os.WriteFile(filepath.Join(dirs.Dev, "nvidia1"), nil, 0o644)
	if vals := minorValues("", dirs, "00000000:19:00.0", map[string]int{u: 1}, u); vals[1].OK || !strings.HasPrefix(vals[1].Got, "not a character device") {
		t.Fatalf("regular /dev/nvidia1: %+v", vals)
	}
	// No driver folder for the GPU: the driver's minor is unreadable, pkg/nvml's node checked.
	vals = minorValues("", dirs, "00000000:20:00.0", map[string]int{u: 0}, u)
	if vals[0].OK || vals[0].Want != "readable" || !strings.Contains(vals[0].Note, "no such file") || !vals[1].OK {
		t.Fatalf("no driver information: %+v", vals)
	}
	if _, err := driverMinor(t.TempDir(), "0000:19:00.0"); err == nil {
		t.Fatal("driverMinor without the file: no error")
	}
}

// case: sysfs -1 (no NUMA affinity) accepts NVML's -1 and a node NVML knows; an unreadable
// sysfs entry fails the value.
func TestNUMAValue(t *testing.T) {
	sys := sysfsFixture(t, map[string]string{"0000:19:00.0": "-1"})
	if v := numaValue("", sys, "00000000:19:00.0", -1); !v.OK || v.Want != "-1" {
		t.Errorf("sysfs -1, NVML -1: %+v, want ok", v)
	}
	if v := numaValue("", sys, "00000000:19:00.0", 0); !v.OK {
		t.Errorf("sysfs -1, NVML 0: %+v, want ok", v)
	}
	if v := numaValue("", sys, "00000000:20:00.0", 0); v.OK || !strings.Contains(v.Note, "no such file") {
		t.Errorf("missing sysfs entry: %+v, want a difference naming the error", v)
	}
}

// fakeHost answers commands from a table keyed by the command's base name and first argument.
type fakeHost struct {
	path    map[string]bool
	answers map[string]fakeAnswer
	calls   []string
	envs    map[string][]string
	// onRun, when set, runs before answering (e.g. to write files a command would write).
	onRun func(key string, env []string)
	// onRunArgs, when set, runs before onRun with the whole command.
	onRunArgs func(name string, args, env []string)
	// args are each call's arguments, in order.
	args [][]string
}

type fakeAnswer struct {
	stdout, stderr string
	err            error
}

func (f *fakeHost) host() host {
	return host{
		lookPath: func(file string) (string, error) {
			if f.path[file] {
				return "/usr/bin/" + file, nil
			}
			return "", &os.PathError{Op: "lookpath", Path: file, Err: os.ErrNotExist}
		},
		run: func(_ context.Context, env []string, name string, args ...string) ([]byte, []byte, error) {
			key := filepath.Base(name)
			if len(args) > 0 {
				key += " " + args[0]
			}
			f.calls = append(f.calls, key)
			if f.envs == nil {
				f.envs = map[string][]string{}
			}
			f.envs[key] = env
			f.args = append(f.args, append([]string{name}, args...))
			if f.onRunArgs != nil {
				f.onRunArgs(name, args, env)
			}
			if f.onRun != nil {
				f.onRun(key, env)
			}
			a, ok := f.answers[key]
			if !ok {
				return nil, []byte("not found"), os.ErrNotExist
			}
			return []byte(a.stdout), []byte(a.stderr), a.err
		},
	}
}

func TestDiscoveryRunsAndSavesRaw(t *testing.T) {
	pj, _ := json.Marshal(probeH200())
	f := &fakeHost{answers: map[string]fakeAnswer{
		"nvidia-smi --query-gpu=" + smiQueryFields: {stdout: smiH200},
		"nvidia-smi":            {stdout: smiTable},
		"nvml-probe --watch=2s": {stdout: string(pj), stderr: "klog lines"},
	}}
	out := t.TempDir()
	sys := sysfsFixture(t, map[string]string{"0000:19:00.0": "0", "0000:9a:00.0": "1"})
	r := discovery(context.Background(), f.host(), out, "nvidia-smi", "/stage/bin/nvml-probe", driverFixture(t, sys))
	if r.Status != Pass || len(r.Values) != 21 {
		t.Fatalf("discovery = %s (%s) with %d values, want pass with 21", r.Status, r.Reason, len(r.Values))
	}
	for name, want := range map[string]string{"nvidia-smi-query.csv": smiH200, "nvml-probe.err": "klog lines", "nvidia-smi.txt": smiTable} {
		if got := readRaw(out, name); got != strings.TrimSpace(want) {
			t.Errorf("raw/%s = %q, want %q", name, got, want)
		}
	}
}

func TestDiscoveryFailsWithoutProbeReport(t *testing.T) {
	f := &fakeHost{answers: map[string]fakeAnswer{
		"nvidia-smi --query-gpu=" + smiQueryFields: {stdout: smiH200},
		"nvidia-smi":            {stdout: smiTable},
		"nvml-probe --watch=2s": {stderr: "nvml-probe: NVML library libnvidia-ml.so.1 not found", err: os.ErrNotExist},
	}}
	r := discovery(context.Background(), f.host(), t.TempDir(), "nvidia-smi", "nvml-probe", discoveryDirs{SysfsPCI: t.TempDir()})
	if r.Status != Fail || !strings.Contains(r.Reason, "nvml-probe gave no report") || !strings.Contains(r.Reason, "libnvidia-ml.so.1 not found") {
		t.Fatalf("discovery = %s (%s), want fail naming the missing report and the probe's error", r.Status, r.Reason)
	}
}

// outDir is an empty output folder with its raw/ folder.
func outDir(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	if err := os.MkdirAll(rawDir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

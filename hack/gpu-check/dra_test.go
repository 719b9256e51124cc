package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/hami-go/hami-go/pkg/draapi"
)

// The names gpucheck compares are the driver's (it does not import them, to stay small).
func TestDRANamesAreTheDriversNames(t *testing.T) {
	for got, want := range map[string]string{
		draAttrUUID: string(draapi.AttrUUID), draAttrIndex: string(draapi.AttrIndex), draAttrProductName: string(draapi.AttrProductName),
		draAttrComputeCapability: string(draapi.AttrComputeCapability), draAttrDriverVersion: string(draapi.AttrDriverVersion),
		draAttrCUDAVersion: string(draapi.AttrCUDAVersion), draCapMemory: string(draapi.CapacityMemory),
		draCapCores: string(draapi.CapacityCores), draCapSharers: string(draapi.CapacitySharers),
		draAttrPCIBusID: string(deviceattribute.StandardDeviceAttributePCIBusID), draAttrNUMANode: string(deviceattribute.StandardDeviceAttributeNUMANode),
	} {
		if got != want {
			t.Errorf("gpucheck compares %q, the driver publishes %q", got, want)
		}
	}
}

// draH200 is the report TestGPUCheckDRA would write on the machine of smiH200 (split count 4,
// the claim on gpu-0).
func draH200() draReport {
	dev := func(name, uuid, index, bus, numa string) draDevice {
		return draDevice{Name: name, Attributes: map[string]string{
			draAttrUUID: uuid, draAttrIndex: index, draAttrProductName: "NVIDIA H200", draAttrComputeCapability: "9.0.0",
			draAttrDriverVersion: "550.54.15", draAttrCUDAVersion: "12.4.0", draAttrPCIBusID: bus, draAttrNUMANode: numa,
		}, Capacity: map[string]string{draCapMemory: "150754820096", draCapCores: "100", draCapSharers: "4"}}
	}
	return draReport{SplitCount: 4, Prepared: "gpu-0", MemoryMiB: 4000, Cores: 25,
		Devices: []draDevice{
			dev("gpu-0", "GPU-3a1d5e6f-0000-1111-2222-333344445555", "0", "0000:19:00.0", "0"),
			dev("gpu-1", "GPU-9b8c7d6e-aaaa-bbbb-cccc-ddddeeeeffff", "1", "0000:9a:00.0", "1"),
		},
		CDIDevices: []string{"gpu.hami-go.io/claim=uid-gpu-check"},
		Env: map[string]string{"HAMI_GO_GPU_UUIDS": "GPU-3a1d5e6f-0000-1111-2222-333344445555",
			"CUDA_DEVICE_MEMORY_LIMIT_0": "4000m", "CUDA_DEVICE_SM_LIMIT_0": "25"}}
}

func TestCompareDRAEqual(t *testing.T) {
	rows, err := parseSMIQuery(smiH200)
	if err != nil {
		t.Fatal(err)
	}
	sys := sysfsFixture(t, map[string]string{"0000:19:00.0": "0", "0000:9a:00.0": "1"})
	vals := compareDRA(rows, "12.4", draH200(), sys)
	// 2 overall + 12 per GPU x 2 + 5 for the prepared claim.
	if len(vals) != 32 {
		t.Fatalf("%d values, want 32: %+v", len(vals), vals)
	}
	for _, v := range vals {
		if !v.OK {
			t.Errorf("value %+v differs, want all equal", v)
		}
	}
	if v, _ := valueByWhat(vals, "GPU-3a1d5e6f-0000-1111-2222-333344445555 capacity memory (bytes)"); v.Want != "150754820096" {
		t.Errorf("memory want %q, want 143771 MiB in bytes", v.Want)
	}
	r := Result{Values: vals}
	r.finish()
	if r.Status != Pass {
		t.Fatalf("status %s (%s), want pass", r.Status, r.Reason)
	}
}

func TestCompareDRAFindsDifferences(t *testing.T) {
	rows, err := parseSMIQuery(smiH200)
	if err != nil {
		t.Fatal(err)
	}
	sys := sysfsFixture(t, map[string]string{"0000:19:00.0": "-1", "0000:9a:00.0": "1"})
	rep := draH200()
	a0, a1 := rep.Devices[0].Attributes, rep.Devices[1].Attributes
	a0[draAttrIndex] = "3"
	a0[draAttrPCIBusID] = "00000000:19:00.0" // not the sysfs form the standard attribute takes
	a0[draAttrComputeCapability] = "9.0"     // not a semantic version
	a0[draAttrDriverVersion] = "550.54.14"
	a0[draAttrCUDAVersion] = "12.3.0"
	// a0 keeps numaNode 0, but sysfs says -1: the attribute must be absent.
	delete(a1, draAttrNUMANode) // sysfs says 1
	a1[draAttrProductName] = "NVIDIA H100"
	rep.Devices[1].Capacity[draCapMemory] = "143771" // MiB, not bytes
	rep.Devices[1].Capacity[draCapSharers] = "10"
	rep.Devices[1].Taints = 1
	rep.Env["HAMI_GO_GPU_UUIDS"] = "GPU-9b8c7d6e-aaaa-bbbb-cccc-ddddeeeeffff"
	rep.Env["CUDA_DEVICE_MEMORY_LIMIT_0"] = "4000"
	delete(rep.Env, "CUDA_DEVICE_SM_LIMIT_0")
	rep.Error = "CDI spec: no device"

	vals := compareDRA(rows, "12.4", rep, sys)
	bad := map[string]bool{}
	for _, v := range vals {
		if !v.OK {
			bad[v.What] = true
		}
	}
	u0, u1 := "GPU-3a1d5e6f-0000-1111-2222-333344445555 ", "GPU-9b8c7d6e-aaaa-bbbb-cccc-ddddeeeeffff "
	want := []string{"test steps",
		u0 + "attribute index", u0 + "attribute resource.kubernetes.io/pciBusID",
		u0 + "attribute computeCapability", u0 + "attribute driverVersion", u0 + "attribute cudaDriverVersion",
		u0 + "attribute resource.kubernetes.io/numaNode",
		u1 + "attribute productName", u1 + "capacity memory (bytes)", u1 + "capacity sharers",
		u1 + "attribute resource.kubernetes.io/numaNode", u1 + "taints",
		"CDI HAMI_GO_GPU_UUIDS", "CDI CUDA_DEVICE_MEMORY_LIMIT_0", "CDI CUDA_DEVICE_SM_LIMIT_0"}
	for _, w := range want {
		if !bad[w] {
			t.Errorf("%q not flagged", w)
		}
		delete(bad, w)
	}
	for w := range bad {
		t.Errorf("%q flagged, but it matches", w)
	}

	// A GPU nvidia-smi lists that the slice does not publish; the claim on a device that is
	// not there.
	rep = draH200()
	rep.Devices = rep.Devices[1:]
	rep.Prepared = "gpu-7"
	vals = compareDRA(rows, "12.4", rep, sysfsFixture(t, map[string]string{"0000:19:00.0": "0", "0000:9a:00.0": "1"}))
	for _, w := range []string{"device count", u0 + "published", "Prepare: the claim's GPU gpu-7 is one nvidia-smi lists"} {
		if v, ok := valueByWhat(vals, w); !ok || v.OK {
			t.Errorf("%q: %+v, want a differing value", w, v)
		}
	}
	// The test failed before Prepare (nvml.Open): one value says so, no claim values.
	vals = compareDRA(rows, "12.4", draReport{Error: "nvml.Open: NVML library libnvidia-ml.so.1 not found"}, sys)
	if v := vals[len(vals)-1]; v.What != "Prepare" || v.OK || v.Got != "not reached" {
		t.Errorf("last value %+v, want Prepare not reached", v)
	}
	if _, ok := valueByWhat(vals, "Prepare error"); ok {
		t.Error("Prepare error compared though Prepare was not reached")
	}
	// The Prepare refusal is a value of its own.
	rep = draH200()
	rep.PrepareError = "consumed cores 25 is above the 0 the request allowed"
	if v, _ := valueByWhat(compareDRA(rows, "12.4", rep, sys), "Prepare error"); v.OK || v.Got != rep.PrepareError {
		t.Errorf("Prepare error: %+v", v)
	}
}

func TestSemVer(t *testing.T) {
	for in, want := range map[string]string{"9.0": "9.0.0", "535.104.05": "535.104.5", "12.4": "12.4.0", "550.54.15": "550.54.15", "x.1": "x.1", "": ""} {
		if got := semVer(in); got != want {
			t.Errorf("semVer(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDRACheck(t *testing.T) {
	out := outDir(t)
	sys := sysfsFixture(t, map[string]string{"0000:19:00.0": "0", "0000:9a:00.0": "1"})
	f := &fakeHost{answers: map[string]fakeAnswer{
		"nvidia-smi --query-gpu=" + smiQueryFields: {stdout: smiH200},
		"nvidia-smi":         {stdout: smiTable},
		"dra.test -test.run": {stdout: "=== RUN   TestGPUCheckDRA\n--- PASS: TestGPUCheckDRA (0.4s)\nPASS\n"},
	}}
	f.onRun = func(key string, _ []string) {
		if key == "dra.test -test.run" {
			b, _ := json.Marshal(draH200())
			_ = os.WriteFile(filepath.Join(rawDir(out), "dra-driver.json"), b, 0o644)
		}
	}
	r := draCheck(context.Background(), f.host(), out, "nvidia-smi", "/stage/bin/dra.test", sys)
	if r.Status != Pass || len(r.Values) != 32 {
		t.Fatalf("dra-driver = %s (%s) with %d values, want pass with 32", r.Status, r.Reason, len(r.Values))
	}
	if env := strings.Join(f.envs["dra.test -test.run"], " "); env != "HAMI_GO_GPU_CHECK=1 HAMI_GO_GPU_CHECK_OUT="+rawDir(out) {
		t.Fatalf("test env = %q", env)
	}
	if !strings.Contains(readRaw(out, "dra-driver.log"), "--- PASS") || !strings.Contains(readRaw(out, "dra-nvidia-smi-query.csv"), "NVIDIA H200") {
		t.Fatal("raw/dra-driver.log or raw/dra-nvidia-smi-query.csv not written")
	}

	// The test binary skipped (HAMI_GO_GPU_CHECK not seen): a failure, even with a report left.
	f.answers["dra.test -test.run"] = fakeAnswer{stdout: "--- SKIP: TestGPUCheckDRA\n    real-GPU check: runs only with HAMI_GO_GPU_CHECK=1\n"}
	if r = draCheck(context.Background(), f.host(), out, "nvidia-smi", "dra.test", sys); r.Status != Fail || !strings.HasPrefix(r.Reason, "the test skipped") {
		t.Fatalf("skipped test: %s (%s)", r.Status, r.Reason)
	}

	// No report (the binary could not start): a failure naming the missing file and the exit.
	f.onRun = nil
	f.answers["dra.test -test.run"] = fakeAnswer{stderr: "error while loading shared libraries: libc.so.6", err: errors.New("exit status 127")}
	r = draCheck(context.Background(), f.host(), out, "nvidia-smi", "dra.test", sys)
	if r.Status != Fail || !strings.Contains(r.Reason, "no DRA report") || !strings.Contains(r.Reason, "dra-driver.json") ||
		!strings.Contains(r.Reason, "exit status 127") {
		t.Fatalf("no report: %s (%s)", r.Status, r.Reason)
	}

	// Every value matches but the binary failed afterwards.
	f.onRun = func(key string, _ []string) {
		if key == "dra.test -test.run" {
			b, _ := json.Marshal(draH200())
			_ = os.WriteFile(filepath.Join(rawDir(out), "dra-driver.json"), b, 0o644)
		}
	}
	f.answers["dra.test -test.run"] = fakeAnswer{stdout: "--- FAIL: TestGPUCheckDRA\n", err: errors.New("exit status 1")}
	if r = draCheck(context.Background(), f.host(), out, "nvidia-smi", "dra.test", sys); r.Status != Fail || !strings.Contains(r.Reason, "exit status 1") {
		t.Fatalf("failed binary: %s (%s)", r.Status, r.Reason)
	}

	// nvidia-smi fails: the check fails before running the binary.
	f.answers["nvidia-smi --query-gpu="+smiQueryFields] = fakeAnswer{stderr: "NVIDIA-SMI has failed", err: errors.New("exit status 9")}
	if r = draCheck(context.Background(), f.host(), out, "nvidia-smi", "dra.test", sys); r.Status != Fail || !strings.Contains(r.Reason, "NVIDIA-SMI has failed") {
		t.Fatalf("nvidia-smi failing: %s (%s)", r.Status, r.Reason)
	}
}

// When the cgo binaries cannot run, `gpucheck preflight` records dra-driver as skipped with the
// reason, like the other NVML checks; dra.test is one of the cgo binaries it reads (here the
// only missing one).
func TestPreflightCGOUnusableSkipsDRA(t *testing.T) {
	out := t.TempDir()
	missing := filepath.Join(t.TempDir(), "dra.test")
	var o, e strings.Builder
	rc := run(context.Background(), []string{"preflight", "--out", out, "--nvml-probe", "/bin/sh", "--test-binary", "/bin/sh", "--dra-test-binary", missing},
		glibcHost("99.0").host(), t.TempDir(), &o, &e)
	if rc != exitCGOUnusable {
		t.Fatalf("rc %d, want %d\n%s%s", rc, exitCGOUnusable, o.String(), e.String())
	}
	r, ok, err := readResult(out, "dra-driver")
	if err != nil || !ok || r.Status != Skip || !strings.Contains(r.Reason, "needs NVML through the cgo binaries") || !strings.Contains(r.Reason, missing) {
		t.Fatalf("dra-driver = %+v (%v, %v), want skip naming %s", r, ok, err, missing)
	}
}

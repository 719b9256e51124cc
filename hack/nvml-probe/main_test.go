package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/hami-go/hami-go/pkg/fake"
)

func TestRunOnFakeFleet(t *testing.T) {
	var buf bytes.Buffer
	cfg := config{Watch: 3 * time.Second, FakeProfile: "dgxh200", FakeNode: "gpu-node-1", FakeInjectXID: 79}
	if err := run(context.Background(), cfg, &buf); err != nil {
		t.Fatalf("run: %v\n%s", err, buf.String())
	}
	var rep report
	if err := json.Unmarshal(buf.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, buf.String())
	}
	if rep.Backend != "fake" || len(rep.GPUs) != 8 || len(rep.Failures) != 0 {
		t.Fatalf("report = backend %q, %d GPUs, failures %v; want fake, 8, none", rep.Backend, len(rep.GPUs), rep.Failures)
	}
	for i, g := range rep.GPUs {
		if g.UUID != fake.GPUUUID("gpu-node-1", i) || g.Model != "NVIDIA H200 141GB HBM3e" || g.MemoryMiB != 144384 ||
			rep.Probes[g.UUID] != "ok" {
			t.Errorf("gpu %d = %+v, probe %q", i, g, rep.Probes[g.UUID])
		}
	}
	// The minor numbers travel (device.GPU leaves Minor out of its JSON): one per GPU, distinct.
	seen := map[int]bool{}
	for _, g := range rep.GPUs {
		m, ok := rep.Minors[g.UUID]
		if !ok || m < 0 || seen[m] {
			t.Errorf("minor of %s = %d (%v); want one, distinct, per GPU: %v", g.UUID, m, ok, rep.Minors)
		}
		seen[m] = true
	}
	if len(rep.Minors) != 8 || !strings.Contains(buf.String(), `"minors": {`) {
		t.Errorf("minors = %v", rep.Minors)
	}
	if len(rep.XIDs) == 0 || rep.XIDs[0].XID != 79 || rep.XIDs[0].UUID != fake.GPUUUID("gpu-node-1", 0) {
		t.Errorf("xids = %+v, want XID 79 on GPU 0 first", rep.XIDs)
	}
}

func TestRunBadFakeProfile(t *testing.T) {
	err := run(context.Background(), config{Watch: time.Millisecond, FakeProfile: "3x0:X", FakeNode: "n"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `memory "0"`) {
		t.Fatalf("run with a bad profile = %v, want the profile error", err)
	}
}

// TestReadVersionsOnGoNVMLMock reads versions from go-nvml's dgxh200 mock (driver 550.54.15,
// CUDA 12040, compute capability 9.0).
func TestReadVersionsOnGoNVMLMock(t *testing.T) {
	s := dgxh200.New()
	uuids := []string{s.Devices[0].(*server.Device).UUID, s.Devices[7].(*server.Device).UUID}
	v := readVersions(s, uuids)
	if v.DriverVersion != "550.54.15" || v.CUDADriverVersion != "12.4" || len(v.Errors) != 0 {
		t.Fatalf("versions = %+v, want driver 550.54.15, CUDA 12.4, no errors", v)
	}
	for _, u := range uuids {
		if v.ComputeCapability[u] != "9.0" {
			t.Errorf("compute capability of %s = %q, want 9.0", u, v.ComputeCapability[u])
		}
	}
}

// TestReadVersionsRecordsFailures: an unknown UUID and a mock without the CUDA version function
// are recorded as errors, the other values still read.
func TestReadVersionsRecordsFailures(t *testing.T) {
	s := dgxh200.New()
	s.SystemGetCudaDriverVersionFunc = nil
	v := readVersions(s, []string{"GPU-nope"})
	if v.DriverVersion != "550.54.15" || v.CUDADriverVersion != "" || len(v.Errors) != 2 ||
		!strings.Contains(v.Errors[0], "nvmlSystemGetCudaDriverVersion") || !strings.Contains(v.Errors[1], "GPU-nope") {
		t.Fatalf("versions = %+v, want the driver version and 2 errors (CUDA version, GPU-nope)", v)
	}
}

func TestCUDAVersionString(t *testing.T) {
	for in, want := range map[int]string{12040: "12.4", 12080: "12.8", 11000: "11.0", 13010: "13.1"} {
		if got := cudaVersionString(in); got != want {
			t.Errorf("cudaVersionString(%d) = %q, want %q", in, got, want)
		}
	}
}

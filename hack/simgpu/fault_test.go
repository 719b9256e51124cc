package main

import (
	"testing"

	"github.com/hami-go/hami-go/hack/simgpu/daemon"
)

// TestCUDAOnALostGPU: a GPU broken by a non-application XID (the daemon answers ERR LOST) is
// still listed by cuInit/cuDeviceGet with its name and UUID, while its memory calls
// (cuMemAlloc, cuMemGetInfo) answer CUDA_ERROR_UNKNOWN; the other GPUs are unaffected, and
// after RECOVER it allocates again.
func TestCUDAOnALostGPU(t *testing.T) {
	requireCUDATools(t)
	out := buildCUDA(t)
	e := newCUDAEnv(t, out)
	cl, err := daemon.Dial(e.socket, "fault-test")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Request("XID 3 79"); err != nil {
		t.Fatal(err)
	}
	lost := e.uuids(3)[0]
	r := e.probe(t, nil, "--max-mib", "512")
	if r.Error != "" || len(r.Devices) != len(e.devs) {
		t.Fatalf("cudaprobe with a lost GPU: error %q, %d devices; want all %d listed", r.Error, len(r.Devices), len(e.devs))
	}
	for _, d := range r.Devices {
		switch {
		case d.UUID == lost && (d.Name != e.devs[3].Name || d.AllocMiB != 0 || d.AllocError != "CUDA_ERROR_UNKNOWN"):
			t.Errorf("lost GPU: %+v, want its name, no allocation, CUDA_ERROR_UNKNOWN", d)
		case d.UUID != lost && (d.AllocMiB != 512 || d.AllocError != ""):
			t.Errorf("healthy GPU: %+v, want 512 MiB allocated", d)
		}
	}
	if _, err := cl.Request("RECOVER 3"); err != nil {
		t.Fatal(err)
	}
	for _, d := range e.probe(t, nil, "--max-mib", "512").Devices {
		if d.AllocMiB != 512 || d.AllocError != "" || d.FreeMiB != h100MiB {
			t.Errorf("after RECOVER: %+v, want 512 MiB allocated and all memory free", d)
		}
	}
}

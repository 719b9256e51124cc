package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The demo's first line names the node's driver: the simulated driver's version from its
// library under <state>/driver with the nvml backend, the fake backend's mock servers otherwise.
func TestDriverLine(t *testing.T) {
	state := t.TempDir()
	lib := filepath.Join(state, "driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05")
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		state string
		a     agent
		want  string
	}{
		{state, agent{name: "device plugin", backend: "nvml"}, "Driver: simulated NVIDIA driver 580.95.05 (hack/simgpu, docs/simgpu.md) under " + filepath.Join(state, "driver") + "; the device plugin's nvml backend over it"},
		{t.TempDir(), agent{name: "DRA driver", backend: "nvml"}, "Driver: NVIDIA driver on the node (the DRA driver's nvml backend)"},
		{state, agent{name: "DRA driver", backend: "fake"}, "Driver: none; the DRA driver's fake backend (go-nvml mock servers, no CUDA)"},
	} {
		if got := driverLine(tc.state, tc.a); !strings.HasPrefix(got, tc.want) {
			t.Errorf("driverLine(%+v) = %q, want it to start %q", tc.a, got, tc.want)
		}
	}
}

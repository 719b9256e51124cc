package gpuenv

import (
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// HAMI_GO_GPU_MODEL (and through it the Ray label hami-go.io/accelerator-type) is Ray's own
// accelerator type of the first GPU (device.RayAcceleratorType), the rule docs/components.md
// documents: for a GeForce card Ray reports "G", not the model number.
func TestBuildModelIsRayAcceleratorType(t *testing.T) {
	for _, tc := range []struct {
		name   string
		grants []Grant
		model  string
		want   string
	}{
		{"H100", []Grant{{UUID: "GPU-A", MemoryMiB: 4000}}, "NVIDIA H100 80GB HBM3", "H100"},
		{"GeForce as Ray reports it", []Grant{{UUID: "GPU-A", MemoryMiB: 4000}}, "NVIDIA GeForce RTX 4090", "G"},
		{"Tesla", []Grant{{UUID: "GPU-A", MemoryMiB: 4000}}, "Tesla V100-SXM2-16GB", "V100"},
		{"no GPU", nil, "NVIDIA GeForce RTX 4090", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Build(Config{Enforcement: EnforceNone}, Request{Grants: tc.grants, Model: tc.model}, func(string) bool { return false })
			if got := e.Env[device.EnvGPUModel]; got != tc.want {
				t.Errorf("%s = %q for %q, want %q", device.EnvGPUModel, got, tc.model, tc.want)
			}
		})
	}
}

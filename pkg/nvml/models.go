package nvml

import "github.com/hami-go/hami-go/pkg/device"

// modelSMs is one row of the SM table: a model, as whole tokens (device.ModelMatches), and its
// streaming multiprocessor count from NVIDIA's datasheets and architecture whitepapers.
type modelSMs struct {
	model string
	sms   int
}

// smTable lists known models, more specific names first (a PCIe H100 has fewer SMs than an
// SXM one). A function, not a package variable, so nothing can modify it.
func smTable() []modelSMs {
	return []modelSMs{
		{"H100 PCIe", 114},
		{"H100", 132}, // SXM5 and NVL
		{"H800 PCIe", 114},
		{"H800", 132},
		{"H200", 132},
		{"H20", 78},
		{"GH200", 132},
		{"B200", 148},
		{"A100", 108},
		{"A800", 108},
		{"A30", 56},
		{"A10", 72},
		{"A40", 84},
		{"L40S", 142},
		{"L40", 142},
		{"L4", 58},
		{"T4", 40},
		{"V100", 80},
	}
}

// SMCountOf returns the streaming multiprocessor count of a known GPU model (NVML device name,
// matched by whole tokens, so "A10" is not "A100"), or 0 when the model is not known. Discovery
// uses it when NVML does not report the count (nvmlDeviceGetAttributes supports only MIG device
// handles, per nvml.h); pkg/fake uses it for simulated GPUs.
func SMCountOf(model string) int {
	for _, r := range smTable() {
		if device.ModelMatches(r.model, model) {
			return r.sms
		}
	}
	return 0
}

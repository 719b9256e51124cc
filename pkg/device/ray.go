package device

import "strings"

// RayAcceleratorType turns an NVML device name into the value of Ray's
// `ray.io/accelerator-type` node label, by Ray's own rule for NVIDIA GPUs
// (python/ray/_private/accelerators/nvidia_gpu.py, NVIDIA_GPU_NAME_PATTERN `\w+\s+([A-Z0-9]+)`:
// the run of capitals and digits that starts the second word): "NVIDIA H100 80GB HBM3" ->
// "H100", "NVIDIA A100-SXM4-80GB" -> "A100", "Tesla V100-SXM2-16GB" -> "V100". A name the rule
// does not fit becomes a valid label value (at most 63 of [A-Za-z0-9_.-], alphanumeric at both
// ends; other characters become "-"); an empty result is UnknownModel. It is hami-go's one rule
// for a GPU's model label: both node components put it in EnvGPUModel, which the webhook's
// rewritten `ray start` line passes to --labels, and the DRA driver publishes it as the device
// attribute "model". Ray's rule keeps the first run of capitals and digits, so a name whose
// second word is not a model number gets what Ray itself reports: "NVIDIA GeForce RTX 4090" ->
// "G".
func RayAcceleratorType(model string) string {
	f := strings.Fields(model)
	if len(f) >= 2 && isWordChars(f[0]) {
		run := 0
		for run < len(f[1]) && (f[1][run] >= 'A' && f[1][run] <= 'Z' || f[1][run] >= '0' && f[1][run] <= '9') {
			run++
		}
		if run > 0 {
			return f[1][:run]
		}
	}
	b := []byte(strings.TrimSpace(model))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	s := strings.TrimFunc(string(b), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
	if s == "" {
		return UnknownModel
	}
	return s
}

// isWordChars reports whether s is all of Python's \w in ASCII: letters, digits, underscore.
func isWordChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return s != ""
}

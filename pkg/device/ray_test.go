package device

import "testing"

func TestRayAcceleratorType(t *testing.T) {
	for model, want := range map[string]string{
		"NVIDIA H100 80GB HBM3":   "H100",
		"NVIDIA A100-SXM4-80GB":   "A100",
		"Tesla V100-SXM2-16GB":    "V100",
		"NVIDIA L4":               "L4",
		"NVIDIA H200":             "H200",
		"NVIDIA GeForce RTX 4090": "G", // what Ray itself reports
		"  ":                      "unknown",
		"weird/name (rev 2)!":     "weird-name--rev-2",
		"NVIDIA B200":             "B200",
		"Quadro_RTX 8000":         "8000",
		"Tesla T4":                "T4",
		"":                        "unknown",
	} {
		if got := RayAcceleratorType(model); got != want {
			t.Errorf("RayAcceleratorType(%q) = %q, want %q", model, got, want)
		}
	}
}

package nri

import (
	"strings"
	"testing"
)

// case C42 (issue 29): a HAMi-core container's NVIDIA_DRIVER_CAPABILITIES must include compute and utility,
// or glibc skips libvgpu.so and the process runs without limits. What the container has is kept.
func TestDriverCapabilitiesChange(t *testing.T) {
	const key = "NVIDIA_DRIVER_CAPABILITIES"
	for _, tc := range []struct {
		name   string
		env    []string
		need   string
		want   string // "" = no change
		errHas string
	}{
		{name: "nothing needed", env: []string{key + "=video"}, need: ""},
		{name: "unset: the toolkit would give utility only", env: []string{"PATH=/bin"}, need: "compute,utility", want: "compute,utility"},
		{name: "empty value", env: []string{key + "="}, need: "compute,utility", want: "compute,utility"},
		{name: "CUDA base image's value", env: []string{key + "=compute,utility"}, need: "compute,utility"},
		{name: "same set, other order and spaces", env: []string{key + "=utility, compute"}, need: "compute,utility"},
		{name: "all", env: []string{key + "=all"}, need: "compute,utility"},
		{name: "graphics image: kept, compute and utility added", env: []string{key + "=graphics,display"}, need: "compute,utility", want: "graphics,display,compute,utility"},
		{name: "utility only (NVML tools image)", env: []string{key + "=utility"}, need: "compute,utility", want: "utility,compute"},
		{name: "twice, last includes them", env: []string{key + "=video", key + "=all"}, need: "compute,utility"},
		{name: "twice, last lacks compute: refused", env: []string{key + "=all", key + "=utility"}, need: "compute,utility",
			errHas: "sets NVIDIA_DRIVER_CAPABILITIES more than once (last NVIDIA_DRIVER_CAPABILITIES=utility), and the GPU enforcement needs it to include compute,utility, which cannot be added to a repeated name (set it once, e.g. NVIDIA_DRIVER_CAPABILITIES=utility,compute)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch, err := DriverCapabilitiesChange(tc.env, tc.need)
			switch {
			case tc.errHas != "":
				if err == nil || !strings.Contains(err.Error(), tc.errHas) || ch != nil {
					t.Fatalf("= %+v, %v; want refusal containing %q", ch, err, tc.errHas)
				}
			case err != nil:
				t.Fatal(err)
			case tc.want == "" && ch != nil:
				t.Fatalf("= %+v, want no change", *ch)
			case tc.want != "" && (ch == nil || *ch != EnvChange{Name: key, Value: tc.want}):
				t.Fatalf("= %+v, want %s=%s", ch, key, tc.want)
			}
		})
	}
}

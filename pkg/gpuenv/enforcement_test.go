package gpuenv

import (
	"strings"
	"testing"
)

// The enforcement is a fact checked on the host: an enforcing mode whose library or daemon is
// missing is not Ready and says which path is missing; the fake backend is Ready and Simulated
// in every mode; none is always Ready.
func TestCheckEnforcement(t *testing.T) {
	cfg := Config{HAMiCoreLibrary: "/usr/local/vgpu/libvgpu.so", MPSPipeDir: "/tmp/nvidia-mps"}
	present := func(paths ...string) func(string) bool {
		return func(p string) bool {
			for _, q := range paths {
				if p == q {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		name       string
		mode       string
		simulated  bool
		exists     func(string) bool
		ready      bool
		reasonHas  string
		simulatedW bool
	}{
		{"hami-core present", EnforceHAMiCore, false, present("/usr/local/vgpu/libvgpu.so"), true, "", false},
		{"hami-core missing", EnforceHAMiCore, false, present(), false, "HAMi-core library /usr/local/vgpu/libvgpu.so not found", false},
		{"hami-core fake", EnforceHAMiCore, true, present(), true, "", true},
		{"mps daemon up", EnforceMPS, false, present("/tmp/nvidia-mps/control"), true, "", false},
		{"mps daemon down", EnforceMPS, false, present("/usr/local/vgpu/libvgpu.so"), false, "/tmp/nvidia-mps/control not found", false},
		{"none", EnforceNone, false, present(), true, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.Enforcement = tc.mode
			e := CheckEnforcement(c, tc.simulated, tc.exists)
			if e.Mode != tc.mode || e.Ready != tc.ready || e.Simulated != tc.simulatedW || !strings.Contains(e.Reason, tc.reasonHas) || (tc.ready && e.Reason != "") {
				t.Errorf("CheckEnforcement = %+v; want mode %s ready %v simulated %v reason containing %q", e, tc.mode, tc.ready, tc.simulatedW, tc.reasonHas)
			}
			if err := e.Validate(); err != nil {
				t.Errorf("the result does not validate: %v", err)
			}
		})
	}
}

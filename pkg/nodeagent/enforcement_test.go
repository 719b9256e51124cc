package nodeagent

import (
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/hamicore"
	"github.com/hami-go/hami-go/pkg/nri"
	"github.com/hami-go/hami-go/pkg/preflight"
)

// namedBackend is a device.Backend that only has a name (the enforcement reads nothing else).
type namedBackend struct{ device.Backend }

func (namedBackend) Name() string { return BackendNVML }

// The enforcement both agents publish: checked on the host at every State, with the installed
// library's version and sha256 while it is the library containers get, and the last
// preflight's fail-open window; SetPreflight says when that window changed.
func TestEnforcementState(t *testing.T) {
	lib := "/usr/local/vgpu/libvgpu.so.v2.10.0"
	present := false
	e := NewEnforcement(func() gpuenv.Config {
		return gpuenv.Config{Enforcement: gpuenv.EnforceHAMiCore, HAMiCoreLibrary: lib}
	}, namedBackend{}, func(p string) bool { return present && p == lib })
	if s := e.State(); s.Ready || s.Reason == "" {
		t.Fatalf("library absent: %+v; want not ready, with the reason", s)
	}
	present = true
	e.SetInstalled(hamicore.Installed{Path: lib, Version: "v2.10.0", SHA256: "abc"})
	if s := e.State(); !s.Ready || s.Version != "v2.10.0" || s.SHA256 != "abc" || s.Library != lib {
		t.Fatalf("library installed: %+v; want ready with its version and sha256", s)
	}
	open := preflight.Report{FailOpen: true, FailOpenReason: "set accept-nvidia-visible-devices-envvar-when-unprivileged = false"}
	if !e.SetPreflight(open) || e.SetPreflight(open) {
		t.Error("SetPreflight: want changed once, then unchanged")
	}
	if s := e.State(); !s.FailOpen || s.FailOpenReason != open.FailOpenReason {
		t.Errorf("after the preflight: %+v; want its fail-open window", s)
	}
	if in := e.PreflightInput(nri.NewPlugin(nil), preflight.StrategyCDI, "/var/run/cdi"); in.Backend != BackendNVML || !in.EnforcementPresent ||
		in.Enforcement != gpuenv.EnforceHAMiCore || in.NRIConnected || in.CDISpecDir != "/var/run/cdi" {
		t.Errorf("preflight input %+v", in)
	}
}

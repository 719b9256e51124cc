package nodeagent

import (
	"context"
	"strings"
	"testing"

	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// InstallHAMiCore installs only for hami-core enforcement with a source configured; a failed
// install names the source and the host directory (the agent then does not start), and leaves
// HAMiCoreLibrary as it was. (pkg/hamicore tests the install itself.)
func TestInstallHAMiCore(t *testing.T) {
	c := Defaults()
	if in, err := c.InstallHAMiCore(context.Background()); err != nil || in.Path != "" || c.HAMiCoreLibrary != "/usr/local/vgpu/libvgpu.so" {
		t.Fatalf("no source: %+v, %v, library %s; want nothing installed", in, err, c.HAMiCoreLibrary)
	}
	src, host := t.TempDir(), t.TempDir()
	c.HAMiCore.SourceDir, c.HAMiCore.HostDir = src, host
	c.Enforcement = gpuenv.EnforceMPS
	if in, err := c.InstallHAMiCore(context.Background()); err != nil || in.Path != "" {
		t.Fatalf("mps enforcement: %+v, %v; want nothing installed", in, err)
	}
	c.Enforcement = gpuenv.EnforceHAMiCore
	_, err := c.InstallHAMiCore(context.Background())
	if err == nil || !strings.Contains(err.Error(), "install HAMi-core from "+src+" into "+host) {
		t.Fatalf("empty source: %v; want an error naming the source and host directory", err)
	}
	if c.HAMiCoreLibrary != "/usr/local/vgpu/libvgpu.so" {
		t.Errorf("HAMiCoreLibrary = %s after a failed install, want it unchanged", c.HAMiCoreLibrary)
	}
}

package nodeagent

import (
	"strings"
	"testing"
	"time"

	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// The defaults of docs/components.md, shared by both node agents.
func TestDefaults(t *testing.T) {
	c := Defaults()
	if c.NodeName != "" || c.SplitCount != 10 || c.MemoryScaling != 1 || c.ReservedMemory.String() != "" ||
		c.Enforcement != gpuenv.EnforceHAMiCore || c.HAMiCoreLibrary != "/usr/local/vgpu/libvgpu.so" || c.MPSPipeDir != "/tmp/nvidia-mps" ||
		len(c.ApplicationXIDs) != 6 || c.ApplicationXIDs[0] != 13 || c.ApplicationXIDs[5] != 109 ||
		c.RecoveryProbes != 3 || c.ProbeInterval != 5*time.Second || c.MetricsAddress != ":9400" ||
		c.NRISocket != "/var/run/nri/nri.sock" || len(c.NRIExemptNamespaces) != 0 {
		t.Fatalf("defaults = %+v", c)
	}
	c.NodeName = "n"
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults with a node name: %v", err)
	}
}

// Each bad field is reported with its flag and its value.
func TestValidateNamesFlagAndValue(t *testing.T) {
	for want, bad := range map[string]func(*Config){
		"--node-name is empty":                                func(c *Config) { c.NodeName = "" },
		"--split-count: 0 is outside 1..1000":                 func(c *Config) { c.SplitCount = 0 },
		"--split-count: 1001 is outside 1..1000":              func(c *Config) { c.SplitCount = 1001 },
		"--memory-scaling: 0.5 is outside 1..100":             func(c *Config) { c.MemoryScaling = 0.5 },
		"--memory-scaling: 101 is outside 1..100":             func(c *Config) { c.MemoryScaling = 101 },
		`--enforcement: "cuda" is not hami-core, mps or none`: func(c *Config) { c.Enforcement = "cuda" },
		"--mps-pipe-dir is empty but --enforcement is mps":    func(c *Config) { c.Enforcement, c.MPSPipeDir = gpuenv.EnforceMPS, "" },
		"--recovery-probes: 0 is below 1":                     func(c *Config) { c.RecoveryProbes = 0 },
		"--probe-interval: 0s is not positive":                func(c *Config) { c.ProbeInterval = 0 },
		"--drain-timeout: -1s is negative":                    func(c *Config) { c.DrainTimeout = -time.Second },
		"--metrics-address is empty":                          func(c *Config) { c.MetricsAddress = "" },
	} {
		c := Defaults()
		c.NodeName = "n"
		bad(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	}
	// An empty MPS pipe directory matters only under mps; an empty NRI socket is the agent's to judge.
	c := Defaults()
	c.NodeName, c.MPSPipeDir, c.NRISocket = "n", "", ""
	if err := c.Validate(); err != nil {
		t.Errorf("hami-core without an MPS pipe directory or NRI socket: %v", err)
	}
}

func TestEnvConfig(t *testing.T) {
	c := Defaults()
	c.Enforcement, c.MemoryScaling, c.HAMiCoreLibrary, c.MPSPipeDir = gpuenv.EnforceMPS, 1.5, "/l.so", "/m"
	for _, visible := range []bool{true, false} {
		want := gpuenv.Config{Enforcement: gpuenv.EnforceMPS, NVIDIAVisibleDevices: visible, MemoryScaling: 1.5, HAMiCoreLibrary: "/l.so", MPSPipeDir: "/m"}
		if got := c.EnvConfig(visible); got != want {
			t.Errorf("EnvConfig(%v) = %+v, want %+v", visible, got, want)
		}
	}
}

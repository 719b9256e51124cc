package nodeagent

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/hami-go/hami-go/pkg/cliflags"
	"github.com/hami-go/hami-go/pkg/cliflags/flagtest"
)

// parse binds the shared flags to a default Config, parses args and validates them as the node
// agents do (Flags.Validate, then Config.Validate).
func parse(args []string, env map[string]string) (Flags, Config, error) {
	f, c := DefaultFlags(), Defaults()
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	AddFlags(fs, &f, &c, flagtest.Env(env))
	if err := fs.Parse(args); err != nil {
		return f, c, err
	}
	if err := f.Validate(&c); err != nil {
		return f, c, err
	}
	return f, c, c.Validate()
}

// With no flags the Config keeps its defaults, the node name comes from $NODE_NAME, and the
// binary-level flags have theirs.
func TestFlagDefaults(t *testing.T) {
	f, c, err := parse(nil, map[string]string{"NODE_NAME": "n1"})
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want.NodeName = "n1"
	if c.NodeName != "n1" || c.SplitCount != want.SplitCount || cliflags.JoinXIDs(c.ApplicationXIDs) != "13,31,43,45,68,109" ||
		c.ReservedMemory.String() != "" || c.MetricsAddress != want.MetricsAddress || c.NRISocket != want.NRISocket || len(c.NRIExemptNamespaces) != 0 {
		t.Errorf("config = %+v, want %+v", c, want)
	}
	if f.Kubeconfig != "" || f.Backend != BackendNVML || f.FakeProfile != "dgxh100" || f.FakeProfileLabel != "hami-go.io/fake-profile" {
		t.Errorf("flags = %+v", f)
	}
}

// Every shared flag lands in its field.
func TestAddFlagsBindsEveryField(t *testing.T) {
	args := []string{
		"--kubeconfig=/k", "--node-name=n2", "--backend=fake", "--fake-profile=2x24576:NVIDIA A10", "--fake-profile-label=x/y",
		"--split-count=4", "--memory-scaling=1.5", "--reserved-memory=2048,GPU-a=1Gi,3=0", "--enforcement=mps",
		"--hami-core-library=/l.so", "--mps-pipe-dir=/m", "--application-xids=13, 79", "--recovery-probes=5",
		"--probe-interval=2s", "--drain-timeout=90s", "--metrics-address=:1", "--nri-socket=/n.sock", "--nri-exempt-namespaces=sys,kube-system",
		"--hami-core-install-from=/img", "--hami-core-install-glob=lib/libvgpu.so*", "--hami-core-host-dir=/h", "--hami-core-cache-dir=/h/containers",
	}
	f, c, err := parse(args, map[string]string{"NODE_NAME": "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	got := []any{f.Kubeconfig, c.NodeName, f.Backend, f.FakeProfile, f.FakeProfileLabel, c.SplitCount, c.MemoryScaling,
		c.ReservedMemory.String(), c.Enforcement, c.HAMiCoreLibrary, c.MPSPipeDir, cliflags.JoinXIDs(c.ApplicationXIDs),
		c.RecoveryProbes, c.ProbeInterval, c.DrainTimeout, c.MetricsAddress, c.NRISocket, strings.Join(c.NRIExemptNamespaces, ","),
		c.HAMiCore.SourceDir, c.HAMiCore.SourceGlob, c.HAMiCore.HostDir, c.HAMiCacheDir}
	want := []any{"/k", "n2", "fake", "2x24576:NVIDIA A10", "x/y", 4, 1.5, "2048,3=0,GPU-a=1024", "mps", "/l.so", "/m", "13,79",
		5, 2 * time.Second, 90 * time.Second, ":1", "/n.sock", "sys,kube-system", "/img", "lib/libvgpu.so*", "/h", "/h/containers"}
	flagtest.Fields(t, got, want)
}

// Bad values are refused by the flag checks (Flags.Validate) or the config's, naming the flag.
func TestBadSharedFlags(t *testing.T) {
	flagtest.BadFlags(t, func(args []string) error { _, _, err := parse(args, nil); return err }, map[string]string{
		"":                                     "--node-name is empty",
		"--node-name=n --backend=gpu":          `--backend: "gpu" is not nvml or fake`,
		"--node-name=n --application-xids=1,x": `--application-xids: "x" is not an XID number`,
		"--node-name=n --reserved-memory=2GB":  `--reserved-memory: entry "2GB"`,
		"--node-name=n --backend=fake --fake-profile= --fake-profile-label=": "--backend=fake needs --fake-profile or --fake-profile-label",
		"--node-name=n --split-count=0":                                      "--split-count: 0 is outside 1..1000",
		"--node-name=n --metrics-address=":                                   "--metrics-address is empty",
		"--node-name=n --probe-interval=0s":                                  "--probe-interval: 0s is not positive",
		"--node-name=n --hami-core-install-from=/img --hami-core-host-dir=":  `--hami-core-install-from, --hami-core-install-glob, --hami-core-host-dir: hamicore: HostDir "": not an absolute path`,
	})
}

func TestFakeProfileSpec(t *testing.T) {
	f := Flags{FakeProfile: "dgxh100", FakeProfileLabel: "hami-go.io/fake-profile"}
	if got := f.FakeProfileSpec(map[string]string{"hami-go.io/fake-profile": "2x24576.NVIDIA-A10"}); got != "2x24576.NVIDIA-A10" {
		t.Fatalf("label: %q", got)
	}
	if got := f.FakeProfileSpec(nil); got != "dgxh100" {
		t.Fatalf("default: %q", got)
	}
	f.FakeProfileLabel = ""
	if got := f.FakeProfileSpec(map[string]string{"": "x"}); got != "dgxh100" {
		t.Fatalf("no label flag: %q", got)
	}
}

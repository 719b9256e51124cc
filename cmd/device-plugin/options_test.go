package main

import (
	"strings"
	"testing"
	"time"

	"github.com/hami-go/hami-go/pkg/cliflags"
	"github.com/hami-go/hami-go/pkg/cliflags/flagtest"
)

func TestDefaults(t *testing.T) {
	o, err := parseOptions(nil, flagtest.Env(map[string]string{"NODE_NAME": "n1"}))
	if err != nil {
		t.Fatal(err)
	}
	c := o.Plugin
	if c.NodeName != "n1" || o.Node.Backend != "nvml" || o.Node.FakeProfile != "dgxh100" || o.Node.FakeProfileLabel != "hami-go.io/fake-profile" ||
		c.SplitCount != 10 || c.MemoryScaling != 1 || c.Enforcement != "hami-core" || c.DeviceListStrategy != "cdi" ||
		c.CDISpecDir != "/var/run/cdi" || c.HAMiCoreLibrary != "/usr/local/vgpu/libvgpu.so" || c.MPSPipeDir != "/tmp/nvidia-mps" ||
		cliflags.JoinXIDs(c.ApplicationXIDs) != "13,31,43,45,68,109" || c.RecoveryProbes != 3 || c.ProbeInterval != 5*time.Second ||
		c.PlanWait != 5*time.Second || c.DevicePluginDir != "/var/lib/kubelet/device-plugins" ||
		c.LeaseNamespace != "kube-node-lease" ||
		c.MetricsAddress != ":9400" || c.NRISocket != "/var/run/nri/nri.sock" || len(c.NRIExemptNamespaces) != 0 || c.FakeFaultInjection || c.ReservedMemory.String() != "" || o.Node.Kubeconfig != "" || c.Resources.Count != "nvidia.com/gpu" {
		t.Fatalf("defaults = %+v", o)
	}
}

// Every flag of docs/components.md lands in its field.
func TestEveryFlag(t *testing.T) {
	args := []string{
		"--kubeconfig=/k", "--node-name=n2", "--backend=fake", "--fake-profile=2x24576:NVIDIA A10", "--fake-profile-label=x/y",
		"--fake-fault-injection", "--split-count=4", "--memory-scaling=1.5", "--enforcement=mps", "--device-list-strategy=cdi",
		"--cdi-spec-dir=/c", "--hami-core-library=/l.so", "--mps-pipe-dir=/m", "--application-xids=13, 79", "--recovery-probes=5",
		"--probe-interval=2s", "--plan-wait=3s", "--device-plugin-dir=/d",
		"--lease-namespace=ns", "--metrics-address=:1", "--resource-count=x.io/gpu", "--resource-memory=x.io/mem",
		"--resource-memory-percentage=x.io/pct", "--resource-cores=x.io/cores", "-v=4", "--reserved-memory=2048,GPU-a=1Gi,3=0",
		"--nri-socket=/n.sock", "--nri-exempt-namespaces=sys,kube-system",
	}
	o, err := parseOptions(args, flagtest.Env(nil))
	if err != nil {
		t.Fatal(err)
	}
	c := o.Plugin
	got := []any{o.Node.Kubeconfig, c.NodeName, o.Node.Backend, o.Node.FakeProfile, o.Node.FakeProfileLabel, c.FakeFaultInjection, c.SplitCount,
		c.MemoryScaling, c.Enforcement, c.DeviceListStrategy, c.CDISpecDir, c.HAMiCoreLibrary, c.MPSPipeDir, cliflags.JoinXIDs(c.ApplicationXIDs),
		c.RecoveryProbes, c.ProbeInterval, c.PlanWait, c.DevicePluginDir, c.LeaseNamespace, c.MetricsAddress,
		c.Resources.Count, c.Resources.Memory, c.Resources.MemoryPercent, c.Resources.Cores, c.ReservedMemory.String(), c.NRISocket, strings.Join(c.NRIExemptNamespaces, ",")}
	want := []any{"/k", "n2", "fake", "2x24576:NVIDIA A10", "x/y", true, 4, 1.5, "mps", "cdi", "/c", "/l.so", "/m", "13,79",
		5, 2 * time.Second, 3 * time.Second, "/d", "ns", ":1", "x.io/gpu", "x.io/mem", "x.io/pct", "x.io/cores", "2048,3=0,GPU-a=1024", "/n.sock", "sys,kube-system"}
	flagtest.Fields(t, got, want)
}

func TestBadFlags(t *testing.T) {
	flagtest.BadFlags(t, parse, map[string]string{
		"":                                                           "--node-name is empty",
		"--node-name=n --split-count=0":                              "--split-count: 0 is outside 1..1000",
		"--node-name=n --memory-scaling=0.5":                         "--memory-scaling: 0.5 is outside",
		"--node-name=n --enforcement=cuda":                           `--enforcement: "cuda" is not hami-core, mps or none`,
		"--node-name=n --device-list-strategy=x":                     `--device-list-strategy: "x" is not envvar or cdi`,
		"--node-name=n --application-xids=1,x":                       `--application-xids: "x" is not an XID number`,
		"--node-name=n --backend=gpu":                                `--backend: "gpu" is not nvml or fake`,
		"--node-name=n --fake-fault-injection":                       "--fake-fault-injection needs --backend=fake",
		"--node-name=n --recovery-probes=0":                          "--recovery-probes: 0 is below 1",
		"--node-name=n --probe-interval=0s":                          "--probe-interval: 0s is not positive",
		"--node-name=n --plan-wait=26s":                              "--plan-wait: 26s is outside 0..25s",
		"--node-name=n --metrics-address=":                           "--metrics-address is empty",
		"--node-name=n --resource-count=":                            "resource name count is empty",
		"--node-name=n extra":                                        "unexpected arguments",
		"--node-name=n --reserved-memory=2GB":                        `--reserved-memory: entry "2GB"`,
		"--node-name=n --reserved-memory=gpu0=1":                     `--reserved-memory: entry "gpu0=1": "gpu0" is neither a GPU UUID`,
		"--node-name=n --backend=nvml --device-list-strategy=envvar": "--backend=nvml needs --device-list-strategy=cdi (got envvar)",
		"--node-name=n --backend=fake --nri-socket=":                 "--nri-socket is empty: the device plugin applies each pod's plan through the runtime's NRI",
	})
}

// parse is parseOptions with no environment, for flagtest.BadFlags.
func parse(args []string) error {
	_, err := parseOptions(args, flagtest.Env(nil))
	return err
}

package main

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/hami-go/hami-go/pkg/cliflags"
	"github.com/hami-go/hami-go/pkg/cliflags/flagtest"
)

func TestDefaults(t *testing.T) {
	o, err := parseOptions(nil, flagtest.Env(map[string]string{"NODE_NAME": "n1"}))
	if err != nil {
		t.Fatal(err)
	}
	c := o.Driver
	if c.NodeName != "n1" || o.Node.Backend != "nvml" || c.ToolkitCDIKind != "nvidia.com/gpu" || o.Node.FakeProfile != "dgxh100" || o.Node.FakeProfileLabel != "hami-go.io/fake-profile" ||
		c.SplitCount != 10 || c.MemoryScaling != 1 || c.ReservedMemory.String() != "" || c.Enforcement != "hami-core" ||
		c.CDIDir != "/var/run/cdi" || c.PluginDataDir != "/var/lib/kubelet/plugins/gpu.hami-go.io" || c.RegistrarDir != "/var/lib/kubelet/plugins_registry" ||
		c.HAMiCoreLibrary != "/usr/local/vgpu/libvgpu.so" || c.MPSPipeDir != "/tmp/nvidia-mps" ||
		cliflags.JoinXIDs(c.ApplicationXIDs) != "13,31,43,45,68,109" || c.RecoveryProbes != 3 || c.ProbeInterval != 5*time.Second ||
		c.MetricsAddress != ":9400" || c.NRISocket != "/var/run/nri/nri.sock" || len(c.NRIExemptNamespaces) != 0 || o.Node.Kubeconfig != "" || o.FakeFaultInjection || c.DeviceOrder != "index" || c.RepublishDelay != time.Second ||
		c.PrepareWait != 30*time.Second || o.KubeAPIQPS != 50 || o.KubeAPIBurst != 100 {
		t.Fatalf("defaults = %+v", o)
	}
}

// Every flag of docs/components.md ("dra-driver") lands in its field.
func TestEveryFlag(t *testing.T) {
	args := []string{
		"--kubeconfig=/k", "--node-name=n2", "--backend=fake", "--fake-profile=2x24576:NVIDIA A10", "--fake-profile-label=x/y",
		"--split-count=4", "--memory-scaling=1.5", "--reserved-memory=2048,GPU-a=4Gi,3=0", "--enforcement=mps", "--hami-core-library=/l.so",
		"--mps-pipe-dir=/m", "--cdi-dir=/c", "--plugin-data-dir=/p", "--registrar-dir=/r", "--application-xids=13, 79",
		"--recovery-probes=5", "--probe-interval=2s", "--metrics-address=:1", "--fake-fault-injection", "-v=4", "--nri-socket=", "--nri-exempt-namespaces=sys",
		"--device-order=spread", "--republish-delay=250ms",
		"--prepare-wait=12s", "--kube-api-qps=7.5", "--kube-api-burst=9",
	}
	o, err := parseOptions(args, flagtest.Env(nil))
	if err != nil {
		t.Fatal(err)
	}
	c := o.Driver
	got := []any{o.Node.Kubeconfig, c.NodeName, o.Node.Backend, c.ToolkitCDIKind, o.Node.FakeProfile, o.Node.FakeProfileLabel, c.SplitCount, c.MemoryScaling,
		c.ReservedMemory.String(), c.Enforcement, c.HAMiCoreLibrary, c.MPSPipeDir, c.CDIDir, c.PluginDataDir, c.RegistrarDir,
		cliflags.JoinXIDs(c.ApplicationXIDs), c.RecoveryProbes, c.ProbeInterval, c.MetricsAddress, o.FakeFaultInjection, c.NRISocket, strings.Join(c.NRIExemptNamespaces, ","),
		string(c.DeviceOrder), c.RepublishDelay, c.PrepareWait, o.KubeAPIQPS, o.KubeAPIBurst}
	want := []any{"/k", "n2", "fake", "", "2x24576:NVIDIA A10", "x/y", 4, 1.5, "2048,3=0,GPU-a=4096", "mps", "/l.so", "/m", "/c", "/p", "/r",
		"13,79", 5, 2 * time.Second, ":1", true, "", "sys", "spread", 250 * time.Millisecond, 12 * time.Second, float32(7.5), 9}
	flagtest.Fields(t, got, want)
	// The client limits reach the REST config the driver's clientset is built from.
	var rc rest.Config
	o.tuneClient(&rc)
	if rc.QPS != 7.5 || rc.Burst != 9 {
		t.Errorf("REST config QPS %v burst %d, want 7.5 and 9", rc.QPS, rc.Burst)
	}
}

func TestBadFlags(t *testing.T) {
	flagtest.BadFlags(t, parse, map[string]string{
		"":                                                                   "--node-name is empty",
		"--node-name=n --backend=x":                                          `--backend: "x" is not nvml or fake`,
		"--node-name=n --split-count=0":                                      "--split-count: 0 is outside 1..1000",
		"--node-name=n --memory-scaling=0.5":                                 "--memory-scaling: 0.5 is outside 1..100",
		"--node-name=n --reserved-memory=-1":                                 `--reserved-memory: entry "-1"`,
		"--node-name=n --reserved-memory=2GB":                                `--reserved-memory: entry "2GB"`,
		"--node-name=n --reserved-memory=gpu0=1":                             `--reserved-memory: entry "gpu0=1": "gpu0" is neither a GPU UUID`,
		"--node-name=n --enforcement=x":                                      `--enforcement: "x" is not hami-core, mps or none`,
		"--node-name=n --cdi-dir=":                                           "--cdi-dir is empty",
		"--node-name=n --plugin-data-dir=":                                   "--plugin-data-dir is empty",
		"--node-name=n --registrar-dir=":                                     "--registrar-dir is empty",
		"--node-name=n --metrics-address=":                                   "--metrics-address is empty",
		"--node-name=n --application-xids=a":                                 `--application-xids: "a" is not an XID number`,
		"--node-name=n --recovery-probes=0":                                  "--recovery-probes: 0 is below 1",
		"--node-name=n --probe-interval=0s":                                  "--probe-interval: 0s is not positive",
		"--node-name=n --enforcement=mps --mps-pipe-dir=":                    "--mps-pipe-dir is empty but --enforcement is mps",
		"--node-name=n --backend=fake --fake-profile= --fake-profile-label=": "--backend=fake needs --fake-profile or --fake-profile-label",
		"--node-name=n --fake-fault-injection":                               `--fake-fault-injection needs --backend=fake (got "nvml")`,
		"--node-name=n --device-order=first":                                 `--device-order: "first" is not index, binpack or spread`,
		"--node-name=n --republish-delay=-1s":                                "--republish-delay: -1s is negative",
		"--node-name=n --prepare-wait=41s":                                   "--prepare-wait: 41s is outside 0s..40s",
		"--node-name=n --prepare-wait=-1s":                                   "--prepare-wait: -1s is outside 0s..40s",
		"--node-name=n --kube-api-qps=0":                                     "--kube-api-qps: 0 is not positive",
		"--node-name=n --kube-api-burst=0":                                   "--kube-api-burst: 0 is below 1",
		"--node-name=n stray":                                                `unexpected arguments: ["stray"]`,
	})
}

// parse is parseOptions with no environment, for flagtest.BadFlags.
func parse(args []string) error {
	_, err := parseOptions(args, flagtest.Env(nil))
	return err
}

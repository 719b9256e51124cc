package cliflags

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/hami-go/hami-go/pkg/device"
)

// GPU backends of the node agents (--backend).
const (
	// BackendNVML is the driver's NVML library (real GPUs).
	BackendNVML = "nvml"
	// BackendFake is a simulated pkg/fake fleet.
	BackendFake = "fake"
)

// NodeOptions are the flags both node agents (cmd/device-plugin, cmd/dra-driver) take
// (docs/components.md). The first four are the binary's own; the pointers are bound to the
// agent's config fields (deviceplugin.Config, dra.Config), whose current values are the flags'
// defaults. Fill every pointer before AddNodeFlags.
type NodeOptions struct {
	// Kubeconfig is an explicit kubeconfig path; "" = in-cluster configuration.
	Kubeconfig string
	// Backend is BackendNVML or BackendFake.
	Backend string
	// FakeProfile is the fake fleet (pkg/fake profile syntax) when the node has no profile label.
	FakeProfile string
	// FakeProfileLabel is the node label whose value picks the fake profile.
	FakeProfileLabel string

	NodeName        *string
	SplitCount      *int
	MemoryScaling   *float64
	ReservedMemory  *device.MemoryReserve
	Enforcement     *string
	HAMiCoreLibrary *string
	MPSPipeDir      *string
	ApplicationXIDs *[]uint64
	RecoveryProbes  *int
	ProbeInterval   *time.Duration
	MetricsAddress  *string
	// NRISocket is the container runtime's NRI socket the env guard (pkg/nri, case C37)
	// connects to; "" = no guard.
	NRISocket *string
	// NRIExemptNamespaces are the namespaces whose pods the env guard lets through unchanged.
	NRIExemptNamespaces *[]string

	// reserved and xids are the raw flag values, parsed by Validate.
	reserved, xids string
}

// DefaultNodeOptions returns the binary-level defaults: backend nvml, fake profile dgxh100,
// profile label hami-go.io/fake-profile. The caller binds the config pointers.
func DefaultNodeOptions() NodeOptions {
	return NodeOptions{Backend: BackendNVML, FakeProfile: "dgxh100", FakeProfileLabel: "hami-go.io/fake-profile"}
}

// AddNodeFlags registers the shared node-agent flags on fs, bound to o; getenv supplies
// $NODE_NAME, the default of --node-name. Call o.Validate after parsing.
func AddNodeFlags(fs *pflag.FlagSet, o *NodeOptions, getenv func(string) string) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "path of a kubeconfig; empty = in-cluster configuration")
	fs.StringVar(o.NodeName, "node-name", getenv("NODE_NAME"), "this node (default $NODE_NAME); for the DRA driver also the ResourceSlice pool name")
	fs.StringVar(&o.Backend, "backend", o.Backend, "GPU backend: nvml (the driver's NVML) or fake (simulated fleet)")
	fs.StringVar(&o.FakeProfile, "fake-profile", o.FakeProfile, "fake fleet (pkg/fake profile syntax) when the node has no --fake-profile-label label")
	fs.StringVar(&o.FakeProfileLabel, "fake-profile-label", o.FakeProfileLabel, "node label whose value picks the fake profile")
	fs.IntVar(o.SplitCount, "split-count", *o.SplitCount, "containers (device plugin) or claims (DRA driver) that may share one GPU")
	fs.Float64Var(o.MemoryScaling, "memory-scaling", *o.MemoryScaling, "memory over-commit factor (>= 1; 1 = never over-commit)")
	fs.StringVar(&o.reserved, "reserved-memory", o.ReservedMemory.String(), "GPU memory used outside Kubernetes, kept out of the inventory: an amount for every GPU and/or <GPU-UUID|index>=<amount>, comma-separated; amounts in MiB or with a binary suffix (e.g. 2048,GPU-8d2c...=4Gi,3=0) (case C41)")
	fs.StringVar(o.Enforcement, "enforcement", *o.Enforcement, "limit enforcement: hami-core, mps or none")
	fs.StringVar(o.HAMiCoreLibrary, "hami-core-library", *o.HAMiCoreLibrary, "host path of HAMi-core's libvgpu.so; mounted into containers when it exists")
	fs.StringVar(o.MPSPipeDir, "mps-pipe-dir", *o.MPSPipeDir, "MPS pipe directory (mps enforcement)")
	fs.StringVar(&o.xids, "application-xids", JoinXIDs(*o.ApplicationXIDs), "comma-separated XIDs that change nothing (application errors)")
	fs.IntVar(o.RecoveryProbes, "recovery-probes", *o.RecoveryProbes, "consecutive successful probes that return an unhealthy GPU to healthy")
	fs.DurationVar(o.ProbeInterval, "probe-interval", *o.ProbeInterval, "probe period for unhealthy GPUs")
	fs.StringVar(o.MetricsAddress, "metrics-address", *o.MetricsAddress, "address of /metrics and /healthz")
	fs.StringSliceVar(o.NRIExemptNamespaces, "nri-exempt-namespaces", *o.NRIExemptNamespaces, "namespaces whose pods the NRI env guard lets through unchanged (comma-separated; the chart passes its own namespace and the webhook's excluded ones)")
	fs.StringVar(o.NRISocket, "nri-socket", *o.NRISocket, "the container runtime's NRI socket: the env guard connects there and refuses containers whose env would widen a GPU slice (case C37); it retries while the socket is missing; empty = no guard")
}

// Validate parses --reserved-memory and --application-xids into their fields and checks
// --backend, the fake profile and --metrics-address. The agent config's own Validate checks
// the rest. Errors name the flag and the value.
func (o *NodeOptions) Validate() error {
	var err error
	if *o.ApplicationXIDs, err = ParseXIDs(o.xids); err != nil {
		return err
	}
	if *o.ReservedMemory, err = device.ParseMemoryReserve("--reserved-memory", o.reserved); err != nil {
		return err
	}
	switch o.Backend {
	case BackendNVML:
	case BackendFake:
		if o.FakeProfile == "" && o.FakeProfileLabel == "" {
			return fmt.Errorf("--backend=fake needs --fake-profile or --fake-profile-label")
		}
	default:
		return fmt.Errorf("--backend: %q is not nvml or fake", o.Backend)
	}
	if *o.MetricsAddress == "" {
		return fmt.Errorf("--metrics-address is empty")
	}
	return nil
}

// FakeProfileSpec is the fake fleet of a node with these labels: its --fake-profile-label
// value, else --fake-profile.
func (o *NodeOptions) FakeProfileSpec(labels map[string]string) string {
	if v := labels[o.FakeProfileLabel]; o.FakeProfileLabel != "" && v != "" {
		return v
	}
	return o.FakeProfile
}

// JoinXIDs writes XIDs as "13,31,…", the --application-xids syntax.
func JoinXIDs(x []uint64) string {
	s := make([]string, len(x))
	for i, v := range x {
		s[i] = strconv.FormatUint(v, 10)
	}
	return strings.Join(s, ",")
}

// ParseXIDs reads "13,31,…"; an empty value means no application XIDs. Errors name
// --application-xids and the bad entry.
func ParseXIDs(s string) ([]uint64, error) {
	out := []uint64{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--application-xids: %q is not an XID number", f)
		}
		out = append(out, v)
	}
	return out, nil
}

package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/hami-go/hami-go/pkg/cliflags"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/dra"
)

// Backends (--backend).
const (
	backendNVML = "nvml"
	backendFake = "fake"
)

// options are the binary's flags (docs/components.md, "dra-driver").
type options struct {
	// Kubeconfig is an explicit kubeconfig path; "" = in-cluster configuration.
	Kubeconfig string
	// Backend is "nvml" or "fake".
	Backend string
	// FakeProfile is the fake fleet (pkg/fake profile syntax) when the node has no profile label.
	FakeProfile string
	// FakeProfileLabel is the node label whose value picks the fake profile.
	FakeProfileLabel string
	// FakeFaultInjection serves the fake fleet's fault API (--fake-fault-injection).
	FakeFaultInjection bool
	// Driver is the DRA driver's configuration.
	Driver dra.Config
}

// parseOptions parses args into options and validates them; getenv supplies $NODE_NAME, the
// default of --node-name. Errors name the flag and value.
func parseOptions(args []string, getenv func(string) string) (options, error) {
	o := options{Backend: backendNVML, FakeProfile: "dgxh100", FakeProfileLabel: "hami-go.io/fake-profile", Driver: dra.Defaults()}
	c := &o.Driver
	fs := pflag.NewFlagSet("dra-driver", pflag.ContinueOnError)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "path of a kubeconfig; empty = in-cluster configuration")
	fs.StringVar(&c.NodeName, "node-name", getenv("NODE_NAME"), "this node (default $NODE_NAME); also the ResourceSlice pool name")
	fs.StringVar(&o.Backend, "backend", o.Backend, "GPU backend: nvml (the driver's NVML) or fake (simulated fleet)")
	fs.StringVar(&o.FakeProfile, "fake-profile", o.FakeProfile, "fake fleet (pkg/fake profile syntax) when the node has no --fake-profile-label label")
	fs.StringVar(&o.FakeProfileLabel, "fake-profile-label", o.FakeProfileLabel, "node label whose value picks the fake profile")
	fs.IntVar(&c.SplitCount, "split-count", c.SplitCount, "sharers capacity of every GPU: claims that may share it")
	fs.Float64Var(&c.MemoryScaling, "memory-scaling", c.MemoryScaling, "memory over-commit factor (>= 1; 1 = never over-commit)")
	reserved := fs.String("reserved-memory", "", "GPU memory used outside Kubernetes, not published: an amount for every GPU and/or <GPU-UUID|index>=<amount>, comma-separated; amounts in MiB or with a binary suffix (e.g. 2048,GPU-8d2c...=4Gi,3=0); the device plugin's syntax (case C41)")
	fs.StringVar(&c.Enforcement, "enforcement", c.Enforcement, "limit enforcement: hami-core, mps or none")
	fs.StringVar(&c.HAMiCoreLibrary, "hami-core-library", c.HAMiCoreLibrary, "host path of HAMi-core's libvgpu.so; mounted into containers when it exists")
	fs.StringVar(&c.MPSPipeDir, "mps-pipe-dir", c.MPSPipeDir, "MPS pipe directory (mps enforcement)")
	fs.StringVar(&c.CDIDir, "cdi-dir", c.CDIDir, "the container runtime's CDI directory, where claim specs are written")
	fs.StringVar(&c.PluginDataDir, "plugin-data-dir", c.PluginDataDir, "directory of the driver's socket and checkpoint")
	fs.StringVar(&c.RegistrarDir, "registrar-dir", c.RegistrarDir, "the kubelet's plugin registration directory")
	xids := fs.String("application-xids", joinXIDs(c.ApplicationXIDs), "comma-separated XIDs that change nothing (application errors)")
	fs.IntVar(&c.RecoveryProbes, "recovery-probes", c.RecoveryProbes, "consecutive successful probes that return an unhealthy GPU to healthy")
	fs.DurationVar(&c.ProbeInterval, "probe-interval", c.ProbeInterval, "probe period for unhealthy GPUs")
	fs.StringVar(&c.MetricsAddress, "metrics-address", c.MetricsAddress, "address of /metrics and /healthz")
	fs.BoolVar(&o.FakeFaultInjection, "fake-fault-injection", false, "serve POST /debug/fake/xid?uuid=&xid= and /debug/fake/recover?uuid= on the metrics address, as the device plugin does (fake backend only)")
	if err := cliflags.Parse(fs, args); err != nil {
		return o, err
	}
	var err error
	if c.ApplicationXIDs, err = parseXIDs(*xids); err != nil {
		return o, err
	}
	if c.ReservedMemory, err = device.ParseMemoryReserve("--reserved-memory", *reserved); err != nil {
		return o, err
	}
	switch o.Backend {
	case backendNVML:
		if o.FakeFaultInjection {
			return o, fmt.Errorf("--fake-fault-injection needs --backend=fake (got %q)", o.Backend)
		}
		// Real GPUs: the device nodes and driver libraries come from the NVIDIA Container
		// Toolkit's CDI spec (nvidia.com/gpu=<UUID>).
		c.ToolkitCDI = true
	case backendFake:
		if o.FakeProfile == "" && o.FakeProfileLabel == "" {
			return o, fmt.Errorf("--backend=fake needs --fake-profile or --fake-profile-label")
		}
	default:
		return o, fmt.Errorf("--backend: %q is not nvml or fake", o.Backend)
	}
	if c.MetricsAddress == "" {
		return o, fmt.Errorf("--metrics-address is empty")
	}
	if c.RegistrarDir == "" {
		return o, fmt.Errorf("--registrar-dir is empty")
	}
	if err := c.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

func joinXIDs(x []uint64) string {
	s := make([]string, len(x))
	for i, v := range x {
		s[i] = strconv.FormatUint(v, 10)
	}
	return strings.Join(s, ",")
}

// parseXIDs reads "13,31,…"; an empty value means no application XIDs.
func parseXIDs(s string) ([]uint64, error) {
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

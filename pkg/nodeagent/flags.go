package nodeagent

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/hami-go/hami-go/pkg/cliflags"
	"github.com/hami-go/hami-go/pkg/device"
)

// GPU backends of the node agents (--backend), defined in pkg/device.
const (
	// BackendNVML is the driver's NVML library (real GPUs).
	BackendNVML = device.BackendNVML
	// BackendFake is a simulated pkg/fake fleet.
	BackendFake = device.BackendFake
)

// Flags are the node agents' shared flags that are the binary's own, not the agent's Config:
// the API client and the GPU backend. It also keeps the raw values of --reserved-memory and
// --application-xids until Validate parses them into the Config.
type Flags struct {
	// Kubeconfig is an explicit kubeconfig path (--kubeconfig); "" = in-cluster configuration.
	Kubeconfig string
	// Backend is BackendNVML or BackendFake (--backend).
	Backend string
	// FakeProfile is the fake fleet (pkg/fake profile syntax) when the node has no profile
	// label (--fake-profile).
	FakeProfile string
	// FakeProfileLabel is the node label whose value picks the fake profile
	// (--fake-profile-label).
	FakeProfileLabel string
	// NVMLLibrary is the path of libnvidia-ml.so.1 in the agent's filesystem (--nvml-library),
	// for agents that get the driver from a mounted driver root instead of the NVIDIA container
	// runtime (chart devicePlugin.nvidiaDevices=driver-root); "" = the dynamic linker's search.
	NVMLLibrary string

	// reserved and xids are the raw flag values, parsed by Validate.
	reserved, xids string
}

// DefaultFlags returns the binary-level defaults: backend nvml, fake profile dgxh100, profile
// label hami-go.io/fake-profile.
func DefaultFlags() Flags {
	return Flags{Backend: BackendNVML, FakeProfile: "dgxh100", FakeProfileLabel: "hami-go.io/fake-profile"}
}

// AddFlags registers the flags both node agents take on fs: f's, and c's fields, whose current
// values are the flags' defaults; getenv supplies $NODE_NAME, $POD_NAMESPACE and $POD_NAME, the
// defaults of --node-name, --pod-namespace and --pod-name. Call
// f.Validate(c) after parsing.
func AddFlags(fs *pflag.FlagSet, f *Flags, c *Config, getenv func(string) string) {
	fs.StringVar(&f.Kubeconfig, "kubeconfig", f.Kubeconfig, "path of a kubeconfig; empty = in-cluster configuration")
	fs.StringVar(&c.NodeName, "node-name", getenv("NODE_NAME"), "this node (default $NODE_NAME); for the DRA driver also the ResourceSlice pool name")
	fs.StringVar(&c.PodNamespace, "pod-namespace", getenv("POD_NAMESPACE"), "namespace of the agent's own pod (default $POD_NAMESPACE): at a stop its DaemonSet tells a removal for good, when the agent withdraws what it published on the node, from a restart; empty = never withdraw")
	fs.StringVar(&c.PodName, "pod-name", getenv("POD_NAME"), "name of the agent's own pod (default $POD_NAME); see --pod-namespace")
	fs.StringVar(&f.Backend, "backend", f.Backend, "GPU backend: nvml (the driver's NVML) or fake (simulated fleet)")
	fs.StringVar(&f.FakeProfile, "fake-profile", f.FakeProfile, "fake fleet (pkg/fake profile syntax) when the node has no --fake-profile-label label")
	fs.StringVar(&f.FakeProfileLabel, "fake-profile-label", f.FakeProfileLabel, "node label whose value picks the fake profile")
	fs.StringVar(&f.NVMLLibrary, "nvml-library", f.NVMLLibrary, "path of libnvidia-ml.so.1 in the agent's filesystem (nvml backend), e.g. under a driver root mounted read-only (/host/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1); empty = the dynamic linker's search path, where the NVIDIA container runtime mounts the driver's libraries")
	fs.StringSliceVar(&c.ToolkitConfigPaths, "toolkit-config", c.ToolkitConfigPaths, "host paths, in order, of the NVIDIA Container Toolkit's config.toml for the preflight (comma-separated; read below /host, first found wins; the config next to containerd's NVIDIA runtime wrapper, the GPU Operator's <toolkit dir>/.config/nvidia-container-runtime/config.toml, is tried before them)")
	fs.StringSliceVar(&c.ContainerdConfigPaths, "containerd-config", c.ContainerdConfigPaths, "host paths, in order, of containerd's config.toml for the preflight (comma-separated; read below /host, first found wins, imports merged)")
	fs.IntVar(&c.SplitCount, "split-count", c.SplitCount, "containers (device plugin) or claims (DRA driver) that may share one GPU")
	fs.Float64Var(&c.MemoryScaling, "memory-scaling", c.MemoryScaling, "memory over-commit factor (>= 1; 1 = never over-commit)")
	fs.StringVar(&f.reserved, "reserved-memory", c.ReservedMemory.String(), "GPU memory used outside Kubernetes, kept out of the inventory: an amount for every GPU and/or <GPU-UUID|index>=<amount>, comma-separated; amounts in MiB or with a binary suffix (e.g. 2048,GPU-8d2c...=4Gi,3=0) (case C41)")
	fs.StringVar(&c.Enforcement, "enforcement", c.Enforcement, "limit enforcement: hami-core, mps or none")
	fs.StringVar(&c.HAMiCoreLibrary, "hami-core-library", c.HAMiCoreLibrary, "host path of HAMi-core's libvgpu.so; mounted into containers when it exists")
	fs.StringVar(&c.MPSPipeDir, "mps-pipe-dir", c.MPSPipeDir, "MPS pipe directory (mps enforcement)")
	fs.StringVar(&c.HAMiCore.SourceDir, "hami-core-install-from", c.HAMiCore.SourceDir, "directory of a mounted HAMi-core image to install libvgpu.so from at start (versioned, atomically, into --hami-core-host-dir; it then replaces --hami-core-library); empty = bring your own library")
	fs.StringVar(&c.HAMiCore.SourceGlob, "hami-core-install-glob", c.HAMiCore.SourceGlob, "the library's path in that image, a glob relative to its root that matches exactly one file")
	fs.StringVar(&c.HAMiCore.HostDir, "hami-core-host-dir", c.HAMiCore.HostDir, "host directory the library is installed in (with its ld.so.preload)")
	fs.StringVar(&c.HAMiCacheDir, "hami-core-cache-dir", c.HAMiCacheDir, "host directory under which each GPU container gets a writable directory for HAMi-core's shared cache (so readOnlyRootFilesystem containers work); empty = the cache file stays in the container's root filesystem")
	fs.StringVar(&c.HAMiCacheLabel, "hami-core-cache-selinux-label", c.HAMiCacheLabel, "SELinux context each --hami-core-cache-dir directory gets when the node runs SELinux (container_file_t lets the container create HAMi-core's cache file in it; setting it needs an agent allowed to relabel, e.g. spc_t); empty = never label; no effect without SELinux")
	fs.StringVar(&f.xids, "application-xids", cliflags.JoinXIDs(c.ApplicationXIDs), "comma-separated XIDs that change nothing (application errors)")
	fs.IntVar(&c.RecoveryProbes, "recovery-probes", c.RecoveryProbes, "consecutive successful probes that return an unhealthy GPU to healthy")
	fs.DurationVar(&c.ProbeInterval, "probe-interval", c.ProbeInterval, "probe period for unhealthy GPUs")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "how long an agent taken off its node for a mode switch (hami-go.io/mode relabelled, or its DaemonSet deleted by a chart mode change) keeps serving the pods that still hold its GPUs before it leaves (0: at once); the pod's termination grace period must exceed it")
	fs.StringVar(&c.MetricsAddress, "metrics-address", c.MetricsAddress, "address of /metrics and /healthz")
	fs.StringSliceVar(&c.NRIExemptNamespaces, "nri-exempt-namespaces", c.NRIExemptNamespaces, "namespaces whose pods the NRI plugin lets through unchanged (comma-separated; the chart passes its own namespace and the webhook's excluded ones)")
	fs.StringVar(&c.NRISocket, "nri-socket", c.NRISocket, "the container runtime's NRI socket: the NRI plugin connects there and refuses containers whose env would widen a GPU slice (case C37); it retries while the socket is missing; empty = no NRI plugin")
}

// Validate parses --reserved-memory and --application-xids into c and checks --backend and the
// fake profile; c.Validate checks the rest of the shared config. Errors name the flag and the
// value.
func (f *Flags) Validate(c *Config) error {
	var err error
	if c.ApplicationXIDs, err = cliflags.ParseXIDs(f.xids); err != nil {
		return err
	}
	if c.ReservedMemory, err = device.ParseMemoryReserve("--reserved-memory", f.reserved); err != nil {
		return err
	}
	if f.NVMLLibrary != "" && f.Backend != BackendNVML {
		return fmt.Errorf("--nvml-library needs --backend=nvml (got %q)", f.Backend)
	}
	switch f.Backend {
	case BackendNVML:
	case BackendFake:
		if f.FakeProfile == "" && f.FakeProfileLabel == "" {
			return fmt.Errorf("--backend=fake needs --fake-profile or --fake-profile-label")
		}
	default:
		return fmt.Errorf("--backend: %q is not nvml or fake", f.Backend)
	}
	return nil
}

// FakeProfileSpec is the fake fleet of a node with these labels: its --fake-profile-label
// value, else --fake-profile.
func (f *Flags) FakeProfileSpec(labels map[string]string) string {
	if v := labels[f.FakeProfileLabel]; f.FakeProfileLabel != "" && v != "" {
		return v
	}
	return f.FakeProfile
}

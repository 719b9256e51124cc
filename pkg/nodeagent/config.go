package nodeagent

import (
	"context"
	"fmt"
	"path"
	"slices"
	"time"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/hamicore"
	"github.com/hami-go/hami-go/pkg/nri"
	"github.com/hami-go/hami-go/pkg/preflight"
)

// Config is the configuration both node agents share; deviceplugin.Config and dra.Config embed
// it, and AddFlags binds it to the flags of the same names (docs/components.md).
type Config struct {
	// NodeName is this node (--node-name); for the DRA driver also the ResourceSlice pool name.
	NodeName string
	// PodNamespace and PodName name the agent's own pod (--pod-namespace, --pod-name; the
	// downward API's $POD_NAMESPACE and $POD_NAME): at a stop the agent reads its DaemonSet
	// through it to tell a removal for good from a restart (CheckRemoval). Empty: every stop is
	// taken for a restart, and nothing is withdrawn.
	PodNamespace, PodName string
	// SplitCount is how many containers (device plugin: slice devices per GPU) or claims (DRA
	// driver: the sharers capacity) may share one GPU, device.MinSplitCount..MaxSplitCount
	// (--split-count).
	SplitCount int
	// MemoryScaling is the memory over-commit factor, device.MinMemoryScaling..MaxMemoryScaling
	// (--memory-scaling; 1 = never).
	MemoryScaling float64
	// ReservedMemory is GPU memory used outside Kubernetes, per GPU, subtracted from each GPU
	// before anything is published (--reserved-memory; device.ParseMemoryReserve, case C41).
	// The scaling factor applies to what is left.
	ReservedMemory device.MemoryReserve
	// Enforcement is device.EnforcementHAMiCore, EnforcementMPS or EnforcementNone
	// (--enforcement).
	Enforcement string
	// HAMiCoreLibrary is the host path of libvgpu.so, mounted when it exists
	// (--hami-core-library).
	HAMiCoreLibrary string
	// HAMiCore installs HAMi-core's library on the node at start, from an image mounted in the
	// agent (pkg/hamicore; chart hamiCore.install): when its SourceDir is set (--hami-core-install-from,
	// --hami-core-install-glob, --hami-core-host-dir), the installed versioned file replaces
	// HAMiCoreLibrary. Zero: bring your own library at HAMiCoreLibrary.
	HAMiCore hamicore.Config
	// HAMiCacheDir is the host directory under which each GPU container gets a writable
	// directory of its own for HAMi-core's shared cache file, mounted at
	// gpuenv.HAMiContainerCacheDir (--hami-core-cache-dir; "" = the cache file stays in the
	// container's root filesystem, which a readOnlyRootFilesystem container cannot write).
	HAMiCacheDir string
	// HAMiCacheLabel is the SELinux context each cache directory gets when the node runs SELinux
	// (--hami-core-cache-selinux-label, default DefaultCacheDirLabel; "" = never label):
	// CacheDirMaker.
	HAMiCacheLabel string
	// MPSPipeDir is the MPS pipe directory, needed with device.EnforcementMPS (--mps-pipe-dir).
	MPSPipeDir string
	// ApplicationXIDs change nothing when they occur (--application-xids).
	ApplicationXIDs []uint64
	// RecoveryProbes is the number of consecutive successful probes that return a GPU to
	// healthy, >= 1 (--recovery-probes).
	RecoveryProbes int
	// ProbeInterval is the probe period for unhealthy GPUs, > 0 (--probe-interval).
	ProbeInterval time.Duration
	// DrainTimeout bounds how long an agent leaving its node for a mode switch (Removal.Drain)
	// keeps serving the pods that hold its GPUs, >= 0 seconds (--drain-timeout; 0: it leaves at
	// once). The pod's terminationGracePeriodSeconds must exceed it (the chart adds 30 s).
	DrainTimeout time.Duration
	// MetricsAddress is the listen address of /metrics and /healthz (--metrics-address).
	MetricsAddress string
	// NRISocket is the container runtime's NRI socket the NRI plugin (pkg/nri, case C37)
	// connects to (--nri-socket). The DRA driver runs no NRI plugin when it is ""; the device plugin
	// requires it (its own Validate says so).
	NRISocket string
	// NRIExemptNamespaces are the namespaces whose pods the NRI plugin lets through unchanged
	// (--nri-exempt-namespaces).
	NRIExemptNamespaces []string
	// ToolkitConfigPaths and ContainerdConfigPaths are the host paths, in order, the preflight
	// looks for the NVIDIA Container Toolkit's and containerd's configs at, below HostRoot; the
	// first that exists is read (--toolkit-config, --containerd-config; default
	// preflight.DefaultToolkitConfigPaths and preflight.DefaultContainerdConfigPaths). The toolkit
	// config next to containerd's NVIDIA runtime wrapper (the GPU Operator's) is tried first
	// (preflight.ReadNodeConfigs). The charts mount each candidate's directory read-only.
	ToolkitConfigPaths, ContainerdConfigPaths []string
}

// Defaults returns the shared defaults of docs/components.md (NodeName empty: --node-name
// defaults to $NODE_NAME).
func Defaults() Config {
	return Config{
		SplitCount:      10,
		MemoryScaling:   1.0,
		Enforcement:     device.EnforcementHAMiCore,
		HAMiCoreLibrary: "/usr/local/vgpu/libvgpu.so",
		MPSPipeDir:      "/tmp/nvidia-mps",
		HAMiCacheLabel:  DefaultCacheDirLabel,
		HAMiCore:        hamicore.Config{SourceGlob: hamicore.DefaultSourceGlob, HostDir: hamicore.DefaultHostDir},
		ApplicationXIDs: []uint64{13, 31, 43, 45, 68, 109},
		RecoveryProbes:  3,
		ProbeInterval:   5 * time.Second,
		DrainTimeout:    time.Hour,
		MetricsAddress:  ":9400",
		NRISocket:       nri.DefaultSocket,

		ToolkitConfigPaths:    slices.Clone(preflight.DefaultToolkitConfigPaths),
		ContainerdConfigPaths: slices.Clone(preflight.DefaultContainerdConfigPaths),
	}
}

// Validate reports the first bad shared field, naming the flag and the value. ReservedMemory
// and ApplicationXIDs are checked when their flags are parsed (Flags.Validate).
func (c *Config) Validate() error {
	if c.NodeName == "" {
		return fmt.Errorf("--node-name is empty (and $NODE_NAME is not set)")
	}
	if err := device.CheckSplitCount(c.SplitCount); err != nil {
		return fmt.Errorf("--split-count: %w", err)
	}
	if err := device.CheckMemoryScaling(c.MemoryScaling); err != nil {
		return fmt.Errorf("--memory-scaling: %w", err)
	}
	if err := device.CheckEnforcementMode(c.Enforcement); err != nil {
		return fmt.Errorf("--enforcement: %w", err)
	}
	if c.Enforcement == device.EnforcementMPS && c.MPSPipeDir == "" {
		return fmt.Errorf("--mps-pipe-dir is empty but --enforcement is mps")
	}
	if c.RecoveryProbes < 1 {
		return fmt.Errorf("--recovery-probes: %d is below 1", c.RecoveryProbes)
	}
	if c.ProbeInterval <= 0 {
		return fmt.Errorf("--probe-interval: %s is not positive", c.ProbeInterval)
	}
	if c.DrainTimeout < 0 {
		return fmt.Errorf("--drain-timeout: %s is negative", c.DrainTimeout)
	}
	if c.MetricsAddress == "" {
		return fmt.Errorf("--metrics-address is empty")
	}
	for _, l := range []struct {
		flag  string
		paths []string
	}{{"--toolkit-config", c.ToolkitConfigPaths}, {"--containerd-config", c.ContainerdConfigPaths}} {
		for _, p := range l.paths {
			if !path.IsAbs(p) {
				return fmt.Errorf("%s: %q is not an absolute host path", l.flag, p)
			}
		}
	}
	if c.HAMiCore.SourceDir != "" {
		if err := c.HAMiCore.Validate(); err != nil {
			return fmt.Errorf("--hami-core-install-from, --hami-core-install-glob, --hami-core-host-dir: %w", err)
		}
	}
	return nil
}

// EnvConfig is the part of the config the shared env builder (gpuenv.Build) reads;
// nvidiaVisibleDevices says whether the GPUs are named in NVIDIA_VISIBLE_DEVICES (false where
// CDI devices name them).
func (c *Config) EnvConfig(nvidiaVisibleDevices bool) gpuenv.Config {
	return gpuenv.Config{
		Enforcement:          c.Enforcement,
		NVIDIAVisibleDevices: nvidiaVisibleDevices,
		MemoryScaling:        c.MemoryScaling,
		HAMiCoreLibrary:      c.HAMiCoreLibrary,
		HAMiCacheDir:         c.HAMiCacheDir,
		MPSPipeDir:           c.MPSPipeDir,
	}
}

// InstallHAMiCore installs HAMi-core's library from c.HAMiCore when its SourceDir is set
// (hamicore.Run: versioned, atomic, idempotent) and points HAMiCoreLibrary at the installed
// file, so every container created from now on mounts that version; it returns what was
// installed (zero when nothing was to install). An agent whose install fails does not start:
// the error names the source and the host path.
func (c *Config) InstallHAMiCore(ctx context.Context) (hamicore.Installed, error) {
	if c.HAMiCore.SourceDir == "" || c.Enforcement != device.EnforcementHAMiCore {
		return hamicore.Installed{}, nil
	}
	in, err := hamicore.Run(ctx, c.HAMiCore)
	if err != nil {
		return hamicore.Installed{}, fmt.Errorf("install HAMi-core from %s into %s: %w", c.HAMiCore.SourceDir, c.HAMiCore.HostDir, err)
	}
	c.HAMiCoreLibrary = in.Path
	return in, nil
}

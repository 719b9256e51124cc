// Package dra is hami-go's DRA kubelet plugin (driver gpu.hami-go.io, docs/design.md "DRA
// mode"): it publishes each physical GPU as one shareable device with consumable capacities
// memory, cores and sharers, prepares claims by writing a CDI spec per claim with the env the
// device plugin gives the same slice (pkg/gpuenv), turns fatal XIDs into device taints and
// health reports (pkg/gpuhealth), and keeps a checkpoint so Unprepare works after a restart.
//
// It sees GPUs only through device.Backend (NVML or fake), like the device plugin.
package dra

import (
	"fmt"
	"time"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/dra/draapi"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/nri"
)

// CDIClass is the CDI class of the claim specs: ids are "gpu.hami-go.io/claim=<claim UID>".
const CDIClass = "claim"

// CDIKind is the CDI kind of the claim specs.
const CDIKind = draapi.DriverName + "/" + CDIClass

// ToolkitCDIKind is the NVIDIA Container Toolkit's CDI kind (`nvidia-ctk cdi generate`); on
// the NVML backend each GPU is named as ToolkitCDIKind + "=" + UUID beside the claim's device.
const ToolkitCDIKind = "nvidia.com/gpu"

// Config is everything the DRA driver needs; cmd/dra-driver fills it from flags
// (docs/components.md, "dra-driver").
type Config struct {
	// NodeName is this node (--node-name); it is also the ResourceSlice pool name.
	NodeName string
	// SplitCount is the sharers capacity of every GPU: claims that may share it, 1..1000.
	SplitCount int
	// MemoryScaling is the memory over-commit factor, 1..100.
	MemoryScaling float64
	// ReservedMemory is memory used outside Kubernetes, per GPU (--reserved-memory, the device
	// plugin's syntax and rule: device.ParseMemoryReserve, case C41), subtracted before the
	// scaling factor (see BookableMiB).
	ReservedMemory device.MemoryReserve
	// Enforcement is gpuenv.EnforceHAMiCore, EnforceMPS or EnforceNone.
	Enforcement string
	// HAMiCoreLibrary is the host path of libvgpu.so, mounted when it exists.
	HAMiCoreLibrary string
	// MPSPipeDir is the MPS pipe directory (mps enforcement).
	MPSPipeDir string
	// CDIDir is where claim CDI specs are written (the runtime's CDI directory).
	CDIDir string
	// PluginDataDir holds the driver's socket and its checkpoint of prepared claims.
	PluginDataDir string
	// RegistrarDir is the kubelet's plugin registration directory.
	RegistrarDir string
	// ToolkitCDI names nvidia.com/gpu=<UUID> beside each claim's device (real GPUs).
	ToolkitCDI bool
	// ApplicationXIDs change nothing when they occur.
	ApplicationXIDs []uint64
	// RecoveryProbes is the number of consecutive successful probes that return a GPU to healthy.
	RecoveryProbes int
	// ProbeInterval is the probe period for unhealthy GPUs.
	ProbeInterval time.Duration
	// MetricsAddress serves /metrics and /healthz.
	MetricsAddress string
	// DeviceOrder is the order of the devices in the ResourceSlice (--device-order): index,
	// binpack (fullest first) or spread (emptiest first), by the prepared claims' use.
	DeviceOrder DeviceOrder
	// RepublishDelay is how long the driver gathers changes of prepared claims before it
	// republishes a reordered ResourceSlice (--republish-delay): at most one ResourceSlice
	// update per delay; 0 = at every change.
	RepublishDelay time.Duration
	// NRISocket is the runtime's NRI socket the NRI plugin connects to (case C37); "" = none.
	NRISocket string
	// NRIExemptNamespaces are the namespaces whose pods the NRI plugin lets through unchanged.
	NRIExemptNamespaces []string
	// PrepareWait is how long a prepare that does not fit beside the claims prepared on its GPU
	// waits for Unprepare calls to free room before it is refused (--prepare-wait; 0: refuse
	// at once). At most MaxPrepareWait.
	PrepareWait time.Duration
}

// MaxPrepareWait is the longest PrepareWait: below the kubelet's 45 s timeout of a
// NodePrepareResources call (k8s.io/kubernetes pkg/kubelet/cm/dra/plugin,
// defaultClientCallTimeout), so a refusal still reaches the kubelet.
const MaxPrepareWait = 40 * time.Second

// Defaults returns the defaults of docs/components.md.
func Defaults() Config {
	return Config{
		SplitCount:      10,
		MemoryScaling:   1.0,
		Enforcement:     gpuenv.EnforceHAMiCore,
		HAMiCoreLibrary: "/usr/local/vgpu/libvgpu.so",
		MPSPipeDir:      "/tmp/nvidia-mps",
		CDIDir:          "/var/run/cdi",
		PluginDataDir:   "/var/lib/kubelet/plugins/" + draapi.DriverName,
		RegistrarDir:    "/var/lib/kubelet/plugins_registry",
		ApplicationXIDs: []uint64{13, 31, 43, 45, 68, 109},
		RecoveryProbes:  3,
		ProbeInterval:   5 * time.Second,
		MetricsAddress:  ":9400",
		DeviceOrder:     OrderIndex,
		RepublishDelay:  time.Second,
		NRISocket:       nri.DefaultSocket,
		PrepareWait:     30 * time.Second,
	}
}

// Validate reports the first bad field, naming the flag and the value.
func (c *Config) Validate() error {
	if c.NodeName == "" {
		return fmt.Errorf("--node-name is empty (and $NODE_NAME is not set)")
	}
	if c.SplitCount < 1 || c.SplitCount > 1000 {
		return fmt.Errorf("--split-count: %d is outside 1..1000", c.SplitCount)
	}
	if !(c.MemoryScaling >= 1 && c.MemoryScaling <= 100) {
		return fmt.Errorf("--memory-scaling: %v is outside 1..100", c.MemoryScaling)
	}
	switch c.Enforcement {
	case gpuenv.EnforceHAMiCore, gpuenv.EnforceMPS, gpuenv.EnforceNone:
	default:
		return fmt.Errorf("--enforcement: %q is not hami-core, mps or none", c.Enforcement)
	}
	if c.Enforcement == gpuenv.EnforceMPS && c.MPSPipeDir == "" {
		return fmt.Errorf("--mps-pipe-dir is empty but --enforcement is mps")
	}
	if c.CDIDir == "" {
		return fmt.Errorf("--cdi-dir is empty")
	}
	if c.PluginDataDir == "" {
		return fmt.Errorf("--plugin-data-dir is empty")
	}
	if c.RecoveryProbes < 1 {
		return fmt.Errorf("--recovery-probes: %d is below 1", c.RecoveryProbes)
	}
	if _, err := ParseDeviceOrder("--device-order", string(c.DeviceOrder)); err != nil {
		return err
	}
	if c.RepublishDelay < 0 {
		return fmt.Errorf("--republish-delay: %s is negative", c.RepublishDelay)
	}
	if c.ProbeInterval <= 0 {
		return fmt.Errorf("--probe-interval: %s is not positive", c.ProbeInterval)
	}
	if c.PrepareWait < 0 || c.PrepareWait > MaxPrepareWait {
		return fmt.Errorf("--prepare-wait: %s is outside 0s..%s", c.PrepareWait, MaxPrepareWait)
	}
	return nil
}

// envConfig is the part of the config the shared env builder reads.
func (c *Config) envConfig() gpuenv.Config {
	return gpuenv.Config{
		Enforcement:          c.Enforcement,
		NVIDIAVisibleDevices: true,
		MemoryScaling:        c.MemoryScaling,
		HAMiCoreLibrary:      c.HAMiCoreLibrary,
		MPSPipeDir:           c.MPSPipeDir,
	}
}

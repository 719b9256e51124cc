// Package deviceplugin is hami-go's per-node kubelet device plugin: it advertises split-count
// slice devices per healthy GPU, matches each Allocate call to the pod the scheduler extender
// placed (docs/design.md, "Matching Allocate to a pod"), answers with the devices and the limits of
// the enforcement mode, records the claim on the pod, tracks GPU health from XID events, and
// publishes the node inventory, GFD-style labels, a liveness Lease and metrics.
//
// It sees GPUs only through device.Backend (NVML or fake).
package deviceplugin

import (
	"fmt"
	"time"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/nri"
)

// Device-list strategies (--device-list-strategy).
const (
	// StrategyEnvvar names the GPUs in NVIDIA_VISIBLE_DEVICES.
	StrategyEnvvar = "envvar"
	// StrategyCDI answers with CDI device names and writes the CDI spec.
	StrategyCDI = "cdi"
)

// Config is everything the device plugin needs; cmd/device-plugin fills it from flags
// (docs/components.md).
type Config struct {
	// NodeName is this node (--node-name).
	NodeName string
	// Resources are the extended-resource names; Resources.Count is the one advertised.
	Resources device.ResourceNames
	// SplitCount is the number of slice devices advertised per GPU, 1..1000.
	SplitCount int
	// MemoryScaling is the memory over-commit factor, >= 1.
	MemoryScaling float64
	// ReservedMemory is GPU memory used outside Kubernetes, subtracted from each GPU before
	// anything is published (--reserved-memory; device.MemoryReserve, case C41). The scaling
	// factor applies to what is left.
	ReservedMemory device.MemoryReserve
	// Enforcement is gpuenv.EnforceHAMiCore, gpuenv.EnforceMPS or gpuenv.EnforceNone.
	Enforcement string
	// DeviceListStrategy is StrategyEnvvar or StrategyCDI (the default; the NVML backend needs
	// it: the NRI plugin adds each container's GPUs as CDI devices, so a container the NRI plugin
	// misses gets none, where under envvar an image's NVIDIA_VISIBLE_DEVICES=all would stand).
	DeviceListStrategy string
	// CDISpecDir is where the CDI spec is written (StrategyCDI).
	CDISpecDir string
	// HAMiCoreLibrary is the host path of libvgpu.so, mounted when it exists.
	HAMiCoreLibrary string
	// MPSPipeDir is the MPS pipe directory (gpuenv.EnforceMPS).
	MPSPipeDir string
	// ApplicationXIDs change nothing when they occur.
	ApplicationXIDs []uint64
	// RecoveryProbes is the number of consecutive successful probes that return a GPU to healthy.
	RecoveryProbes int
	// ProbeInterval is the probe period for unhealthy GPUs.
	ProbeInterval time.Duration
	// PlanWait is the longest wait in PreStartContainer, before each GPU container's creation,
	// for the node agent's NRI plugin to be able to apply the container's plan
	// (nri.Plugin.CanApplyPlans), after which the creation is refused and the kubelet retries it.
	// 0..25s: below the kubelet's PreStartContainer deadline of 30 s
	// (pluginapi.KubeletPreStartContainerRPCTimeoutInSecs).
	PlanWait time.Duration
	// DevicePluginDir holds kubelet.sock and our socket.
	DevicePluginDir string
	// LeaseNamespace is the namespace of the node's liveness Lease.
	LeaseNamespace string
	// MetricsAddress serves /metrics, /healthz (and /debug/fake/* with FakeFaultInjection).
	MetricsAddress string
	// FakeFaultInjection serves POST /debug/fake/xid and /debug/fake/recover (fake backend only).
	FakeFaultInjection bool
	// NRISocket is the runtime's NRI socket the NRI plugin connects to (required): the NRI plugin
	// applies each pod's plan at CreateContainer (Allocate names no pod) and checks the
	// container's protected env (case C37).
	NRISocket string
	// NRIExemptNamespaces are the namespaces whose pods the NRI plugin lets through unchanged.
	NRIExemptNamespaces []string
}

// SocketName is the file name of the plugin's gRPC socket in DevicePluginDir.
const SocketName = "hami-go.sock"

// Defaults returns the defaults of docs/components.md.
func Defaults() Config {
	return Config{
		Resources:          device.DefaultResourceNames(),
		SplitCount:         10,
		MemoryScaling:      1.0,
		Enforcement:        gpuenv.EnforceHAMiCore,
		DeviceListStrategy: StrategyCDI,
		CDISpecDir:         "/var/run/cdi",
		HAMiCoreLibrary:    "/usr/local/vgpu/libvgpu.so",
		MPSPipeDir:         "/tmp/nvidia-mps",
		ApplicationXIDs:    []uint64{13, 31, 43, 45, 68, 109},
		RecoveryProbes:     3,
		ProbeInterval:      5 * time.Second,
		PlanWait:           5 * time.Second,
		DevicePluginDir:    "/var/lib/kubelet/device-plugins",
		LeaseNamespace:     "kube-node-lease",
		MetricsAddress:     ":9400",
		NRISocket:          nri.DefaultSocket,
	}
}

// Validate reports the first bad field, naming the flag and the value.
func (c *Config) Validate() error {
	if c.NodeName == "" {
		return fmt.Errorf("--node-name is empty (and $NODE_NAME is not set)")
	}
	if err := c.Resources.Validate(); err != nil {
		return err
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
	switch c.DeviceListStrategy {
	case StrategyEnvvar, StrategyCDI:
	default:
		return fmt.Errorf("--device-list-strategy: %q is not envvar or cdi", c.DeviceListStrategy)
	}
	if c.DeviceListStrategy == StrategyCDI && c.CDISpecDir == "" {
		return fmt.Errorf("--cdi-spec-dir is empty but --device-list-strategy is cdi")
	}
	if c.Enforcement == gpuenv.EnforceMPS && c.MPSPipeDir == "" {
		return fmt.Errorf("--mps-pipe-dir is empty but --enforcement is mps")
	}
	if c.RecoveryProbes < 1 {
		return fmt.Errorf("--recovery-probes: %d is below 1", c.RecoveryProbes)
	}
	if c.ProbeInterval <= 0 {
		return fmt.Errorf("--probe-interval: %s is not positive", c.ProbeInterval)
	}
	if c.PlanWait < 0 || c.PlanWait > 25*time.Second {
		return fmt.Errorf("--plan-wait: %s is outside 0..25s (the kubelet gives PreStartContainer 30 s)", c.PlanWait)
	}
	if c.DevicePluginDir == "" {
		return fmt.Errorf("--device-plugin-dir is empty")
	}
	if c.LeaseNamespace == "" {
		return fmt.Errorf("--lease-namespace is empty")
	}
	if c.NRISocket == "" {
		return fmt.Errorf("--nri-socket is empty: the device plugin applies each pod's plan through the runtime's NRI (containerd >= 2.0) when the container is created")
	}
	return nil
}

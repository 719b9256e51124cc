// Package deviceplugin is hami-go's per-node kubelet device plugin: it advertises split-count
// slice devices per healthy GPU, answers every Allocate container request with the pending
// answer (no GPU named: the kubelet does not say which pod it serves), and, through the NRI
// NRI plugin at container creation, applies the container's own plan that the scheduler
// extender wrote on the pod (docs/design.md, "Applying a pod's plan"): the devices and the
// limits of the enforcement mode, and the claimed record on the pod. It tracks GPU health from
// XID events and publishes the node inventory, GFD-style labels, a liveness Lease and metrics.
//
// It sees GPUs only through device.Backend (NVML or fake).
package deviceplugin

import (
	"fmt"
	"path"
	"time"

	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

// Device-list strategies (--device-list-strategy), defined in pkg/device.
const (
	// StrategyEnvvar names the GPUs in NVIDIA_VISIBLE_DEVICES.
	StrategyEnvvar = device.StrategyEnvvar
	// StrategyCDI answers with CDI device names and writes the CDI spec.
	StrategyCDI = device.StrategyCDI
)

// Config is everything the device plugin needs; cmd/device-plugin fills it from flags
// (docs/components.md).
type Config struct {
	// Config is what the DRA driver shares: node name, split count, memory scaling and
	// reservation, enforcement, XID health, metrics address and the NRI plugin. NRISocket is
	// required here: the NRI plugin applies each pod's plan at CreateContainer (Allocate names no
	// pod) and checks the container's protected env (case C37).
	nodeagent.Config
	// Resources are the extended-resource names; Resources.Count is the one advertised.
	Resources device.ResourceNames
	// DeviceListStrategy is StrategyEnvvar or StrategyCDI (the default; the NVML backend needs
	// it: the NRI plugin adds each container's GPUs as CDI devices, so a container the NRI plugin
	// misses gets none, where under envvar an image's NVIDIA_VISIBLE_DEVICES=all would stand).
	DeviceListStrategy string
	// CDISpecDir is where the CDI spec is written (StrategyCDI).
	CDISpecDir string
	// ToolkitCDIKind is the NVIDIA Container Toolkit's CDI kind (--toolkit-cdi-kind, default
	// DefaultToolkitCDIKind, the kind `nvidia-ctk cdi generate` writes): under StrategyCDI each
	// GPU of a plan is also named <ToolkitCDIKind>=<UUID>, which brings the driver's libraries
	// (libcuda.so.1, libnvidia-ml.so.1) and the toolkit's hooks into the container (case C53).
	// "" names none: for nodes that deliver the driver's libraries another way (baked into the
	// image, or a mount of the pod's own); the fake backend's default.
	ToolkitCDIKind string
	// DriverRoot and DevRoot are the host's NVIDIA driver root and the root its /dev/nvidia*
	// nodes are under (--driver-root, --dev-root; "/" for a driver installed on the host,
	// "/run/nvidia/driver" for the GPU Operator's driver container). Under StrategyCDI the
	// spec's device nodes are read from <DevRoot>/dev (CDI hostPath) and appear at /dev in the
	// container. DevRoot "" = DriverRoot (nvidia-ctk's rule).
	DriverRoot, DevRoot string
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
	// FakeFaultInjection serves POST /debug/fake/xid and /debug/fake/recover (fake backend only).
	FakeFaultInjection bool
}

// DefaultToolkitCDIKind is the CDI kind of the NVIDIA Container Toolkit's generated spec
// (`nvidia-ctk cdi generate`: nvidia.com/gpu=<index|UUID|all>); the DRA driver names the same
// (pkg/dra DefaultToolkitCDIKind).
const DefaultToolkitCDIKind = "nvidia.com/gpu"

// EffectiveDevRoot is DevRoot, or DriverRoot when DevRoot is empty (nvidia-ctk's rule).
func (c *Config) EffectiveDevRoot() string {
	if c.DevRoot != "" {
		return c.DevRoot
	}
	return c.DriverRoot
}

// SocketName is the file name of the plugin's gRPC socket in DevicePluginDir.
const SocketName = "hami-go.sock"

// Defaults returns the defaults of docs/components.md.
func Defaults() Config {
	return Config{
		Config:             nodeagent.Defaults(),
		Resources:          device.DefaultResourceNames(),
		DeviceListStrategy: StrategyCDI,
		CDISpecDir:         "/var/run/cdi",
		ToolkitCDIKind:     DefaultToolkitCDIKind,
		DriverRoot:         "/",
		PlanWait:           5 * time.Second,
		DevicePluginDir:    "/var/lib/kubelet/device-plugins",
		LeaseNamespace:     "kube-node-lease",
	}
}

// Validate reports the first bad field, naming the flag and the value: the shared fields
// (nodeagent.Config.Validate), then the device plugin's own.
func (c *Config) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if err := c.Resources.Validate(); err != nil {
		return err
	}
	switch c.DeviceListStrategy {
	case StrategyEnvvar, StrategyCDI:
	default:
		return fmt.Errorf("--device-list-strategy: %q is not envvar or cdi", c.DeviceListStrategy)
	}
	if c.DeviceListStrategy == StrategyCDI && c.CDISpecDir == "" {
		return fmt.Errorf("--cdi-spec-dir is empty but --device-list-strategy is cdi")
	}
	if k := c.ToolkitCDIKind; k != "" {
		if _, _, _, err := cdiparser.ParseQualifiedName(k + cdiDeviceNameSeparator + "GPU-0"); err != nil {
			return fmt.Errorf("--toolkit-cdi-kind: %q is not a CDI kind (vendor/class, e.g. %s): %v", k, DefaultToolkitCDIKind, err)
		}
	}
	if c.DriverRoot == "" {
		return fmt.Errorf("--driver-root is empty (\"/\" for a driver installed on the host)")
	}
	for _, f := range []struct{ flag, dir string }{{"--driver-root", c.DriverRoot}, {"--dev-root", c.DevRoot}} {
		if f.dir != "" && !path.IsAbs(f.dir) {
			return fmt.Errorf("%s: %q is not an absolute path", f.flag, f.dir)
		}
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

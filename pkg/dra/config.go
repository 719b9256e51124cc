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

	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

// CDIClass is the CDI class of the claim specs: ids are "gpu.hami-go.io/claim=<claim UID>".
const CDIClass = "claim"

// CDIKind is the CDI kind of the claim specs.
const CDIKind = draapi.DriverName + "/" + CDIClass

// DefaultToolkitCDIKind is the NVIDIA Container Toolkit's CDI kind (`nvidia-ctk cdi generate`),
// --toolkit-cdi-kind's default on the NVML backend (pkg/deviceplugin DefaultToolkitCDIKind).
const DefaultToolkitCDIKind = "nvidia.com/gpu"

// Config is everything the DRA driver needs; cmd/dra-driver fills it from flags
// (docs/components.md, "dra-driver").
type Config struct {
	// Config is what the device plugin shares: node name (also the ResourceSlice pool name),
	// split count (the sharers capacity of every GPU), memory scaling and reservation (see
	// BookableMiB), enforcement, XID health, metrics address and the NRI plugin (NRISocket
	// "" = none).
	nodeagent.Config
	// CDIDir is where claim CDI specs are written (the runtime's CDI directory).
	CDIDir string
	// PluginDataDir holds the driver's socket and its checkpoint of prepared claims.
	PluginDataDir string
	// RegistrarDir is the kubelet's plugin registration directory.
	RegistrarDir string
	// ToolkitCDIKind is the NVIDIA Container Toolkit's CDI kind (--toolkit-cdi-kind): each GPU
	// of a claim is also named <ToolkitCDIKind>=<UUID> beside the claim's device, which brings
	// the device nodes, the driver's libraries and the toolkit's hooks (real GPUs), and
	// NVIDIA_VISIBLE_DEVICES is left out of the container's env. "" names none (the fake
	// backend's default; Defaults names none too): for nodes that deliver the driver another
	// way.
	ToolkitCDIKind string
	// DeviceOrder is the order of the devices in the ResourceSlice (--device-order): index,
	// binpack (fullest first) or spread (emptiest first), by the prepared claims' use.
	DeviceOrder DeviceOrder
	// RepublishDelay is how long the driver gathers changes of prepared claims before it
	// republishes a reordered ResourceSlice (--republish-delay): at most one ResourceSlice
	// update per delay; 0 = at every change.
	RepublishDelay time.Duration
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
		Config:         nodeagent.Defaults(),
		CDIDir:         "/var/run/cdi",
		PluginDataDir:  "/var/lib/kubelet/plugins/" + draapi.DriverName,
		RegistrarDir:   "/var/lib/kubelet/plugins_registry",
		DeviceOrder:    OrderIndex,
		RepublishDelay: time.Second,
		PrepareWait:    30 * time.Second,
	}
}

// Validate reports the first bad field, naming the flag and the value: the shared fields
// (nodeagent.Config.Validate), then the driver's own.
func (c *Config) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if c.CDIDir == "" {
		return fmt.Errorf("--cdi-dir is empty")
	}
	if c.PluginDataDir == "" {
		return fmt.Errorf("--plugin-data-dir is empty")
	}
	if k := c.ToolkitCDIKind; k != "" {
		if _, _, _, err := parser.ParseQualifiedName(k + "=GPU-0"); err != nil {
			return fmt.Errorf("--toolkit-cdi-kind: %q is not a CDI kind (vendor/class, e.g. %s): %v", k, DefaultToolkitCDIKind, err)
		}
	}
	if _, err := ParseDeviceOrder("--device-order", string(c.DeviceOrder)); err != nil {
		return err
	}
	if c.RepublishDelay < 0 {
		return fmt.Errorf("--republish-delay: %s is negative", c.RepublishDelay)
	}
	if c.PrepareWait < 0 || c.PrepareWait > MaxPrepareWait {
		return fmt.Errorf("--prepare-wait: %s is outside 0s..%s", c.PrepareWait, MaxPrepareWait)
	}
	return nil
}

// envConfig is the part of the config the shared env builder reads: the GPUs are named in
// NVIDIA_VISIBLE_DEVICES too (beside the claim's CDI devices).
func (c *Config) envConfig() gpuenv.Config { return c.EnvConfig(true) }

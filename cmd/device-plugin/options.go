package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/hami-go/hami-go/pkg/cliflags"
	"github.com/hami-go/hami-go/pkg/deviceplugin"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

// options are the binary's flags (docs/components.md, "device-plugin").
type options struct {
	// Node are the flags shared with the DRA driver that are not the plugin's config (API
	// client, GPU backend); nodeagent.AddFlags binds the shared config flags to Plugin.Config.
	Node nodeagent.Flags
	// Plugin is the device plugin's configuration.
	Plugin deviceplugin.Config
}

// parseOptions parses args into options and validates them; getenv supplies $NODE_NAME, the
// default of --node-name. Errors name the flag and value.
func parseOptions(args []string, getenv func(string) string) (*options, error) {
	o := &options{Node: nodeagent.DefaultFlags(), Plugin: deviceplugin.Defaults()}
	c := &o.Plugin
	n := &o.Node
	fs := pflag.NewFlagSet("device-plugin", pflag.ContinueOnError)
	nodeagent.AddFlags(fs, n, &c.Config, getenv)
	fs.BoolVar(&c.FakeFaultInjection, "fake-fault-injection", false, "serve POST /debug/fake/xid?uuid=&xid= and /debug/fake/recover?uuid= on the metrics address (fake backend only)")
	fs.StringVar(&c.DeviceListStrategy, "device-list-strategy", c.DeviceListStrategy, "how devices are named to the runtime: envvar (NVIDIA_VISIBLE_DEVICES) or cdi")
	fs.StringVar(&c.CDISpecDir, "cdi-spec-dir", c.CDISpecDir, "where the CDI spec is written (cdi strategy)")
	fs.StringVar(&c.ToolkitCDIKind, "toolkit-cdi-kind", c.ToolkitCDIKind, "the NVIDIA Container Toolkit's CDI kind (nvidia-ctk cdi generate): each GPU of a plan is also named <kind>=<UUID>, which brings the driver's libraries (cdi strategy); empty = none, for nodes that deliver the driver otherwise (default for --backend=fake: none)")
	fs.StringVar(&c.DriverRoot, "driver-root", c.DriverRoot, "host root of the NVIDIA driver (/ for a host install, /run/nvidia/driver for the GPU Operator's driver container)")
	fs.StringVar(&c.DevRoot, "dev-root", c.DevRoot, "host root whose dev/ holds the /dev/nvidia* nodes written into the CDI spec (hostPath); empty = --driver-root")
	fs.DurationVar(&c.PlanWait, "plan-wait", c.PlanWait, "longest wait in PreStartContainer, before each GPU container's creation, for the node agent's NRI plugin to be able to apply the container's plan (connected to containerd >= 2.0); then the creation is refused and the kubelet retries it (0..25s)")
	fs.StringVar(&c.DevicePluginDir, "device-plugin-dir", c.DevicePluginDir, "directory of kubelet.sock and the plugin's socket")
	fs.StringVar(&c.LeaseNamespace, "lease-namespace", c.LeaseNamespace, "namespace of the node's liveness Lease hami-go-<node>")
	cliflags.AddResourceNames(fs, &c.Resources)
	if err := cliflags.Parse(fs, args); err != nil {
		return o, err
	}
	if err := n.Validate(&c.Config); err != nil {
		return o, err
	}
	if n.Backend == nodeagent.BackendFake && !fs.Changed("toolkit-cdi-kind") {
		c.ToolkitCDIKind = "" // no toolkit spec for fake GPUs
	}
	if n.Backend != nodeagent.BackendFake && c.FakeFaultInjection {
		return o, fmt.Errorf("--fake-fault-injection needs --backend=fake (got %q)", n.Backend)
	}
	if n.Backend == nodeagent.BackendNVML && c.DeviceListStrategy == deviceplugin.StrategyEnvvar {
		// A container the NRI plugin misses (created while it reconnects) must get no GPU: under
		// the cdi strategy the NRI plugin adds the devices, under envvar the image's own
		// NVIDIA_VISIBLE_DEVICES (all, in NVIDIA's CUDA images) would stand.
		return o, fmt.Errorf("--backend=nvml needs --device-list-strategy=cdi (got envvar): the NRI plugin adds each container's GPUs as CDI devices")
	}
	if err := c.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

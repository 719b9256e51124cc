package main

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/hami-go/hami-go/pkg/cliflags"
	"github.com/hami-go/hami-go/pkg/dra"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

// options are the binary's flags (docs/components.md, "dra-driver").
type options struct {
	// Node are the flags shared with the device plugin that are not the driver's config (API
	// client, GPU backend); nodeagent.AddFlags binds the shared config flags to Driver.Config.
	Node nodeagent.Flags
	// FakeFaultInjection serves the fake fleet's fault API (--fake-fault-injection), as the
	// device plugin does.
	FakeFaultInjection bool
	// Driver is the DRA driver's configuration.
	Driver dra.Config
	// KubeAPIQPS and KubeAPIBurst limit the driver's API client (--kube-api-qps,
	// --kube-api-burst; requests per second and burst). Every prepare reads its claim through
	// it (the kubeletplugin helper), so client-go's default 5/10 would hold a burst of 50 claims
	// about 8 s; the defaults are the kubelet's own (50/100).
	KubeAPIQPS   float32
	KubeAPIBurst int
}

// tuneClient applies the client limits to a REST config.
func (o *options) tuneClient(rc *rest.Config) { rc.QPS, rc.Burst = o.KubeAPIQPS, o.KubeAPIBurst }

// parseOptions parses args into options and validates them; getenv supplies $NODE_NAME, the
// default of --node-name. Errors name the flag and value.
func parseOptions(args []string, getenv func(string) string) (*options, error) {
	o := &options{Node: nodeagent.DefaultFlags(), Driver: dra.Defaults(), KubeAPIQPS: 50, KubeAPIBurst: 100}
	c := &o.Driver
	n := &o.Node
	fs := pflag.NewFlagSet("dra-driver", pflag.ContinueOnError)
	nodeagent.AddFlags(fs, n, &c.Config, getenv)
	fs.StringVar(&c.CDIDir, "cdi-dir", c.CDIDir, "the container runtime's CDI directory, where claim specs are written")
	fs.StringVar(&c.PluginDataDir, "plugin-data-dir", c.PluginDataDir, "directory of the driver's socket and checkpoint")
	fs.StringVar(&c.RegistrarDir, "registrar-dir", c.RegistrarDir, "the kubelet's plugin registration directory")
	fs.StringVar(&c.ToolkitCDIKind, "toolkit-cdi-kind", dra.DefaultToolkitCDIKind, "the NVIDIA Container Toolkit's CDI kind (nvidia-ctk cdi generate): each GPU of a claim is also named <kind>=<UUID>, which brings the device nodes and the driver's libraries; empty = none, for nodes that deliver the driver otherwise (default for --backend=fake: none)")
	order := fs.String("device-order", string(c.DeviceOrder), "order of the GPUs in the published ResourceSlice, which kube-scheduler's first-fit device allocator follows: index (NVML index order, never republished), binpack (fullest GPU first, by the prepared claims) or spread (emptiest first)")
	fs.DurationVar(&c.RepublishDelay, "republish-delay", c.RepublishDelay, "how long changes of prepared claims are gathered before the reordered ResourceSlice is republished (at most one update per delay; 0 = at every change)")
	fs.DurationVar(&c.PrepareWait, "prepare-wait", c.PrepareWait, "how long a claim that does not fit beside the claims prepared on its GPU waits for those of stopped pods to be unprepared before it is refused (0s: refuse at once; at most 40s, below the kubelet's 45s call timeout)")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "requests per second of the driver's API client (each prepare reads its claim)")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "burst of the driver's API client")
	fs.BoolVar(&o.FakeFaultInjection, "fake-fault-injection", false, "serve POST /debug/fake/xid?uuid=&xid= and /debug/fake/recover?uuid= on the metrics address, as the device plugin does (fake backend only)")
	if err := cliflags.Parse(fs, args); err != nil {
		return o, err
	}
	if err := n.Validate(&c.Config); err != nil {
		return o, err
	}
	if !(o.KubeAPIQPS > 0) {
		return o, fmt.Errorf("--kube-api-qps: %v is not positive", o.KubeAPIQPS)
	}
	if o.KubeAPIBurst < 1 {
		return o, fmt.Errorf("--kube-api-burst: %d is below 1", o.KubeAPIBurst)
	}
	var err error
	if c.DeviceOrder, err = dra.ParseDeviceOrder("--device-order", *order); err != nil {
		return o, err
	}
	if n.Backend != nodeagent.BackendFake && o.FakeFaultInjection {
		return o, fmt.Errorf("--fake-fault-injection needs --backend=fake (got %q)", n.Backend)
	}
	// Real GPUs: the device nodes and driver libraries come from the NVIDIA Container
	// Toolkit's CDI spec (nvidia.com/gpu=<UUID>); fake GPUs have none unless asked.
	if n.Backend == nodeagent.BackendFake && !fs.Changed("toolkit-cdi-kind") {
		c.ToolkitCDIKind = ""
	}
	if c.RegistrarDir == "" {
		return o, fmt.Errorf("--registrar-dir is empty")
	}
	if err := c.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

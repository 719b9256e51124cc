package dra

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"

	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/gpuhealth"
	"github.com/hami-go/hami-go/pkg/metrics"
	"github.com/hami-go/hami-go/pkg/nodeagent"
	"github.com/hami-go/hami-go/pkg/nri"
	"github.com/hami-go/hami-go/pkg/preflight"
)

// Deps are the driver's connections to the world, made by cmd/dra-driver.
type Deps struct {
	// Client talks to the API server (claims, ResourceSlices).
	Client kubernetes.Interface
	// Backend is NVML or fake.
	Backend device.Backend
	// Options are the injectable parts.
	Options Options
	// Faults is the fake fleet's fault API (--fake-fault-injection): when not nil, the metrics
	// address also serves the device plugin's POST /debug/fake/xid and /debug/fake/recover.
	Faults nodeagent.FaultInjector
}

// Run runs the driver until ctx ends (nil) or the helper reports an unrecoverable error
// (returned): it discovers the GPUs, serves metrics and /readyz (Registration), starts the
// kubeletplugin helper (registration with the kubelet, the DRA and health gRPC services),
// publishes the ResourceSlice, watches XIDs and probes unhealthy GPUs (republishing on every
// health change), republishes when prepared claims change the device order (RepublishLoop), and
// (with Config.NRISocket) runs the NRI plugin (pkg/nri, case C37).
func Run(ctx context.Context, cfg Config, deps Deps) error {
	installed, err := cfg.InstallHAMiCore(ctx)
	if err != nil {
		return err
	}
	d, err := New(cfg, deps.Backend, deps.Options)
	if err != nil {
		return err
	}
	d.enf.SetInstalled(installed)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	d.fatal = cancel
	reg := &Registration{}
	stopMetrics, err := metrics.Serve(cfg.MetricsAddress, MetricsHandler(d, deps.Faults, reg))
	if err != nil {
		return err
	}
	defer stopMetrics()

	// The kubelet plugin and the NRI plugin outlive ctx by the drain of a mode switch
	// (Removal.Drain): the kubelet needs the driver to unprepare the claims it prepared.
	agentCtx, stopAgent := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAgent()
	helper, err := kubeletplugin.Start(agentCtx, d,
		kubeletplugin.DriverName(draapi.DriverName),
		kubeletplugin.KubeClient(deps.Client),
		kubeletplugin.NodeName(cfg.NodeName),
		kubeletplugin.PluginDataDirectoryPath(cfg.PluginDataDir),
		kubeletplugin.RegistrarDirectoryPath(cfg.RegistrarDir),
		// The driver serialises its own state (Driver.mu); a prepare waiting for room
		// (Config.PrepareWait) must let the kubelet's Unprepare calls in.
		kubeletplugin.Serialize(false),
	)
	if err != nil {
		return fmt.Errorf("start the kubelet plugin: %w", err)
	}
	defer helper.Stop()
	reg.Set(helper)
	// case C37: the NRI plugin answers from the prepared claims (restored from the checkpoint).
	g := nri.NewPlugin(d, cfg.NRIExemptNamespaces...)
	pf := &nodeagent.Preflight{Client: deps.Client, Node: cfg.NodeName, HostRoot: nodeagent.HostRoot,
		ToolkitConfigPaths: cfg.ToolkitConfigPaths, ContainerdConfigPaths: cfg.ContainerdConfigPaths,
		Input: func() preflight.Input { return d.PreflightInput(g) }, Changed: g.Changed, Clock: d.opts.Clock}
	// A mode switch (issue 28): the node's GPUs are the device plugin's until the pods it placed
	// and the plugin itself are gone; only then are devices published and the NRI plugin
	// connected. A restart or a first start does not wait.
	if err := cfg.WaitOldModeGone(ctx, deps.Client, nodeagent.ComponentDRADriver, d.enf, d.opts.Clock, func() { go pf.Run(ctx, d.SetPreflight) }); err != nil {
		return nil // stopped while waiting: nothing was published
	}
	d.SetPublisher(helper)
	if err := helper.PublishResources(ctx, d.Resources()); err != nil {
		return fmt.Errorf("publish the ResourceSlice: %w", err)
	}
	nriDone := make(chan struct{})
	go func() {
		if cfg.NRISocket != "" {
			nri.Run(agentCtx, cfg.NRISocket, g, nri.DefaultRetry)
		}
		close(nriDone)
	}()
	klog.InfoS("DRA driver started", "driver", draapi.DriverName, "node", cfg.NodeName, "gpus", len(d.gpus))
	uuids := make([]string, 0, len(d.gpus))
	for _, g := range d.gpus {
		uuids = append(uuids, g.GPU.UUID)
	}
	go d.RepublishLoop(ctx)
	gm := &nodeagent.NodeResourcesPublisher{Client: deps.Client, Node: cfg.NodeName, Clock: d.opts.Clock, Want: d.NodeResources}
	go gm.Run(ctx)
	go gpuhealth.WatchXIDs(ctx, d.backend, uuids, d.opts.Clock, func(ev device.XIDEvent) { d.OnXID(ctx, ev) })
	go gpuhealth.ProbeLoop(ctx, d.opts.Clock, cfg.ProbeInterval, func() { d.ProbeUnhealthy(ctx) })
	<-ctx.Done()
	r := cfg.LeavingForGood(ctx, deps.Client)
	if r.Drain && len(d.Prepared()) > 0 {
		d.drain(helper, cfg.SwitchUndone(ctx, deps.Client))
		// taken again after the drain: a switch undone meanwhile withdraws nothing
		r = cfg.LeavingForGood(ctx, deps.Client)
	}
	stopAgent()
	<-nriDone
	if r.ForGood {
		wctx, cancel := nodeagent.WithdrawContext(ctx)
		d.withdraw(wctx, deps.Client)
		cancel()
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// drain keeps the kubelet plugin and the NRI plugin serving the claims the driver prepared until
// the kubelet has unprepared them all (their pods ended) or Config.DrainTimeout passes, when
// the driver leaves its node for a mode switch (Removal.Drain), or until undone says the switch
// was undone (nodeagent.Config.Drain). It first publishes no device, so DRA's allocator places
// no new claim on the node.
func (d *Driver) drain(p Publisher, undone func() bool) {
	ctx, cancel := nodeagent.WithdrawContext(context.Background())
	if err := p.PublishResources(ctx, resourceslice.DriverResources{}); err != nil {
		klog.ErrorS(err, "Withdrawing the ResourceSlices before the drain failed", "node", d.cfg.NodeName)
	}
	cancel()
	d.cfg.Drain("the kubelet to unprepare the claims this DRA driver prepared", d.preparedNames, undone, d.opts.Clock)
}

// preparedNames are the prepared claims as "namespace/name", sorted.
func (d *Driver) preparedNames() []string {
	var out []string
	for _, p := range d.Prepared() {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	sort.Strings(out)
	return out
}

// withdraw removes the preflight condition and the node's synthetic resources (NodeResources)
// when the driver leaves the node for good (issue 28);
// the kubelet removes its ResourceSlices 30 s after it unregisters. Claims still prepared (a
// drain cut by --drain-timeout, or helm uninstall) are kept (their CDI specs and checkpoint):
// the kubelet needs a driver on the node to unprepare them, which the log says.
func (d *Driver) withdraw(ctx context.Context, c kubernetes.Interface) {
	if n := len(d.Prepared()); n > 0 {
		klog.ErrorS(nil, "Leaving the node for good with prepared claims: their pods cannot release them until a DRA driver runs on the node again", "node", d.cfg.NodeName, "claims", n)
	}
	nodeagent.Withdraw(ctx, c, d.cfg.NodeName, d.NodeResourceNames()...)
}

// MetricsHandler is what the DRA driver serves on --metrics-address: /metrics (d's Collector,
// with the Go and process collectors), /healthz, /readyz (reg) and, with faults, the fake
// backend's fault injection (nodeagent.Handler).
func MetricsHandler(d *Driver, faults nodeagent.FaultInjector, reg *Registration) http.Handler {
	return withReadyz(nodeagent.Handler(metrics.NewRegistry(NewCollector(d)), faults), reg)
}

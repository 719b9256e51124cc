package dra

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/gpuhealth"
	"github.com/hami-go/hami-go/pkg/nodeagent"
	"github.com/hami-go/hami-go/pkg/nri"
	"github.com/hami-go/hami-go/pkg/preflight"
)

// agent is the DRA driver's side of nodeagent.Life (nodeagent.Agent): the driver, its
// kubeletplugin helper and its connections.
type agent struct {
	// run is Run's context: its cause is the helper's unrecoverable error (Driver.fatal).
	run  context.Context
	cfg  Config
	deps Deps
	d    *Driver
	reg  *Registration
	// helper is the kubeletplugin helper, set by Start.
	helper *kubeletplugin.Helper
}

var _ nodeagent.Agent = (*agent)(nil)

// newAgent builds the driver (HAMi-core installed: cfg names the library); the helper's
// unrecoverable errors end run with fatal.
func newAgent(run context.Context, fatal context.CancelCauseFunc, cfg Config, deps Deps) (*agent, error) {
	d, err := New(cfg, deps.Backend, deps.Options)
	if err != nil {
		return nil, err
	}
	d.fatal = fatal
	return &agent{run: run, cfg: cfg, deps: deps, d: d, reg: &Registration{}}, nil
}

func (a *agent) Enforcement() *nodeagent.Enforcement { return a.d.enf }

func (a *agent) Handler() http.Handler { return MetricsHandler(a.d, a.deps.Faults, a.reg) }

// NRISource is the driver: case C37, the NRI plugin answers from the prepared claims (restored
// from the checkpoint).
func (a *agent) NRISource() nri.Source { return a.d }

// Start starts the kubeletplugin helper under agentCtx: it outlives ctx by the drain of a mode
// switch (Removal.Drain), as the kubelet needs the driver to unprepare the claims it prepared.
func (a *agent) Start(_, agentCtx context.Context, _ *nri.Plugin) (func(), error) {
	helper, err := kubeletplugin.Start(agentCtx, a.d,
		kubeletplugin.DriverName(draapi.DriverName),
		kubeletplugin.KubeClient(a.deps.Client),
		kubeletplugin.NodeName(a.cfg.NodeName),
		kubeletplugin.PluginDataDirectoryPath(a.cfg.PluginDataDir),
		kubeletplugin.RegistrarDirectoryPath(a.cfg.RegistrarDir),
		// The driver serialises its own state (Driver.mu); a prepare waiting for room
		// (Config.PrepareWait) must let the kubelet's Unprepare calls in.
		kubeletplugin.Serialize(false),
	)
	if err != nil {
		return nil, fmt.Errorf("start the kubelet plugin: %w", err)
	}
	a.helper = helper
	a.reg.Set(helper)
	return helper.Stop, nil
}

func (a *agent) PreflightInput(g *nri.Plugin) preflight.Input { return a.d.PreflightInput(g) }

func (a *agent) SetPreflight(r preflight.Report) { a.d.SetPreflight(r) }

// Serve waits: the helper serves the kubelet from Start until the Life stops the agent. It
// returns the helper's unrecoverable error, if one ended the run.
func (a *agent) Serve(ctx context.Context) error {
	<-ctx.Done()
	if err := context.Cause(a.run); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// StopsBeforeArrival is true: stopped while waiting for the old mode, the driver has published
// nothing and prepared nothing to unprepare.
func (a *agent) StopsBeforeArrival() bool { return true }

// Publish publishes the ResourceSlice, then republishes it when prepared claims change the
// device order (RepublishLoop) and at every health change (XIDs, probes); the node's synthetic
// resources follow PublishedResources, over an informer on the node's pods (waited for up to
// nodePodsSync). Nothing to wait for at the stop (nil done).
func (a *agent) Publish(ctx context.Context) (<-chan struct{}, error) {
	d := a.d
	d.SetPublisher(a.helper)
	if err := a.helper.PublishResources(ctx, d.Resources()); err != nil {
		return nil, fmt.Errorf("publish the ResourceSlice: %w", err)
	}
	klog.InfoS("DRA driver started", "driver", draapi.DriverName, "node", a.cfg.NodeName, "gpus", len(d.gpus))
	uuids := make([]string, 0, len(d.gpus))
	for _, g := range d.gpus {
		uuids = append(uuids, g.GPU.UUID)
	}
	go d.RepublishLoop(ctx)
	pods := nodeagent.NewNodePods(a.deps.Client, a.cfg.NodeName)
	pods.Start(ctx, nodePodsSync)
	d.SetHeld(pods.Held)
	gm := &nodeagent.NodeResourcesPublisher{Client: a.deps.Client, Node: a.cfg.NodeName, Clock: d.opts.Clock, Want: d.PublishedResources}
	go gm.Run(ctx)
	go gpuhealth.WatchXIDs(ctx, d.backend, uuids, d.opts.Clock, func(ev device.XIDEvent) { d.OnXID(ctx, ev) })
	go gpuhealth.ProbeLoop(ctx, d.opts.Clock, a.cfg.ProbeInterval, func() { d.ProbeUnhealthy(ctx) })
	return nil, nil
}

// nodePodsSync bounds how long Publish waits for the first list of the node's pods (their holds
// floor the synthetic resources, PublishedResources): the kubelet's own view is one watch.
const nodePodsSync = 10 * time.Second

// HandOver does nothing: the driver has no Lease; DRA's allocator places claims from its
// ResourceSlice, which Drain withdraws.
func (a *agent) HandOver() {}

// Drain keeps the kubelet plugin and the NRI plugin serving the claims the driver prepared
// until the kubelet has unprepared them all (their pods ended), when the driver leaves its node
// for a mode switch (nodeagent.Life.Drain). With no claim prepared it leaves at once (nil
// holders). It first publishes no device, so DRA's allocator places no new claim on the node.
func (a *agent) Drain() (string, func() []string) {
	if len(a.d.Prepared()) == 0 {
		return "", nil
	}
	ctx, cancel := nodeagent.WithdrawContext(context.Background())
	if err := a.helper.PublishResources(ctx, resourceslice.DriverResources{}); err != nil {
		klog.ErrorS(err, "Withdrawing the ResourceSlices before the drain failed", "node", a.cfg.NodeName)
	}
	cancel()
	return "the kubelet to unprepare the claims this DRA driver prepared", a.d.preparedNames
}

// Flush does nothing: the driver writes its checkpoint at each prepare.
func (a *agent) Flush() {}

func (a *agent) Withdraw(ctx context.Context) { a.d.withdraw(ctx, a.deps.Client) }

package deviceplugin

import (
	"context"
	"net/http"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/nodeagent"
	"github.com/hami-go/hami-go/pkg/nri"
	"github.com/hami-go/hami-go/pkg/preflight"
)

// agent is the device plugin's side of nodeagent.Life (nodeagent.Agent): the plugin, its pod
// sync (the ledger's pods and the claim writer) and its connections.
type agent struct {
	cfg  Config
	d    Deps
	p    *Plugin
	sync *PodSync
}

var _ nodeagent.Agent = (*agent)(nil)

// newAgent builds the plugin (HAMi-core installed: cfg names the library) and writes the CDI
// spec (cdi strategy).
func newAgent(cfg Config, d Deps) (*agent, error) {
	sync := NewPodSync(d.Client, cfg.NodeName, cfg.HAMiCacheDir)
	p, err := New(cfg, d.Backend, d.Options, sync.Dirty)
	if err != nil {
		return nil, err
	}
	// Item 7 of issue 37: the figures published (node status, ListAndWatch) never drop below
	// what the node's running pods hold, or the kubelet refuses them at its restart.
	p.SetHeld(sync.Held)
	if cfg.DeviceListStrategy == StrategyCDI {
		// The dev root's nodes are seen under the host root the chart mounts (<devRoot>/dev
		// read-only at nodeagent.HostRoot<devRoot>/dev).
		exists := func(hostPath string) bool {
			_, err := os.Stat(filepath.Join(nodeagent.HostRoot, hostPath))
			return err == nil
		}
		if err := WriteCDISpec(cfg.CDISpecDir, p.GPUs(), cfg.EffectiveDevRoot(), exists); err != nil {
			return nil, err
		}
	}
	return &agent{cfg: cfg, d: d, p: p, sync: sync}, nil
}

func (a *agent) Enforcement() *nodeagent.Enforcement { return a.p.enf }

func (a *agent) Handler() http.Handler {
	var faults nodeagent.FaultInjector
	if a.cfg.FakeFaultInjection {
		faults = a.d.Faults
	}
	return MetricsHandler(a.p, a.d.PIDResolver, faults)
}

func (a *agent) NRISource() nri.Source { return NRISource(a.p) }

// Start starts the claim writer under agentCtx (it outlives the kubelet-facing server: the
// claims applied during the drain are written, Flush), wires the NRI plugin g into the plugin,
// and watches the GPUs' health from now on (the kubelet stream reports it).
func (a *agent) Start(ctx, agentCtx context.Context, g *nri.Plugin) (func(), error) {
	p := a.p
	if err := a.sync.Start(agentCtx, p.Ledger()); err != nil {
		return nil, err
	}
	// case C37: the NRI plugin starts once the ledger has its pods and claims back (informer
	// synced): before that it could not tell a GPU container from one without GPUs.
	// PreStartContainer waits for it to connect (Plugin.waitPlansApplicable), and containers it
	// finds running without their plan when it connects are stopped (unplannedStopper).
	p.ConnectNRI(g)
	events := record.NewBroadcaster(record.WithContext(ctx))
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.d.Client.CoreV1().Events("")})
	recorder := events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "hami-go-device-plugin", Host: a.cfg.NodeName})
	g.OnUnplanned(unplannedStopper{p: p, client: a.d.Client, recorder: recorder}.stop)
	g.OnPlanCreated(p.PlanCreated)
	go p.watchXIDs(ctx)
	go p.probeLoop(ctx)
	return events.Shutdown, nil
}

func (a *agent) PreflightInput(g *nri.Plugin) preflight.Input { return a.p.PreflightInput(g) }

func (a *agent) SetPreflight(r preflight.Report) { a.p.SetPreflight(r) }

// Serve serves the kubelet past the stop (ctx is the Life's): by the handover (case C45) the
// Lease is released first, so that no GPU pod is placed on the node any more, and the pods
// placed before are admitted while the kubelet still has the devices; then, when the agent
// leaves the node for a mode switch (Removal.Drain), by the drain: the pods that hold its slices
// keep their kubelet (container restarts) and NRI plugin until they end.
func (a *agent) Serve(ctx context.Context) error { return a.p.Serve(ctx) }

// StopsBeforeArrival is false: the kubelet-facing server served during the wait, so the stop
// hands over and decides as any other.
func (a *agent) StopsBeforeArrival() bool { return false }

// Publish starts the publish loop (inventory, labels, the node's Lease). The node's extended
// resources (an allocatable change, which makes kube-scheduler retry the GPU pods it could not
// place) are published once the extender can place pods here (the Lease held): published
// before, after a mode switch the retry came before the node was usable, and the pods that
// waited for the switch then waited for kube-scheduler's periodic retry. done closes when the
// loop has stopped: its last renewal comes before HandOver's release.
func (a *agent) Publish(ctx context.Context) (<-chan struct{}, error) {
	p := a.p
	gm := &nodeagent.NodeResourcesPublisher{Client: a.d.Client, Node: a.cfg.NodeName, Want: p.PublishedResources, Clock: p.opts.Clock}
	done := make(chan struct{})
	go func() {
		p.publishLoop(ctx, a.d.Client, func() { go gm.Run(ctx) })
		close(done)
	}()
	return done, nil
}

func (a *agent) HandOver() { a.p.handOver(a.d.Client, a.sync) }

// Drain drains the pods holding the plugin's slices (its ledger's holders); its capacity went
// with the Lease (HandOver).
func (a *agent) Drain() (string, func() []string) {
	return "the pods holding this device plugin's slices to end", a.p.Ledger().Holders
}

// Flush waits for the containers PreStartContainer let through to be created with their plan
// (Plugin.Drain) and for the claims applied meanwhile to be written (PodSync.Flush), each up to
// Config.PlanWait.
func (a *agent) Flush() {
	if n := a.p.Drain(); n > 0 {
		klog.InfoS("Stopping with containers let through PreStartContainer not yet created", "containers", n, "waited", a.cfg.PlanWait)
	}
	if !a.sync.Flush(a.p.opts.Clock.After(a.cfg.PlanWait)) {
		klog.InfoS("Stopping with claimed records not yet written", "waited", a.cfg.PlanWait)
	}
}

func (a *agent) Withdraw(ctx context.Context) { a.p.withdraw(ctx, a.d.Client) }

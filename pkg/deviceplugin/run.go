package deviceplugin

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuhealth"
	"github.com/hami-go/hami-go/pkg/metrics"
	"github.com/hami-go/hami-go/pkg/nodeagent"
	"github.com/hami-go/hami-go/pkg/nri"
	"github.com/hami-go/hami-go/pkg/preflight"
)

// Deps are the plugin's connections to the world, made by cmd/device-plugin.
type Deps struct {
	// Client talks to the API server (pods, the Node, the Lease).
	Client kubernetes.Interface
	// Backend is NVML or fake.
	Backend device.Backend
	// Faults is the fake fleet's fault API; served only when Config.FakeFaultInjection.
	Faults nodeagent.FaultInjector
	// Options are the injectable parts (clock, intervals).
	Options Options
	// PIDResolver maps GPU processes to containers for per-slice memory use; nil = none.
	PIDResolver PIDResolver
}

// Run runs the device plugin until ctx ends: it discovers the GPUs, writes the CDI spec (cdi
// strategy), syncs pods and rebuilds claims (AnnoClaimed) before serving the kubelet, runs the
// NRI plugin that applies each pod's plan at container creation (pkg/nri, Config.NRISocket;
// case C37), watches XIDs, probes unhealthy GPUs every ProbeInterval, publishes the Node
// inventory and labels on change and renews the Lease every 10 s, and serves metrics.
func Run(ctx context.Context, cfg Config, d Deps) error {
	installed, err := cfg.InstallHAMiCore(ctx)
	if err != nil {
		return err
	}
	sync := NewPodSync(d.Client, cfg.NodeName, cfg.HAMiCacheDir)
	p, err := New(cfg, d.Backend, d.Options, sync.Dirty)
	if err != nil {
		return err
	}
	p.enf.SetInstalled(installed)
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
			return err
		}
	}
	var faults nodeagent.FaultInjector
	if cfg.FakeFaultInjection {
		faults = d.Faults
	}
	stopMetrics, err := metrics.Serve(cfg.MetricsAddress, MetricsHandler(p, d.PIDResolver, faults))
	if err != nil {
		return err
	}
	defer stopMetrics()

	// The claim writer and the NRI plugin outlive the kubelet-facing server: at shutdown the
	// NRI plugin stays connected until the containers PreStartContainer let through have been
	// created with their plan (Drain), and the claims applied meanwhile are written (Flush).
	agentCtx, stopAgent := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAgent()
	if err := sync.Start(agentCtx, p.Ledger()); err != nil {
		return err
	}
	// case C37: the NRI plugin starts once the ledger has its pods and claims back (informer
	// synced): before that it could not tell a GPU container from one without GPUs.
	// PreStartContainer waits for it to connect (Plugin.waitPlansApplicable), and containers it
	// finds running without their plan when it connects are stopped (unplannedStopper).
	g := nri.NewPlugin(NRISource(p), cfg.NRIExemptNamespaces...)
	p.canApplyPlans, p.nriChanged = g.CanApplyPlans, g.Changed
	events := record.NewBroadcaster(record.WithContext(ctx))
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: d.Client.CoreV1().Events("")})
	defer events.Shutdown()
	recorder := events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "hami-go-device-plugin", Host: cfg.NodeName})
	g.OnUnplanned(unplannedStopper{p: p, client: d.Client, recorder: recorder}.stop)
	g.OnPlanCreated(p.PlanCreated)
	pf := &nodeagent.Preflight{Client: d.Client, Node: cfg.NodeName, HostRoot: nodeagent.HostRoot,
		ToolkitConfigPaths: cfg.ToolkitConfigPaths, ContainerdConfigPaths: cfg.ContainerdConfigPaths,
		Input: func() preflight.Input { return p.PreflightInput(g) }, Changed: g.Changed, Clock: p.opts.Clock}
	// A mode switch (issue 28): the node's GPUs are the DRA driver's until its pods and claims
	// are gone; only then does this agent connect its NRI plugin (it stops containers running
	// without a plan), take the Lease and publish. A restart or a first start does not wait.
	arrived := make(chan struct{})
	go func() {
		if cfg.WaitOldModeGone(ctx, d.Client, nodeagent.ComponentDevicePlugin, p.enf, p.opts.Clock, func() { go pf.Run(ctx, p.SetPreflight) }) == nil {
			close(arrived)
		}
	}()
	nriDone := make(chan struct{})
	go func() {
		select {
		case <-arrived:
			nri.Run(agentCtx, cfg.NRISocket, g, nri.DefaultRetry)
		case <-ctx.Done():
		}
		close(nriDone)
	}()
	go p.watchXIDs(ctx)
	go p.probeLoop(ctx)
	// The node's extended resources (an allocatable change, which makes kube-scheduler retry
	// the GPU pods it could not place) are published once the extender can place pods here (the
	// Lease held): published before, after a mode switch the retry came before the node was
	// usable, and the pods that waited for the switch then waited for kube-scheduler's periodic
	// retry.
	gm := &nodeagent.NodeResourcesPublisher{Client: d.Client, Node: cfg.NodeName, Want: p.PublishedResources, Clock: p.opts.Clock}
	published := make(chan struct{})
	go func() {
		select {
		case <-arrived:
			p.publishLoop(ctx, d.Client, func() { go gm.Run(ctx) })
		case <-ctx.Done():
		}
		close(published)
	}()
	// The kubelet-facing server outlives ctx by the handover (case C45): the Lease released
	// first, so that no GPU pod is placed on the node any more, and the pods placed before
	// admitted while the kubelet still has the devices; then, when the agent leaves the node
	// for a mode switch (Removal.Drain), by the drain: the pods that hold its slices keep their
	// kubelet (container restarts) and NRI plugin until they end.
	var removal nodeagent.Removal
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	decided := make(chan struct{})
	go func() {
		<-ctx.Done()
		<-published
		r := cfg.LeavingForGood(ctx, d.Client)
		p.handOver(d.Client, sync)
		if r.Drain {
			cfg.Drain("the pods holding this device plugin's slices to end", p.Ledger().Holders, cfg.SwitchUndone(ctx, d.Client), p.opts.Clock)
			// taken again after the drain: a switch undone meanwhile withdraws nothing
			r = cfg.LeavingForGood(ctx, d.Client)
		}
		removal = r
		close(decided)
		stopServing()
	}()
	err = p.Serve(serveCtx)
	if n := p.Drain(); n > 0 {
		klog.InfoS("Stopping with containers let through PreStartContainer not yet created", "containers", n, "waited", cfg.PlanWait)
	}
	if !sync.Flush(p.opts.Clock.After(cfg.PlanWait)) {
		klog.InfoS("Stopping with claimed records not yet written", "waited", cfg.PlanWait)
	}
	stopAgent()
	<-nriDone
	if ctx.Err() == nil {
		return err // Serve failed without a stop: a crash, which the DaemonSet restarts
	}
	<-decided
	if removal.ForGood {
		wctx, cancel := nodeagent.WithdrawContext(ctx)
		p.withdraw(wctx, d.Client)
		cancel()
	}
	return err
}

// withdraw removes what the agent published on the node when it leaves it for good (issue 28):
// the inventory annotation, its labels, the Lease, the preflight condition, the node's extended
// resources (NodeResourceNames) and its CDI spec.
// Pods that still run keep their containers; failures are logged.
func (p *Plugin) withdraw(ctx context.Context, c kubernetes.Interface) {
	if err := WithdrawNode(ctx, c, p.Inventory(), p.cfg.Enforcement, p.cfg.LeaseNamespace); err != nil {
		klog.ErrorS(err, "Withdrawing the node's inventory failed", "node", p.cfg.NodeName)
	}
	nodeagent.Withdraw(ctx, c, p.cfg.NodeName, p.NodeResourceNames()...)
	if p.cfg.DeviceListStrategy == StrategyCDI {
		if err := os.Remove(filepath.Join(p.cfg.CDISpecDir, CDISpecName)); err != nil && !os.IsNotExist(err) {
			klog.ErrorS(err, "Removing the CDI spec failed", "dir", p.cfg.CDISpecDir)
		}
	}
	klog.InfoS("Withdrew the node's inventory, labels, Lease, preflight condition and extended resources", "node", p.cfg.NodeName)
}

func (p *Plugin) watchXIDs(ctx context.Context) {
	uuids := make([]string, 0, len(p.gpus))
	for _, g := range p.gpus {
		uuids = append(uuids, g.UUID)
	}
	gpuhealth.WatchXIDs(ctx, p.backend, uuids, p.opts.Clock, p.OnXID)
}

func (p *Plugin) probeLoop(ctx context.Context) {
	gpuhealth.ProbeLoop(ctx, p.opts.Clock, p.cfg.ProbeInterval, p.ProbeUnhealthy)
}

// publishLoop publishes the inventory and renews the Lease every LeaseRenewInterval, at every
// health change and whenever the kubelet gets or loses the devices (Serving): the Lease is held
// only while it has them (RenewLease; case C45). firstHeld (if not nil) is called once, when the
// Lease is first held: the extender can place pods on the node from then on.
func (p *Plugin) publishLoop(ctx context.Context, c kubernetes.Interface, firstHeld func()) {
	t := p.opts.Clock.NewTicker(LeaseRenewInterval)
	defer t.Stop()
	held := false
	once := false
	for {
		changed, serving := p.HealthChanged(), p.ServingChanged()
		if _, err := PublishNode(ctx, c, p.Inventory(), p.cfg.Enforcement); err != nil {
			klog.ErrorS(err, "Publishing the node inventory failed", "node", p.cfg.NodeName)
		}
		hold := p.Serving()
		if err := RenewLease(ctx, c, p.cfg.LeaseNamespace, p.cfg.NodeName, p.leaseHolder(), p.opts.Clock, hold); err != nil {
			klog.ErrorS(err, "Renewing the node Lease failed", "node", p.cfg.NodeName, "namespace", p.cfg.LeaseNamespace, "hold", hold)
		} else if hold != held {
			held = hold
			if hold {
				klog.InfoS("Node Lease held: the kubelet has the devices", "node", p.cfg.NodeName)
				if !once && firstHeld != nil {
					once = true
					firstHeld()
				}
			} else {
				klog.InfoS("Node Lease released: the kubelet does not have the devices", "node", p.cfg.NodeName)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-changed:
		case <-serving:
		}
	}
}

// leaseHolder is the agent's identity in the node's Lease: its pod's name (--pod-name), else the
// node's name.
func (p *Plugin) leaseHolder() string {
	if p.cfg.PodName != "" {
		return p.cfg.PodName
	}
	return p.cfg.NodeName
}

// Handover bounds (case C45): after the Lease is released the kubelet-facing server keeps
// serving at least handOverMin (the extender's informer sees the release, and binds already
// on their way reach the kubelet) and until no GPU pod placed on the node awaits the kubelet's
// admission, at most handOverMax.
const (
	handOverMin  = time.Second
	handOverMax  = 10 * time.Second
	handOverPoll = 100 * time.Millisecond
)

// handOver runs when the agent stops, before the kubelet-facing server does: it releases the
// node's Lease (the extender then places no GPU pod there: device.LeaseReleased), then, while a
// kubelet has its devices (Serving), waits while GPU pods already placed on the node have not
// been admitted by the kubelet
// (PodSync.AwaitingAdmission): the kubelet admits a pod only while a device plugin serves it the
// devices, and fails it otherwise (UnexpectedAdmissionError, "no healthy devices present"). The
// next agent takes the Lease once the kubelet has its devices (publishLoop).
func (p *Plugin) handOver(c kubernetes.Interface, s *PodSync) {
	clk := p.opts.Clock
	start := clk.Now()
	ctx, cancel := context.WithTimeout(context.Background(), handOverMax)
	defer cancel()
	if ok, err := ReleaseLease(ctx, c, p.cfg.LeaseNamespace, p.cfg.NodeName, p.leaseHolder(), clk); err != nil {
		klog.ErrorS(err, "Releasing the node Lease failed", "node", p.cfg.NodeName, "namespace", p.cfg.LeaseNamespace)
	} else if !ok {
		klog.InfoS("Node Lease held by the next agent already; not releasing it", "node", p.cfg.NodeName)
	}
	var waiting []string
	for p.Serving() { // no kubelet stream (a kubelet restart): no admission to wait for
		waiting = s.AwaitingAdmission()
		elapsed := clk.Since(start)
		if (elapsed >= handOverMin && len(waiting) == 0) || elapsed >= handOverMax {
			break
		}
		<-clk.After(handOverPoll)
	}
	if len(waiting) > 0 && p.Serving() {
		klog.InfoS("Stopping with GPU pods the kubelet has not admitted yet (it may fail them)", "node", p.cfg.NodeName, "pods", waiting, "waited", handOverMax)
	} else {
		klog.InfoS("Node Lease released; stopping to serve the kubelet", "node", p.cfg.NodeName, "after", clk.Since(start))
	}
}

// MetricsHandler is what the device plugin serves on --metrics-address: /metrics (p's
// Collector, with the Go and process collectors), /healthz and, with faults, the fake backend's
// fault injection (nodeagent.Handler).
func MetricsHandler(p *Plugin, resolve PIDResolver, faults nodeagent.FaultInjector) http.Handler {
	return nodeagent.Handler(metrics.NewRegistry(NewCollector(p, resolve)), faults)
}

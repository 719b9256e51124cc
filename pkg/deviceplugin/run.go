package deviceplugin

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuhealth"
	"github.com/hami-go/hami-go/pkg/metrics"
	"github.com/hami-go/hami-go/pkg/nodeagent"
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
// inventory and labels on change and renews the Lease every 10 s, and serves metrics. Its life
// (install, wait for the old mode, publish, hand over, drain, withdraw) is nodeagent.Life's;
// the device plugin's steps are its agent's (agent).
func Run(ctx context.Context, cfg Config, d Deps) error {
	l := &nodeagent.Life{Config: &cfg.Config, Client: d.Client, Component: nodeagent.ComponentDevicePlugin, Clock: d.Options.Clock}
	return l.Run(ctx, func() (nodeagent.Agent, error) { return newAgent(cfg, d) })
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

package dra

import (
	"context"
	"net/http"
	"sort"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/metrics"
	"github.com/hami-go/hami-go/pkg/nodeagent"
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
// (with Config.NRISocket) runs the NRI plugin (pkg/nri, case C37). Its life (install, wait for
// the old mode, publish, drain, withdraw) is nodeagent.Life's; the driver's steps are its
// agent's (agent).
func Run(ctx context.Context, cfg Config, deps Deps) error {
	// The helper's unrecoverable errors end the run (Driver.fatal) and are what it returns.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	l := &nodeagent.Life{Config: &cfg.Config, Client: deps.Client, Component: nodeagent.ComponentDRADriver, Clock: deps.Options.Clock}
	return l.Run(ctx, func() (nodeagent.Agent, error) { return newAgent(ctx, cancel, cfg, deps) })
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

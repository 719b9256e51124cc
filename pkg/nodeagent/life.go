package nodeagent

import (
	"context"
	"net/http"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/metrics"
	"github.com/hami-go/hami-go/pkg/nri"
	"github.com/hami-go/hami-go/pkg/preflight"
)

// Agent is what a node agent (pkg/deviceplugin, pkg/dra) hands to its Life: the steps whose
// doing differs between the device plugin and the DRA driver. The Life calls them in its one
// order (Life.Run); where the two modes differ in more than the doing, the method says why.
type Agent interface {
	// Enforcement is the agent's node enforcement: the Life records in it the HAMi-core
	// library it installed and, during a mode switch, what it waits for (the preflight
	// condition, FindingOldModeInUse).
	Enforcement() *Enforcement
	// Handler is what the agent serves on --metrics-address, for its whole life.
	Handler() http.Handler
	// NRISource answers the agent's NRI plugin (pkg/nri, case C37): the device plugin from its
	// plans, the DRA driver from its prepared claims.
	NRISource() nri.Source

	// Start starts what the agent serves from its start, before the old mode of a mode switch
	// is gone (the kubelet registration): ctx ends at the stop, agentCtx once the Life stops the
	// agent, after the drain and the flush (what must stay up for the drain runs under
	// agentCtx). g is the agent's NRI plugin, connected later by the Life. stop is called when
	// Run returns. Errors end Run.
	//
	// The device plugin starts its claim writer (PodSync, under agentCtx: the claims applied
	// during the drain are written) and its GPU health watches (XIDs, probes: the kubelet stream
	// it serves from the start reports health); the DRA driver starts the kubeletplugin helper
	// under agentCtx: it stays up past ctx for the kubelet's Unprepare calls of the drain.
	Start(ctx, agentCtx context.Context, g *nri.Plugin) (stop func(), err error)
	// PreflightInput is what the node's preflight checks that only the agent knows (g is its
	// NRI plugin); SetPreflight gets each report (Preflight.Run).
	PreflightInput(g *nri.Plugin) preflight.Input
	SetPreflight(r preflight.Report)
	// Serve serves the kubelet until ctx ends; the Life ends ctx after the stop's hand-over and
	// drain, not at the stop. An error before the stop is a crash: Run flushes, stops the agent
	// and returns it (the DaemonSet restarts the agent), deciding and withdrawing nothing.
	// Serve's error, or nil, is what Run returns.
	//
	// The device plugin serves its kubelet-facing gRPC server here: past ctx, by the hand-over
	// (case C45) and the drain, the pods that hold its slices keep their kubelet. The DRA
	// driver's helper serves from Start; its Serve only waits, and returns the error the helper
	// reported (Driver.fatal), if any.
	Serve(ctx context.Context) error
	// StopsBeforeArrival says whether a stop that comes before the old mode is gone ends Run at
	// once, with nil: no decision, hand-over, drain or withdrawal. The DRA driver's does: it has
	// published nothing then, and prepared nothing it must unprepare. The device plugin's does
	// not: its kubelet-facing server has served the kubelet meanwhile, and it takes the stop as
	// any other (hands over, withdraws when it leaves for good).
	StopsBeforeArrival() bool
	// Publish publishes the agent's capacity once the old mode is gone (the Life connects the
	// NRI plugin after it); done (nil: nothing to wait for) is closed once the publishing it
	// started has stopped, after ctx's end: the stop's decision waits for it. An error ends Run.
	//
	// The device plugin starts its publish loop (the inventory and the node's Lease, then the
	// node's extended resources once the Lease is first held): done closes when the loop has
	// stopped, so that its last Lease renewal comes before HandOver releases the Lease. The DRA
	// driver publishes its ResourceSlice (an error ends Run), then starts what republishes it
	// (prepared claims' device order, the node's resources, XIDs and probes: health changes
	// republish the slice, so they start once it is published); nil done.
	Publish(ctx context.Context) (done <-chan struct{}, err error)
	// HandOver runs at every stop, once decided whether the agent leaves for good, before the
	// drain: the device plugin releases the node's Lease (no GPU pod is placed on the node any
	// more) and waits for the pods placed before to be admitted (case C45). The DRA driver has no
	// Lease (DRA's allocator places claims from its ResourceSlice, which Drain withdraws): it
	// does nothing.
	HandOver()
	// Drain runs when the agent leaves its node for a mode switch (Removal.Drain): it stops
	// offering capacity and returns what the drain waits for, for the log, and the holders of the
	// agent's GPUs that it waits out (Life.Drain); nil holders: no drain, and the removal is not
	// decided again. The device plugin's capacity is gone with its Lease (HandOver): it drains
	// the pods holding its slices (its ledger's holders). The DRA driver drains only while it has
	// prepared claims (none: it leaves at once); it first publishes no device, then waits for
	// the kubelet to unprepare its claims.
	Drain() (what string, holders func() []string)
	// Flush runs once Serve has returned, before the agent is stopped: the device plugin waits
	// for the containers PreStartContainer let through to be created with their plan, and for
	// their claimed records to be written (Config.PlanWait each). The DRA driver writes its
	// checkpoint at each prepare: nothing to flush.
	Flush()
	// Withdraw removes what the agent published on its node, when it leaves it for good; ctx
	// is bounded (WithdrawContext).
	Withdraw(ctx context.Context)
}

// Life is a node agent's life, written once for both agents (issue 39): it owns the shared
// configuration, the API client, the clock and the enforcement, and runs the agent's steps
// (Agent) in their one order (Run). Its methods are the steps that make API calls and wait
// (the mode switch's wait and drain, the removal decision).
type Life struct {
	// Config is the agent's shared configuration; Run installs HAMi-core into it
	// (Config.InstallHAMiCore) before it builds the agent.
	Config *Config
	// Client talks to the API server.
	Client kubernetes.Interface
	// Component is the agent's (ComponentDevicePlugin or ComponentDRADriver): the arriving
	// side of a mode switch (WaitOldModeGone).
	Component string
	// Clock is injectable; nil = the real one.
	Clock clock.WithTicker
	// Enforcement is the agent's (Agent.Enforcement), set by Run; WaitOldModeGone reports what
	// it waits for in it.
	Enforcement *Enforcement
}

func (l *Life) clock() clock.WithTicker {
	if l.Clock == nil {
		return clock.RealClock{}
	}
	return l.Clock
}

// Run runs a node agent's life until ctx ends (the stop, SIGTERM) and the stop's steps are done,
// or until the agent fails. build makes the agent once HAMi-core is installed (it reads the
// installed library from Config). The steps, in their one order:
//
//  1. install HAMi-core (Config.InstallHAMiCore; an error ends Run), build the agent, serve
//     metrics (Agent.Handler), start the agent (Agent.Start);
//  2. serve the kubelet (Agent.Serve), past ctx until the stop's steps are done;
//  3. wait for the old mode of a mode switch to be gone (WaitOldModeGone; a first start or a
//     restart does not wait), the node's preflight started after the first look;
//  4. publish (Agent.Publish), then connect the NRI plugin (Config.NRISocket; none when "");
//  5. at the stop, once publishing has stopped: decide whether the agent leaves its node for good
//     (LeavingForGood), hand over (Agent.HandOver), and for a mode switch drain (Agent.Drain,
//     Life.Drain, ended early when the switch is undone: SwitchUndone) and decide again (a
//     switch undone meanwhile withdraws nothing);
//  6. stop serving, flush (Agent.Flush), stop the agent (the NRI plugin disconnects) and, when
//     it leaves for good, withdraw (Agent.Withdraw).
func (l *Life) Run(ctx context.Context, build func() (Agent, error)) error {
	installed, err := l.Config.InstallHAMiCore(ctx)
	if err != nil {
		return err
	}
	a, err := build()
	if err != nil {
		return err
	}
	l.Enforcement = a.Enforcement()
	l.Enforcement.SetInstalled(installed)
	stopMetrics, err := metrics.Serve(l.Config.MetricsAddress, a.Handler())
	if err != nil {
		return err
	}
	defer stopMetrics()

	// What the agent serves outlives ctx by the stop's steps: the hand-over and the drain of a
	// mode switch (Removal.Drain) need the kubelet plugin and the NRI plugin up.
	agentCtx, stopAgent := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAgent()
	g := nri.NewPlugin(a.NRISource(), l.Config.NRIExemptNamespaces...)
	stop, err := a.Start(ctx, agentCtx, g)
	if err != nil {
		return err
	}
	defer stop()
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	v := &living{l: l, a: a, g: g, ctx: ctx, agentCtx: agentCtx, stopAgent: stopAgent, stopServing: stopServing,
		served: make(chan error, 1), quit: make(chan error, 1), ended: make(chan struct{}),
		arrived: make(chan struct{}), published: make(chan struct{}), nriDone: make(chan struct{}), decided: make(chan struct{})}
	defer close(v.ended)
	go func() { v.served <- a.Serve(serveCtx) }()
	go v.arrive()
	go v.connectNRI()
	go v.decide()
	return v.serve()
}

// living is one Run's state once the agent has started: the strands of its life run
// concurrently (serve, arrive, connectNRI, decide) and meet on its channels.
type living struct {
	l                      *Life
	a                      Agent
	g                      *nri.Plugin
	ctx, agentCtx          context.Context
	stopAgent, stopServing context.CancelFunc

	served  chan error    // Agent.Serve's error, once it has returned
	quit    chan error    // Run ends at once with this (arrive)
	ended   chan struct{} // Run has returned
	arrived chan struct{} // the old mode gone and the agent published: the NRI plugin connects
	// published is closed once the agent's publishing has stopped after the stop, or at once
	// when the stop came during the wait
	published chan struct{}
	nriDone   chan struct{} // the NRI plugin has disconnected, or never connected
	decided   chan struct{} // removal is set
	removal   Removal
}

// arrive waits for the old mode of a mode switch to be gone (issue 28): the node's GPUs are the
// other mode's until its pods and claims are gone; only then does the agent publish and connect
// its NRI plugin (the device plugin's stops containers running without a plan). A restart or a
// first start does not wait. The node's preflight starts after the wait's first look, so that
// the node's condition says at once what the agent waits for.
func (v *living) arrive() {
	l, a, ctx := v.l, v.a, v.ctx
	pf := &Preflight{Client: l.Client, Node: l.Config.NodeName, HostRoot: HostRoot,
		ToolkitConfigPaths: l.Config.ToolkitConfigPaths, ContainerdConfigPaths: l.Config.ContainerdConfigPaths,
		Input: func() preflight.Input { return a.PreflightInput(v.g) }, Changed: v.g.Changed, Clock: l.clock()}
	if l.WaitOldModeGone(ctx, func() { go pf.Run(ctx, a.SetPreflight) }) != nil {
		if a.StopsBeforeArrival() {
			v.quit <- nil // stopped while waiting: nothing was published
			return
		}
		close(v.published)
		return
	}
	done, err := a.Publish(ctx)
	if err != nil {
		v.quit <- err
		return
	}
	close(v.arrived)
	if done != nil {
		<-done
	}
	close(v.published)
}

// connectNRI runs the NRI plugin (case C37; none without Config.NRISocket) from the agent's
// arrival until the agent is stopped.
func (v *living) connectNRI() {
	select {
	case <-v.arrived:
		if socket := v.l.Config.NRISocket; socket != "" {
			nri.Run(v.agentCtx, socket, v.g, nri.DefaultRetry)
		}
	case <-v.ctx.Done():
	}
	close(v.nriDone)
}

// decide takes the stop's steps once publishing has stopped: whether the agent leaves its node
// for good, the hand-over and, for a mode switch, the drain; then it stops serving.
func (v *living) decide() {
	l, a, ctx := v.l, v.a, v.ctx
	select {
	case <-ctx.Done():
	case <-v.ended:
		return
	}
	select {
	case <-v.published:
	case <-v.ended:
		return
	}
	r := l.LeavingForGood(ctx)
	a.HandOver()
	if r.Drain {
		if what, holders := a.Drain(); holders != nil {
			l.Drain(what, holders, l.SwitchUndone(ctx))
			// taken again after the drain: a switch undone meanwhile withdraws nothing
			r = l.LeavingForGood(ctx)
		}
	}
	v.removal = r
	close(v.decided)
	v.stopServing()
}

// serve waits for Agent.Serve to return (after decide, or a crash), then flushes, stops the
// agent and, when it leaves its node for good, withdraws; it returns Serve's error.
func (v *living) serve() error {
	var err error
	select {
	case err = <-v.served:
	case err = <-v.quit:
		v.stopServing()
		<-v.served
		return err
	}
	v.a.Flush()
	v.stopAgent()
	<-v.nriDone
	if v.ctx.Err() == nil {
		return err // Serve failed without a stop: a crash, which the DaemonSet restarts
	}
	<-v.decided
	if v.removal.ForGood {
		wctx, cancel := WithdrawContext(v.ctx)
		v.a.Withdraw(wctx)
		cancel()
	}
	return err
}

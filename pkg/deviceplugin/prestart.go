package deviceplugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/nri"
)

// NRIConnection is what the gate needs of the NRI plugin (nri.Plugin): why it cannot apply a
// pending answer's plan now (nil: it can), and a channel closed when that may have changed.
type NRIConnection interface {
	CanApplyPlans(cdi bool) error
	Changed() <-chan struct{}
}

// ConnectNRI joins the NRI plugin's connection to the PreStartContainer gate; call it before
// the plugin serves the kubelet. Until then no GPU container is let through.
func (p *Plugin) ConnectNRI(c NRIConnection) {
	p.canApplyPlans, p.nriChanged = c.CanApplyPlans, c.Changed
}

// preStartGate is the PreStartContainer gate: it lets the kubelet create a container that holds
// the plugin's devices only once the node agent's NRI plugin can apply the container's plan at
// its creation, and counts the containers it let through until the runtime has created them with
// their plan (Plugin.Drain).
//
// Its parties: the clock, the longest wait (Config.PlanWait), the NRI socket its refusals name
// and whether plans carry CDI devices (the cdi strategy), all given to newPreStartGate by New;
// and the NRI plugin's connection (canApplyPlans, nriChanged), joined by Plugin.ConnectNRI when
// the agent starts the NRI plugin (agent.Start). That one cannot be New's: the NRI plugin is
// built over the plugin (NRISource), after New.
type preStartGate struct {
	clock     clock.Clock
	wait      time.Duration
	nriSocket string
	cdi       bool

	// canApplyPlans says why the NRI plugin cannot apply a pending answer's plan now, or nil
	// (nri.Plugin.CanApplyPlans; set before serving; nil: there is no NRI plugin).
	// PreStartContainer lets a GPU container be created only when it says nil.
	canApplyPlans func(cdi bool) error
	// nriChanged returns a channel closed when canApplyPlans may have changed (nil: never).
	nriChanged func() <-chan struct{}

	mu sync.Mutex
	// starting counts the containers PreStartContainer let the kubelet create whose plan the NRI
	// plugin has not applied yet (Drain); started is closed and replaced at each application.
	starting int
	started  chan struct{}
}

// newPreStartGate is the gate over its parties given at New; the NRI plugin's connection joins
// later (preStartGate).
func newPreStartGate(clk clock.Clock, wait time.Duration, nriSocket string, cdi bool) *preStartGate {
	return &preStartGate{clock: clk, wait: wait, nriSocket: nriSocket, cdi: cdi, started: make(chan struct{})}
}

// GetDevicePluginOptions implements the kubelet API. PreStartRequired makes the kubelet call
// PreStartContainer before it creates each container that holds the plugin's devices, every time
// it creates one (restarts included), and refuse to create it while the plugin is not registered:
// its endpoint is stopped when the plugin's connection ends and missing after a kubelet restart
// (k8s.io/kubernetes pkg/kubelet/cm/devicemanager, callPreStartContainerIfNeeded). So a GPU
// container is never created while the node agent, and with it the NRI plugin that applies the
// container's plan, is away: its absence is what fails the creation, which the kubelet retries
// (CreateContainerConfigError in `kubectl describe pod`). GetPreferredAllocation is not needed:
// the slices the kubelet picks name no GPU of the pod's.
// The kubelet takes the options from the registration (RegisterRequest.Options), so both use
// pluginOptions.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return pluginOptions(), nil
}

// pluginOptions are the options the plugin registers with and GetDevicePluginOptions returns.
func pluginOptions() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{PreStartRequired: true}
}

// PreStartContainer implements the kubelet API, called before each creation of a container that
// holds the plugin's devices (GetDevicePluginOptions). It returns once the node agent's NRI
// plugin can apply the container's plan at its creation (nri.Plugin.CanApplyPlans), waiting up
// to cfg.PlanWait for it (woken by the NRI connection's changes), and otherwise refuses with the
// reason (FailedPrecondition): the kubelet then does not create the container, shows the reason
// as the container's CreateContainerConfigError and retries. The device IDs are checked as in
// Allocate.
func (p *Plugin) PreStartContainer(ctx context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	if err := p.checkIDs(r.DevicesIds); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "hami-go: PreStartContainer: %v", err)
	}
	g := p.preStartGate
	if why := g.waitPlansApplicable(ctx); why != nil {
		err := fmt.Errorf("%v (NRI socket %s), so the container's GPU plan could not be applied at its creation; "+
			"the container is not created until the node agent's NRI plugin is connected (the kubelet retries)", why, g.nriSocket)
		klog.ErrorS(err, "PreStartContainer refused", "deviceIDs", r.DevicesIds)
		return nil, status.Errorf(codes.FailedPrecondition, "hami-go: %v", err)
	}
	klog.V(4).InfoS("PreStartContainer: the NRI plugin can apply the plan", "deviceIDs", r.DevicesIds)
	g.mu.Lock()
	g.starting++
	g.mu.Unlock()
	return &pluginapi.PreStartContainerResponse{}, nil
}

// PlanCreated notes that the runtime created a container with the plan the NRI plugin gave it
// (nri.Plugin.OnPlanCreated; Drain).
func (p *Plugin) PlanCreated(nri.Container) {
	g := p.preStartGate
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.starting > 0 {
		g.starting--
	}
	close(g.started)
	g.started = make(chan struct{})
}

// Drain waits, after the plugin stopped serving the kubelet (Serve returned: no new
// PreStartContainer can succeed), until the runtime has created every container
// PreStartContainer let the kubelet create with the plan the NRI plugin gave it (PlanCreated, at
// NRI's PostCreateContainer), or up to cfg.PlanWait (a creation the runtime refused for another
// reason never comes), and returns how many it did not see. The agent keeps its NRI plugin
// connected until then: a container the kubelet creates right after PreStartContainer must not
// find the plugin gone, nor lose the plan because the connection closed before the runtime read
// it (a graceful restart or rolling update of the agent; after a crash the NRI plugin's
// Synchronize finds such a container and stops it).
func (p *Plugin) Drain() int {
	g := p.preStartGate
	timeout := g.clock.After(g.wait)
	for {
		g.mu.Lock()
		n, started := g.starting, g.started
		g.mu.Unlock()
		if n == 0 {
			return 0
		}
		select {
		case <-started:
		case <-timeout:
			return n
		}
	}
}

// plansBlocked says why the NRI plugin cannot apply a pending answer's plan now
// (nri.Plugin.CanApplyPlans), or nil.
func (g *preStartGate) plansBlocked() error {
	if g.canApplyPlans == nil {
		return fmt.Errorf("the device plugin runs no NRI plugin")
	}
	return g.canApplyPlans(g.cdi)
}

// waitPlansApplicable waits, up to cfg.PlanWait, until the NRI plugin can apply plans (a plugin
// the runtime closed, after a call timed out or a runtime restart, reconnects within
// nri.DefaultRetry), and returns why it cannot, or nil.
func (g *preStartGate) waitPlansApplicable(ctx context.Context) error {
	var timeout <-chan time.Time
	for {
		var changed <-chan struct{}
		if g.nriChanged != nil {
			changed = g.nriChanged()
		}
		err := g.plansBlocked()
		if err == nil || changed == nil || g.wait <= 0 {
			return err
		}
		if timeout == nil {
			timeout = g.clock.After(g.wait)
		}
		select {
		case <-changed:
		case <-timeout:
			if err := g.plansBlocked(); err != nil {
				return fmt.Errorf("%w (waited %s)", err, g.wait)
			}
			return nil
		case <-ctx.Done():
			return fmt.Errorf("%v: %w", err, ctx.Err())
		}
	}
}

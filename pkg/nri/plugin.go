package nri

// This file is the plugin over NRI: its connection to the runtime, the NRI stub's callbacks
// (CreateContainer, StartContainer, Configure, Synchronize, PostCreateContainer) and Run; what
// a container gets is Decide's (decide.go).

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/containerd/nri/pkg/stub"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// PluginName and PluginIndex register the plugin with the runtime's NRI ("90-hami-go" in the
// runtime's log). NRI sends every plugin the same container and merges their
// adjustments (a second plugin changing the same env name is an error there), so the index
// only orders the calls.
const (
	PluginName  = "hami-go"
	PluginIndex = "90"
	// DefaultSocket is NRI's default socket, /var/run/nri/nri.sock (containerd 2.x, CRI-O).
	DefaultSocket = api.DefaultSocketPath
	// DefaultRetry is how often the node agents' NRI plugin tries to (re)connect to the socket: a
	// restarted runtime gets it back within a second (a GPU container's creation waits for it,
	// deviceplugin --plan-wait), at the cost of one failed dial a second while the socket is not
	// there.
	DefaultRetry = time.Second
)

// MarkerEnv is set by hami-go in every container it gives GPUs, in both modes (the plan this
// plugin applies, the DRA driver's CDI spec: pkg/gpuenv.EnvGPUUUIDs); the device plugin's pending
// answer sets it empty. A container that carries it but for which the Source reports no GPUs is
// refused, never emptied: emptying hami-go's limits would widen a slice (fail closed).
const MarkerEnv = device.EnvGPUUUIDs

// Plugin is the node agents' NRI plugin. At CreateContainer it has two duties:
//   - apply a pod's plan (device-plugin mode): a container carrying the pending answer gets the
//     env and CDI devices of its pod's own plan (Source.Plan);
//   - check protected env (both modes, case C37): any container's protected names
//     (device.IsProtectedEnv) are pinned with PlanEnv to what hami-go gave it (Source.Granted),
//     and the container is refused when a value hami-go did not give would reach the process.
//
// A container whose env holds no protected name is let through without asking the Source, so
// pods without GPUs and without such env never depend on hami-go. Pods in an exempt namespace
// are let through unchanged, but for a pending plan, which is applied unchecked: the namespaces
// the webhook does not see either (hami-go's own, whose MPS control daemon and NVML-mode agents
// set NVIDIA_VISIBLE_DEVICES=all, and kube-system); namespaces are the cluster admin's, unlike
// pod labels.
type Plugin struct {
	src    Source
	exempt map[string]bool
	// answers is set (Configure) when the runtime keeps a repeated env name as two entries, which
	// the single-marker rule of answerPending relies on.
	answers atomic.Bool
	// cdi is set (Configure) when the runtime injects the CDI devices an adjustment names
	// (containerd >= 2.1, NRI-native CDI injection).
	cdi atomic.Bool
	// runtimeInfo is [name, version] as Configure reported them (Runtime, messages).
	runtimeInfo atomic.Value
	// connected is true while the plugin is registered with the runtime: only then does the
	// runtime ask it at CreateContainer.
	connected atomic.Bool
	mu        sync.Mutex
	changed   chan struct{} // closed and replaced whenever connected flips (Changed)
	// unplanned is told of running containers created without their plan (OnUnplanned).
	unplanned func(context.Context, Container)
	// planCreated is told of each container the runtime created with its plan (OnPlanCreated).
	planCreated func(Container)
}

// Changed returns a channel closed at the next change of the plugin's connection to the runtime
// (and so of CanApplyPlans).
func (g *Plugin) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

func (g *Plugin) setConnected(v bool) {
	g.connected.Store(v)
	g.mu.Lock()
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}

// CanApplyPlans says why the plugin cannot apply a pending plan
// now, or nil: the plugin must be connected, the runtime must keep every entry of a repeated env
// name in order (containerd >= 2.0: the single empty marker is then hami-go's own), and, when
// the plan names CDI devices (cdi), inject the CDI devices an NRI adjustment names (containerd
// >= 2.1). The device plugin answers Allocate with a pending answer only when it is nil.
func (g *Plugin) CanApplyPlans(cdi bool) error {
	name, version, _ := g.Runtime()
	rt := strings.TrimSpace(name + " " + version)
	switch {
	case !g.connected.Load():
		return fmt.Errorf("the NRI plugin is not connected to the runtime")
	case !g.answers.Load():
		return fmt.Errorf("the runtime (%s) is not containerd >= 2.0, whose env keeps every entry in order", rt)
	case cdi && !g.cdi.Load():
		return fmt.Errorf("the runtime (%s) is not containerd >= 2.1, which injects the CDI devices an NRI adjustment names", rt)
	}
	return nil
}

// Runtime returns the runtime's name and version as its last Configure reported them
// ("containerd", "v2.4.2"; both "" before the first connection) and whether the plugin is
// connected now: what the node's preflight (pkg/preflight) checks.
func (g *Plugin) Runtime() (name, version string, connected bool) {
	info, _ := g.runtimeInfo.Load().([2]string)
	return info[0], info[1], g.connected.Load()
}

// NewPlugin returns a plugin over src that lets pods in the exempt namespaces through.
func NewPlugin(src Source, exempt ...string) *Plugin {
	g := &Plugin{src: src, exempt: map[string]bool{}, changed: make(chan struct{})}
	for _, ns := range exempt {
		g.exempt[ns] = true
	}
	return g
}

// CreateContainer implements the NRI stub's CreateContainerInterface: Decide's changes become
// env adjustments, and its error refuses the container (containerd returns it from CRI
// CreateContainer; the kubelet shows it as the container's waiting reason and a Failed Event).
func (g *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	c := containerOf(pod, ctr)
	c.Creating = true
	d, err := g.Decide(ctx, c, ctr.GetEnv())
	if err != nil {
		klog.InfoS("Refusing container (protected env)", "pod", klog.KRef(c.PodNamespace, c.PodName), "podUID", c.PodUID, "container", c.Name, "err", err)
		return nil, nil, err
	}
	if len(d.Env) == 0 && len(d.CDIDevices) == 0 && len(d.Mounts) == 0 {
		return nil, nil, nil
	}
	adj := &api.ContainerAdjustment{}
	for _, ch := range d.Env {
		adj.AddEnv(ch.Name, ch.Value)
	}
	for _, name := range d.CDIDevices {
		adj.AddCDIDevice(&api.CDIDevice{Name: name})
	}
	for _, m := range d.Mounts {
		adj.AddMount(&api.Mount{Destination: m.Destination, Source: m.Source, Type: "bind", Options: m.options()})
	}
	klog.V(4).InfoS("Pinning protected env", "pod", klog.KRef(c.PodNamespace, c.PodName), "container", c.Name, "changes", len(d.Env), "cdiDevices", len(d.CDIDevices))
	return adj, nil, nil
}

// StartContainer implements the NRI stub's StartContainerInterface: a container whose env still
// carries the device plugin's pending answer (answerPending) was created without its plan (the
// NRI call timed out, or the plugin was away at its creation and is back now), so it is refused
// here, before its process runs (case C52). The runtime returns the error from CRI StartContainer
// (NRI v0.12.3 pkg/adaptation StartContainer stops at a plugin's error; containerd's CRI
// StartContainer fails with "NRI container start failed"), the kubelet shows it as the
// container's RunContainerError and a Failed Event, and the next creation of the container gets
// its plan. A container that got its plan carries the marker with its GPUs, not empty.
func (g *Plugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if !g.answerPending(ctr.GetEnv()) {
		return nil
	}
	c := containerOf(pod, ctr)
	err := fmt.Errorf("hami-go: container %s of pod %s/%s (UID %s) was created without its GPU plan (%s is still the device plugin's empty pending answer: "+
		"hami-go's NRI plugin was away or timed out at its creation); refusing to start it, the kubelet creates it again with its plan",
		c.Name, c.PodNamespace, c.PodName, c.PodUID, MarkerEnv)
	klog.InfoS("Refusing to start a container created without its GPU plan", "pod", klog.KRef(c.PodNamespace, c.PodName), "podUID", c.PodUID, "container", c.Name)
	return err
}

// Configure implements the NRI stub's ConfigureInterface (the events stay those the plugin
// handles): it notes whether the runtime keeps every entry of a repeated env name in the order
// the CRI env gives them, image ENV first (containerd >= 2.0, measured on 2.4.2:
// docs/components.md), which answerPending relies on, and whether
// it injects the CDI devices an adjustment names (containerd >= 2.1; CanApplyPlans).
func (g *Plugin) Configure(_ context.Context, _, runtime, version string) (api.EventMask, error) {
	major, rest, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ := strings.Cut(rest, ".")
	n, err := strconv.Atoi(major)
	m, merr := strconv.Atoi(minor)
	containerd2 := runtime == "containerd" && err == nil && n >= 2
	g.answers.Store(containerd2)
	g.cdi.Store(containerd2 && (n > 2 || merr == nil && m >= 1))
	g.runtimeInfo.Store([2]string{runtime, version})
	klog.V(2).InfoS("NRI runtime", "runtime", runtime, "version", version, "answersFromEnv", g.answers.Load(), "cdiInjection", g.cdi.Load())
	return 0, nil
}

// Synchronize implements the NRI stub's SynchronizeInterface: when the plugin (re)connects, the
// runtime lists the containers it already has. The plugin counts as connected from here
// (CanApplyPlans), not from the stub's Start, which returns after Configure: the runtime sends
// a plugin container events only once its Synchronize has returned (NRI v0.12.3
// pkg/adaptation acceptPluginConnections), and holds container creations while a plugin
// synchronizes, so a container PreStartContainer lets through now meets the plugin. A running container whose env still carries the
// device plugin's pending answer (answerPending) was created while the plugin was away:
// its plan was never applied, so it runs with no GPU limit (and, where the image names GPUs and
// the NVIDIA runtime honours it, with GPUs no plan gave it). It is handed to the Unplanned
// handler (the device plugin stops it, so that its controller makes a new one that gets its
// plan) and never claims its plan here. Every other running container is checked as at its
// creation. A running container cannot be refused or adjusted any more, so this runs after
// Synchronize returns (the runtime bounds the call's time); what Decide would have refused is
// logged as an error.
func (g *Plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, p := range pods {
		byID[p.GetId()] = p
	}
	type check struct {
		c   Container
		env []string
	}
	var checks []check
	for _, ctr := range ctrs {
		if ctr.GetState() != api.ContainerState_CONTAINER_STOPPED {
			checks = append(checks, check{containerOf(byID[ctr.GetPodSandboxId()], ctr), ctr.GetEnv()})
		}
	}
	g.setConnected(true)
	ctx = context.WithoutCancel(ctx)
	go func() {
		for _, ch := range checks {
			if g.answerPending(ch.env) {
				klog.ErrorS(nil, "A running container carries the pending answer: it was created without its GPU plan",
					"pod", klog.KRef(ch.c.PodNamespace, ch.c.PodName), "podUID", ch.c.PodUID, "container", ch.c.Name)
				if g.unplanned != nil {
					g.unplanned(ctx, ch.c)
				}
				continue
			}
			if _, err := g.Decide(ctx, ch.c, ch.env); err != nil {
				klog.ErrorS(err, "A running container fails the NRI plugin's check", "pod", klog.KRef(ch.c.PodNamespace, ch.c.PodName), "podUID", ch.c.PodUID, "container", ch.c.Name)
			}
		}
	}()
	return nil, nil
}

// OnUnplanned sets the handler Synchronize calls for each running container created without its
// plan (its env still carries the pending answer); nil: only logged. Set it before Run.
func (g *Plugin) OnUnplanned(f func(context.Context, Container)) { g.unplanned = f }

// OnPlanCreated sets the handler told of each container the runtime created with its plan
// (PostCreateContainer); nil: none. Set it before Run.
func (g *Plugin) OnPlanCreated(f func(Container)) { g.planCreated = f }

// PostCreateContainer implements the NRI stub's PostCreateContainerInterface: the runtime has
// created the container with the plugin's adjustment. A container that carries a plan (MarkerEnv
// set and not empty: at creation only a plan sets it, and a container carrying another value is
// refused at CreateContainer) is handed to the OnPlanCreated handler. This, not the plan's
// computation in CreateContainer, is when a plan is applied: a plugin whose connection closes
// before the runtime has read its answer is dropped and the container created unadjusted (NRI
// v0.12.3 pkg/adaptation plugin.createContainer: a fatal error closes the plugin and the
// creation goes on), so the device plugin's Drain waits for this event before the agent closes
// the connection.
func (g *Plugin) PostCreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if g.planCreated != nil && carriesPlan(ctr.GetEnv()) {
		g.planCreated(containerOf(pod, ctr))
	}
	return nil
}

// carriesPlan reports whether env sets MarkerEnv to a value that is not empty.
func carriesPlan(env []string) bool {
	for _, e := range env {
		if name, value, _ := strings.Cut(e, "="); name == MarkerEnv && value != "" {
			return true
		}
	}
	return false
}

// containerOf names ctr of pod (nil: unknown) as Decide takes it.
func containerOf(pod *api.PodSandbox, ctr *api.Container) Container {
	c := Container{Name: ctr.GetName(), ID: ctr.GetId()}
	if pod != nil {
		c.PodUID, c.PodNamespace, c.PodName = pod.GetUid(), pod.GetNamespace(), pod.GetName()
	}
	for _, d := range ctr.GetCDIDevices() {
		c.CDIDevices = append(c.CDIDevices, d.GetName())
	}
	return c
}

// Run connects g to the runtime's NRI socket and serves it until ctx ends, reconnecting every
// retry after the connection fails or closes (the runtime restarted, or the socket is not there
// yet). While the plugin is not connected the runtime creates containers without it: the plugin
// closes the hole only while it runs.
//
// A connection that lasted at least retry is made again at once when it closes (the runtime
// restarted, or closed the plugin after a call timed out), so the window in which containers are
// created without the plugin is as short as reconnecting; one that closed sooner waits retry.
func Run(ctx context.Context, socket string, g *Plugin, retry time.Duration) {
	failed := false
	for ctx.Err() == nil {
		start := time.Now()
		connected, err := serveOnce(ctx, socket, g)
		if ctx.Err() != nil {
			return
		}
		wait := retry
		if connected && time.Since(start) >= retry {
			wait = 0
		}
		if connected || !failed {
			klog.ErrorS(err, "NRI plugin not connected; retrying", "socket", socket, "retry", wait)
		} else {
			klog.V(4).InfoS("NRI plugin still not connected", "socket", socket, "err", err)
		}
		failed = !connected
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// serveOnce registers g with the runtime at socket and serves until the connection closes
// (an error saying so) or ctx ends (nil); connected says whether it registered.
func serveOnce(ctx context.Context, socket string, g *Plugin) (connected bool, err error) {
	closed := make(chan struct{})
	var once sync.Once
	s, err := stub.New(g, stub.WithPluginName(PluginName), stub.WithPluginIdx(PluginIndex),
		stub.WithSocketPath(socket), stub.WithLogger(klogLogger{}),
		stub.WithOnClose(func() { once.Do(func() { close(closed) }) }))
	if err != nil {
		return false, err
	}
	if err := s.Start(ctx); err != nil {
		s.Stop()
		return false, err
	}
	// Connected once the runtime synchronizes the plugin (Synchronize), not yet here.
	klog.InfoS("NRI plugin registered", "socket", socket, "plugin", PluginIndex+"-"+PluginName)
	defer g.setConnected(false)
	select {
	case <-closed:
		s.Stop()
		return true, fmt.Errorf("the runtime closed the NRI connection on %s", socket)
	case <-ctx.Done():
		s.Stop()
		return true, nil
	}
}

// klogLogger routes the NRI stub's log through klog.
type klogLogger struct{}

var _ nrilog.Logger = klogLogger{}

func (klogLogger) Debugf(_ context.Context, f string, a ...any) { klog.V(5).Infof("nri: "+f, a...) }
func (klogLogger) Infof(_ context.Context, f string, a ...any)  { klog.V(2).Infof("nri: "+f, a...) }
func (klogLogger) Warnf(_ context.Context, f string, a ...any)  { klog.Warningf("nri: "+f, a...) }
func (klogLogger) Errorf(_ context.Context, f string, a ...any) { klog.Errorf("nri: "+f, a...) }

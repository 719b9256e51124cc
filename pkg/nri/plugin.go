package nri

import (
	"context"
	"fmt"
	"slices"
	"sort"
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

// Container names the container the runtime is creating, as NRI delivers it.
type Container struct {
	// PodUID, PodNamespace and PodName are the pod's (Kubernetes UID, namespace, name).
	PodUID, PodNamespace, PodName string
	// Name is the container's name in the pod spec.
	Name string
	// ID is the runtime's container ID ("" = unknown): what /proc/<pid>/cgroup names, for
	// mapping GPU processes to containers (per-slice memory use).
	ID string
	// CDIDevices are the fully qualified CDI device names the kubelet asked for
	// ("vendor/class=name"), e.g. a DRA claim's.
	CDIDevices []string
	// Creating is true at CreateContainer, where the container has not started yet (a Source
	// may prepare host state for it, e.g. a fresh HAMi-core cache file: case C56), and false
	// for a running container Synchronize checks.
	Creating bool
}

func (c Container) String() string { return c.PodNamespace + "/" + c.PodName + "/" + c.Name }

// Plan is what the NRI plugin sets in a container whose plan the device plugin left to it (the
// pending answer: docs/design.md "Applying a pod's plan").
type Plan struct {
	// Env is the env the plan gives the container (pkg/gpuenv); empty: the container has no plan.
	Env map[string]string
	// CDIDevices are the fully qualified CDI device names the plugin adds ("vendor/class=name";
	// the device plugin's cdi strategy).
	CDIDevices []string
	// Mounts are the bind mounts the plugin adds: the enforcement's library and its preload file
	// (read-only), the mask of HAMi-core's /overrideEnv, the container's own directory for
	// HAMi-core's shared cache (read-write; the Source created it on the host). They are decided
	// here, at the container's creation, from what the host has then: a mount the kubelet cached
	// from Allocate would outlive the library it names (issue 36 item 4). A mount replaces one
	// the container already has at the same destination (NRI v0.12.3
	// pkg/runtime-tools/generate AdjustMounts removes it first).
	Mounts []Mount
	// DriverCapabilities are the NVIDIA driver capabilities the container's
	// NVIDIA_DRIVER_CAPABILITIES must include (gpuenv.Edits.DriverCapabilities; "" = none):
	// the plugin adds what it lacks (DriverCapabilitiesChange).
	DriverCapabilities string
	// Answer is the protected env the device plugin's pending answer sets beside the empty
	// MarkerEnv (NVIDIA_VISIBLE_DEVICES=void under the cdi strategy, so that a container created
	// without its plan reaches no GPU through the NVIDIA runtime). A name counts as the answer's
	// only where the container's env holds that exact entry: a kubelet's checkpointed answer from
	// an older device plugin lacks it. Env should set each such name too (the plan's value wins:
	// Decide's adjustment replaces the answer's).
	Answer map[string]string
}

// Mount is a bind mount of host path Source at container path Destination, read-write unless
// ReadOnly.
type Mount struct {
	Source, Destination string
	ReadOnly            bool
}

// options are m's OCI mount options: a recursive bind, "ro" or "rw".
func (m Mount) options() []string {
	if m.ReadOnly {
		return []string{"rbind", "ro"}
	}
	return []string{"rbind", "rw"}
}

// Granted is what hami-go gave a container whose env it checks.
type Granted struct {
	// GPU is true when hami-go gave the container GPUs.
	GPU bool
	// Env is the env hami-go's answer set in the container (the DRA claims' CDI specs; a running
	// container's applied plan); nil when GPU is false.
	Env map[string]string
	// DriverCapabilities are as Plan's: what the container's NVIDIA_DRIVER_CAPABILITIES must
	// include ("" = none).
	DriverCapabilities string
}

// Source is what a node agent knows of the GPUs it gives containers, asked by the NRI plugin's
// two duties. An error means the container has (or may have) GPUs and what hami-go gives it
// cannot be known now; the plugin then refuses the container (fail closed) and the kubelet
// retries it.
type Source interface {
	// Plan is asked for a container whose env carries the device plugin's pending answer (the
	// plugin decides that, answerPending): the container claims its pod's own plan, and the
	// plugin applies it (device-plugin mode). A Source that never gives the pending answer (the
	// DRA driver) returns an error.
	Plan(ctx context.Context, c Container) (Plan, error)
	// Granted is asked for any other container whose env holds a protected name: what hami-go
	// gave it, which the plugin pins the env to (case C37, both modes).
	Granted(ctx context.Context, c Container) (Granted, error)
}

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

// Adjustment is what the plugin changes in one container: its env, and the CDI devices and
// mounts it adds (a pending plan only).
type Adjustment struct {
	Env        []EnvChange
	CDIDevices []string
	Mounts     []Mount
}

// Decide is the plugin's whole decision for one container: the adjustment (zero: none), or an
// error that refuses it (a *RefusedError from PlanEnv, or why what hami-go gave is unknown).
// env is the container's OCI env at CreateContainer (see PlanEnv). A container carrying the
// pending answer gets its plan (Source.Plan), which the plugin applies; any other container with
// protected env is checked against what it was given (Source.Granted).
func (g *Plugin) Decide(ctx context.Context, c Container, env []string) (adj Adjustment, err error) {
	protected, marked := false, false
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		protected = protected || device.IsProtectedEnv(name)
		marked = marked || name == MarkerEnv
	}
	pending := g.answerPending(env)
	exempt := g.exempt[c.PodNamespace]
	if exempt && !pending {
		return Adjustment{}, nil
	}
	if !protected {
		return legacyVoid(Adjustment{}, env), nil
	}
	defer func() {
		if r := recover(); r != nil {
			adj = Adjustment{}
			err = fmt.Errorf("hami-go: internal error while checking the container's env: %v", r)
		}
	}()
	unknown := func(err error) error {
		return fmt.Errorf("hami-go: cannot tell which GPUs container %s was given, so its env cannot be checked (the kubelet retries): %w", c, err)
	}
	noGPU := func() error {
		return fmt.Errorf("hami-go: container %s carries %s but hami-go has no GPU allocation for it (the kubelet retries; "+
			"an image or envFrom may not set %s)", c, MarkerEnv, MarkerEnv)
	}
	if pending {
		p, err := g.src.Plan(ctx, c)
		switch {
		case err != nil:
			return Adjustment{}, unknown(err)
		case len(p.Env) == 0:
			return Adjustment{}, noGPU()
		case exempt:
			// The env of an exempt namespace's pods is not checked, but the plan is still
			// applied: without it the container would get no GPU.
			for n, v := range p.Env {
				adj.Env = append(adj.Env, EnvChange{Name: n, Value: v})
			}
			adj.CDIDevices, adj.Mounts = p.CDIDevices, p.Mounts
			return withDriverCapabilities(adj, env, p.DriverCapabilities)
		}
		changes, err := PlanEnv(env, pendingAnswer(env, p.Answer), p.Env)
		if err != nil {
			return Adjustment{}, err
		}
		return withDriverCapabilities(Adjustment{Env: changes, CDIDevices: p.CDIDevices, Mounts: p.Mounts}, env, p.DriverCapabilities)
	}
	a, err := g.src.Granted(ctx, c)
	if err != nil {
		return Adjustment{}, unknown(err)
	}
	if !a.GPU && marked {
		return Adjustment{}, noGPU()
	}
	var want map[string]string
	if a.GPU {
		want = a.Env
	}
	changes, err := PlanEnv(env, want, want)
	if err != nil {
		return Adjustment{}, err
	}
	adj = Adjustment{Env: changes}
	if !a.GPU {
		adj = legacyVoid(adj, env)
	}
	return withDriverCapabilities(adj, env, a.DriverCapabilities)
}

// pendingAnswer is the protected env the pending answer put in env: the empty MarkerEnv, and
// each entry of answer (Plan.Answer) that env holds exactly.
func pendingAnswer(env []string, answer map[string]string) map[string]string {
	out := map[string]string{MarkerEnv: ""}
	for n, v := range answer {
		if slices.Contains(env, n+"="+v) {
			out[n] = v
		}
	}
	return out
}

// Env names of the NVIDIA Container Toolkit's legacy-image rule (nvidia-container-toolkit
// v1.20.2 internal/config/image cuda_image.go: IsLegacy, VisibleDevicesFromEnvVar).
const (
	envCUDAVersion         = "CUDA_VERSION"
	envNVIDIARequireCUDA   = "NVIDIA_REQUIRE_CUDA"
	envNVIDIAVisibleDevice = "NVIDIA_VISIBLE_DEVICES"
	// VoidDevices is the NVIDIA_VISIBLE_DEVICES value with which the toolkit gives a container
	// no GPU (and which its own CDI specs set).
	VoidDevices = "void"
)

// legacyVoid adds NVIDIA_VISIBLE_DEVICES=void to adj, the adjustment of a container hami-go gave
// no GPU, when the toolkit would otherwise give it every GPU of the node (case C51): its env
// (image ENV included) sets CUDA_VERSION, no NVIDIA_REQUIRE_CUDA (the toolkit's "legacy" CUDA
// image) and no NVIDIA_VISIBLE_DEVICES at all; the toolkit then defaults to "all". It only
// narrows: a container that names NVIDIA_VISIBLE_DEVICES itself, in any form, is left to the
// env rules (PlanEnv), and a name absent from env is one an adjustment simply adds.
func legacyVoid(adj Adjustment, env []string) Adjustment {
	cuda, require, visible := "", "", false
	for _, e := range env {
		name, value, _ := strings.Cut(e, "=")
		switch name {
		case envCUDAVersion:
			cuda = value
		case envNVIDIARequireCUDA:
			require = value
		case envNVIDIAVisibleDevice:
			visible = true
		}
	}
	if cuda != "" && require == "" && !visible {
		adj.Env = append(adj.Env, EnvChange{Name: envNVIDIAVisibleDevice, Value: VoidDevices})
		sort.Slice(adj.Env, func(i, j int) bool { return adj.Env[i].Name < adj.Env[j].Name })
	}
	return adj
}

// withDriverCapabilities adds to adj the change that gives the container the driver
// capabilities it needs (DriverCapabilitiesChange), or refuses it, and sorts adj's env changes
// by name.
func withDriverCapabilities(adj Adjustment, env []string, need string) (Adjustment, error) {
	ch, err := DriverCapabilitiesChange(env, need)
	if err != nil {
		return Adjustment{}, err
	}
	if ch != nil {
		adj.Env = append(adj.Env, *ch)
	}
	sort.Slice(adj.Env, func(i, j int) bool { return adj.Env[i].Name < adj.Env[j].Name })
	return adj, nil
}

// answerPending is the one place that decides whether env carries the device plugin's pending
// answer, which leaves the container's plan to this plugin: MarkerEnv exactly once, empty, on a
// runtime that keeps a repeated env name as two entries (containerd >= 2.0, Configure). hami-go
// sets the marker in every container it gives GPUs, so a second writer (image ENV, the pod's env
// or envFrom) makes a second entry, and the container is then checked against what it was
// granted (refused when nothing). On runtimes where a later value replaces an earlier one
// (containerd 1.x, CRI-O) an envFrom value could stand alone, so it is never pending there.
func (g *Plugin) answerPending(env []string) bool {
	markers, empty := 0, false
	for _, e := range env {
		if name, value, _ := strings.Cut(e, "="); name == MarkerEnv {
			markers++
			empty = value == ""
		}
	}
	return markers == 1 && empty && g.answers.Load()
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

package nri

// This file is the plugin's decision for one container (Decide): the adjustment it gets or the
// refusal, from its env and what the Source says; no NRI types.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/hami-go/hami-go/pkg/device"
)

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
			return Adjustment{}, fmt.Errorf("hami-go: cannot apply container %s's GPU plan (the kubelet retries): %w", c, err)
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

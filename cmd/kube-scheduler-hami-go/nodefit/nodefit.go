// Package nodefit is kube-scheduler's NodeResourcesFit with its extended-resource check decided
// once per pod instead of once per node: the plugin "HamiGoNodeResourcesFit" that the chart's
// plugin profile (scheduler.placement=plugin) runs in place of NodeResourcesFit.
//
// Why: NodeResourcesFit's Filter (k8s.io/kubernetes pkg/scheduler/framework/plugins/noderesources,
// fitsRequest) validates every scalar resource name of the pod with v1helper.IsExtendedResourceName,
// a regular expression (validation.IsQualifiedName), on every node, before it looks at
// ignoredResources. A sliced GPU pod carries three or four extended names (nvidia.com/gpu,
// nvidia.com/gpumem, hami-go.io/gpu-memory, ...), so on 1,000 nodes that is 3,000 to 4,000
// regular-expression matches per pod: 2.2 ms of CPU per pod in this project's measurement
// (docs/bench/cpu.md), more than all of hami-go's own placement work.
//
// What: PreFilter classifies the pod's extended resources once (the same rules: a name that is
// not native, not "requests."-prefixed and a qualified name; ignoredResources and
// ignoredResourceGroups skipped) and hands the upstream plugin the pod without them; Filter runs
// the upstream Filter and then checks the pod's extended requests against the node with the
// upstream arithmetic (requested + pod > allocatable: "Insufficient <name>", unresolvable when
// the pod alone exceeds allocatable; a name the node does not advertise is left to DRA where
// DRAExtendedResource maps it to a DeviceClass, as upstream's shouldDelegateResourceToDRA). Every
// other extension point (PreScore, Score, queueing hints, pod signing) is the upstream plugin's,
// over the pod as written. A pod already bound to a node (in-place resize, where upstream adjusts
// the request by the cached pod) goes to the upstream plugin unchanged.
package nodefit

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-helpers/resource"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// Name is the plugin's name in a KubeSchedulerConfiguration profile. Its args are
// NodeResourcesFitArgs (kubescheduler.config.k8s.io/v1), defaulted as upstream's.
const Name = "HamiGoNodeResourcesFit"

// stateKey is the key of the pod's extended requests in its CycleState.
const stateKey fwk.StateKey = Name + "/extended"

// Plugin is upstream's *noderesources.Fit, whose methods it promotes (so the framework finds the
// same extension points and queueing hints), with PreFilter and Filter as the package doc says.
type Plugin struct {
	*noderesources.Fit
	ignored, ignoredGroups sets.Set[string]
	podLevelResources      bool
	// draManager is set where DRAExtendedResource is on: a node that does not advertise an
	// extended resource leaves it to DRA when a DeviceClass maps it.
	draManager fwk.SharedDRAManager
}

var (
	_ fwk.PreFilterPlugin   = (*Plugin)(nil)
	_ fwk.FilterPlugin      = (*Plugin)(nil)
	_ fwk.PreScorePlugin    = (*Plugin)(nil)
	_ fwk.ScorePlugin       = (*Plugin)(nil)
	_ fwk.EnqueueExtensions = (*Plugin)(nil)
)

// Factory is the plugin's factory as kube-scheduler's registry takes it: New with the
// scheduler features of the process's feature gates, read when the profile is built (after
// --feature-gates was applied), as the in-tree registry reads them.
func Factory(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	return New(ctx, obj, h, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
}

// New builds the plugin: args (nil, or NodeResourcesFitArgs as *runtime.Unknown) decoded and
// defaulted as kube-scheduler does for NodeResourcesFit, then upstream's noderesources.NewFit.
// Errors: args that do not decode or do not validate (upstream's messages, naming the field).
func New(ctx context.Context, obj runtime.Object, h fwk.Handle, fts feature.Features) (fwk.Plugin, error) {
	args, err := argsFrom(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	inner, err := noderesources.NewFit(ctx, args, h, fts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	p := &Plugin{
		Fit:               inner.(*noderesources.Fit),
		ignored:           sets.New(args.IgnoredResources...),
		ignoredGroups:     sets.New(args.IgnoredResourceGroups...),
		podLevelResources: fts.EnablePodLevelResources,
	}
	if fts.EnableDRAExtendedResource {
		p.draManager = h.SharedDRAManager()
	}
	return p, nil
}

// argsFrom decodes NodeResourcesFitArgs from obj (nil: all defaults), applies the v1 defaults
// and converts them to the internal type upstream's NewFit takes.
func argsFrom(obj runtime.Object) (*config.NodeResourcesFitArgs, error) {
	var in configv1.NodeResourcesFitArgs
	if obj != nil {
		if err := frameworkruntime.DecodeInto(obj, &in); err != nil {
			return nil, fmt.Errorf("args: %w", err)
		}
	}
	scheme.Scheme.Default(&in)
	out := &config.NodeResourcesFitArgs{}
	if err := scheme.Scheme.Convert(&in, out, nil); err != nil {
		return nil, fmt.Errorf("args: %w", err)
	}
	return out, nil
}

// Name returns Name.
func (p *Plugin) Name() string { return Name }

// request is one extended resource the pod asks for (its PodRequests quantity, > 0).
type request struct {
	name v1.ResourceName
	qty  int64
}

// extendedState is the pod's extended requests that Filter checks itself. Read only.
type extendedState struct{ reqs []request }

// Clone returns s: it is never modified after PreFilter.
func (s *extendedState) Clone() fwk.StateData { return s }

// PreFilter runs upstream's PreFilter over the pod without its extended resources and keeps
// those that are not ignored for Filter. A pod already bound to a node, or one with no extended
// resource, goes to upstream unchanged (and Filter then checks nothing more).
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if pod.Spec.NodeName == "" {
		if stripped, reqs, ok := p.split(pod); ok {
			state.Write(stateKey, &extendedState{reqs: reqs})
			return p.Fit.PreFilter(ctx, state, stripped, nodes)
		}
	}
	return p.Fit.PreFilter(ctx, state, pod, nodes)
}

// split returns a copy of pod whose containers, init containers and overhead hold no extended
// resource, and the pod's requests of those not ignored; ok is false where the pod has no
// extended resource (nothing to take over).
func (p *Plugin) split(pod *v1.Pod) (stripped *v1.Pod, reqs []request, ok bool) {
	total := resource.PodRequests(pod, resource.PodResourcesOptions{SkipPodLevelResources: !p.podLevelResources})
	extended := map[v1.ResourceName]bool{}
	for name, q := range total {
		if !v1helper.IsExtendedResourceName(name) {
			continue
		}
		extended[name] = true
		if v := q.Value(); v > 0 && !p.isIgnored(name) {
			reqs = append(reqs, request{name: name, qty: v})
		}
	}
	if len(extended) == 0 {
		return nil, nil, false
	}
	cp := *pod
	cp.Spec.Containers = withoutResources(pod.Spec.Containers, extended)
	cp.Spec.InitContainers = withoutResources(pod.Spec.InitContainers, extended)
	cp.Spec.Overhead = without(pod.Spec.Overhead, extended)
	return &cp, reqs, true
}

// isIgnored reports whether upstream skips the extended resource name: listed in
// ignoredResources, or its prefix (before "/") in ignoredResourceGroups.
func (p *Plugin) isIgnored(name v1.ResourceName) bool {
	if p.ignored.Has(string(name)) {
		return true
	}
	group, _, _ := strings.Cut(string(name), "/")
	return p.ignoredGroups.Has(group)
}

// withoutResources copies cs with the names in drop removed from each container's requests and
// limits; cs itself is not modified.
func withoutResources(cs []v1.Container, drop map[v1.ResourceName]bool) []v1.Container {
	if len(cs) == 0 {
		return cs
	}
	out := make([]v1.Container, len(cs))
	for i := range cs {
		out[i] = cs[i]
		out[i].Resources.Requests = without(cs[i].Resources.Requests, drop)
		out[i].Resources.Limits = without(cs[i].Resources.Limits, drop)
	}
	return out
}

// without returns l with the names in drop removed: l itself where it holds none of them.
func without(l v1.ResourceList, drop map[v1.ResourceName]bool) v1.ResourceList {
	n := 0
	for name := range l {
		if drop[name] {
			n++
		}
	}
	if n == 0 {
		return l
	}
	out := make(v1.ResourceList, len(l)-n)
	for name, q := range l {
		if !drop[name] {
			out[name] = q
		}
	}
	return out
}

// Filter is upstream's Filter, then the pod's extended requests against the node: each that
// does not fit adds "Insufficient <name>" to the reasons, UnschedulableAndUnresolvable where the
// request exceeds the node's allocatable even empty, Unschedulable otherwise (upstream's rules).
func (p *Plugin) Filter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	st := p.Fit.Filter(ctx, state, pod, nodeInfo)
	d, err := state.Read(stateKey)
	if err != nil {
		return st // upstream saw the whole pod
	}
	s, _ := d.(*extendedState)
	if s == nil || len(s.reqs) == 0 || (st != nil && !st.IsRejected()) {
		return st
	}
	var reasons []string
	code := fwk.Unschedulable
	alloc, used := nodeInfo.GetAllocatable().GetScalarResources(), nodeInfo.GetRequested().GetScalarResources()
	for _, r := range s.reqs {
		a := alloc[r.name]
		if a == 0 && p.delegatedToDRA(r.name) {
			continue
		}
		if r.qty > a-used[r.name] {
			reasons = append(reasons, "Insufficient "+string(r.name))
			if r.qty > a {
				code = fwk.UnschedulableAndUnresolvable
			}
		}
	}
	if len(reasons) == 0 {
		return st
	}
	if st != nil {
		reasons = append(st.Reasons(), reasons...)
		if st.Code() == fwk.UnschedulableAndUnresolvable {
			code = fwk.UnschedulableAndUnresolvable
		}
	}
	return fwk.NewStatus(code, reasons...)
}

// delegatedToDRA reports whether an extended resource the node does not advertise is DRA's: a
// DeviceClass maps it (DRAExtendedResource on; upstream's shouldDelegateResourceToDRA).
func (p *Plugin) delegatedToDRA(name v1.ResourceName) bool {
	return p.draManager != nil && p.draManager.DeviceClassResolver().GetDeviceClass(name) != nil
}

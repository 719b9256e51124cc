package schedplugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/hami-go/hami-go/pkg/device"
)

// PreFilter weighs a GPU pod of ours on every node at once (the extender's Filter over the names
// of nodes) and keeps the verdicts in state for Filter. It answers Skip for every other pod,
// UnschedulableAndUnresolvable naming the error for a GPU request that does not parse, and
// Unschedulable with the extender's refusal (extender.Extender.FilterRefusal: not ready,
// stopping, and with Args.LeaderElectionLease not leading or in a takeover's hold; a pod refused
// for leadership is requeued by the extender when the term opens), retried. It
// never narrows the nodes (nil PreFilterResult): Filter gives each refused node its reason.
func (p *Plugin) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	req, ours, err := p.cache.ParseRequest(pod)
	switch {
	case err != nil:
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "hami-go: "+err.Error())
	case !ours:
		return nil, fwk.NewStatus(fwk.Skip)
	}
	if why := p.ext.FilterRefusal(pod); why != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, why.Error())
	}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if nd := n.Node(); nd != nil {
			names = append(names, nd.Name)
		}
	}
	res := p.sched.Filter(pod, names)
	s := &filterState{req: req, failed: res.FailedNodes, unresolvable: res.FailedAndUnresolvableNodes}
	if res.NodeNames != nil {
		s.fits = make(map[string]struct{}, len(*res.NodeNames))
		for _, n := range *res.NodeNames {
			s.fits[n] = struct{}{}
		}
	}
	state.Write(filterKey, s)
	klog.FromContext(ctx).V(5).Info("hami-go weighed the pod", "pod", klog.KObj(pod), "nodes", len(names), "fit", len(s.fits))
	return nil, nil
}

// PreFilterExtensions returns nil: the verdicts do not follow pods the framework adds or removes
// in a dry run (kube-scheduler's preemption cannot free GPUs through this plugin).
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter answers PreFilter's verdict for the node: Success where the pod fits, Unschedulable
// with the extender's reason where its GPUs are in use, UnschedulableAndUnresolvable where the
// node cannot take it even empty (no inventory, stale, too small). A node PreFilter did not see
// (added since) is Unschedulable and weighed in the next cycle. The framework skips Filter for
// pods PreFilter skipped; without PreFilter's state Filter answers Success.
func (p *Plugin) Filter(_ context.Context, state fwk.CycleState, _ *corev1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s := readFilter(state)
	if s == nil {
		return nil
	}
	n := nodeInfo.Node()
	if n == nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node not found")
	}
	if _, ok := s.fits[n.Name]; ok {
		return nil
	}
	if why, ok := s.unresolvable[n.Name]; ok {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why)
	}
	if why, ok := s.failed[n.Name]; ok {
		return fwk.NewStatus(fwk.Unschedulable, why)
	}
	return fwk.NewStatus(fwk.Unschedulable, "hami-go: node "+n.Name+" was not weighed in this cycle")
}

// PostFilter runs when the pod fits no node after every plugin's Filter: it drops the
// speculative reservation the extender's Filter left on the node it ranked best (another
// plugin refused that node), so that no GPU stays booked while the pod waits. Informational: it
// always answers Unschedulable without a result, so the next PostFilter plugin
// (DefaultPreemption) has its turn.
func (p *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	if readFilter(state) != nil && p.cache.Unreserve(device.RefOf(pod), "") {
		klog.FromContext(ctx).V(4).Info("hami-go dropped the reservation of a pod no node takes", "pod", klog.KObj(pod))
	}
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

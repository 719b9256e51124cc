package schedplugin

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
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
	res, released, at := p.sched.Weigh(pod, names)
	s := &filterState{req: req, prio: podPriority(pod), failed: res.FailedNodes, unresolvable: res.FailedAndUnresolvableNodes, released: released, weighedAt: at}
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

// Filter answers PreFilter's verdict for the node: Success where the pod fits, Unschedulable
// with the extender's reason where its GPUs are in use, UnschedulableAndUnresolvable where the
// node cannot take it even empty (no inventory, stale, too small). Where AddPod or RemovePod
// changed the node's pods in this CycleState (kube-scheduler's preemption dry run, nominated
// pods), the pod is weighed again on the node with the change (filterChanged). A node
// PreFilter did not see (added since) is Unschedulable and weighed in the next cycle. The
// framework skips Filter for pods PreFilter skipped; without PreFilter's state Filter answers
// Success.
func (p *Plugin) Filter(_ context.Context, state fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	s := readFilter(state)
	if s == nil {
		return nil
	}
	n := nodeInfo.Node()
	if n == nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node not found")
	}
	if why, ok := s.unresolvable[n.Name]; ok {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why)
	}
	if ch := s.changes[n.Name]; !ch.Empty() {
		return p.filterChanged(s, pod, n.Name, ch)
	}
	if _, ok := s.fits[n.Name]; ok {
		return nil
	}
	if why, ok := s.failed[n.Name]; ok {
		return fwk.NewStatus(fwk.Unschedulable, why)
	}
	return fwk.NewStatus(fwk.Unschedulable, "hami-go: node "+n.Name+" was not weighed in this cycle")
}

// PostFilter runs when the pod fits no node after every plugin's Filter: it drops the
// speculative reservation the extender's Filter left on the node it ranked best (another
// plugin refused that node), so that no GPU stays booked while the pod waits, and notes the pod
// unschedulable for the extender's requeue and own preemption
// (extender.Scheduler.NoteUnschedulable) with only the nodes whose status is HamiGo's
// Unschedulable: the framework stops at a node's first failing Filter and runs HamiGo's last
// (kube-scheduler orders a plugin enabled at an extension point but not in multiPoint after the
// multiPoint ones), so those nodes passed every other Filter, as the nodes kube-scheduler hands
// the extender's filter verb did (this holds while HamiGo is not in multiPoint and no plugin is
// listed after it at filter, as in the chart's profile). A node another plugin refused is never
// offered for preemption. The refusal is dated at PreFilter's weighing, so GPUs released during
// the Filters requeue the pod; when PostFilter dropped the pod's own reservation, a release
// that changes nothing for the pod, at the note. Pods of a pod group, whose cycles skip
// PostFilter (gated in 1.37), are never noted: kube-scheduler's own events requeue them.
// Informational: it always answers Unschedulable without a result, so the next
// PostFilter plugin (DefaultPreemption) has its turn.
func (p *Plugin) PostFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	s := readFilter(state)
	if s == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	at := s.weighedAt
	if p.cache.Unreserve(device.RefOf(pod), "") {
		// A release, but of the pod's own booking: the refusal is noted after it (zero at).
		at = time.Time{}
		klog.FromContext(ctx).V(4).Info("hami-go dropped the reservation of a pod no node takes", "pod", klog.KObj(pod))
	}
	var ours extenderv1.FailedNodesMap
	for n, why := range s.failed {
		if st := nodeStatus(statuses, n); st != nil && st.Plugin() == Name && st.Code() == fwk.Unschedulable {
			if ours == nil {
				ours = extenderv1.FailedNodesMap{}
			}
			ours[n] = why
		}
	}
	p.sched.NoteUnschedulable(pod, ours, s.released, at)
	klog.FromContext(ctx).V(5).Info("hami-go noted a pod no node takes", "pod", klog.KObj(pod), "gpuRefused", len(ours), "weighedRefused", len(s.failed))
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

// nodeStatus is the node's status in statuses (nil: none, or no statuses).
func nodeStatus(statuses fwk.NodeToStatusReader, node string) *fwk.Status {
	if statuses == nil {
		return nil
	}
	return statuses.Get(node)
}

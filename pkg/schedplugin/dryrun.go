package schedplugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/extender"
)

// podPriority is the pod's priority as kube-scheduler reads it (spec.priority, 0 when unset).
func podPriority(p *corev1.Pod) int32 { return corev1helpers.PodPriority(p) }

// PreFilterExtensions returns the plugin itself where kube-scheduler's preemption frees GPUs
// (Args.Preemption "verb"): its AddPod and RemovePod make Filter follow the pods the framework
// adds to and removes from a node while it filters (DefaultPreemption's dry run removes a node's
// lower-priority pods and adds back those the pod can live with; nominated pods are added), so
// that DefaultPreemption chooses GPU victims as it chooses CPU ones. With "own" or "none" it
// returns nil: Filter keeps PreFilter's verdicts, so DefaultPreemption never frees GPUs for a
// pod (the extender's own loop does, or none does).
func (p *Plugin) PreFilterExtensions() fwk.PreFilterExtensions {
	if p.preemption != extender.PreemptionVerb {
		return nil
	}
	return p
}

// AddPod records that podInfoToAdd counts on its node (nodeInfo's) while podToSchedule is
// filtered in this CycleState: a pod RemovePod took off is put back; another GPU pod of ours
// is added with its request (Cache.FitWithChange places it unless the cache books it there
// already). Pods that are not GPU pods of ours change nothing. Always Success (nil).
func (p *Plugin) AddPod(_ context.Context, state fwk.CycleState, _ *corev1.Pod, podInfoToAdd fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, ch, k := p.changeOf(state, podInfoToAdd, nodeInfo)
	if s == nil {
		return nil
	}
	if _, removed := ch.Removed[k]; removed {
		delete(ch.Removed, k)
		return nil
	}
	req, ours, err := p.cache.ParseRequest(podInfoToAdd.GetPod())
	if err == nil && ours {
		ch.Added = append(ch.Added, extender.AddedPod{Ref: k, Req: req})
	}
	return nil
}

// RemovePod records that podInfoToRemove no longer counts on its node while podToSchedule is
// filtered in this CycleState: a pod AddPod added is taken off again; otherwise its booking
// there stops counting. Always Success (nil).
func (p *Plugin) RemovePod(_ context.Context, state fwk.CycleState, _ *corev1.Pod, podInfoToRemove fwk.PodInfo, nodeInfo fwk.NodeInfo) *fwk.Status {
	s, ch, k := p.changeOf(state, podInfoToRemove, nodeInfo)
	if s == nil {
		return nil
	}
	for i, a := range ch.Added {
		if a.Ref == k {
			ch.Added = append(ch.Added[:i], ch.Added[i+1:]...)
			return nil
		}
	}
	if ch.Removed == nil {
		ch.Removed = map[device.PodRef]struct{}{}
	}
	ch.Removed[k] = struct{}{}
	return nil
}

// changeOf returns the pod's filterState in state, the change of the node pi is on (the pod's
// spec.nodeName, else nodeInfo's node; created empty), and pi's reference; s is nil when
// PreFilter skipped the pod or no node is known.
func (p *Plugin) changeOf(state fwk.CycleState, pi fwk.PodInfo, nodeInfo fwk.NodeInfo) (s *filterState, ch *extender.NodeChange, k device.PodRef) {
	s = readFilter(state)
	if s == nil || pi == nil || pi.GetPod() == nil {
		return nil, nil, k
	}
	pod := pi.GetPod()
	node := pod.Spec.NodeName
	if node == "" && nodeInfo != nil && nodeInfo.Node() != nil {
		node = nodeInfo.Node().Name
	}
	if node == "" {
		return nil, nil, k
	}
	if s.changes == nil {
		s.changes = map[string]*extender.NodeChange{}
	}
	ch = s.changes[node]
	if ch == nil {
		ch = &extender.NodeChange{}
		s.changes[node] = ch
	}
	return s, ch, device.RefOf(pod)
}

// filterChanged is Filter's answer on node for pod with ch applied (Cache.FitWithChange):
// Success where it fits, Unschedulable with the reason otherwise (preemption may still help:
// the dry run removes more, or the node's pods change).
func (p *Plugin) filterChanged(s *filterState, pod *corev1.Pod, node string, ch *extender.NodeChange) *fwk.Status {
	if err := p.cache.FitWithChange(device.RefOf(pod), s.req, s.prio, node, ch); err != nil {
		return fwk.NewStatus(fwk.Unschedulable, err.Error()) // an *allocator.Unfit's text is its Reason
	}
	return nil
}

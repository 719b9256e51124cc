package schedplugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// scoreScale turns the extender's 0..10 into the framework's 0..100 (as kube-scheduler scales
// an extender's priorities).
const scoreScale = fwk.MaxNodeScore / extenderv1.MaxExtenderPriority

// PreScore runs the extender's Prioritize once over the nodes that passed every Filter and keeps
// the scores for Score. Skip for pods PreFilter skipped (the framework then skips Score).
func (p *Plugin) PreScore(_ context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	if readFilter(state) == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if nd := n.Node(); nd != nil {
			names = append(names, nd.Name)
		}
	}
	list := p.sched.Prioritize(pod, names)
	s := &scoreState{scores: make(map[string]int64, len(list))}
	for _, h := range list {
		s.scores[h.Host] = h.Score
	}
	state.Write(scoreKey, s)
	return nil
}

// Score returns the node's extender score (0..10; the node holding the pod's reservation 10)
// ×10: 0..fwk.MaxNodeScore. A node PreScore did not see scores 0. An Error without PreScore's
// state (it always writes one for pods it does not skip).
func (p *Plugin) Score(_ context.Context, state fwk.CycleState, _ *corev1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	d, err := state.Read(scoreKey)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	s, ok := d.(*scoreState)
	n := nodeInfo.Node()
	if !ok || n == nil {
		return 0, nil
	}
	return s.scores[n.Name] * scoreScale, nil
}

// ScoreExtensions returns nil: Score already answers 0..fwk.MaxNodeScore.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

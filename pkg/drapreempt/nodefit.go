package drapreempt

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// nodeFit answers nodeRefusal for one pod, its required node affinity parsed once for every
// node Choose looks at.
type nodeFit struct {
	pod      *corev1.Pod
	affinity nodeaffinity.RequiredNodeAffinity
}

func newNodeFit(pod *corev1.Pod) nodeFit {
	return nodeFit{pod: pod, affinity: nodeaffinity.GetRequiredNodeAffinity(pod)}
}

// refusal says why the pod can never be placed on node, whatever is evicted there ("": it may
// be): the node is cordoned (spec.unschedulable, kube-scheduler's NodeUnschedulable, which a
// toleration of node.kubernetes.io/unschedulable:NoSchedule lifts), the pod's nodeSelector or
// required node affinity does not match it (NodeAffinity), or it has a NoSchedule or NoExecute
// taint the pod does not tolerate (TaintToleration). These are kube-scheduler's filters that no
// eviction changes, evaluated with its own helpers (k8s.io/component-helpers); a preemption on
// such a node would evict pods for nothing. CPU, memory and pod count are not checked (an
// eviction may change them).
func (f nodeFit) refusal(node *corev1.Node) string {
	noSchedule := func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}
	if node.Spec.Unschedulable {
		cordon := corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
		if !corev1helpers.TolerationsTolerateTaint(klog.Background(), f.pod.Spec.Tolerations, &cordon, false) {
			return "cordoned (spec.unschedulable)"
		}
	}
	if ok, err := f.affinity.Match(node); err != nil || !ok {
		return "the pod's nodeSelector or required node affinity does not match it"
	}
	if t, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, f.pod.Spec.Tolerations, noSchedule, false); untolerated {
		return fmt.Sprintf("taint %s=%s:%s not tolerated by the pod", t.Key, t.Value, t.Effect)
	}
	return ""
}

package extender

import (
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"

	"github.com/hami-go/hami-go/pkg/device"
)

// DisruptionCheck tells which evictions of a set of victims violate a PodDisruptionBudget, as
// kube-scheduler's preemption counts them (pkg/scheduler/framework/preemption,
// filterPodsWithPDBViolation): the victims are taken in the order given, each budget that selects
// a victim (and does not list it in status.disruptedPods yet) is decremented from its
// status.disruptionsAllowed, and the victim violates when a budget of its goes below zero. So a
// budget allowing 1 disruption with 3 of its pods in the set counts 2 violations. A victim whose
// Namespace and Name are empty is looked up by UID (kube-scheduler's proposal names victims by
// UID only). The result has one entry per victim.
type DisruptionCheck func(victims []device.PodRef) []bool

// countViolations is the number of victims check finds violating (0 without a check).
func countViolations(check DisruptionCheck, victims []device.PodRef) int {
	if check == nil || len(victims) == 0 {
		return 0
	}
	n := 0
	for _, v := range check(victims) {
		if v {
			n++
		}
	}
	return n
}

// PerPodDisruption is a DisruptionCheck from a per-pod rule (tests; a budget per pod that
// allows nothing): a victim violates when violates says so, whatever the other victims.
func PerPodDisruption(violates func(device.PodRef) bool) DisruptionCheck {
	return func(victims []device.PodRef) []bool {
		out := make([]bool, len(victims))
		for i, v := range victims {
			out[i] = violates(v)
		}
		return out
	}
}

// pdbViolation is the DisruptionCheck over the extender's informers: the pods and the
// PodDisruptionBudgets they see. A pod the lister does not know violates none.
func pdbViolation(pods corelisters.PodLister, pdbs policylisters.PodDisruptionBudgetLister) DisruptionCheck {
	return func(victims []device.PodRef) []bool {
		out := make([]bool, len(victims))
		var byUID map[types.UID]*corev1.Pod // built once, when a victim is named by UID only
		allowed := map[*policyv1.PodDisruptionBudget]int32{}
		budgets := map[string][]*policyv1.PodDisruptionBudget{} // by namespace
		for i, k := range victims {
			var p *corev1.Pod
			if k.Namespace == "" && k.Name == "" {
				if byUID == nil {
					byUID = map[types.UID]*corev1.Pod{}
					all, _ := pods.List(labels.Everything())
					for _, q := range all {
						byUID[q.UID] = q
					}
				}
				p = byUID[k.UID]
			} else if q, err := pods.Pods(k.Namespace).Get(k.Name); err == nil && q.UID == k.UID {
				p = q
			}
			if p == nil || len(p.Labels) == 0 {
				continue // a pod with no labels matches no budget
			}
			list, ok := budgets[p.Namespace]
			if !ok {
				list, _ = pdbs.PodDisruptionBudgets(p.Namespace).List(labels.Everything())
				budgets[p.Namespace] = list
			}
			for _, b := range list {
				sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
				if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
					continue
				}
				if _, disrupted := b.Status.DisruptedPods[p.Name]; disrupted {
					continue // its eviction is already counted by the budget
				}
				left, seen := allowed[b]
				if !seen {
					left = b.Status.DisruptionsAllowed
				}
				left--
				allowed[b] = left
				if left < 0 {
					out[i] = true
				}
			}
		}
		return out
	}
}

package drapreempt

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A node the preemptor can never go to is left alone: evicting there would free GPUs for
// nothing. The node (2 GPUs full of low-priority claims) is cordoned, tainted or
// unselected; with the matching toleration or label it is chosen again.
func TestChooseSkipsNodesThePodCannotUse(t *testing.T) {
	lowA, lowB := mkPod("default", "low-a", 0), mkPod("default", "low-b", 0)
	snap := func(n *corev1.Node) *Snapshot {
		return &Snapshot{
			Slices: []*resourceapi.ResourceSlice{gpuSlice("node-1", 2, 81920, 10)},
			Claims: []*resourceapi.ResourceClaim{held("ca", "node-1", 0, 81920, lowA), held("cb", "node-1", 1, 81920, lowB)},
			Pods:   map[types.UID]*corev1.Pod{lowA.UID: lowA, lowB.UID: lowB},
			Nodes:  map[string]*corev1.Node{n.Name: n},
		}
	}
	node := func(mod func(n *corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"pool": "gpu"}}}
		mod(n)
		return n
	}
	taint := corev1.Taint{Key: "dedicated", Value: "training", Effect: corev1.TaintEffectNoSchedule}
	pod := func(mod func(p *corev1.Pod)) *corev1.Pod {
		p := mkPod("default", "high", 100)
		mod(p)
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		node *corev1.Node
		why  string // "": a preemption on node-1
	}{
		{"plain node", pod(func(*corev1.Pod) {}), node(func(*corev1.Node) {}), ""},
		{"cordoned", pod(func(*corev1.Pod) {}), node(func(n *corev1.Node) { n.Spec.Unschedulable = true }), "no node"},
		{"untolerated taint", pod(func(*corev1.Pod) {}), node(func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{taint} }), "no node"},
		{"tolerated taint", pod(func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "training", Effect: corev1.TaintEffectNoSchedule}}
		}), node(func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{taint} }), ""},
		{"nodeSelector elsewhere", pod(func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"pool": "cpu"} }), node(func(*corev1.Node) {}), "no node"},
		{"nodeSelector here", pod(func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"pool": "gpu"} }), node(func(*corev1.Node) {}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := NewChooser().Choose(tc.pod, []*resourceapi.ResourceClaim{need("n", 1, 40000)}, snap(tc.node))
			var np *NoPreemption
			switch {
			case tc.why == "" && (err != nil || plan.Node != "node-1" || len(plan.Victims) != 1):
				t.Fatalf("plan %s %d victims, err %v; want one victim on node-1", plan.Node, len(plan.Victims), err)
			case tc.why != "" && (!errors.As(err, &np) || !strings.Contains(np.Reason, tc.why)):
				t.Fatalf("err %v, plan %s; want no preemption (%q)", err, plan.Node, tc.why)
			}
		})
	}
	if r := newNodeFit(mkPod("default", "x", 0)).refusal(node(func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{taint} })); r != "taint dedicated=training:NoSchedule not tolerated by the pod" {
		t.Errorf("refusal = %q", r)
	}
}

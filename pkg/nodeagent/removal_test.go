package nodeagent

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// agentDaemonSet is the device plugin's DaemonSet as the chart renders it: its pods go only
// where hami-go.io/mode is not "dra" (_affinity.tpl), and the nodeSelector of the chart's values.
func agentDaemonSet(nodeSelector map[string]string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "hami-go-system", Name: "hami-go-device-plugin", UID: "ds-uid"},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			NodeSelector: nodeSelector,
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "hami-go.io/mode", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"dra"}},
				}}},
			}}},
		}}},
	}
}

func labelledNode(labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: labels}}
}

// case C45 (issue 28): a stopping agent tells a removal for good (uninstall, the node switched to the other
// mode) from a restart, as the DaemonSet controller would decide where its pods run.
func TestRemovalOf(t *testing.T) {
	deleting := agentDaemonSet(nil)
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	gpuNodes := map[string]string{"hami-go.io/device-plugin": "true"}
	for _, tc := range []struct {
		name    string
		ds      *appsv1.DaemonSet
		node    *corev1.Node
		forGood bool
		drain   bool
		why     string
	}{
		{"restart: the DaemonSet still selects the node", agentDaemonSet(nil), labelledNode(nil), false, false, "a restart"},
		{"restart: mode label deviceplugin", agentDaemonSet(gpuNodes), labelledNode(map[string]string{"hami-go.io/mode": "deviceplugin", "hami-go.io/device-plugin": "true"}), false, false, "a restart"},
		{"node switched to DRA mode", agentDaemonSet(nil), labelledNode(map[string]string{"hami-go.io/mode": "dra"}), true, true, "no longer matches the node selection of DaemonSet hami-go-system/hami-go-device-plugin"},
		{"node lost the nodeSelector's label", agentDaemonSet(gpuNodes), labelledNode(nil), true, true, "no longer matches"},
		{"helm uninstall: DaemonSet deleting", deleting, labelledNode(nil), true, false, "is being deleted"},
		{"chart mode changed: DaemonSet gone", nil, labelledNode(nil), true, true, "its DaemonSet is gone"},
		{"node gone", agentDaemonSet(nil), nil, true, false, "its node is gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := RemovalOf(tc.ds, tc.node)
			if r.ForGood != tc.forGood || r.Drain != tc.drain || !strings.Contains(r.Why, tc.why) {
				t.Errorf("RemovalOf = %+v, want forGood %v, drain %v with %q", r, tc.forGood, tc.drain, tc.why)
			}
		})
	}
}

// CheckRemoval reads the agent's own pod, its controlling DaemonSet and the node.
func TestCheckRemoval(t *testing.T) {
	ds := agentDaemonSet(nil)
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: "hami-go-device-plugin-x1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: types.UID("ds-uid"), Controller: &yes}}}}
	ctx := context.Background()

	c := fake.NewClientset(ds, pod, labelledNode(nil))
	if r, err := CheckRemoval(ctx, c, ds.Namespace, pod.Name, "node-1"); err != nil || r.ForGood {
		t.Errorf("DaemonSet selecting the node: %+v, %v; want a restart", r, err)
	}
	c = fake.NewClientset(ds, pod, labelledNode(map[string]string{"hami-go.io/mode": "dra"}))
	if r, err := CheckRemoval(ctx, c, ds.Namespace, pod.Name, "node-1"); err != nil || !r.ForGood {
		t.Errorf("node relabelled dra: %+v, %v; want for good", r, err)
	}
	c = fake.NewClientset(pod, labelledNode(nil))
	if r, err := CheckRemoval(ctx, c, ds.Namespace, pod.Name, "node-1"); err != nil || !r.ForGood {
		t.Errorf("DaemonSet deleted: %+v, %v; want for good", r, err)
	}
	c = fake.NewClientset(ds, labelledNode(nil))
	if _, err := CheckRemoval(ctx, c, ds.Namespace, pod.Name, "node-1"); err == nil || !strings.Contains(err.Error(), "read the agent's own pod") {
		t.Errorf("own pod missing: %v; want an error (the caller takes it for a restart)", err)
	}
	l := &Life{Config: &Config{NodeName: "node-1"}, Client: c}
	if r := l.LeavingForGood(ctx); r.ForGood {
		t.Errorf("without --pod-name: %+v; want a restart", r)
	}
}

// Issue 28: a drain ends when its switch is undone, the node relabelled back so that the
// agent's DaemonSet selects it again; an unreadable state counts as not undone.
func TestSwitchUndone(t *testing.T) {
	ds := agentDaemonSet(nil)
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: "hami-go-device-plugin-x1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: types.UID("ds-uid"), Controller: &yes}}}}
	ctx := context.Background()
	cfg := Config{NodeName: "node-1", PodNamespace: ds.Namespace, PodName: pod.Name}
	c := fake.NewClientset(ds, pod, labelledNode(map[string]string{"hami-go.io/mode": "dra"}))
	undone := (&Life{Config: &cfg, Client: c}).SwitchUndone(ctx)
	if undone() {
		t.Error("node still labelled dra: undone; want the drain to go on")
	}
	n, _ := c.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	n.Labels["hami-go.io/mode"] = "deviceplugin"
	if _, err := c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !undone() {
		t.Error("node relabelled deviceplugin: not undone; want the drain to end")
	}
	if (&Life{Config: &cfg, Client: fake.NewClientset(ds, labelledNode(nil))}).SwitchUndone(ctx)() {
		t.Error("own pod unreadable: undone; want the drain to go on")
	}
}

// The preflight condition is removed, the node's other conditions are kept.
func TestRemovePreflightCondition(t *testing.T) {
	n := labelledNode(nil)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}, {Type: "hami-go.io/PreflightPassed", Status: corev1.ConditionTrue}}
	c := fake.NewClientset(n)
	ctx := context.Background()
	if err := RemovePreflightCondition(ctx, c, "node-1"); err != nil {
		t.Fatal(err)
	}
	got, _ := c.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != corev1.NodeReady {
		t.Errorf("conditions %+v, want only Ready", got.Status.Conditions)
	}
	if err := RemovePreflightCondition(ctx, c, "gone"); err != nil {
		t.Errorf("node gone: %v", err)
	}
}

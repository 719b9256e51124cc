package nodeagent

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// Removal says whether a stopping node agent leaves its node for good, and why.
type Removal struct {
	// ForGood is true when no agent of this DaemonSet will run on the node again: the
	// DaemonSet is gone or being deleted (helm uninstall), or the node no longer matches its
	// node selection (a node relabelled to the other mode, hami-go.io/mode). False on a mere
	// restart (rolling update, crash, pod deleted), when the next agent takes over what this
	// one published.
	ForGood bool
	// Drain is true when ForGood is and another agent is to take the node over (a mode
	// switch: the DaemonSet gone, as a chart mode change deletes it, or no longer selecting the
	// node): the agent first keeps serving the pods that hold its GPUs, up to
	// Config.DrainTimeout. False for a DaemonSet being deleted (helm uninstall's pre-delete hook
	// deletes it in the foreground and waits) or a node gone.
	Drain bool
	// Why is the reason, for the log.
	Why string
}

// RemovalOf decides Removal from the agent's DaemonSet (nil: not found) and its node (nil: not
// found). The node selection is the DaemonSet's pod template's nodeSelector and required node
// affinity, as the DaemonSet controller evaluates it (k8s.io/component-helpers nodeaffinity).
func RemovalOf(ds *appsv1.DaemonSet, node *corev1.Node) Removal {
	switch {
	case ds == nil:
		return Removal{ForGood: true, Drain: true, Why: "its DaemonSet is gone"}
	case ds.DeletionTimestamp != nil:
		return Removal{ForGood: true, Why: fmt.Sprintf("its DaemonSet %s/%s is being deleted", ds.Namespace, ds.Name)}
	case node == nil:
		return Removal{ForGood: true, Why: "its node is gone"}
	}
	match, err := nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: ds.Spec.Template.Spec}).Match(node)
	switch {
	case err != nil:
		return Removal{Why: fmt.Sprintf("the node selection of DaemonSet %s/%s does not evaluate (%v); taken for a restart", ds.Namespace, ds.Name, err)}
	case !match:
		return Removal{ForGood: true, Drain: true, Why: fmt.Sprintf("node %s no longer matches the node selection of DaemonSet %s/%s (for example its hami-go.io/mode label changed)", node.Name, ds.Namespace, ds.Name)}
	}
	return Removal{Why: "a restart: the DaemonSet still selects the node"}
}

// CheckRemoval reads what RemovalOf needs: the agent's own pod (namespace, name: the downward
// API's POD_NAMESPACE and POD_NAME), the DaemonSet that owns it and the node. An error means it
// could not tell; the caller then takes the stop for a restart (keeping what it published is
// the safe side: the next agent overwrites it, and nothing is withdrawn under running pods).
func CheckRemoval(ctx context.Context, c kubernetes.Interface, namespace, pod, node string) (Removal, error) {
	p, err := c.CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return Removal{}, fmt.Errorf("read the agent's own pod %s/%s: %w", namespace, pod, err)
	}
	owner := metav1.GetControllerOf(p)
	if owner == nil || owner.Kind != "DaemonSet" {
		return Removal{}, fmt.Errorf("pod %s/%s is not run by a DaemonSet", namespace, pod)
	}
	ds, err := c.AppsV1().DaemonSets(namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ds = nil
	case err != nil:
		return Removal{}, fmt.Errorf("read DaemonSet %s/%s: %w", namespace, owner.Name, err)
	}
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		n = nil
	case err != nil:
		return Removal{}, fmt.Errorf("read node %s: %w", node, err)
	}
	return RemovalOf(ds, n), nil
}

// removalCheckTimeout bounds the API calls of a stopping agent's removal check and withdrawal:
// they run inside the pod's termination grace period.
const removalCheckTimeout = 5 * time.Second

// LeavingForGood is CheckRemoval for a stopping agent, under a timeout of its own (ctx, ended by
// the stop, is only the parent of values): an unknown pod (PodName empty) or an error counts as
// a restart, logged.
func (l *Life) LeavingForGood(ctx context.Context) Removal {
	c, client := l.Config, l.Client
	cctx, cancel := WithdrawContext(ctx)
	defer cancel()
	if c.PodName == "" || c.PodNamespace == "" {
		return Removal{Why: "the agent's pod is unknown (--pod-name, --pod-namespace)"}
	}
	r, err := CheckRemoval(cctx, client, c.PodNamespace, c.PodName, c.NodeName)
	if err != nil {
		klog.ErrorS(err, "Could not tell whether the agent leaves the node for good; taking the stop for a restart", "node", c.NodeName)
		return Removal{Why: err.Error()}
	}
	klog.InfoS("Stopping", "node", c.NodeName, "forGood", r.ForGood, "drain", r.Drain, "why", r.Why)
	return r
}

// WithdrawContext is the context of a stopping agent's withdrawal calls: not ended by ctx's end
// (the stop), bounded by a timeout of its own. Call cancel when done.
func WithdrawContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), removalCheckTimeout)
}

// Withdraw removes what both node agents publish on their node, for one that leaves it for good:
// the preflight condition (RemovePreflightCondition) and the node's extended resources named
// (WithdrawNodeResources). Each failure is logged; the other is still removed.
func Withdraw(ctx context.Context, c kubernetes.Interface, node string, resources ...corev1.ResourceName) {
	if err := RemovePreflightCondition(ctx, c, node); err != nil {
		klog.ErrorS(err, "Withdrawing the preflight condition failed", "node", node)
	}
	if err := WithdrawNodeResources(ctx, c, node, resources...); err != nil {
		klog.ErrorS(err, "Withdrawing the node's extended resources failed", "node", node, "resources", resources)
	}
}

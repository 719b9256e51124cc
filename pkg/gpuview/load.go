package gpuview

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// List reads the objects a view is built from: every Node, every Pod bound to a node or not
// (all namespaces), the Leases in cfg.LeaseNamespace, and the DRA source's ResourceSlices and
// ResourceClaims (none when the cluster does not serve resource.k8s.io/v1). Each list is one API call (the
// client's paging is not used: a view is a snapshot). Errors name the list that failed.
func List(ctx context.Context, client kubernetes.Interface, cfg Config) (Objects, error) {
	var o Objects
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("list nodes: %w", err)
	}
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("list pods: %w", err)
	}
	leases, err := client.CoordinationV1().Leases(cfg.LeaseNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("list leases in %s: %w", cfg.LeaseNamespace, err)
	}
	o.Nodes, o.Pods, o.Leases = nodes.Items, pods.Items, leases.Items
	// The DRA source: a cluster that does not serve resource.k8s.io/v1 has none.
	rs, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return o, nil
	case err != nil:
		return o, fmt.Errorf("list resourceslices: %w", err)
	}
	rc, err := client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return o, fmt.Errorf("list resourceclaims: %w", err)
	}
	o.ResourceSlices = rs.Items
	if err == nil {
		o.ResourceClaims = rc.Items
	}
	return o, nil
}

// PodEvents lists the events of pod (field selector on involvedObject; Explain filters again,
// so a client that ignores field selectors gives the same answer).
func PodEvents(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) ([]corev1.Event, error) {
	sel := fields.Set{"involvedObject.name": pod.Name, "involvedObject.namespace": pod.Namespace}.AsSelector().String()
	l, err := client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list events of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return l.Items, nil
}

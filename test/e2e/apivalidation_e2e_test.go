//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestGPUResourceValidationMatchesAPIServer (case C47, issue 28 item 5, either mode): a GPU request the
// API server's own validation refuses (without its limit, or unequal to it) is refused for a
// tenant with the API server's words. The oracle is the cluster's kube-apiserver itself: the same
// pod, server-side dry run, in kube-system, which the webhook does not see. In DRA mode the
// webhook moves the resources into a claim, so without its own check such a pod was admitted.
func TestGPUResourceValidationMatchesAPIServer(t *testing.T) {
	c := NewCluster(t)
	ns := e2eNamespace(t, c)
	mode := "device-plugin"
	if c.isDRAMode(t) {
		mode = "DRA"
	}
	pod := func(ns string, limits, requests corev1.ResourceList) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "badres", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "pause",
				Resources: corev1.ResourceRequirements{Limits: limits, Requests: requests}}}},
		}
	}
	q := resource.MustParse
	for _, tc := range []struct {
		name             string
		limits, requests corev1.ResourceList
	}{
		{"request without a limit", nil, corev1.ResourceList{"nvidia.com/gpu": q("1")}},
		{"request below the limit", corev1.ResourceList{"nvidia.com/gpu": q("1"), "nvidia.com/gpumem": q("3000")},
			corev1.ResourceList{"nvidia.com/gpu": q("1"), "nvidia.com/gpumem": q("2000")}},
	} {
		ctx := context.Background()
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		_, apiErr := c.Client.CoreV1().Pods("kube-system").Create(ctx, pod("kube-system", tc.limits, tc.requests), dry)
		_, tenantErr := c.Client.CoreV1().Pods(ns).Create(ctx, pod(ns, tc.limits, tc.requests), dry)
		if apiErr == nil || tenantErr == nil {
			t.Fatalf("%s: API server %v, tenant (%s mode) %v; want both refused", tc.name, apiErr, mode, tenantErr)
		}
		_, words, ok := strings.Cut(apiErr.Error(), " is invalid: ")
		if !ok || !strings.Contains(tenantErr.Error(), words) {
			t.Errorf("%s (%s mode): tenant refused with %q; want the API server's words %q", tc.name, mode, tenantErr, words)
		}
		t.Logf("%s (%s mode): %s", tc.name, mode, tenantErr)
	}
}

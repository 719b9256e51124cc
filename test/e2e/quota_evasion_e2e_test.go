//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/device"
)

// TestQuotaCannotBeEvaded (issue 37 item 4), in whichever mode the cluster runs, through the
// real API server, webhook and admission policies:
//   - a pod's GPU compute is written as hami-go.io/gpu-cores (2 GPUs x 30% = 60) beside its memory;
//   - under a quota on requests.hami-go.io/gpu-memory, an exclusive GPU (cores 100, gpumem 1) is
//     refused, naming the field (before: it held a whole GPU for 1 MiB of quota);
//   - under a quota on requests.hami-go.io/gpu-cores, a container without a cores limit is refused;
//   - a pod that names hami-go's claim template itself is refused by the webhook;
//   - DRA mode: under such a quota the tenant's own ResourceClaim on gpu.hami-go.io is refused
//     by the policy <release>-gpu-claims, and allowed in a namespace without one.
//
// Case C59.
func TestQuotaCannotBeEvaded(t *testing.T) {
	c := NewCluster(t)
	dra := c.isDRAMode(t)
	if dra {
		c.driverPod(t)
	} else {
		c.requireChart(t)
	}
	newNS := func() string {
		if dra {
			return draNamespace(t, c)
		}
		return e2eNamespace(t, c)
	}
	ctx := context.Background()
	quota := func(ns string, keys ...string) {
		hard := corev1.ResourceList{}
		for _, k := range keys {
			hard[corev1.ResourceName(k)] = resource.MustParse("400000")
		}
		if _, err := c.Client.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: ns}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(ns, name string, g gpuLimits, want string) {
		t.Helper()
		var err error
		// DRA mode: right after an earlier test restarted the kubelet, the webhook's view of the
		// ResourceSlices may be empty for a moment ("no GPU of driver ... is published"), which
		// refuses an exclusive GPU before the quota is looked at; wait for the view.
		_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err = c.Client.CoreV1().Pods(ns).Create(ctx, gpuPod(ns, name, g), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil || !strings.Contains(err.Error(), "is published in the cluster (no ResourceSlices)"), nil
		})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("pod %s %+v: err %v, want a refusal containing %q", name, g, err, want)
		}
		t.Logf("pod %s refused: %v", name, err)
	}

	// the compute figure, written beside the memory figure
	free := newNS()
	p, err := c.Client.CoreV1().Pods(free).Create(ctx, gpuPod(free, "cores", gpuLimits{count: 2, memMiB: 1000, cores: 30}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	lim := p.Spec.Containers[0].Resources.Limits
	if m, k := lim[device.ResourceGPUMemory], lim[device.ResourceGPUCores]; m.Value() != 2000 || k.Value() != 60 {
		t.Fatalf("limits %v: want %s=2000 and %s=60", lim, device.ResourceGPUMemory, device.ResourceGPUCores)
	}

	memNS := newNS()
	quota(memNS, device.QuotaResourceGPUMemory)
	refused(memNS, "exclusive", gpuLimits{count: 1, memMiB: 1, cores: 100},
		"resources.limits["+resCores+"]: 100 (an exclusive GPU, whose whole memory it holds")

	coresNS := newNS()
	quota(coresNS, device.QuotaResourceGPUCores)
	refused(coresNS, "uncapped", gpuLimits{count: 1, memMiB: 1000},
		"resources.limits["+resCores+"]: not set (no compute limit: every SM of each GPU)")

	// a pod naming the webhook's template itself
	borrowed := gpuPod(memNS, "borrowed", gpuLimits{})
	tmpl := "hami-go-gpu-0123456789abcdef"
	borrowed.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl}}
	borrowed.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	_, err = c.Client.CoreV1().Pods(memNS).Create(ctx, borrowed, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil || !strings.Contains(err.Error(), `resourceClaimTemplateName: "hami-go-gpu-0123456789abcdef" is one of hami-go's GPU claims`) {
		t.Fatalf("pod naming %s: err %v, want the webhook's refusal", tmpl, err)
	}
	t.Logf("pod naming the webhook's template refused: %v", err)

	if !dra {
		return
	}
	own := func(ns string) error {
		g := gpuClaim{count: 1, memory: "1Mi", index: -1}
		_, err := c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "own", Namespace: ns}, Spec: g.spec()}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	if err := own(memNS); err == nil || !strings.Contains(err.Error(), "hami-go-gpu-claims") || !strings.Contains(err.Error(), "caps GPU memory or compute (ResourceQuota gpu)") {
		t.Fatalf("own claim under the quota: err %v, want the gpu-claims policy's refusal", err)
	} else {
		t.Logf("own claim under the quota refused: %v", err)
	}
	if err := own(free); err != nil {
		t.Fatalf("own claim in a namespace without a GPU quota: %v, want it allowed (the DRA API)", err)
	}
}

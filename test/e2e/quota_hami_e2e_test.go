//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/webhook"
)

// waitHAMiSibling waits until the webhook's HAMi quota controller has made the sibling of the
// source quota ns/src with requests.hami-go.io/gpu-memory = mib, owned by the source, and the
// API server's quota controller has filled its status (so quota admission counts it).
func (c *Cluster) waitHAMiSibling(t *testing.T, ns, src string, mib int64, timeout time.Duration) *corev1.ResourceQuota {
	t.Helper()
	name := webhook.HAMiQuotaSiblingName(src)
	var got *corev1.ResourceQuota
	last := "not found"
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		q, err := c.Client.CoreV1().ResourceQuotas(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		got = q
		h, ok := q.Spec.Hard[device.QuotaResourceGPUMemory]
		ref := metav1.GetControllerOf(q)
		last = "spec.hard " + h.String() + ", managed-by " + q.Labels[webhook.LabelManagedBy]
		if !ok || h.Value() != mib || q.Labels[webhook.LabelManagedBy] != webhook.ManagedByHAMiGo || ref == nil || ref.Kind != "ResourceQuota" || ref.Name != src {
			return false, nil
		}
		_, synced := q.Status.Hard[device.QuotaResourceGPUMemory]
		if !synced {
			last = "status.hard not yet set"
		}
		return synced, nil
	})
	if err != nil {
		t.Fatalf("sibling %s/%s of %s: %s; want %s = %d MiB (is the webhook running with --hami-quota-keys and its RBAC?)", ns, name, src, last, device.QuotaResourceGPUMemory, mib)
	}
	return got
}

// case C44 with HAMi's keys. TestQuotaHAMiKeys (issue 37 item 5), in whichever mode the cluster
// runs: a ResourceQuota written as HAMi's scheduler reads it (limits.nvidia.com/gpumem: 40000)
// or as HAMi's user guide writes it (limit.nvidia.com/gpumem: 40000) gets the webhook's sibling
// <name>-hami-go on requests.hami-go.io/gpu-memory: 40000, so the API server refuses a pod of
// 2 GPUs x 30000 MiB ("exceeded quota: <name>-hami-go") and admits 1 x 30000, whose figure the
// sibling counts until the pod ends. Then the sibling follows an edit of the source, is restored
// after a user deletes it, and goes with the source (garbage collection).
// Case C60.
func TestQuotaHAMiKeys(t *testing.T) {
	c := NewCluster(t)
	dra := c.isDRAMode(t)
	if dra {
		c.driverPod(t)
	}
	for _, key := range []string{"limits." + resMemory, "limit." + resMemory} {
		t.Run(strings.SplitN(key, ".", 2)[0], func(t *testing.T) {
			var ns string
			if dra {
				ns = draNamespace(t, c)
			} else {
				ns = e2eNamespace(t, c)
			}
			ctx := context.Background()
			rq := c.Client.CoreV1().ResourceQuotas(ns)
			const src = "hami"
			sibling := webhook.HAMiQuotaSiblingName(src)
			if _, err := rq.Create(ctx, &corev1.ResourceQuota{
				ObjectMeta: metav1.ObjectMeta{Name: src, Namespace: ns},
				Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceName(key): resource.MustParse("40000")}},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatalf("%s: 40000: the API server refused the key: %v", key, err)
			}
			c.waitHAMiSibling(t, ns, src, 40000, time.Minute)
			c.waitQuotaUsed(t, ns, sibling, 0, time.Minute)
			t.Logf("%s: 40000 → %s/%s %s: 40000 (dra=%v)", key, ns, sibling, device.QuotaResourceGPUMemory, dra)

			ends := func(p *corev1.Pod) *corev1.Pod {
				p.Spec.RestartPolicy = corev1.RestartPolicyNever
				p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "sleep 3"}
				return p
			}
			_, err := c.Client.CoreV1().Pods(ns).Create(ctx, ends(gpuPod(ns, "two-x-30000", gpuLimits{count: 2, memMiB: 30000})), metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), "exceeded quota: "+sibling) || !strings.Contains(err.Error(), "requested: "+device.QuotaResourceGPUMemory+"=60k") {
				t.Fatalf("2 x 30000 MiB under %s: 40000: err %v, want the API server's \"exceeded quota: %s, requested: %s=60k ...\"", key, err, sibling, device.QuotaResourceGPUMemory)
			}
			t.Logf("2 x 30000 MiB refused: %v", err)

			c.CreatePod(t, ends(gpuPod(ns, "one-x-30000", gpuLimits{count: 1, memMiB: 30000})))
			c.waitQuotaUsed(t, ns, sibling, 30000, time.Minute)
			c.WaitForPhase(t, ns, "one-x-30000", corev1.PodSucceeded, 2*time.Minute)
			c.waitQuotaUsed(t, ns, sibling, 0, time.Minute)

			// the source edited: the sibling follows
			q, err := rq.Get(ctx, src, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			q.Spec.Hard[corev1.ResourceName(key)] = resource.MustParse("20000")
			if _, err := rq.Update(ctx, q, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			c.waitHAMiSibling(t, ns, src, 20000, time.Minute)

			// the sibling deleted by a user: restored
			if err := rq.Delete(ctx, sibling, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			c.waitHAMiSibling(t, ns, src, 20000, time.Minute)

			// the source deleted: the sibling goes with it
			if err := rq.Delete(ctx, src, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				_, err := rq.Get(ctx, sibling, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			}); err != nil {
				t.Fatalf("sibling %s/%s still there a minute after its source was deleted", ns, sibling)
			}
		})
	}
}

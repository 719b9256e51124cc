package extender

import (
	"context"
	"encoding/json"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// requeueLoop updates, after every release of GPUs, the pods Filter refused just before it
// (requeue.go), until ctx ends.
func (e *Extender) requeueLoop(ctx context.Context, c *Cache) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.Released():
		}
		select {
		case <-ctx.Done():
			return
		case <-e.clock.After(requeueSettle):
		}
		keys, freed := c.RefusedBeforeRelease()
		for _, k := range keys {
			if err := e.requeue(ctx, k, freed); err != nil {
				klog.ErrorS(err, "Cannot update a refused pod so that kube-scheduler retries it", "pod", klog.KRef(k.Namespace, k.Name))
			}
		}
	}
}

// requeue sets AnnoRequeue on pod k (merge patch with its UID as a precondition); a pod gone or
// re-created meanwhile is left alone.
func (e *Extender) requeue(ctx context.Context, k device.PodRef, freed time.Time) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         k.UID,
		"annotations": map[string]string{device.AnnoRequeue: freed.UTC().Format(time.RFC3339Nano)},
	}})
	if err != nil {
		return err
	}
	_, err = e.client.CoreV1().Pods(k.Namespace).Patch(ctx, k.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	switch {
	case err == nil:
		klog.V(2).InfoS("Refused just before GPUs were released; asked kube-scheduler to retry", "pod", klog.KRef(k.Namespace, k.Name), "released", freed)
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err), apierrors.IsInvalid(err):
		klog.V(4).InfoS("Refused pod gone or replaced; not retried", "pod", klog.KRef(k.Namespace, k.Name), "err", err)
		return nil
	default:
		return err
	}
}

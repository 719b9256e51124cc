package extender

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// A rebuild current as of readiness.
//
// An informer's first list may be served from the API server's watch cache, which can lag
// behind etcd under load (seen on the local cluster: an extender restarted mid-burst missed the
// pods its previous instance had bound 0.4 s earlier and planned ten more on a full GPU). So
// before it reports ready, the extender reads the bound pods with a consistent list (no
// resourceVersion: read from etcd, or from a watch cache proven current) and waits until its
// cache has handled each of them at that version or later. Pods deleted meanwhile only make the
// cache conservative until their delete events arrive.

// currentPageSize is the page size of the consistent list (keeps its memory bounded).
const currentPageSize = 500

// currentTimeout bounds the wait for the informer to catch up.
const currentTimeout = time.Minute

// handled records, until ready, the resourceVersion of a pod the cache handled.
func (e *Extender) handled(o any) {
	if e.ready.Load() {
		return
	}
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	if p, ok := o.(*corev1.Pod); ok {
		e.startup.Store(p.UID, p.ResourceVersion)
	}
}

// waitCurrent waits until done holds for every bound pod that carries a hami-go allocation, as
// a consistent list returns it: at startup handledAtLeast (the cache handled it at that version
// or later), at a leader hand-over charged (leader.go). After currentTimeout it logs what is
// missing and goes on: readiness is not held forever.
func (e *Extender) waitCurrent(ctx context.Context, done func(*corev1.Pod) bool) error {
	opts := metav1.ListOptions{Limit: currentPageSize}
	checked, waited := 0, 0
	for {
		l, err := e.client.CoreV1().Pods("").List(ctx, opts)
		if err != nil {
			return fmt.Errorf("consistent list of pods: %w", err)
		}
		for i := range l.Items {
			p := &l.Items[i]
			_, planned := p.Annotations[device.AnnoPlanned]
			_, claimed := p.Annotations[device.AnnoClaimed]
			if p.Spec.NodeName == "" || (!planned && !claimed) {
				continue
			}
			checked++
			if done(p) {
				continue
			}
			waited++
			err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, currentTimeout, true, func(context.Context) (bool, error) {
				return done(p), nil
			})
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				klog.ErrorS(err, "The pod informer did not catch up with a consistent list; reporting ready all the same", "pod", klog.KObj(p), "resourceVersion", p.ResourceVersion)
			}
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	klog.V(2).InfoS("Cache current with a consistent list of bound pods", "pods", checked, "waitedFor", waited)
	return nil
}

// handledAtLeast reports whether the cache handled p at its resourceVersion or later.
func (e *Extender) handledAtLeast(p *corev1.Pod) bool {
	v, ok := e.startup.Load(p.UID)
	if !ok {
		return false
	}
	cmp, err := resourceversion.CompareResourceVersion(v.(string), p.ResourceVersion)
	return err != nil || cmp >= 0 // a malformed version cannot be waited for
}

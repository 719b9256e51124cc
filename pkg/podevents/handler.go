// Package podevents holds the one rule by which every informer-fed state of hami-go (the
// extender's cache, the device plugin's ledger and claim writer) follows pods: a pod is its
// namespace, name and UID (case C12), never its name alone.
package podevents

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Handler returns pod informer handlers that apply the identity rule (case C34).
//
// A pod deleted and re-created under the same namespace/name while the informer's watch was
// down reaches the informer, after the watch ended with 410 Gone and the reflector relisted, as
// ONE update whose old and new objects have different UIDs, and no delete: the informer's store
// is keyed by namespace/name. Handler turns such an update into remove(old) followed by
// upsert(new), as kube-scheduler's own cache does: it keys pods by UID and applies an update as
// removePod(old) then addPod(new) (kubernetes v1.37 pkg/scheduler/backend/cache/cache.go,
// cacheImpl.updatePod; framework.GetPodKey is the UID).
//
// upsert receives added pods and same-UID updates. remove receives deleted objects as the
// informer gives them (a *corev1.Pod or a cache.DeletedFinalStateUnknown tombstone) and the old
// *corev1.Pod of a UID change. Objects of other types are logged and dropped.
func Handler(upsert func(*corev1.Pod), remove func(obj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if p, ok := asPod(o); ok {
				upsert(p)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			p, ok := asPod(newObj)
			if !ok {
				return
			}
			if old, ok := oldObj.(*corev1.Pod); ok && old.UID != p.UID {
				klog.V(2).InfoS("Pod re-created under the same name while the watch was down; handling it as a delete and an add",
					"pod", klog.KObj(p), "oldUID", old.UID, "newUID", p.UID)
				remove(old)
			}
			upsert(p)
		},
		DeleteFunc: remove,
	}
}

func asPod(o any) (*corev1.Pod, bool) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		klog.InfoS("Ignoring an informer object that is not a pod", "type", fmt.Sprintf("%T", o))
	}
	return p, ok
}

package webhook

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// Event reasons the HAMi quota controller writes on a source ResourceQuota.
const (
	ReasonHAMiQuotaInvalid   = "InvalidHAMiQuotaValue"
	ReasonHAMiQuotaNameTaken = "HAMiQuotaSiblingNameTaken"
)

// HAMiQuotaController keeps, for each ResourceQuota written with HAMi's keys, the sibling
// ResourceQuota HAMiQuotaSibling describes: it creates and updates it, restores it when someone
// else edits or deletes it, deletes it when the source loses its HAMi keys or is gone (garbage
// collection deletes it with the source too). It touches no ResourceQuota but the siblings it
// owns: a controller owner reference to the source ResourceQuota, and the managed-by label (or
// the source's UID in that reference). The work queue is keyed by namespace/source name.
type HAMiQuotaController struct {
	client   kubernetes.Interface
	lister   corelisters.ResourceQuotaLister
	synced   cache.InformerSynced
	names    device.ResourceNames
	recorder record.EventRecorder // nil: problems are logged only
	queue    workqueue.TypedRateLimitingInterface[string]
}

// NewHAMiQuotaController registers its handlers on informer (the QuotaCache's one in the
// webhook; nothing runs until Run and the informer's factory are started). recorder may be nil.
func NewHAMiQuotaController(client kubernetes.Interface, informer coreinformers.ResourceQuotaInformer, names device.ResourceNames, recorder record.EventRecorder) (*HAMiQuotaController, error) {
	c := &HAMiQuotaController{
		client:   client,
		lister:   informer.Lister(),
		names:    names,
		recorder: recorder,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "hami-quota-keys"}),
	}
	reg, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue,
		UpdateFunc: func(o, n any) {
			if oq, ok := o.(*corev1.ResourceQuota); ok {
				if nq, ok := n.(*corev1.ResourceQuota); ok && !hamiQuotaChanged(oq, nq) {
					return // status.used moves with every pod: nothing of ours changed
				}
			}
			c.enqueue(o)
			c.enqueue(n)
		},
		DeleteFunc: c.enqueue,
	})
	if err != nil {
		return nil, err
	}
	c.synced = reg.HasSynced
	return c, nil
}

// hamiQuotaChanged reports whether an update changed what the controller reads or writes.
func hamiQuotaChanged(o, n *corev1.ResourceQuota) bool {
	return !equality.Semantic.DeepEqual(o.Spec, n.Spec) || !equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
		!equality.Semantic.DeepEqual(o.Annotations, n.Annotations) || !equality.Semantic.DeepEqual(o.OwnerReferences, n.OwnerReferences) ||
		o.UID != n.UID || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
}

// enqueue queues obj's own key (it may be a source) and, for a sibling, its source's key (an
// edit or deletion of the sibling is repaired from its source), and for a name ending in
// -hami-go the name without it (a foreign quota in a sibling's name may have gone).
func (c *HAMiQuotaController) enqueue(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	q, ok := obj.(*corev1.ResourceQuota)
	if !ok {
		return
	}
	c.queue.Add(q.Namespace + "/" + q.Name)
	if ref := metav1.GetControllerOf(q); ref != nil && isQuotaRef(ref) {
		c.queue.Add(q.Namespace + "/" + ref.Name)
	}
	if s, ok := strings.CutSuffix(q.Name, HAMiQuotaSiblingSuffix); ok && s != "" {
		c.queue.Add(q.Namespace + "/" + s)
	}
}

func isQuotaRef(ref *metav1.OwnerReference) bool {
	return ref.APIVersion == "v1" && ref.Kind == "ResourceQuota"
}

// ownedBy reports whether q is a sibling of the source srcName (srcUID: "" where the source is
// gone): a controller reference to it, and the managed-by label or the source's UID in the
// reference (a sibling whose label someone removed is still ours to restore).
func ownedBy(q *corev1.ResourceQuota, srcName string, srcUID string) bool {
	ref := metav1.GetControllerOf(q)
	if ref == nil || !isQuotaRef(ref) || ref.Name != srcName {
		return false
	}
	return IsHAMiQuotaSibling(q) || (srcUID != "" && string(ref.UID) == srcUID)
}

// Run waits for the informer's first list and works the queue until ctx ends.
func (c *HAMiQuotaController) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx).WithName("hami-quota-keys")
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return fmt.Errorf("HAMi quota keys: the ResourceQuota cache did not sync")
	}
	logger.Info("Translating HAMi's ResourceQuota keys", "memory", []string{"limits." + c.names.Memory, "limit." + c.names.Memory},
		"cores", []string{"limits." + c.names.Cores, "limit." + c.names.Cores}, "to", []string{device.QuotaResourceGPUMemory, device.QuotaResourceGPUCores})
	ctx = klog.NewContext(ctx, logger)
	for i := 0; i < workers; i++ {
		go wait.UntilWithContext(ctx, c.worker, time.Second)
	}
	<-ctx.Done()
	return nil
}

func (c *HAMiQuotaController) worker(ctx context.Context) {
	for c.next(ctx) {
	}
}

func (c *HAMiQuotaController) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			// the cache was behind a write (often the controller's own): retry on a fresh view
			klog.FromContext(ctx).V(2).Info("Syncing the HAMi quota sibling; retrying", "source", key, "err", err)
		} else {
			klog.FromContext(ctx).Error(err, "Syncing the HAMi quota sibling; retrying", "source", key)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// sync brings the siblings of the source ResourceQuota key (namespace/name) in line with it.
func (c *HAMiQuotaController) sync(ctx context.Context, key string) error {
	logger := klog.FromContext(ctx)
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key this controller queued
	}
	src, err := c.lister.ResourceQuotas(ns).Get(name)
	if apierrors.IsNotFound(err) {
		src = nil
	} else if err != nil {
		return err
	}
	if src != nil && IsHAMiQuotaSibling(src) {
		return nil // a sibling is never a source; its own source's key repairs it
	}
	var want *corev1.ResourceQuota
	srcUID := ""
	if src != nil {
		srcUID = string(src.UID)
		if src.DeletionTimestamp == nil {
			want = c.wantSibling(logger, src)
		}
	}
	if err := c.deleteStale(ctx, logger, key, ns, name, srcUID, src == nil, want); err != nil {
		return err
	}
	if want == nil {
		return nil
	}
	cur, err := c.lister.ResourceQuotas(ns).Get(want.Name)
	if apierrors.IsNotFound(err) {
		if _, err := c.client.CoreV1().ResourceQuotas(ns).Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating sibling %s/%s: %w", ns, want.Name, err)
		}
		logger.Info("Created the HAMi quota sibling", "resourceQuota", klog.KObj(want), "source", key, "hard", want.Spec.Hard)
		return nil
	} else if err != nil {
		return err
	}
	if !ownedBy(cur, name, srcUID) {
		logger.Error(nil, "A ResourceQuota not owned by hami-go has the sibling's name; HAMi's keys are not enforced", "resourceQuota", klog.KObj(cur), "source", key)
		if c.recorder != nil {
			c.recorder.Eventf(src, corev1.EventTypeWarning, ReasonHAMiQuotaNameTaken, "ResourceQuota %s exists and is not hami-go's sibling of this quota; HAMi's keys here are not enforced until it is renamed or deleted", cur.Name)
		}
		return nil
	}
	if !siblingDiffers(cur, want) {
		return nil
	}
	return c.updateSibling(ctx, logger, key, ns, cur, want)
}

// wantSibling returns the sibling that the source src (not being deleted) asks for, logging
// each HAMi quota value it leaves out and reporting it as an event on src.
func (c *HAMiQuotaController) wantSibling(logger klog.Logger, src *corev1.ResourceQuota) *corev1.ResourceQuota {
	want, problems := HAMiQuotaSibling(src, c.names)
	for _, p := range problems {
		logger.Error(nil, "Invalid HAMi quota value; left out of the sibling", "resourceQuota", klog.KObj(src), "field", "spec.hard["+string(p.Key)+"]", "value", p.Value, "reason", p.Why)
		if c.recorder != nil {
			c.recorder.Eventf(src, corev1.EventTypeWarning, ReasonHAMiQuotaInvalid, "%s; hami-go does not enforce it (write e.g. %s: \"40000\")", p, p.Key)
		}
	}
	return want
}

// deleteStale deletes, in namespace ns, the siblings of the source key (name, srcUID) other
// than want (every one when want is nil), each only if its UID is still the one listed;
// srcGone tells the log that the source is missing.
func (c *HAMiQuotaController) deleteStale(ctx context.Context, logger klog.Logger, key, ns, name, srcUID string, srcGone bool, want *corev1.ResourceQuota) error {
	all, err := c.lister.ResourceQuotas(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	for _, q := range all {
		if !ownedBy(q, name, srcUID) || (want != nil && q.Name == want.Name) {
			continue
		}
		uid := q.UID
		err := c.client.CoreV1().ResourceQuotas(ns).Delete(ctx, q.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting sibling %s/%s: %w", ns, q.Name, err)
		}
		logger.Info("Deleted the HAMi quota sibling", "resourceQuota", klog.KObj(q), "source", key, "sourceGone", srcGone)
	}
	return nil
}

// updateSibling updates the existing sibling cur (in namespace ns) of the source key to want:
// want's labels and annotations merged over cur's, want's owner references and spec.
func (c *HAMiQuotaController) updateSibling(ctx context.Context, logger klog.Logger, key, ns string, cur, want *corev1.ResourceQuota) error {
	upd := cur.DeepCopy()
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	for k, v := range want.Labels {
		upd.Labels[k] = v
	}
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	for k, v := range want.Annotations {
		upd.Annotations[k] = v
	}
	upd.OwnerReferences = want.OwnerReferences
	upd.Spec = want.Spec
	if _, err := c.client.CoreV1().ResourceQuotas(ns).Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating sibling %s/%s: %w", ns, want.Name, err)
	}
	logger.Info("Updated the HAMi quota sibling", "resourceQuota", klog.KObj(want), "source", key, "hard", want.Spec.Hard)
	return nil
}

// siblingDiffers reports whether cur lacks something of want: its spec, labels, annotation or
// owner reference.
func siblingDiffers(cur, want *corev1.ResourceQuota) bool {
	if !equality.Semantic.DeepEqual(cur.Spec, want.Spec) || !equality.Semantic.DeepEqual(cur.OwnerReferences, want.OwnerReferences) {
		return true
	}
	for k, v := range want.Labels {
		if cur.Labels[k] != v {
			return true
		}
	}
	for k, v := range want.Annotations {
		if cur.Annotations[k] != v {
			return true
		}
	}
	return false
}

// RunHAMiQuotaKeys runs the HAMi quota controller (HAMiQuotaController) on the QuotaCache's
// informer until ctx ends, writing its Events through the API (component hami-go-webhook). It
// needs the API client; call it beside Start, which starts the informer.
func (s *Server) RunHAMiQuotaKeys(ctx context.Context) error {
	if s.quotas == nil {
		return fmt.Errorf("HAMi quota keys: no API client")
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	defer b.Shutdown()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.cfg.Client.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "hami-go-webhook"})
	c, err := NewHAMiQuotaController(s.cfg.Client, s.quotas.factory.Core().V1().ResourceQuotas(), s.cfg.Admission.Names, rec)
	if err != nil {
		return err
	}
	return c.Run(ctx, 1)
}

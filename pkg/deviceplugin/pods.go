package deviceplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/ledger"
	"github.com/hami-go/hami-go/pkg/podevents"
)

// PodResourcesLister is the part of the kubelet's PodResources API the plugin uses.
type PodResourcesLister interface {
	List(ctx context.Context, in *podresourcesapi.ListPodResourcesRequest, opts ...grpc.CallOption) (*podresourcesapi.ListPodResourcesResponse, error)
}

// DialPodResources connects to the kubelet's PodResources socket (the connection is lazy).
func DialPodResources(socket string) (PodResourcesLister, func(), error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("pod resources socket %s: %w", socket, err)
	}
	return podresourcesapi.NewPodResourcesListerClient(conn), func() { conn.Close() }, nil
}

// Observe lists what the kubelet holds of the count resource, per container.
func Observe(ctx context.Context, l PodResourcesLister, resource string) ([]ledger.ObservedContainer, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := l.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources List: %w", err)
	}
	var out []ledger.ObservedContainer
	for _, p := range r.PodResources {
		for _, c := range p.Containers {
			var ids []string
			for _, d := range c.Devices {
				if d.ResourceName == resource {
					ids = append(ids, d.DeviceIds...)
				}
			}
			if len(ids) > 0 {
				out = append(out, ledger.ObservedContainer{Namespace: p.Namespace, Pod: p.Name, Container: c.Name, IDs: ids})
			}
		}
	}
	return out, nil
}

// claimWriters is the number of goroutines that write claimed records: a burst of admissions
// claims many pods within a second, and one writer would put the last record seconds behind its
// Allocate. The queue never hands one pod to two writers at once.
const claimWriters = 4

// PodSync feeds the ledger from a pod informer on this node, writes claimed records to pods
// (AnnoClaimed) with retries, and reconciles claims from the kubelet's PodResources API shortly
// after every claim and every ReconcileEvery.
type PodSync struct {
	ledger     *ledger.Ledger
	client     kubernetes.Interface
	lister     corelisters.PodLister
	factory    informers.SharedInformerFactory
	queue      workqueue.TypedRateLimitingInterface[device.PodRef]
	podRes     PodResourcesLister
	resource   string
	soon       chan struct{}
	reconcileE time.Duration
	// reconcileMu makes each reconcile (observe, then apply) whole: the loop and the NRI env
	// guard both reconcile, and an older observation must not be applied after a newer one.
	reconcileMu sync.Mutex

	// mu guards written: per pod, the annotation values this plugin last patched. The writer
	// compares with them before the lister: the informer may not have delivered the plugin's
	// own last patch yet, and a record changed back to what the stale lister shows (a claim
	// written, then swapped away) must still be written.
	mu      sync.Mutex
	written map[types.UID]map[string]*string
}

// NewPodSync builds the informer (field selector spec.nodeName=node) and the writer queue.
// podRes may be nil (no reconcile). Call Dirty as the ledger's dirty callback.
func NewPodSync(client kubernetes.Interface, node, resource string, podRes PodResourcesLister) *PodSync {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	return &PodSync{
		client: client, factory: f, lister: f.Core().V1().Pods().Lister(), podRes: podRes, resource: resource,
		queue:      workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[device.PodRef]()),
		soon:       make(chan struct{}, 1),
		reconcileE: 30 * time.Second,
		written:    map[types.UID]map[string]*string{},
	}
}

// Dirty queues a pod's claimed record for writing and asks for a reconcile soon.
func (s *PodSync) Dirty(r device.PodRef) {
	s.queue.Add(r)
	select {
	case s.soon <- struct{}{}:
	default:
	}
}

// Start attaches the ledger, starts the informer and waits for its sync, then reconciles once
// from PodResources (restart: nothing lost) before returning. Workers run until ctx ends.
func (s *PodSync) Start(ctx context.Context, l *ledger.Ledger) error {
	s.ledger = l
	inf := s.factory.Core().V1().Pods().Informer()
	// A pod re-created under the same name arrives after a relist as one update across UIDs:
	// podevents.Handler forgets the old pod first, so its claims are never served to the new
	// one (case C34). A same-UID update that changed the claimed record is re-asserted (C36).
	h := podevents.Handler(l.UpsertPod, func(o any) {
		if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		if p, ok := o.(*corev1.Pod); ok {
			l.DeletePod(p.UID)
			s.mu.Lock()
			delete(s.written, p.UID)
			s.mu.Unlock()
		}
	})
	update := h.UpdateFunc
	h.UpdateFunc = func(old, o any) { update(old, o); s.reassert(old, o) }
	_, err := inf.AddEventHandler(h)
	if err != nil {
		return err
	}
	s.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("pod informer did not sync")
	}
	s.reconcile(ctx)
	for i := 0; i < claimWriters; i++ {
		go s.writeLoop(ctx)
	}
	go s.reconcileLoop(ctx)
	go func() { <-ctx.Done(); s.queue.ShutDown() }()
	return nil
}

// reassert rewrites the pod's AnnoClaimed when an update changed it to anything but what this
// plugin last wrote (case C36): the record is the plugin's own, and a record someone else wrote,
// changed or removed must neither stand nor be charged by the extender. The written cache is
// dropped for the pod so that the writer compares with the pod as it is now.
func (s *PodSync) reassert(oldObj, newObj any) {
	o, ok1 := oldObj.(*corev1.Pod)
	n, ok2 := newObj.(*corev1.Pod)
	if !ok1 || !ok2 || o.UID != n.UID {
		return
	}
	ov, oh := o.Annotations[device.AnnoClaimed]
	nv, nh := n.Annotations[device.AnnoClaimed]
	if ov == nv && oh == nh {
		return
	}
	r := device.RefOf(n)
	if _, known := s.ledger.ClaimedRecord(n.UID); !known {
		return
	}
	s.mu.Lock()
	last, wrote := s.written[n.UID][device.AnnoClaimed]
	if wrote && (last == nil) == !nh && (last == nil || *last == nv) {
		s.mu.Unlock()
		return // this plugin's own write arriving
	}
	delete(s.written[n.UID], device.AnnoClaimed)
	s.mu.Unlock()
	klog.V(2).InfoS("Claimed allocation record changed by someone else; rewriting it", "pod", klog.KObj(n))
	s.Dirty(r)
}

func (s *PodSync) reconcile(ctx context.Context) {
	if s.podRes == nil {
		return
	}
	s.reconcileMu.Lock()
	defer s.reconcileMu.Unlock()
	obs, err := Observe(ctx, s.podRes, s.resource)
	if err != nil {
		klog.ErrorS(err, "Cannot reconcile claims from the kubelet")
		return
	}
	if changed := s.ledger.Reconcile(obs); len(changed) > 0 {
		klog.V(2).InfoS("Reconciled claims from the kubelet", "pods", len(changed))
	}
}

func (s *PodSync) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(s.reconcileE)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.soon:
			// Let the kubelet finish admitting the pod and checkpoint it first.
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second):
			}
		}
		s.reconcile(ctx)
	}
}

func (s *PodSync) writeLoop(ctx context.Context) {
	for {
		r, quit := s.queue.Get()
		if quit {
			return
		}
		if err := s.write(ctx, r); err != nil {
			klog.ErrorS(err, "Writing the claimed allocation failed; retrying", "pod", r.String())
			s.queue.AddRateLimited(r)
		} else {
			s.queue.Forget(r)
		}
		s.queue.Done(r)
	}
}

// write makes the pod's AnnoClaimed equal the ledger's record (absent when nothing is claimed)
// and, when the ledger republishes the pod's plan (publish.go), its AnnoPlanned too, in one patch.
func (s *PodSync) write(ctx context.Context, r device.PodRef) error {
	rec, ok := s.ledger.ClaimedRecord(r.UID)
	if !ok {
		return nil // pod gone or ended
	}
	var claimed, planned *string
	if len(rec.Containers) > 0 {
		v, err := device.EncodeAllocation(rec)
		if err != nil {
			return err
		}
		claimed = &v
	}
	if a := s.ledger.PlannedRewrite(r.UID); a != nil {
		v, err := device.EncodeAllocation(*a)
		if err != nil {
			return err
		}
		planned = &v
	}
	if s.current(r, device.AnnoClaimed, claimed) && (planned == nil || s.current(r, device.AnnoPlanned, planned)) {
		return nil
	}
	if err := PatchRecords(ctx, s.client, r, planned, claimed); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, known := s.ledger.ClaimedRecord(r.UID); !known {
		return nil // gone or terminating since: nothing more is written for it, and the delete handler may have run
	}
	w := s.written[r.UID]
	if w == nil {
		w = map[string]*string{}
		s.written[r.UID] = w
	}
	w[device.AnnoClaimed] = claimed
	if planned != nil {
		w[device.AnnoPlanned] = planned
	}
	return nil
}

// current reports whether the pod's annotation anno already has value (nil: absent): as this
// plugin last patched it, else as the lister has it; false when neither knows the pod.
func (s *PodSync) current(r device.PodRef, anno string, value *string) bool {
	same := func(cur *string) bool { return (cur == nil) == (value == nil) && (cur == nil || *cur == *value) }
	s.mu.Lock()
	last, ok := s.written[r.UID][anno]
	s.mu.Unlock()
	if ok {
		return same(last)
	}
	p, err := s.lister.Pods(r.Namespace).Get(r.Name)
	if err != nil || p.UID != r.UID {
		return false
	}
	if cur, has := p.Annotations[anno]; has {
		return same(&cur)
	}
	return same(nil)
}

// PatchRecords sets (or, with nil, removes) the pod's AnnoClaimed and, when planned is not nil,
// sets its AnnoPlanned, by one merge patch that carries the pod's UID as a precondition (a
// re-created pod of the same name is never touched).
func PatchRecords(ctx context.Context, c kubernetes.Interface, r device.PodRef, planned, claimed *string) error {
	annos := map[string]any{device.AnnoClaimed: claimed}
	if planned != nil {
		annos[device.AnnoPlanned] = *planned
	}
	patch := map[string]any{"metadata": map[string]any{
		"uid":         r.UID,
		"annotations": annos,
	}}
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.CoreV1().Pods(r.Namespace).Patch(ctx, r.Name, types.MergePatchType, b, metav1.PatchOptions{})
	return err
}

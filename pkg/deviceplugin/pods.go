package deviceplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/ledger"
	"github.com/hami-go/hami-go/pkg/nodeagent"
	"github.com/hami-go/hami-go/pkg/podevents"
)

// claimWriters is the number of goroutines that write claimed records: a burst of admissions
// claims many pods within a second, and one writer would put the last record seconds behind its
// container's creation. The queue never hands one pod to two writers at once.
const claimWriters = 4

// PodSync feeds the ledger from a pod informer on this node and writes claimed records to pods
// (AnnoClaimed) with retries.
type PodSync struct {
	ledger  *ledger.Ledger
	client  kubernetes.Interface
	lister  corelisters.PodLister
	factory informers.SharedInformerFactory
	queue   workqueue.TypedRateLimitingInterface[device.PodRef]

	// mu guards written: per pod, the AnnoClaimed value this plugin last patched (nil: removed).
	// The writer compares with it before the lister: the informer may not have delivered the
	// plugin's own last patch yet.
	mu      sync.Mutex
	written map[types.UID]*string

	// cacheDir is --hami-core-cache-dir ("" = none): the directories of a deleted pod's
	// containers are removed.
	cacheDir string
}

// NewPodSync builds the informer (field selector spec.nodeName=node) and the writer queue. Call
// Dirty as the ledger's dirty callback. cacheDir is the containers' HAMi-core cache directory
// (Config.HAMiCacheDir, "" = none), whose entries of pods gone from the node are removed.
func NewPodSync(client kubernetes.Interface, node, cacheDir string) *PodSync {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	return &PodSync{
		client: client, factory: f, lister: f.Core().V1().Pods().Lister(),
		queue:   workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[device.PodRef]()),
		written: map[types.UID]*string{}, cacheDir: cacheDir,
	}
}

// AwaitingAdmission lists the GPU pods placed on this node (a planned allocation) that the
// kubelet has not admitted yet: Pending, not being deleted, and without any status the kubelet
// writes once it has admitted (or refused) a pod (container statuses, a condition other than
// PodScheduled). Empty before Start.
func (s *PodSync) AwaitingAdmission() []string {
	if s.ledger == nil {
		return nil
	}
	pods, err := s.lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []string
	for _, p := range pods {
		if _, ok := p.Annotations[device.AnnoPlanned]; !ok || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodPending && p.Status.Phase != "" {
			continue
		}
		if len(p.Status.ContainerStatuses) > 0 || len(p.Status.InitContainerStatuses) > 0 {
			continue
		}
		admitted := false
		for _, c := range p.Status.Conditions {
			admitted = admitted || c.Type != corev1.PodScheduled
		}
		if !admitted {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	return out
}

// Held returns what the pods bound to this node (the informer's, spec.nodeName) hold of names,
// as the kubelet counts them (nodeagent.HeldBy): the floor of the figures the plugin publishes
// (Plugin.SetHeld). Nothing before Start.
func (s *PodSync) Held(names ...corev1.ResourceName) nodeagent.NodeResources {
	pods, err := s.lister.List(labels.Everything())
	if err != nil {
		pods = nil
	}
	return nodeagent.HeldBy(pods, names...)
}

// Dirty queues a pod's claimed record for writing.
func (s *PodSync) Dirty(r device.PodRef) { s.queue.Add(r) }

// Start attaches the ledger, starts the informer and waits for its sync (the ledger then has its
// pods and, from their claimed records, its claims back: restart, nothing lost) before
// returning. Workers run until ctx ends.
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
			s.removeCacheDirs(p)
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
	s.sweepCacheDirs(inf.GetStore().List())
	for i := 0; i < claimWriters; i++ {
		go s.writeLoop(ctx)
	}
	go func() { <-ctx.Done(); s.queue.ShutDown() }()
	return nil
}

// removeCacheDirs removes the HAMi-core cache directories of a deleted pod's containers: the
// pod is gone from the API server once the kubelet has stopped them.
func (s *PodSync) removeCacheDirs(p *corev1.Pod) {
	if s.cacheDir == "" {
		return
	}
	var names []string
	for _, c := range p.Spec.InitContainers {
		names = append(names, c.Name)
	}
	for _, c := range p.Spec.Containers {
		names = append(names, c.Name)
	}
	for _, name := range names {
		if err := nodeagent.RemoveCacheDir(s.cacheDir, containerCacheName(p.UID, name)); err != nil {
			klog.ErrorS(err, "Removing a deleted pod's HAMi-core cache directory failed", "pod", klog.KObj(p), "container", name)
		}
	}
}

// sweepCacheDirs removes the HAMi-core cache directories of pods no longer on the node (deleted
// while no agent ran), given the informer's synced pods, before any container of this agent is
// created. A DRA claim's directory is not a container's name, and is left to the DRA driver.
func (s *PodSync) sweepCacheDirs(pods []any) {
	if s.cacheDir == "" {
		return
	}
	live := map[types.UID]bool{}
	for _, o := range pods {
		if p, ok := o.(*corev1.Pod); ok {
			live[p.UID] = true
		}
	}
	removed, err := nodeagent.SweepCacheDirs(s.cacheDir, func(name string) bool {
		uid, ok := podOfCacheName(name)
		return ok && !live[uid]
	})
	if err != nil {
		klog.ErrorS(err, "Removing HAMi-core cache directories of pods gone failed", "dir", s.cacheDir)
	}
	if len(removed) > 0 {
		klog.InfoS("Removed HAMi-core cache directories of pods gone from the node", "dir", s.cacheDir, "count", len(removed))
	}
}

// Flush writes every queued claimed record, waiting until timeout fires, and stops the writers:
// the agent is stopping, and a claim it applied must reach its pod, where the next agent
// restores it from. It says whether everything was written.
func (s *PodSync) Flush(timeout <-chan time.Time) bool {
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		// ShutDownWithDrain waits only for the records a writer holds, not for those still
		// queued (client-go's workqueue), so the queue is first waited empty.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for s.queue.Len() > 0 {
			select {
			case <-tick.C:
			case <-stop:
				return
			}
		}
		s.queue.ShutDownWithDrain()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-timeout:
		close(stop)
		s.queue.ShutDown()
		return false
	}
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
	last, wrote := s.written[n.UID]
	if wrote && (last == nil) == !nh && (last == nil || *last == nv) {
		s.mu.Unlock()
		return // this plugin's own write arriving
	}
	delete(s.written, n.UID)
	s.mu.Unlock()
	klog.V(2).InfoS("Claimed allocation record changed by someone else; rewriting it", "pod", klog.KObj(n))
	s.Dirty(r)
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

// write makes the pod's AnnoClaimed equal the ledger's record (absent when nothing is claimed).
func (s *PodSync) write(ctx context.Context, r device.PodRef) error {
	rec, ok := s.ledger.ClaimedRecord(r.UID)
	if !ok {
		return nil // pod gone or ended
	}
	var claimed *string
	if len(rec.Containers) > 0 {
		v, err := device.EncodeAllocation(rec)
		if err != nil {
			return err
		}
		claimed = &v
	}
	if s.current(r, claimed) {
		return nil
	}
	if err := PatchClaimed(ctx, s.client, r, claimed); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, known := s.ledger.ClaimedRecord(r.UID); !known {
		return nil // gone or terminating since: nothing more is written for it, and the delete handler may have run
	}
	s.written[r.UID] = claimed
	return nil
}

// current reports whether the pod's AnnoClaimed already has value (nil: absent): as this plugin
// last patched it, else as the lister has it; false when neither knows the pod.
func (s *PodSync) current(r device.PodRef, value *string) bool {
	same := func(cur *string) bool { return (cur == nil) == (value == nil) && (cur == nil || *cur == *value) }
	s.mu.Lock()
	last, ok := s.written[r.UID]
	s.mu.Unlock()
	if ok {
		return same(last)
	}
	p, err := s.lister.Pods(r.Namespace).Get(r.Name)
	if err != nil || p.UID != r.UID {
		return false
	}
	if cur, has := p.Annotations[device.AnnoClaimed]; has {
		return same(&cur)
	}
	return same(nil)
}

// PatchClaimed sets (or, with nil, removes) the pod's AnnoClaimed by one merge patch that carries
// the pod's UID as a precondition (a re-created pod of the same name is never touched).
func PatchClaimed(ctx context.Context, c kubernetes.Interface, r device.PodRef, claimed *string) error {
	patch := map[string]any{"metadata": map[string]any{
		"uid":         r.UID,
		"annotations": map[string]any{device.AnnoClaimed: claimed},
	}}
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.CoreV1().Pods(r.Namespace).Patch(ctx, r.Name, types.MergePatchType, b, metav1.PatchOptions{})
	return err
}

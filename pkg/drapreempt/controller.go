package drapreempt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/draapi"
)

// Event reasons.
const (
	// ReasonPreempting is recorded on the preemptor when victims are evicted for it.
	ReasonPreempting = "Preempting"
	// ReasonPreempted is recorded on each victim: kube-scheduler's reason and words.
	ReasonPreempted = "Preempted"
	// ReasonNotHelpful is recorded on the preemptor when no preemption helps (once per reason).
	ReasonNotHelpful = "PreemptionNotHelpful"
)

// Config tunes the controller; zero fields take the defaults.
type Config struct {
	// Timeout is how long a preemption stays in flight (the pod left alone) before the
	// controller may preempt for it again. Default 2 minutes.
	Timeout time.Duration
	// RetryAfter is how long after an eviction refused with 429 (a PodDisruptionBudget) the
	// remaining victims are tried again. Default 10 s.
	RetryAfter time.Duration
	// Resync is how often every pending pod is looked at again. Default 15 s.
	Resync time.Duration
	// APITimeout bounds each API call. Default 10 s.
	APITimeout time.Duration
}

func (c *Config) defaults() {
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Minute
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = 10 * time.Second
	}
	if c.Resync <= 0 {
		c.Resync = 15 * time.Second
	}
	if c.APITimeout <= 0 {
		c.APITimeout = 10 * time.Second
	}
}

// inflight is one preemption under way, by preemptor UID.
type inflight struct {
	node    string
	started time.Time
	pending []*corev1.Pod // victims not evicted yet (an eviction refused with 429, or not tried)
	retryAt time.Time
}

// Controller preempts for pending pods whose claims of gpu.hami-go.io fit no node: for each such
// pod (spec.nodeName empty, PodScheduled False with reason Unschedulable, claims of the driver's
// class, not terminating), at most one preemption at a time. It sets the pod's
// status.nominatedNodeName first (KEP-5278: kube-scheduler then tries that node first), then
// evicts the victims through the Eviction API (PodDisruptionBudgets are the API server's to
// enforce; a 429 stops the round, the rest is retried after RetryAfter), and leaves the pod
// alone until it is bound, deleted, or Timeout passes.
type Controller struct {
	client   kubernetes.Interface
	pods     corelisters.PodLister
	claims   resourcelisters.ResourceClaimLister
	slices   resourcelisters.ResourceSliceLister
	pdbs     policylisters.PodDisruptionBudgetLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	clock    clock.WithTicker
	cfg      Config
	chooser  *Chooser

	mu       sync.Mutex
	flights  map[types.UID]*inflight
	lastWhy  map[types.UID]string // the last PreemptionNotHelpful reason recorded per pod
	ourNomin map[types.UID]string // nominations this controller wrote
}

// New registers the controller's handlers on the factory's informers (pods, resourceclaims,
// resourceslices, poddisruptionbudgets); start the factory after New. recorder may be nil.
func New(client kubernetes.Interface, f informers.SharedInformerFactory, recorder record.EventRecorder, clk clock.WithTicker, cfg Config) (*Controller, error) {
	cfg.defaults()
	if clk == nil {
		clk = clock.RealClock{}
	}
	c := &Controller{
		client: client, recorder: recorder, clock: clk, cfg: cfg, chooser: NewChooser(),
		pods:    f.Core().V1().Pods().Lister(),
		claims:  f.Resource().V1().ResourceClaims().Lister(),
		slices:  f.Resource().V1().ResourceSlices().Lister(),
		pdbs:    f.Policy().V1().PodDisruptionBudgets().Lister(),
		queue:   workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "dra-preemption"}),
		flights: map[types.UID]*inflight{}, lastWhy: map[types.UID]string{}, ourNomin: map[types.UID]string{},
	}
	pi := f.Core().V1().Pods().Informer()
	if _, err := pi.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.onPod(o) },
		UpdateFunc: func(_, o any) { c.onPod(o) },
		DeleteFunc: func(o any) { c.onPod(o) },
	}); err != nil {
		return nil, err
	}
	c.synced = append(c.synced, pi.HasSynced,
		f.Resource().V1().ResourceClaims().Informer().HasSynced,
		f.Resource().V1().ResourceSlices().Informer().HasSynced,
		f.Policy().V1().PodDisruptionBudgets().Informer().HasSynced)
	return c, nil
}

// onPod queues a pod that may need preemption, or whose preemption is in flight.
func (c *Controller) onPod(o any) {
	defer c.recoverPanic("pod event")
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	c.mu.Lock()
	_, flying := c.flights[p.UID]
	c.mu.Unlock()
	if flying || wantsPreemption(p) {
		key, _ := cache.MetaNamespaceKeyFunc(p)
		c.queue.Add(key)
	}
}

func (c *Controller) recoverPanic(what string) {
	if r := recover(); r != nil {
		klog.ErrorS(fmt.Errorf("panic: %v", r), "DRA preemption: recovered", "in", what)
	}
}

// wantsPreemption: pending, not terminating, unschedulable, with claims.
func wantsPreemption(p *corev1.Pod) bool {
	if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || len(p.Spec.ResourceClaims) == 0 {
		return false
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// Run works the queue until ctx ends, looking at every pending pod again each Resync.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return errors.New("DRA preemption: informers did not sync")
	}
	klog.InfoS("DRA preemption: running", "timeout", c.cfg.Timeout)
	go func() {
		t := c.clock.NewTicker(c.cfg.Resync)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
				c.resync()
			}
		}
	}()
	go func() { <-ctx.Done(); c.queue.ShutDown() }()
	for c.next(ctx) {
	}
	return nil
}

func (c *Controller) resync() {
	defer c.recoverPanic("resync")
	ps, _ := c.pods.List(labels.Everything())
	for _, p := range ps {
		c.onPod(p)
	}
}

func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return c.Sync(ctx, key)
	}()
	if err != nil {
		klog.ErrorS(err, "DRA preemption failed; retrying", "pod", key)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// Sync handles one pod by key (namespace/name): it finishes or advances its preemption in
// flight, or starts one. Tests call it directly.
func (c *Controller) Sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	p, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.forgetByKey()
		return nil
	} else if err != nil {
		return err
	}
	c.mu.Lock()
	f := c.flights[p.UID]
	c.mu.Unlock()
	if f != nil {
		return c.advance(ctx, p, f)
	}
	if !wantsPreemption(p) {
		return nil
	}
	if p.Status.NominatedNodeName != "" {
		c.mu.Lock()
		ours := c.ourNomin[p.UID] == p.Status.NominatedNodeName
		c.mu.Unlock()
		if !ours {
			return nil // kube-scheduler (or another component) nominated it: its business
		}
	}
	needs, ours, ready := c.podClaims(p)
	if !ours {
		return nil
	}
	if !ready {
		c.queue.AddAfter(key, c.cfg.RetryAfter)
		return nil
	}
	plan, err := c.chooser.Choose(p, needs, c.snapshot(p.UID))
	var np *NoPreemption
	if errors.As(err, &np) {
		c.notHelpful(p, np.Reason)
		return nil
	} else if err != nil {
		return err
	}
	return c.start(ctx, p, plan)
}

// podClaims returns the pod's claims: ours when one asks the driver's class; ready when every
// claim exists and none is allocated yet (an allocated claim: the pod is being bound).
func (c *Controller) podClaims(p *corev1.Pod) (needs []*resourceapi.ResourceClaim, ours, ready bool) {
	ready = true
	for _, pc := range p.Spec.ResourceClaims {
		name := ""
		if pc.ResourceClaimName != nil {
			name = *pc.ResourceClaimName
		} else {
			for _, st := range p.Status.ResourceClaimStatuses {
				if st.Name == pc.Name && st.ResourceClaimName != nil {
					name = *st.ResourceClaimName
				}
			}
		}
		if name == "" {
			ready = false
			continue
		}
		cl, err := c.claims.ResourceClaims(p.Namespace).Get(name)
		if err != nil {
			ready = false
			continue
		}
		for _, r := range cl.Spec.Devices.Requests {
			if r.Exactly != nil && r.Exactly.DeviceClassName == draapi.DriverName {
				ours = true
			}
			for _, s := range r.FirstAvailable {
				if s.DeviceClassName == draapi.DriverName {
					ours = true
				}
			}
		}
		if cl.Status.Allocation != nil {
			ready = false
		}
		needs = append(needs, cl)
	}
	return needs, ours, ready
}

// snapshot is the informers' view, without the nodes of other preemptions in flight.
func (c *Controller) snapshot(self types.UID) *Snapshot {
	sl, _ := c.slices.List(labels.Everything())
	cl, _ := c.claims.List(labels.Everything())
	ps, _ := c.pods.List(labels.Everything())
	s := &Snapshot{Slices: sl, Pods: make(map[types.UID]*corev1.Pod, len(ps)), Busy: map[string]bool{}, Disruptions: c.disruptions}
	for _, x := range cl {
		if x.Status.Allocation != nil {
			s.Claims = append(s.Claims, x)
		}
	}
	for _, p := range ps {
		s.Pods[p.UID] = p
	}
	c.mu.Lock()
	for uid, f := range c.flights {
		if uid != self {
			s.Busy[f.node] = true
		}
	}
	c.mu.Unlock()
	return s
}

// disruptions is kube-scheduler's count of PDB violations over victims in order (the
// extender's rule, pkg/extender pdb.go): each budget selecting a victim not yet in its
// disruptedPods is decremented from disruptionsAllowed; below zero, the victim violates.
func (c *Controller) disruptions(victims []*corev1.Pod) []bool {
	out := make([]bool, len(victims))
	allowed := map[types.UID]int32{}
	for i, p := range victims {
		if len(p.Labels) == 0 {
			continue
		}
		list, _ := c.pdbs.PodDisruptionBudgets(p.Namespace).List(labels.Everything())
		for _, b := range list {
			sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			if _, ok := b.Status.DisruptedPods[p.Name]; ok {
				continue
			}
			left, seen := allowed[b.UID]
			if !seen {
				left = b.Status.DisruptionsAllowed
			}
			left--
			allowed[b.UID] = left
			if left < 0 {
				out[i] = true
			}
		}
	}
	return out
}

func (c *Controller) notHelpful(p *corev1.Pod, why string) {
	c.mu.Lock()
	same := c.lastWhy[p.UID] == why
	c.lastWhy[p.UID] = why
	c.mu.Unlock()
	if same {
		return
	}
	klog.V(2).InfoS("DRA preemption: not helpful", "pod", klog.KObj(p), "reason", why)
	if c.recorder != nil {
		c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonNotHelpful, "GPU preemption (hami-go, DRA mode) is not helpful: %s", why)
	}
}

// start records the preemption in flight, nominates the pod, then evicts.
func (c *Controller) start(ctx context.Context, p *corev1.Pod, plan Plan) error {
	f := &inflight{node: plan.Node, started: c.clock.Now(), pending: plan.Victims}
	c.mu.Lock()
	if c.flights[p.UID] != nil {
		c.mu.Unlock()
		return nil
	}
	c.flights[p.UID] = f
	c.mu.Unlock()
	if err := c.nominate(ctx, p, plan.Node); err != nil {
		c.mu.Lock()
		delete(c.flights, p.UID)
		c.mu.Unlock()
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone or replaced meanwhile: nobody evicted
		}
		return fmt.Errorf("nominating the pod to node %s: %w", plan.Node, err)
	}
	c.mu.Lock()
	c.ourNomin[p.UID] = plan.Node
	delete(c.lastWhy, p.UID)
	c.mu.Unlock()
	names := make([]string, 0, len(plan.Victims))
	for _, v := range plan.Victims {
		names = append(names, v.Namespace+"/"+v.Name)
	}
	klog.InfoS("DRA preemption: nominated; evicting", "pod", klog.KObj(p), "node", plan.Node, "victims", names, "pdbViolations", plan.Choice.PDBViolations)
	if c.recorder != nil {
		c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonPreempting, "Preempting %d pod(s) of lower priority on node %s to free GPU capacity for its claims: %s", len(names), plan.Node, strings.Join(names, ", "))
	}
	return c.evictPending(ctx, p, f)
}

// nominate writes status.nominatedNodeName (UID precondition).
func (c *Controller) nominate(ctx context.Context, p *corev1.Pod, node string) error {
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": p.UID}, "status": map[string]any{"nominatedNodeName": node}})
	ctx, cancel := context.WithTimeout(ctx, c.cfg.APITimeout)
	defer cancel()
	_, err := c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	return err
}

// evictPending evicts the flight's pending victims in order; a 429 stops and schedules a retry.
func (c *Controller) evictPending(ctx context.Context, p *corev1.Pod, f *inflight) error {
	for {
		c.mu.Lock()
		if len(f.pending) == 0 {
			c.mu.Unlock()
			break
		}
		v := f.pending[0]
		c.mu.Unlock()
		ectx, cancel := context.WithTimeout(ctx, c.cfg.APITimeout)
		err := c.client.PolicyV1().Evictions(v.Namespace).Evict(ectx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &v.UID}},
		})
		cancel()
		switch {
		case err == nil:
			klog.InfoS("DRA preemption: evicted", "victim", klog.KObj(v), "preemptor", klog.KObj(p), "node", f.node)
			if c.recorder != nil {
				c.recorder.Eventf(v, corev1.EventTypeNormal, ReasonPreempted, "Preempted by pod %s on node %s", p.UID, f.node)
			}
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			// gone or replaced meanwhile
		case apierrors.IsTooManyRequests(err):
			c.mu.Lock()
			f.retryAt = c.clock.Now().Add(c.cfg.RetryAfter)
			c.mu.Unlock()
			klog.InfoS("DRA preemption: eviction refused (disruption budget); retrying later", "victim", klog.KObj(v), "preemptor", klog.KObj(p), "after", c.cfg.RetryAfter)
			key, _ := cache.MetaNamespaceKeyFunc(p)
			c.queue.AddAfter(key, c.cfg.RetryAfter)
			return nil
		default:
			key, _ := cache.MetaNamespaceKeyFunc(p)
			c.queue.AddAfter(key, c.cfg.RetryAfter)
			return fmt.Errorf("evicting %s/%s for %s/%s: %w", v.Namespace, v.Name, p.Namespace, p.Name, err)
		}
		c.mu.Lock()
		f.pending = f.pending[1:]
		c.mu.Unlock()
	}
	return nil
}

// advance finishes a preemption in flight (pod bound, terminating, or timed out) or retries its
// pending evictions when due; otherwise it looks again later.
func (c *Controller) advance(ctx context.Context, p *corev1.Pod, f *inflight) error {
	now := c.clock.Now()
	key, _ := cache.MetaNamespaceKeyFunc(p)
	switch {
	case p.Spec.NodeName != "" || p.DeletionTimestamp != nil:
		klog.V(2).InfoS("DRA preemption: done", "pod", klog.KObj(p), "node", p.Spec.NodeName, "after", now.Sub(f.started))
		c.forget(p.UID)
		return nil
	case now.Sub(f.started) >= c.cfg.Timeout:
		klog.InfoS("DRA preemption: the pod was not bound in time; it may preempt again", "pod", klog.KObj(p), "node", f.node, "timeout", c.cfg.Timeout)
		c.forget(p.UID)
		c.queue.Add(key)
		return nil
	}
	c.mu.Lock()
	due := len(f.pending) > 0 && !now.Before(f.retryAt)
	c.mu.Unlock()
	if due {
		return c.evictPending(ctx, p, f)
	}
	c.queue.AddAfter(key, c.cfg.Resync)
	return nil
}

func (c *Controller) forget(uid types.UID) {
	c.mu.Lock()
	delete(c.flights, uid)
	delete(c.lastWhy, uid)
	c.mu.Unlock()
}

// forgetByKey drops the state of deleted pods (known only by key when Sync runs).
func (c *Controller) forgetByKey() {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Flights of pods no longer listed are dropped.
	for uid := range c.flights {
		if !c.listed(uid) {
			delete(c.flights, uid)
			delete(c.lastWhy, uid)
			delete(c.ourNomin, uid)
		}
	}
}

// listed reports whether a pod of that UID is in the informer (caller holds mu).
func (c *Controller) listed(uid types.UID) bool {
	ps, _ := c.pods.List(labels.Everything())
	for _, p := range ps {
		if p.UID == uid {
			return true
		}
	}
	return false
}

// InFlight reports whether a preemption for pod uid is in flight, and its node.
func (c *Controller) InFlight(uid types.UID) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.flights[uid]
	if !ok {
		return "", false
	}
	return f.node, true
}

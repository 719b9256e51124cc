package drapreempt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	nodes    corelisters.NodeLister
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
		nodes:   f.Core().V1().Nodes().Lister(),
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
		f.Policy().V1().PodDisruptionBudgets().Informer().HasSynced,
		f.Core().V1().Nodes().Informer().HasSynced)
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
	ns, _ := c.nodes.List(labels.Everything())
	s := &Snapshot{Slices: sl, Pods: make(map[types.UID]*corev1.Pod, len(ps)), Busy: map[string]bool{}, Disruptions: c.disruptions,
		Nodes: make(map[string]*corev1.Node, len(ns))}
	for _, n := range ns {
		s.Nodes[n.Name] = n
	}
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

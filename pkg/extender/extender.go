package extender

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/podevents"
)

// Extender is the scheduler extender: the cache (state) and the verbs over it (sched), the API
// client it binds with, the event recorder that makes bind refusals visible in `kubectl
// describe pod`, and its metrics.
type Extender struct {
	cfg      Config
	cache    *Cache
	sched    *Scheduler
	client   kubernetes.Interface
	recorder record.EventRecorder
	clock    clock.WithTicker
	metrics  *Metrics
	ready    atomic.Bool
	// stopping: the context ended (SIGTERM); the verbs refuse while the binds in flight
	// (inflight) finish (leader.go).
	stopping atomic.Bool
	inflight binds
	// lead tracks its kube-scheduler's leadership (nil without Config.LeaderLease: leader.go).
	lead *leadership
	pods atomic.Pointer[corelisters.PodLister]
	// startup records, until ready, the resourceVersion of each pod the cache handled
	// (current.go).
	startup sync.Map

	// registerer is New's reg: /metrics registers its error counter there (nil: none).
	registerer prometheus.Registerer
}

// New builds an extender. reg receives its metrics (a fresh prometheus.Registry in tests);
// recorder records Events on pods (record.NewFakeRecorder in unit tests).
func New(cfg Config, client kubernetes.Interface, recorder record.EventRecorder, clk clock.WithTicker, reg prometheus.Registerer) (*Extender, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Extender{cfg: cfg, client: client, recorder: recorder, clock: clk, registerer: reg}
	e.cache = NewCache(cfg, clk)
	if cfg.LeaderLease != "" {
		var now time.Time
		if clk != nil {
			now = clk.Now()
		}
		e.lead = newLeadership(cfg.Identity, cfg.APITimeout, now)
	}
	e.sched = NewScheduler(e.cache)
	m, err := newMetrics(e.cache, reg)
	if err != nil {
		return nil, err
	}
	e.metrics = m
	return e, nil
}

// Cache returns the extender's cache (for tests and inspection).
func (e *Extender) Cache() *Cache { return e.cache }

// Scheduler returns the verbs over the extender's cache (Filter, Prioritize, ReserveOn): what
// pkg/schedplugin calls in-process instead of over HTTP. Safe for concurrent use.
func (e *Extender) Scheduler() *Scheduler { return e.sched }

// Ready reports whether the informers synced and the cache was rebuilt from them, and the
// extender is not stopping.
func (e *Extender) Ready() bool { return e.ready.Load() && !e.stopping.Load() }

// stripPod drops what the extender never reads from cached pods (managed fields, statuses of
// containers, conditions, volumes), to keep the informer's memory small.
func stripPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	p.ManagedFields = nil
	p.Spec.Volumes = nil
	p.Status.Conditions = nil
	p.Status.ContainerStatuses = nil
	p.Status.InitContainerStatuses = nil
	p.Status.EphemeralContainerStatuses = nil
	return p, nil
}

// Run starts the informers (Nodes, Pods, PodDisruptionBudgets, Leases in cfg.LeaseNamespace, and
// with cfg.LeaderLease its kube-scheduler's Lease), waits until they synced and every initial
// object went through the cache (full rebuild from the API), then reports ready, requeues and
// preempts for refused pods (requeue_loop.go, ownpreempt_loop.go), settles leadership hand-overs
// (leader.go) and sweeps stale reservations until ctx ends. When ctx ends (SIGTERM) it stops its
// own preemption first, then closes the verbs (ErrStopping) and waits for the binds in flight
// (at most 2 × APITimeout) before it returns.
func (e *Extender) Run(ctx context.Context) error {
	began := e.clock.Now()
	w, err := e.newWatches()
	if err != nil {
		return err
	}
	c := e.cache
	w.f.Start(ctx.Done())
	w.lf.Start(ctx.Done())
	defer w.f.Shutdown()
	defer w.lf.Shutdown()
	if w.sf != nil {
		w.sf.Start(ctx.Done())
		defer w.sf.Shutdown()
	}
	synced := make([]cache.InformerSynced, 0, len(w.regs))
	for _, r := range w.regs {
		synced = append(synced, r.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("informers did not sync: %w", ctx.Err())
	}
	if err := e.waitCurrent(ctx, e.handledAtLeast); err != nil {
		return err
	}
	e.ready.Store(true)
	e.startup.Clear()
	klog.InfoS("Cache rebuilt from the API; ready", "nodes", len(c.NodeNames()))
	// The pods refused until now (ErrNotReady) are requeued, as after a node's Lease held again.
	c.refusals.reopened(began, e.clock.Now())
	go e.requeueLoop(ctx, c)
	preempting := make(chan struct{})
	go func() { defer close(preempting); e.preemptLoop(ctx) }()
	if e.lead != nil {
		go e.handOverLoop(ctx)
	}
	t := e.clock.NewTicker(e.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// SIGTERM: own preemption stops first (an eviction in progress ends with ctx), then
			// the verbs close and the binds in flight finish.
			<-preempting
			if n := e.stop(); n > 0 {
				klog.InfoS("Stopping with binds still in flight after the drain timeout", "binds", n, "timeout", e.drainTimeout())
			}
			e.ready.Store(false)
			return nil
		case <-t.C():
			c.Sweep()
		}
	}
}

// watches are Run's informer factories, not yet started: f (all namespaces: Pods, Nodes,
// PodDisruptionBudgets), lf (Leases in cfg.LeaseNamespace) and sf (its kube-scheduler's Lease;
// nil without cfg.LeaderLease), with the registration of every handler added to them, whose
// HasSynced Run waits on before it reports ready.
type watches struct {
	f, lf, sf informers.SharedInformerFactory
	regs      []cache.ResourceEventHandlerRegistration
}

// newWatches builds Run's informer factories and adds the handlers that feed the cache (pods,
// nodes, Leases), track the kube-scheduler's leadership (with cfg.LeaderLease) and list the
// PodDisruptionBudgets the preemption's disruption check reads. It also publishes the pod lister
// (e.pods). Nothing starts here: Run starts the factories.
func (e *Extender) newWatches() (*watches, error) {
	w := &watches{
		f:  informers.NewSharedInformerFactory(e.client, 0),
		lf: informers.NewSharedInformerFactoryWithOptions(e.client, 0, informers.WithNamespace(e.cfg.LeaseNamespace)),
	}
	f := w.f
	podInf := f.Core().V1().Pods()
	if err := podInf.Informer().SetTransform(stripPod); err != nil {
		return nil, fmt.Errorf("pod informer transform: %w", err)
	}
	lister := podInf.Lister()
	e.pods.Store(&lister)
	if err := e.watchCache(w, podInf.Informer(), lister); err != nil {
		return nil, err
	}
	if e.lead != nil {
		if err := e.watchSchedulerLease(w); err != nil {
			return nil, err
		}
	}
	pdbInf := f.Policy().V1().PodDisruptionBudgets()
	r, err := pdbInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{})
	if err != nil {
		return nil, err
	}
	w.regs = append(w.regs, r)
	e.sched.SetDisruptionCheck(pdbViolation(lister, pdbInf.Lister()))
	return w, nil
}

// watchCache adds the cache's handlers to w: pods (from podInf, whose deletes ask lister whether
// a pod of that namespace and name still exists, and under which UID), nodes (w.f) and the
// agents' Leases (w.lf). Their registrations go to w.regs.
func (e *Extender) watchCache(w *watches, podInf cache.SharedIndexInformer, lister corelisters.PodLister) error {
	exists := func(ns, name string) (types.UID, bool) {
		p, err := lister.Pods(ns).Get(name)
		if err != nil {
			return "", false
		}
		return p.UID, true
	}
	c := e.cache
	// A pod re-created under the same name arrives after a relist as one update across UIDs:
	// podevents.Handler releases the old pod first (case C34).
	r, err := podInf.AddEventHandler(podevents.Handler(
		func(p *corev1.Pod) { c.OnPod(p); e.handled(p) },
		func(o any) { c.OnPodDelete(o, exists); e.handled(o) },
	))
	if err != nil {
		return err
	}
	w.regs = append(w.regs, r)
	r, err = w.f.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.OnNode(o.(*corev1.Node)) },
		UpdateFunc: func(_, o any) { c.OnNode(o.(*corev1.Node)) },
		DeleteFunc: c.OnNodeDelete,
	})
	if err != nil {
		return err
	}
	w.regs = append(w.regs, r)
	r, err = w.lf.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.OnLease(o.(*coordinationv1.Lease)) },
		UpdateFunc: func(_, o any) { c.OnLease(o.(*coordinationv1.Lease)) },
		DeleteFunc: c.OnLeaseDelete,
	})
	if err != nil {
		return err
	}
	w.regs = append(w.regs, r)
	return nil
}

// watchSchedulerLease builds w.sf, an informer factory over cfg.LeaderLease alone (its
// kube-scheduler's Lease, "namespace/name"), and adds the handler that tracks the leadership
// (onSchedulerLease; nil on delete). Its registration goes to w.regs.
func (e *Extender) watchSchedulerLease(w *watches) error {
	ns, name, err := parseLeaderLease(e.cfg.LeaderLease)
	if err != nil {
		return err
	}
	// Only the one Lease: kube-scheduler's Role grants it by name (resourceNames), which a
	// list and watch with this field selector satisfy.
	w.sf = informers.NewSharedInformerFactoryWithOptions(e.client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name }))
	r, err := w.sf.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { e.onSchedulerLease(o.(*coordinationv1.Lease)) },
		UpdateFunc: func(_, o any) { e.onSchedulerLease(o.(*coordinationv1.Lease)) },
		DeleteFunc: func(any) { e.onSchedulerLease(nil) },
	})
	if err != nil {
		return err
	}
	w.regs = append(w.regs, r)
	return nil
}

// lookupPod returns the pod with exactly key k: from the informer, else from the API.
func (e *Extender) lookupPod(ctx context.Context, k device.PodRef) (*corev1.Pod, error) {
	if l := e.pods.Load(); l != nil {
		if p, err := (*l).Pods(k.Namespace).Get(k.Name); err == nil && p.UID == k.UID {
			return p, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.APITimeout)
	defer cancel()
	p, err := e.client.CoreV1().Pods(k.Namespace).Get(ctx, k.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if p.UID != k.UID {
		return nil, fmt.Errorf("pod %s/%s has UID %s now, not %s", k.Namespace, k.Name, p.UID, k.UID)
	}
	return p, nil
}

func podRef(k device.PodRef) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: k.Namespace, Name: k.Name, UID: k.UID}
}

// EventReasonBindFailed is the reason of the Warning Event recorded on a pod whose bind the
// extender refused or that failed.
const EventReasonBindFailed = "GPUBindFailed"

// Bind books the pod on the node kube-scheduler chose (BookForBind) and creates the Binding in
// ONE API write: the planned allocation travels as the Binding's annotation AnnoPlanned, which
// the API server copies onto the pod together with spec.nodeName in the same update, with the
// pod's UID as precondition (kube-apiserver pkg/registry/core/pod/storage/storage.go,
// BindingREST.Create → assignPod → setPodHostAndAnnotations). nodeName and plan thus land
// atomically. On an error it reconciles from the API before answering. Until Ready it refuses with
// ErrNotReady and writes nothing: a cache not yet rebuilt would book GPUs that are in use.
//
// From SIGTERM on (the context of Run ended) it refuses with ErrStopping; a Bind already in
// flight finishes and Run waits for it. With Config.LeaderLease it refuses while its
// kube-scheduler does not lead (ErrNotLeading) and in a new term's hand-over (ErrHandOver).
func (e *Extender) Bind(ctx context.Context, k device.PodRef, node string) error {
	if err := e.enterBind(); err != nil {
		return e.refused(k, node, err)
	}
	defer e.leaveBind()
	if err := e.refusal(); err != nil {
		return e.refused(k, node, err)
	}
	pod, err := e.lookupPod(ctx, k)
	if err != nil {
		return e.refused(k, node, fmt.Errorf("pod %s: %v", k.Exact(), err))
	}
	req, ours, err := e.cache.ParseRequest(pod)
	if err != nil {
		return e.refused(k, node, err)
	}
	if !ours {
		// Not a GPU pod of ours: bind it as the default binder would.
		return e.refused(k, node, e.createBinding(ctx, k, node, nil))
	}
	alloc, already, err := e.sched.BookForBind(k, req, node)
	if err != nil {
		return e.refused(k, node, err)
	}
	if already && pod.Spec.NodeName == node {
		return nil
	}
	if e.lead != nil {
		// Its kube-scheduler lost the Lease since the verb began (the release at its SIGTERM
		// is seen here first): no Binding, so none commits under the next leader (leader.go).
		if why := e.lead.refusal(e.clock.Now()); why != nil {
			e.sched.FinishBind(k, node, outcomeFailed)
			return e.refused(k, node, why)
		}
	}
	enc, err := device.EncodeAllocation(*alloc)
	if err != nil {
		e.sched.FinishBind(k, node, outcomeFailed)
		return e.refused(k, node, fmt.Errorf("encoding the planned allocation: %w", err))
	}
	err = e.createBinding(ctx, k, node, map[string]string{device.AnnoPlanned: enc})
	if err == nil {
		e.sched.FinishBind(k, node, outcomeBound)
		klog.V(2).InfoS("Bound", "pod", klog.KRef(k.Namespace, k.Name), "node", node)
		return nil
	}
	o := e.reconcile(ctx, k, node, err)
	e.sched.FinishBind(k, node, o)
	if o == outcomeBound {
		klog.InfoS("Bind call failed but the pod is bound", "pod", klog.KRef(k.Namespace, k.Name), "node", node, "err", err)
		return nil
	}
	return e.refused(k, node, fmt.Errorf("bind to node %s: %w", node, err))
}

// refused records a bind failure (Event, log, metrics) and returns it; nil passes through.
func (e *Extender) refused(k device.PodRef, node string, err error) error {
	if err == nil {
		return nil
	}
	klog.InfoS("Bind refused", "pod", klog.KRef(k.Namespace, k.Name), "node", node, "reason", err.Error())
	if e.recorder != nil {
		e.recorder.Eventf(podRef(k), corev1.EventTypeWarning, EventReasonBindFailed, "hami-go could not bind to %s: %v", node, err)
	}
	return err
}

// createBinding creates the pod's Binding to node (UID precondition k.UID); the API server merges
// annotations (nil: none) into the pod's in the same write that sets spec.nodeName.
func (e *Extender) createBinding(ctx context.Context, k device.PodRef, node string, annotations map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.APITimeout)
	defer cancel()
	return e.client.CoreV1().Pods(k.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name, UID: k.UID, Annotations: annotations},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{})
}

// reconcile decides what a failed bind left behind, by reading the pod back: bound to node →
// bound; gone, replaced or bound elsewhere → failed; unbound after an API status error → failed;
// unbound after a timeout or transport error, or unreadable → unknown (the Binding may still be
// committed; the informer settles it).
func (e *Extender) reconcile(ctx context.Context, k device.PodRef, node string, callErr error) bindOutcome {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.APITimeout)
	defer cancel()
	p, err := e.client.CoreV1().Pods(k.Namespace).Get(rctx, k.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return outcomeFailed
	case err != nil:
		return outcomeUnknown
	case p.UID != k.UID:
		return outcomeFailed
	case p.Spec.NodeName == node:
		return outcomeBound
	case p.Spec.NodeName != "":
		return outcomeFailed
	}
	var st apierrors.APIStatus
	if errors.As(callErr, &st) && !apierrors.IsTimeout(callErr) && !apierrors.IsServerTimeout(callErr) {
		return outcomeFailed
	}
	return outcomeUnknown
}

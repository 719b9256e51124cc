package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/dra"
	"github.com/hami-go/hami-go/pkg/draapi"
)

const (
	// templateName is the ResourceClaimTemplate every burst pod's claim comes from.
	templateName = "hami-go-gpu-drapack"
	// claimName is the pod's claim (and the webhook's request) name.
	claimName = "gpu"
)

// claimTemplate is what hami-go's webhook writes in DRA mode for a container asking
// nvidia.com/gpu: 1 and nvidia.com/gpumem: memMiB (pkg/webhook claimSpec: one request "gpu" for
// one device of DeviceClass gpu.hami-go.io, capacity memory memMiB MiB as bytes, allocation mode
// written out).
func claimTemplate(ns string, memMiB int64) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: templateName},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: claimName, Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: draapi.DriverName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
					draapi.CapacityMemory: *resource.NewQuantity(memMiB*dra.MiB, resource.BinarySI)}},
			}}}}}},
	}
}

// burstPod is pod i of a burst as the webhook leaves it: the claim from claimTemplate, the
// container's requests and limits of hami-go.io/gpu-memory (memMiB), scheduler sched.
func burstPod(ns, sched string, i int, memMiB int64) *corev1.Pod {
	mem := corev1.ResourceList{device.ResourceGPUMemory: *resource.NewQuantity(memMiB, resource.DecimalSI)}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("w%03d", i), Labels: map[string]string{benchLabel: "true"}},
		Spec: corev1.PodSpec{
			SchedulerName:                 sched,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: claimName, ResourceClaimTemplateName: ptr.To(templateName)}},
			Containers: []corev1.Container{{Name: "worker", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: mem, Limits: mem, Claims: []corev1.ResourceClaim{{Name: claimName}}}}},
		},
	}
}

// Burst is what one burst of identical pods got.
type Burst struct {
	// GPUs is the number of distinct devices the burst's claims were allocated on.
	GPUs int `json:"gpus"`
	// Ideal is the fewest GPUs the burst fits on (IdealGPUs).
	Ideal int `json:"ideal"`
	// Nodes is the number of distinct nodes the pods were bound to.
	Nodes int `json:"nodes"`
	// Refused is the number of pods not bound within the burst timeout.
	Refused int `json:"refused"`
	// OverCommitted is the number of devices whose claims' memory exceeds the device's.
	OverCommitted int `json:"overCommitted"`
	// Seconds is the time from the first create to the last pod bound (or the timeout).
	Seconds float64 `json:"seconds"`
	// Placement is the pods per device, "node/device:count", sorted.
	Placement []string `json:"placement"`
}

// IdealGPUs is the fewest GPUs of bookable MiB (and split count split) that pods one-GPU claims
// of memMiB each fit on: pods over the claims one GPU takes, rounded up.
func IdealGPUs(pods int, memMiB, bookable int64, split int) int {
	per := int(bookable / memMiB)
	if per > split {
		per = split
	}
	if per < 1 {
		return 0
	}
	return (pods + per - 1) / per
}

// podWatch dispatches the namespace's pod events to the simulated nodes (the kubelet stand-in)
// and to the waiting burst.
type podWatch struct {
	cs    kubernetes.Interface
	lag   time.Duration
	mu    sync.Mutex
	nodes map[string]*simNode
	bound map[string]string // pod name -> node, pods of the namespace bound now
	kick  chan struct{}
}

func startPodWatch(ctx context.Context, cs kubernetes.Interface, ns string, lag time.Duration) (*podWatch, error) {
	w := &podWatch{cs: cs, lag: lag, nodes: map[string]*simNode{}, bound: map[string]string{}, kick: make(chan struct{}, 1)}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = fields.Everything().String() }))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.seen(ctx, o.(*corev1.Pod)) },
		UpdateFunc: func(_, o any) { w.seen(ctx, o.(*corev1.Pod)) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				w.deleted(ctx, p)
			}
		},
	}); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("pod informer did not sync")
	}
	return w, nil
}

// use makes nodes the simulated nodes pods are dispatched to.
func (w *podWatch) use(nodes []*simNode) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nodes = map[string]*simNode{}
	for _, n := range nodes {
		w.nodes[n.name] = n
	}
}

func (w *podWatch) seen(ctx context.Context, p *corev1.Pod) {
	if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
		return
	}
	w.mu.Lock()
	n := w.nodes[p.Spec.NodeName]
	_, had := w.bound[p.Name]
	w.bound[p.Name] = p.Spec.NodeName
	w.mu.Unlock()
	if !had {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	if n != nil {
		n.bound(ctx, w.cs, w.lag, p)
	}
}

func (w *podWatch) deleted(ctx context.Context, p *corev1.Pod) {
	w.mu.Lock()
	n := w.nodes[p.Spec.NodeName]
	delete(w.bound, p.Name)
	w.mu.Unlock()
	if n != nil {
		n.gone(ctx, p.UID)
	}
}

// boundCount is the number of the namespace's pods bound now.
func (w *podWatch) boundCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.bound)
}

// runBurst creates pods identical pods at once (one goroutine each, as a controller scaling up
// does at most), waits until all are bound or timeout, and reads where their claims went.
func runBurst(ctx context.Context, cs kubernetes.Interface, cfg Config, w *podWatch, nodes []*simNode, sched string, pods int) (Burst, error) {
	start := time.Now()
	errs := make(chan error, pods)
	for i := 0; i < pods; i++ {
		go func(i int) {
			_, err := cs.CoreV1().Pods(cfg.Namespace).Create(ctx, burstPod(cfg.Namespace, sched, i, cfg.GPUMemMiB), metav1.CreateOptions{})
			errs <- err
		}(i)
	}
	for i := 0; i < pods; i++ {
		if err := <-errs; err != nil {
			return Burst{}, fmt.Errorf("create pod: %w", err)
		}
	}
	deadline := time.After(cfg.BurstTimeout)
wait:
	for w.boundCount() < pods {
		select {
		case <-ctx.Done():
			return Burst{}, ctx.Err()
		case <-deadline:
			break wait
		case <-w.kick:
		}
	}
	took := time.Since(start)
	b, err := readBurst(ctx, cs, cfg, nodes, pods)
	b.Seconds = took.Seconds()
	return b, err
}

// readBurst reads the namespace's claims and pods after a burst.
func readBurst(ctx context.Context, cs kubernetes.Interface, cfg Config, nodes []*simNode, pods int) (Burst, error) {
	claims, err := cs.ResourceV1().ResourceClaims(cfg.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Burst{}, err
	}
	podList, err := cs.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Burst{}, err
	}
	bookable := map[string]int64{}
	for _, n := range nodes {
		for d, m := range n.bookable {
			bookable[n.name+"/"+d] = m
		}
	}
	used := map[string]int64{}
	count := map[string]int{}
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			key := r.Pool + "/" + r.Device
			count[key]++
			if q, ok := r.ConsumedCapacity[draapi.CapacityMemory]; ok {
				used[key] += q.Value() / dra.MiB
			}
		}
	}
	b := Burst{GPUs: len(count)}
	nodeSet := map[string]bool{}
	for _, p := range podList.Items {
		if p.Spec.NodeName == "" {
			b.Refused++
		} else {
			nodeSet[p.Spec.NodeName] = true
		}
	}
	b.Nodes = len(nodeSet)
	for key, n := range count {
		b.Placement = append(b.Placement, fmt.Sprintf("%s:%d", key, n))
		if used[key] > bookable[key] {
			b.OverCommitted++
		}
	}
	sort.Strings(b.Placement)
	var anyBookable int64
	for _, m := range bookable {
		anyBookable = m
		break
	}
	b.Ideal = IdealGPUs(pods, cfg.GPUMemMiB, anyBookable, cfg.SplitCount)
	return b, nil
}

// clearBurst deletes the namespace's pods, waits until their claims are gone
// (kube-controller-manager deletes them) and the drivers are back to the idle order.
func clearBurst(ctx context.Context, cs kubernetes.Interface, cfg Config, w *podWatch, nodes []*simNode) error {
	if err := cs.CoreV1().Pods(cfg.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("delete pods: %w", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		claims, err := cs.ResourceV1().ResourceClaims(cfg.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		pods, err := cs.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(claims.Items) == 0 && len(pods.Items) == 0 && w.boundCount() == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d claims and %d pods still there 60 s after the burst", len(claims.Items), len(pods.Items))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, n := range nodes {
		n.unprepareAll(ctx)
	}
	return waitIdleOrder(ctx, cs, nodes, cfg.RepublishDelay+30*time.Second)
}

// Variant is one measured combination.
type Variant struct {
	// Order is the drivers' --device-order.
	Order dra.DeviceOrder `json:"order"`
	// Scheduler is the pods' schedulerName (a kube-scheduler profile).
	Scheduler string `json:"scheduler"`
	// Nodes is the number of simulated nodes; Pods the pods per burst.
	Nodes int `json:"nodes"`
	Pods  int `json:"pods"`
	// Bursts are the measured bursts.
	Bursts []Burst `json:"bursts"`
}

// runOrder measures every (scheduler, nodes, pods) combination with the drivers in order o:
// for each node count it starts fresh drivers on that many nodes (deleting the previous ones'
// ResourceSlices), then runs cfg.Bursts bursts of each size with each scheduler, interleaved.
func runOrder(ctx context.Context, cs kubernetes.Interface, cfg Config, w *podWatch, o dra.DeviceOrder) ([]Variant, error) {
	var out []Variant
	for _, nn := range cfg.Nodes {
		nctx, stop := context.WithCancel(ctx)
		nodes := make([]*simNode, nn)
		for i := range nodes {
			name := fmt.Sprintf("drapack-node-%02d", i)
			var err error
			if nodes[i], err = startNode(nctx, cs, cfg, name, o, filepath.Join(cfg.WorkDir, string(o), name)); err != nil {
				stop()
				return out, err
			}
		}
		w.use(nodes)
		if err := waitIdleOrder(ctx, cs, nodes, 30*time.Second); err != nil {
			stop()
			return out, err
		}
		// nodes from a larger earlier set are kept but cordoned so they take nothing
		if err := cordonOthers(ctx, cs, nn); err != nil {
			stop()
			return out, err
		}
		vs := map[string]*Variant{}
		var keys []string
		flush := func() {
			for _, k := range keys {
				out = append(out, *vs[k])
			}
			keys = nil
		}
		for r := 0; r < cfg.Bursts; r++ {
			for _, pods := range cfg.Pods {
				for _, sched := range cfg.Schedulers {
					key := fmt.Sprintf("%s/%d", sched, pods)
					v := vs[key]
					if v == nil {
						v = &Variant{Order: o, Scheduler: sched, Nodes: nn, Pods: pods}
						vs[key] = v
						keys = append(keys, key)
					}
					b, err := runBurst(ctx, cs, cfg, w, nodes, sched, pods)
					if err != nil {
						stop()
						flush()
						return out, err
					}
					v.Bursts = append(v.Bursts, b)
					klog.InfoS("Burst", "order", o, "scheduler", sched, "nodes", nn, "pods", pods, "round", r+1, "gpus", b.GPUs, "ideal", b.Ideal,
						"nodesUsed", b.Nodes, "refused", b.Refused, "overCommitted", b.OverCommitted, "took", time.Duration(b.Seconds*float64(time.Second)).Round(time.Millisecond), "placement", b.Placement)
					if err := clearBurst(ctx, cs, cfg, w, nodes); err != nil {
						stop()
						flush()
						return out, err
					}
				}
			}
		}
		flush()
		stop()
		if err := deleteSlices(ctx, cs); err != nil {
			return out, err
		}
	}
	return out, nil
}

// cordonOthers marks the bench nodes beyond the first n unschedulable and the first n
// schedulable.
func cordonOthers(ctx context.Context, cs kubernetes.Interface, n int) error {
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: benchLabel + "=true"})
	if err != nil {
		return err
	}
	for i := range l.Items {
		node := &l.Items[i]
		var idx int
		if _, err := fmt.Sscanf(node.Name, "drapack-node-%d", &idx); err != nil {
			continue
		}
		want := idx >= n
		if node.Spec.Unschedulable == want {
			continue
		}
		node.Spec.Unschedulable = want
		if _, err := cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("cordon %s: %w", node.Name, err)
		}
	}
	return nil
}

// deleteSlices deletes the ResourceSlices of driver gpu.hami-go.io and waits until none is left.
func deleteSlices(ctx context.Context, cs kubernetes.Interface) error {
	opts := metav1.ListOptions{FieldSelector: "spec.driver=" + draapi.DriverName}
	for i := 0; ; i++ {
		if err := cs.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, opts); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete ResourceSlices: %w", err)
		}
		l, err := cs.ResourceV1().ResourceSlices().List(ctx, opts)
		if err != nil {
			return err
		}
		if len(l.Items) == 0 {
			return nil
		}
		if i > 100 {
			return fmt.Errorf("%d ResourceSlices still there", len(l.Items))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/hack/bench/e2eresult"
	"github.com/hami-go/hami-go/pkg/device"
)

// Result and RunResult are e2esched's JSON (package e2eresult, which hack/bench/report reads).
type (
	Result    = e2eresult.Result
	RunResult = e2eresult.Run
)

// rates returns, for binding times (any origin), the seconds from the first binding to the last,
// the rate over that span ((n-1)/seconds) and the steady rate between the 10th and the 90th
// percentile binding (without ramp-up and tail).
func rates(bound []time.Duration) (seconds, overall, steady float64) {
	if len(bound) < 2 {
		return 0, 0, 0
	}
	s := append([]time.Duration(nil), bound...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	seconds = (s[len(s)-1] - s[0]).Seconds()
	if seconds > 0 {
		overall = float64(len(s)-1) / seconds
	}
	lo, hi := len(s)/10, len(s)*9/10
	if hi > lo && s[hi] > s[lo] {
		steady = float64(hi-lo) / (s[hi] - s[lo]).Seconds()
	}
	return seconds, overall, steady
}

// benchPod is pod i of a run of variant.
func benchPod(cfg Config, variant, run string, i int) *corev1.Pod {
	limits := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: fmt.Sprintf("%s-%s-%04d", variant, run, i),
			Labels: map[string]string{"hami-go.io/bench-run": variant + "-" + run}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{benchLabel: "true"},
			Tolerations:  []corev1.Toleration{{Key: benchTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers:   []corev1.Container{{Name: "main", Image: "docker.io/hami-go/workload:0.1.0", Command: []string{"pause"}}},
		},
	}
	switch {
	case variant == e2eresult.VariantExtender || variant == e2eresult.VariantPlugins:
		p.Spec.SchedulerName = ExtenderScheduler
		if variant == e2eresult.VariantPlugins {
			p.Spec.SchedulerName = PluginsScheduler
		}
		limits["nvidia.com/gpumem"] = *resource.NewQuantity(cfg.GPUMemMiB, resource.DecimalSI)
	case e2eresult.IsDRA(variant):
		p.Spec.SchedulerName = DRAScheduler
		p.Labels[device.LabelOptOut] = "true"
		withClaim(p, variant)
		return p
	default:
		p.Spec.SchedulerName = BaselineScheduler
		p.Labels[device.LabelOptOut] = "true"
	}
	p.Spec.Containers[0].Resources.Limits = limits
	return p
}

// variants are the variants of each run, in the order they run: extender, baseline, then
// (cfg.Plugins) plugins, then (cfg.DRA) dra-plain and dra-slices.
func variants(cfg Config) []string {
	v := []string{e2eresult.VariantExtender, e2eresult.VariantBaseline}
	if cfg.Plugins {
		v = append(v, e2eresult.VariantPlugins)
	}
	if cfg.DRA {
		v = append(v, e2eresult.VariantDRAPlain, e2eresult.VariantDRASlices)
	}
	return v
}

// variantConfig is cfg for a run of variant: Pods is cfg.DRAPods for the DRA variants.
func variantConfig(cfg Config, variant string) Config {
	if e2eresult.IsDRA(variant) {
		cfg.Pods = cfg.DRAPods
	}
	return cfg
}

// runOnce creates cfg.Pods pods of variant while no scheduler of theirs runs (for a DRA variant
// it also waits until kube-controller-manager has made every pod's ResourceClaim), then starts
// that variant's kube-scheduler (calling extenderURL for the extender variant) on a full queue,
// and waits until all pods are bound (or RunTimeout); the scheduler is stopped before it returns.
func runOnce(ctx context.Context, cs kubernetes.Interface, cfg Config, variant, extenderURL string, run int) (RunResult, error) {
	r := RunResult{Variant: variant, Run: run}
	id := strconv.Itoa(run)
	sel := "hami-go.io/bench-run=" + variant + "-" + id
	var (
		mu    sync.Mutex
		start time.Time
	)
	bound := map[string]time.Duration{}
	done := make(chan struct{})
	claimed := map[string]bool{} // DRA: pods whose ResourceClaim exists (their status names it)
	claimsDone := make(chan struct{})
	// The extender's and the plugin's Bind set nodeName and the plan (device.AnnoPlanned) in one
	// write: a pod of theirs seen bound without it was bound by someone else (DefaultBinder).
	planned := variant == e2eresult.VariantExtender || variant == e2eresult.VariantPlugins
	unplanned := 0
	// An informer (list, then watch, re-established when the server ends a watch) sees every
	// binding once; the first time a pod shows a nodeName is its binding time.
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	seen := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if podClaimed(p) && !claimed[p.Name] {
			claimed[p.Name] = true
			if len(claimed) == cfg.Pods {
				close(claimsDone)
			}
		}
		if p.Spec.NodeName == "" {
			return
		}
		if _, ok := bound[p.Name]; ok {
			return
		}
		bound[p.Name] = time.Since(start)
		if planned && p.Annotations[device.AnnoPlanned] == "" {
			unplanned++
		}
		if len(bound) == cfg.Pods {
			close(done)
		}
	}
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }}); err != nil {
		return r, err
	}
	ictx, stopInf := context.WithCancel(ctx)
	defer stopInf()
	f.Start(ictx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ictx.Done(), inf.HasSynced) {
		return r, fmt.Errorf("pod informer did not sync: %w", ctx.Err())
	}
	mu.Lock()
	start = time.Now()
	mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, cfg.RunTimeout)
	defer cancel()
	if err := parallel(cctx, cfg.Pods, 32, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().Pods(cfg.Namespace).Create(ctx, benchPod(cfg, variant, id, i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return r, fmt.Errorf("%s run %d: create pods: %w", variant, run, err)
	}
	created := time.Since(start)
	r.CreateSeconds = created.Seconds()
	if e2eresult.IsDRA(variant) {
		select {
		case <-claimsDone:
		case <-cctx.Done():
			return r, fmt.Errorf("%s run %d: ResourceClaims of the pods not all made by kube-controller-manager: %w", variant, run, cctx.Err())
		}
		r.ClaimsSeconds = time.Since(start).Seconds() - r.CreateSeconds
	}
	profile, url := BaselineScheduler, ""
	switch {
	case variant == e2eresult.VariantExtender:
		profile, url = ExtenderScheduler, extenderURL
	case variant == e2eresult.VariantPlugins:
		profile = PluginsScheduler
	case e2eresult.IsDRA(variant):
		profile = DRAScheduler
	}
	prof := startRunProfiles(cfg, variant, run) // nil unless --cpu-profile-dir
	defer prof.stop()
	sctx, stopSched := context.WithCancel(cctx)
	defer stopSched()
	selfBefore, err := selfCPU()
	if err != nil {
		return r, err
	}
	schedCPU, err := startScheduler(sctx, cfg, profile, url, prof.schedulerPort())
	if err != nil {
		return r, err
	}
	prof.schedulerStarted(sctx)
	select {
	case <-done:
	case <-cctx.Done():
	}
	prof.endScheduler()
	stopSched()
	r.SchedulerCPUSeconds = (<-schedCPU).Seconds()
	selfAfter, err := selfCPU()
	if err != nil {
		return r, err
	}
	prof.stop()
	r.SelfCPUSeconds = (selfAfter - selfBefore).Seconds()
	stopInf()
	mu.Lock()
	times := make([]time.Duration, 0, len(bound))
	for _, d := range bound {
		times = append(times, d)
	}
	mu.Unlock()
	r.Bound = len(times)
	r.Seconds, r.PodsPerSecond, r.SteadyPodsPerSecond = rates(times)
	klog.InfoS("Run done", "variant", variant, "run", run, "bound", r.Bound, "of", cfg.Pods, "createdIn", created.Round(time.Millisecond),
		"claimsIn", fmt.Sprintf("%.1fs", r.ClaimsSeconds),
		"seconds", fmt.Sprintf("%.1f", r.Seconds), "podsPerSecond", fmt.Sprintf("%.1f", r.PodsPerSecond), "steady", fmt.Sprintf("%.1f", r.SteadyPodsPerSecond),
		"schedulerCPU", fmt.Sprintf("%.1fs", r.SchedulerCPUSeconds), "selfCPU", fmt.Sprintf("%.1fs", r.SelfCPUSeconds))
	if r.Bound < cfg.Pods {
		return r, fmt.Errorf("%s run %d: %d of %d pods bound within %v (scheduler logs in %s)", variant, run, r.Bound, cfg.Pods, cfg.RunTimeout, cfg.WorkDir)
	}
	mu.Lock()
	defer mu.Unlock()
	if unplanned > 0 {
		return r, fmt.Errorf("%s run %d: %d of %d pods bound without hami-go's plan (annotation %s): not by hami-go's Bind", variant, run, unplanned, r.Bound, device.AnnoPlanned)
	}
	return r, nil
}

// podClaimed reports whether p's status names a ResourceClaim for each of its pod claims (the
// resource claim controller writes it after creating the claim from the template).
func podClaimed(p *corev1.Pod) bool {
	if len(p.Spec.ResourceClaims) == 0 || len(p.Status.ResourceClaimStatuses) < len(p.Spec.ResourceClaims) {
		return false
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			return false
		}
	}
	return true
}

// clearRun deletes a run's pods and waits until their ResourceClaims are gone too.
func clearRun(ctx context.Context, cs kubernetes.Interface, ns string) error {
	if err := deletePods(ctx, cs, ns); err != nil {
		return err
	}
	return waitClaimsGone(ctx, cs, ns)
}

// Run sets up the simulated nodes and the schedulers, runs the variants interleaved (extender,
// baseline, plugins, dra-plain, dra-slices, extender, ...; each DRA variant with its own driver's
// ResourceSlices published on every node), and always deletes what it created. The plugins
// variant's kube-scheduler is built (or checked) first; where that fails it is skipped, logged.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w (bring the cluster up with hack/cluster/up.sh)", cfg.Kubeconfig, err)
	}
	rc.QPS, rc.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	// The extender's client: the same, impersonating --extender-as where given.
	erc := rest.CopyConfig(rc)
	erc.Impersonate.UserName = cfg.ExtenderAs
	extCS, err := kubernetes.NewForConfig(erc)
	if err != nil {
		return nil, err
	}
	if cfg.Plugins {
		if err := preparePlugins(ctx, &cfg); err != nil {
			klog.InfoS("Skipping the plugins variant", "reason", err.Error())
			cfg.Plugins = false
		}
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		return nil, fmt.Errorf("API server of %s: %w (bring the cluster up with hack/cluster/up.sh)", cfg.Kubeconfig, err)
	}
	res := &Result{Nodes: cfg.Nodes, Pods: cfg.Pods, QPS: cfg.QPS, GPUMemMiB: cfg.GPUMemMiB, Started: time.Now().UTC()}
	if cfg.DRA {
		res.DRAPods, res.DRACores = cfg.DRAPods, cfg.DRACores
	}
	// Leftovers of an interrupted earlier run first.
	if err := deleteAll(cs, cfg.Namespace); err != nil {
		return nil, fmt.Errorf("removing leftovers: %w", err)
	}
	defer func() {
		if err := deleteAll(cs, cfg.Namespace); err != nil {
			klog.ErrorS(err, "Cleanup incomplete: delete nodes, resourceslices and deviceclasses -l "+benchLabel+"=true and namespace "+cfg.Namespace+" by hand")
		} else {
			klog.InfoS("Removed the simulated nodes, their Leases and ResourceSlices, the DeviceClasses and the bench namespace")
		}
	}()
	for {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cfg.Namespace}}, metav1.CreateOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsAlreadyExists(err) { // AlreadyExists: the old one is still terminating
			return nil, err
		}
		time.Sleep(time.Second)
	}
	if err := checkAdmission(ctx, cs, extCS, cfg); err != nil {
		return nil, err
	}
	t := time.Now()
	if err := createNodes(ctx, cs, cfg.Nodes); err != nil {
		return nil, err
	}
	rctx, stopRenew := context.WithCancel(ctx)
	defer stopRenew()
	go renewLeases(rctx, cs, cfg.LeaseRenew)
	for {
		ready, err := untaintNodes(ctx, cs)
		if err != nil {
			return nil, err
		}
		if ready == cfg.Nodes {
			break
		}
		if time.Since(t) > 2*time.Minute {
			return nil, fmt.Errorf("only %d of %d simulated nodes Ready and untainted after 2m", ready, cfg.Nodes)
		}
		time.Sleep(time.Second)
	}
	klog.InfoS("Simulated nodes ready", "nodes", cfg.Nodes, "took", time.Since(t).Round(time.Millisecond))
	var slices *slicePublisher
	if cfg.DRA {
		if slices, err = setupDRA(ctx, cs, cfg); err != nil {
			return nil, fmt.Errorf("DRA set-up: %w", err)
		}
	}
	// publish puts a DRA variant's ResourceSlices (only those) on the nodes before its run.
	publish := func(v string) error {
		if !e2eresult.IsDRA(v) {
			return nil
		}
		return slices.use(ctx, driverOf(v))
	}
	sctx, stopSched := context.WithCancel(ctx)
	defer stopSched()
	url, err := startExtender(sctx, extCS)
	if err != nil {
		return nil, fmt.Errorf("extender: %w", err)
	}
	// Warm-up: a short run of each variant checks the set-up.
	for _, v := range variants(cfg) {
		wcfg := cfg
		wcfg.Pods, wcfg.RunTimeout = 10, 2*time.Minute
		if err := publish(v); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
		if _, err := runOnce(ctx, cs, wcfg, v, url, 0); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	if err := clearRun(ctx, cs, cfg.Namespace); err != nil {
		return nil, err
	}
	for run := 1; run <= cfg.Runs; run++ {
		for _, v := range variants(cfg) {
			if err := publish(v); err != nil {
				return res, err
			}
			r, err := runOnce(ctx, cs, variantConfig(cfg, v), v, url, run)
			res.Runs = append(res.Runs, r)
			if err != nil {
				return res, err
			}
			if err := clearRun(ctx, cs, cfg.Namespace); err != nil {
				return res, err
			}
		}
	}
	logPluginsRatio(res)
	return res, nil
}

package schedplugin

import (
	"context"
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/extender"
	hmetrics "github.com/hami-go/hami-go/pkg/metrics"
)

// Name is the plugin's name in a KubeSchedulerConfiguration profile.
const Name = "HamiGo"

// EventComponent is the source component of the Events the plugin records on pods (bind
// refusals: extender.EventReasonBindFailed).
const EventComponent = "hami-go-scheduler-plugin"

// Plugin is hami-go's placement at PreFilter, Filter, PostFilter, PreScore, Score, Reserve and
// Bind, over one extender.Extender (package doc). Safe for concurrent use, as the framework
// requires: its per-pod state lives in the CycleState.
type Plugin struct {
	ext   *extender.Extender
	sched *extender.Scheduler
	cache *extender.Cache
	// metrics holds the extender's metrics; served is the registry New registered them on
	// (kube-scheduler's legacyregistry), nil when they are not served.
	metrics *hmetrics.Collectors
	served  prometheus.Registerer
	// preemption is Args.Preemption: with PreemptionVerb Filter follows the framework's
	// AddPod and RemovePod (PreFilterExtensions), so that kube-scheduler's preemption frees GPUs.
	preemption extender.PreemptionMode
}

var (
	_ fwk.PreFilterPlugin  = (*Plugin)(nil)
	_ fwk.FilterPlugin     = (*Plugin)(nil)
	_ fwk.PostFilterPlugin = (*Plugin)(nil)
	_ fwk.PreScorePlugin   = (*Plugin)(nil)
	_ fwk.ScorePlugin      = (*Plugin)(nil)
	_ fwk.ReservePlugin    = (*Plugin)(nil)
	_ fwk.BindPlugin       = (*Plugin)(nil)
	_ io.Closer            = (*Plugin)(nil)
)

// New is the plugin's factory (k8s.io/kubernetes/pkg/scheduler/framework/runtime.PluginFactory):
// it decodes args (ConfigFromArgs), builds the extender over h.ClientSet() with an Event recorder
// of its own (component EventComponent), registers the extender's metrics on kube-scheduler's
// registry (k8s.io/component-base legacyregistry: kube-scheduler's /metrics on its secure port
// serves them beside its own, with case C35's rule, hmetrics.Collectors), and starts
// Extender.Run with ctx (the scheduler's: the informers and the extender's loops stop with it).
// Until Run has rebuilt the cache the plugin refuses GPU pods (PreFilter). Errors: bad args, no
// clientset.
func New(ctx context.Context, args runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	cfg, err := ConfigFromArgs(args)
	if err != nil {
		return nil, err
	}
	client := h.ClientSet()
	if client == nil {
		return nil, fmt.Errorf("%s: the framework handle has no clientset", Name)
	}
	return start(ctx, cfg, client, newRecorder(ctx, client), clock.RealClock{}, legacyregistry.Registerer())
}

// start builds the plugin over a new extender (cfg, client, recorder, clk), registers its
// metrics on serve (nil: not served) and runs the extender until ctx ends; a Run error is
// logged (the plugin then stays not ready). A registration refused (another HamiGo of this
// process serves the same series: HamiGo in two profiles, or a scheduler not yet closed) is
// logged and the metrics are not served; the placement runs regardless.
func start(ctx context.Context, cfg extender.Config, client kubernetes.Interface, rec record.EventRecorder, clk clock.WithTicker, serve prometheus.Registerer) (*Plugin, error) {
	cols := hmetrics.NewCollectors()
	e, err := extender.New(cfg, client, rec, clk, cols)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	if serve != nil {
		if err := serve.Register(cols); err != nil {
			klog.FromContext(ctx).Error(err, "hami-go plugin's metrics not served: the registry already holds them", "plugin", Name)
			serve = nil
		}
	}
	go func() {
		if err := e.Run(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "hami-go extender stopped; GPU pods are refused", "plugin", Name)
		}
	}()
	klog.FromContext(ctx).Info("hami-go plugin started", "plugin", Name, "schedulerName", cfg.SchedulerName,
		"nodePolicy", cfg.NodePolicy, "gpuPolicy", cfg.GPUPolicy, "preemption", cfg.Preemption)
	return &Plugin{ext: e, sched: e.Scheduler(), cache: e.Cache(), metrics: cols, served: serve, preemption: cfg.Preemption}, nil
}

// newRecorder returns an Event recorder writing through client (component EventComponent),
// whose broadcaster shuts down when ctx ends.
func newRecorder(ctx context.Context, client kubernetes.Interface) record.EventRecorder {
	bc := record.NewBroadcaster(record.WithContext(ctx))
	bc.StartStructuredLogging(4)
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	go func() { <-ctx.Done(); bc.Shutdown() }()
	return bc.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventComponent})
}

// Name returns Name.
func (p *Plugin) Name() string { return Name }

// Ready reports whether the extender under the plugin has rebuilt its cache (extender.Ready).
func (p *Plugin) Ready() bool { return p.ext.Ready() }

// Extender returns the extender under the plugin (its cache and readiness: what a harness that
// runs kube-scheduler in-process waits on, as hack/schedperf does).
func (p *Plugin) Extender() *extender.Extender { return p.ext }

// Metrics returns the extender's metrics (what kube-scheduler's /metrics serves of the plugin).
func (p *Plugin) Metrics() *hmetrics.Collectors { return p.metrics }

// Close takes the plugin's metrics off the registry New registered them on; kube-scheduler
// closes its plugins (io.Closer) when its Run ends, so that a scheduler started next in the
// same process (scheduler_perf's workloads) serves its own. Always nil.
func (p *Plugin) Close() error {
	if p.served != nil && !p.served.Unregister(p.metrics) {
		klog.Background().Info("hami-go plugin's metrics were not registered at Close", "plugin", Name)
	}
	return nil
}

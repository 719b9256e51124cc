//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/device"
)

// mib is one MiB in bytes.
const mib = 1 << 20

// Jobs of the chart's ServiceMonitors in mode deviceplugin (job = the Service's name).
const (
	jobDevicePlugin = "hami-go-device-plugin"
	jobScheduler    = "hami-go-scheduler"
	jobWebhook      = "hami-go-webhook"
)

// TestPrometheusDashboardAndAlerts (issue 27): a real Prometheus scrapes the local cluster as the
// chart's ServiceMonitors describe it (Kubernetes service discovery, scrapes every second) with
// the chart's PrometheusRule loaded (HamiGoGPUUnhealthy's and HamiGoNodeAgentDown's `for`
// shortened to 1 s and 2 s through the chart's values). With two slices running:
//   - dashboard: every PromQL expression of charts/hami-go/dashboards/hami-go.json, its variables
//     substituted (node and the test's namespace; then "All"), returns the series it should with
//     the values the pods' allocations and the node's inventory give (booked MiB, cores, sharers
//     per GPU; each slice's limit), and the rate() panels show the calls the slices caused;
//   - an XID injected through the fake backend fires HamiGoGPUUnhealthy for that GPU, and the
//     alert resolves once the GPU recovers;
//   - the device plugin kept off the node (DaemonSet nodeSelector) fires HamiGoNodeAgentDown,
//     which resolves once it is back.
func TestPrometheusDashboardAndAlerts(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	inv := c.inventory(t)
	allocatable := int64(len(inv.GPUs) * inv.SplitCount)
	c.waitAllocatable(t, allocatable, time.Minute)

	p := c.startPrometheus(t, "deviceplugin", "prometheusRule.gpuUnhealthy.for=1s", "prometheusRule.nodeAgentDown.for=2s")
	// The test leaves the node offering all its GPUs: once, at the end, for both the GPU the XID
	// broke and the device plugin's return (each waits for the kubelet's next node status, up
	// to its 10 s period; the second wait would find the first done).
	t.Cleanup(func() { c.waitAllocatable(t, allocatable, 2*time.Minute) })
	begin := time.Now()
	targets := p.waitTargets(t, []string{jobDevicePlugin, jobScheduler, jobWebhook}, 30*time.Second)
	t.Logf("3 targets up %v after Prometheus was ready: %s", time.Since(begin).Round(time.Millisecond), targetSummary(targets))

	// Two slices, one after the other: the first creates the series of the calls it causes
	// (Allocate, filter, bind, admissions), and once they are scraped the second increases them,
	// so the dashboard's rate() panels have an increase to show.
	ns := e2eNamespace(t, c)
	c.CreatePod(t, gpuPod(ns, "first", gpuLimits{count: 1, memMiB: 3000, cores: 30}))
	c.WaitForRunning(t, ns, "first", 2*time.Minute)
	p.waitNonEmpty(t, fmt.Sprintf(`hami_go_slice_memory_limit_bytes{namespace=%q, pod="first"}`, ns), 30*time.Second)
	p.waitScraped(t, 30*time.Second, `hami_go_extender_requests_total{verb=~".*filter.*"}`, `hami_go_extender_requests_total{verb=~".*bind.*"}`,
		`hami_go_webhook_admissions_total{resource="pods"}`, `hami_go_device_plugin_request_duration_seconds_count{method=~".*Allocate.*"}`)
	c.CreatePod(t, gpuPod(ns, "second", gpuLimits{count: 1, memMiB: 5000, cores: 20}))
	c.WaitForRunning(t, ns, "second", 2*time.Minute)

	t.Run("dashboard", func(t *testing.T) {
		c.checkDashboard(t, p, ns, func() *promWant { return c.promWant(t, inv, ns) }, devicePluginDashboard)
	})
	t.Run("XID fires HamiGoGPUUnhealthy", func(t *testing.T) { c.checkXIDAlert(t, p, inv) })
	t.Run("node agent down fires HamiGoNodeAgentDown", func(t *testing.T) { c.checkAgentDownAlert(t, p, ns, allocatable) })
}

// promWant is what the dashboard's series should say: the node's inventory, what every pod on
// the node holds per GPU, and the test namespace's slices.
type promWant struct {
	node, ns string
	// inv is the node's GPUs (UUID, index, model) and the memory each offers (MemoryMiB ×
	// MemoryScaling): the device plugin's inventory, or in DRA mode the ResourceSlice's devices.
	inv device.Inventory
	// gpu is, per GPU UUID, what the node's pods (all namespaces) hold.
	gpu map[string]*gpuBooked
	// slices are the test namespace's slices by "<pod>/<container>", or in DRA mode (claims)
	// by ResourceClaim name.
	slices map[string]sliceWant
	claims bool
}

type gpuBooked struct {
	memMiB         int64
	cores, sharers int
}

type sliceWant struct {
	uuid   string
	memMiB int64
	cores  int
}

// promWant reads the pods' allocation records (claimed, else planned) now.
func (c *Cluster) promWant(t testing.TB, inv device.Inventory, ns string) *promWant {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	w := &promWant{node: c.NodeName, ns: ns, inv: inv, gpu: map[string]*gpuBooked{}, slices: map[string]sliceWant{}}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		planned, claimed := allocations(t, pod)
		a := claimed
		if a == nil {
			a = planned
		}
		if a == nil || a.Node != c.NodeName {
			continue
		}
		for _, ctr := range a.Containers {
			for _, d := range ctr.Devices {
				b := w.gpu[d.UUID]
				if b == nil {
					b = &gpuBooked{}
					w.gpu[d.UUID] = b
				}
				b.memMiB += d.MemoryMiB
				b.cores += d.CoresPercent
				b.sharers++
				if pod.Namespace == ns {
					w.slices[pod.Name+"/"+ctr.Name] = sliceWant{uuid: d.UUID, memMiB: d.MemoryMiB, cores: d.CoresPercent}
				}
			}
		}
	}
	return w
}

// seriesCheck checks the result of one dashboard expression.
type seriesCheck func(w *promWant, vec model.Vector) error

// dashboardExpect is what one mode's dashboard must show, by "<panel title>#<target>": checks
// are the values an expression must give with $node = the node and $namespace = the test's
// namespace (and some series with both at "All"); empty are the expressions that must return no
// series in that mode (with either substitution), with the reason. An expression of the
// dashboard in neither, or in both, fails the test (the tables must follow the dashboard).
type dashboardExpect struct {
	checks map[string]seriesCheck
	empty  map[string]string
}

// devicePluginDashboard: mode deviceplugin with the extender (the local cluster's placement)
// fills every panel but the DRA driver's per-claim targets and the HamiGo plugin's.
var devicePluginDashboard = dashboardExpect{checks: dashboardChecks, empty: map[string]string{
	"Slice memory: limit and used#2":          "the DRA driver's per-claim limits (claim label): the device plugin's series have none",
	"Slice memory: limit and used#3":          "the DRA driver's per-claim usage (claim label): the device plugin's series have none",
	"Slice compute limit (%)#1":               "the DRA driver's per-claim limits (claim label): the device plugin's series have none",
	"HamiGo scheduling attempts per second#0": pluginPlacementOnly,
	"HamiGo plugin latency p50 and p99 (s)#0": pluginPlacementOnly,
	"HamiGo plugin latency p50 and p99 (s)#1": pluginPlacementOnly,
}}

// pluginPlacementOnly: the HamiGo plugin's panels read kube-scheduler's own series, which the
// scheduler's ServiceMonitor scrapes only with scheduler.placement plugin (with the extender it
// scrapes the extender's port).
const pluginPlacementOnly = "kube-scheduler-hami-go's series (scheduler_*, plugin HamiGo): scraped only with scheduler.placement plugin; the extender's ServiceMonitor scrapes the extender's port"

// dashboardChecks are mode deviceplugin's values.
var dashboardChecks = map[string]seriesCheck{
	// The extender's bookings.
	"GPU memory booked (MiB)#0":         perGPU(func(w *promWant, u string) float64 { return float64(w.booked(u).memMiB) }),
	"GPU compute booked (%)#0":          perGPU(func(w *promWant, u string) float64 { return float64(w.booked(u).cores) }),
	"Slices per GPU#0":                  perGPU(func(w *promWant, u string) float64 { return float64(w.booked(u).sharers) }),
	"Booked GPU memory by node (MiB)#0": perNode(func(w *promWant) float64 { return float64(w.totalBookedMiB()) }),
	"Slice memory (MiB)#0":              perSlice(func(s sliceWant) float64 { return float64(s.memMiB) }),
	"Slice compute (%)#0":               perSlice(func(s sliceWant) float64 { return float64(s.cores) }),
	"GPU memory: total, handed out, used#0": perGPU(func(w *promWant, u string) float64 {
		return float64(w.gpuMemoryMiB(u)) * mib
	}),
	// The device plugin's view of the same.
	"GPU memory: total, handed out, used#1": perGPU(func(w *promWant, u string) float64 { return float64(w.booked(u).memMiB) * mib }),
	"GPU memory: total, handed out, used#2": everyGPU(func(w *promWant, u string, v float64) bool {
		return v >= 0 && v <= float64(w.gpuMemoryMiB(u))*mib
	}, "between 0 and the GPU's memory"),
	"GPU memory handed out and used (% of total)#0": perGPU(func(w *promWant, u string) float64 {
		return 100 * float64(w.booked(u).memMiB) / float64(w.gpuMemoryMiB(u))
	}),
	"GPU memory handed out and used (% of total)#1": everyGPU(func(_ *promWant, _ string, v float64) bool { return v >= 0 && v <= 100 }, "between 0 and 100"),
	"GPU compute handed out (%)#0":                  perGPU(func(w *promWant, u string) float64 { return float64(w.booked(u).cores) }),
	"Containers per GPU#0":                          perGPU(func(w *promWant, u string) float64 { return float64(w.booked(u).sharers) }),
	"GPU health#0":                                  perGPU(func(*promWant, string) float64 { return 1 }),
	"Slice memory: limit and used#0":                perSlice(func(s sliceWant) float64 { return float64(s.memMiB) * mib }),
	"Slice memory: limit and used#1":                perSliceRange(0, math.Inf(1)),
	"Slice memory used (% of its limit)#0":          perSliceRange(0, 100),
	"Slice compute limit (%)#0":                     perSlice(func(s sliceWant) float64 { return float64(s.cores) }),
	// Rates over the dashboard's own [5m] windows: the second slice's calls.
	"Extender calls per second#0":                positiveFor("verb", "filter", "bind"),
	"Extender latency p99 (s)#0":                 positiveFor("verb", "filter", "bind"),
	"Webhook admissions per second#0":            positiveFor("resource", "pods"),
	"Device plugin call latency p99 (s)#0":       positiveFor("method", "Allocate"),
	"Device plugin calls per second by status#0": positiveFor("method", "Allocate"),
}

func (w *promWant) booked(uuid string) gpuBooked {
	if b := w.gpu[uuid]; b != nil {
		return *b
	}
	return gpuBooked{}
}

func (w *promWant) totalBookedMiB() int64 {
	var n int64
	for _, b := range w.gpu {
		n += b.memMiB
	}
	return n
}

// gpuMemoryMiB is the memory the GPU offers: its inventory memory × the memory scaling.
func (w *promWant) gpuMemoryMiB(uuid string) int64 {
	for _, g := range w.inv.GPUs {
		if g.UUID == uuid {
			return int64(float64(g.MemoryMiB) * w.inv.MemoryScaling)
		}
	}
	return 0
}

// sameValue compares a sample with an expected value (exact for counts and MiB; a relative
// 1e-9 for ratios).
func sameValue(got model.SampleValue, want float64) bool {
	return math.Abs(float64(got)-want) <= 1e-9*math.Max(1, math.Abs(want))
}

// perGPU: one series per GPU of the inventory, labelled with the node and the GPU's uuid, index
// and model, of value want(uuid).
func perGPU(want func(w *promWant, uuid string) float64) seriesCheck {
	return func(w *promWant, vec model.Vector) error {
		if err := oneSeriesPerGPU(w, vec); err != nil {
			return err
		}
		for _, s := range vec {
			u := string(s.Metric["uuid"])
			if x := want(w, u); !sameValue(s.Value, x) {
				return fmt.Errorf("GPU %s (index %s): %v, want %v", u, s.Metric["index"], s.Value, x)
			}
		}
		return nil
	}
}

// everyGPU: one series per GPU whose value satisfies ok.
func everyGPU(ok func(w *promWant, uuid string, v float64) bool, what string) seriesCheck {
	return func(w *promWant, vec model.Vector) error {
		if err := oneSeriesPerGPU(w, vec); err != nil {
			return err
		}
		for _, s := range vec {
			if !finite(s.Value) || !ok(w, string(s.Metric["uuid"]), float64(s.Value)) {
				return fmt.Errorf("GPU %s: %v, want a value %s", s.Metric["uuid"], s.Value, what)
			}
		}
		return nil
	}
}

func oneSeriesPerGPU(w *promWant, vec model.Vector) error {
	if len(vec) != len(w.inv.GPUs) {
		return fmt.Errorf("%d series, want one per GPU (%d)", len(vec), len(w.inv.GPUs))
	}
	seen := map[string]bool{}
	for _, s := range vec {
		u := string(s.Metric["uuid"])
		var g *device.GPU
		for i := range w.inv.GPUs {
			if w.inv.GPUs[i].UUID == u {
				g = &w.inv.GPUs[i]
			}
		}
		if g == nil || seen[u] {
			return fmt.Errorf("series %v: not one GPU of the inventory", s.Metric)
		}
		seen[u] = true
		if string(s.Metric["node"]) != w.node || string(s.Metric["index"]) != fmt.Sprint(g.Index) || string(s.Metric["model"]) != g.Model {
			return fmt.Errorf("series %v: want node %s, index %d, model %q", s.Metric, w.node, g.Index, g.Model)
		}
	}
	return nil
}

// perNode: one series, labelled with the node, of value want.
func perNode(want func(w *promWant) float64) seriesCheck {
	return func(w *promWant, vec model.Vector) error {
		if len(vec) != 1 || string(vec[0].Metric["node"]) != w.node {
			return fmt.Errorf("series %v, want one of node %s", vec, w.node)
		}
		if x := want(w); !sameValue(vec[0].Value, x) {
			return fmt.Errorf("node %s: %v, want %v", w.node, vec[0].Value, x)
		}
		return nil
	}
}

// perSlice: one series per slice of the test namespace, labelled with its namespace, pod,
// container, node and GPU, of value want(slice).
func perSlice(want func(s sliceWant) float64) seriesCheck {
	return sliceCheck(func(s sliceWant, v model.SampleValue) error {
		if x := want(s); !sameValue(v, x) {
			return fmt.Errorf("%v, want %v", v, x)
		}
		return nil
	})
}

// perSliceRange: one series per slice of the test namespace, of a value in [lo, hi].
func perSliceRange(lo, hi float64) seriesCheck {
	return sliceCheck(func(_ sliceWant, v model.SampleValue) error {
		if !finite(v) || float64(v) < lo || float64(v) > hi {
			return fmt.Errorf("%v, want a value in [%v, %v]", v, lo, hi)
		}
		return nil
	})
}

func sliceCheck(check func(s sliceWant, v model.SampleValue) error) seriesCheck {
	return func(w *promWant, vec model.Vector) error {
		if len(vec) != len(w.slices) {
			return fmt.Errorf("%d series (%v), want one per slice of namespace %s (%d)", len(vec), vec, w.ns, len(w.slices))
		}
		for _, s := range vec {
			key := string(s.Metric["pod"]) + "/" + string(s.Metric["container"])
			if w.claims {
				key = string(s.Metric["claim"])
			}
			sw, ok := w.slices[key]
			if !ok || string(s.Metric["namespace"]) != w.ns || string(s.Metric["node"]) != w.node || string(s.Metric["uuid"]) != sw.uuid {
				return fmt.Errorf("series %v: want namespace %s, node %s and one of the slices %v", s.Metric, w.ns, w.node, w.slices)
			}
			if err := check(sw, s.Value); err != nil {
				return fmt.Errorf("slice %s on %s: %w", key, sw.uuid, err)
			}
		}
		return nil
	}
}

// positiveFor: series of finite values >= 0, and for each of values a series whose label
// contains it with a value > 0 (a call the slices caused within the window). NaN is accepted
// where a series is not one of values: histogram_quantile over a zero rate (a method not called
// within the window, e.g. GetDevicePluginOptions once at registration) is 0/0.
func positiveFor(label model.LabelName, values ...string) seriesCheck {
	return func(_ *promWant, vec model.Vector) error {
		for _, s := range vec {
			named := slices.ContainsFunc(values, func(v string) bool { return strings.Contains(string(s.Metric[label]), v) })
			if math.IsNaN(float64(s.Value)) && !named {
				continue
			}
			if !finite(s.Value) || s.Value < 0 {
				return fmt.Errorf("series %v: %v, want a finite value >= 0", s.Metric, s.Value)
			}
		}
		for _, v := range values {
			if !slices.ContainsFunc(vec, func(s *model.Sample) bool {
				return strings.Contains(string(s.Metric[label]), v) && s.Value > 0
			}) {
				return fmt.Errorf("no series with %s containing %q above 0 in %v", label, v, vec)
			}
		}
		return nil
	}
}

// checkDashboard evaluates every expression of the dashboard twice: with $node and $namespace
// set to the node and the test's namespace (the values exp.checks wants from want(), read again
// at each round), and with both at "All" (a regex matching every value: non-empty, no error);
// the expressions of exp.empty must return no series with either. Each variable must offer the
// node and the namespace. It polls until all pass, for up to a minute (the scrapes after the
// pods started).
func (c *Cluster) checkDashboard(t *testing.T, p *prom, ns string, want func() *promWant, exp dashboardExpect) {
	queries, vars := readDashboard(t)
	keys := map[string]bool{}
	for _, q := range queries {
		keys[q.Key()] = true
		_, empty := exp.empty[q.Key()]
		if (exp.checks[q.Key()] == nil) == !empty {
			t.Errorf("dashboard expression %s (%s): want it in exactly one of the expected values and the expected-empty expressions (has values %v, expected empty %v)",
				q.Key(), q.Expr, exp.checks[q.Key()] != nil, empty)
		}
	}
	for _, m := range []map[string]bool{keysOf(exp.checks), keysOf(exp.empty)} {
		for k := range m {
			if !keys[k] {
				t.Errorf("the expectations have %s, which the dashboard does not have", k)
			}
		}
	}
	specific := map[string]string{"datasource": "prometheus", "node": regexp.QuoteMeta(c.NodeName), "namespace": regexp.QuoteMeta(ns)}
	all := map[string]string{"datasource": "prometheus"}
	for k, v := range grafanaBuiltins {
		specific[k], all[k] = v, v
	}
	ctx := context.Background()
	for _, v := range vars {
		values, _, _, err := p.api.LabelValues(ctx, v.Label, []string{v.Metric}, time.Now().Add(-5*time.Minute), time.Now())
		want := map[string]string{"node": c.NodeName, "namespace": ns}[v.Name]
		if err != nil || want == "" || !slices.Contains(values, model.LabelValue(want)) {
			t.Errorf("dashboard variable %s = label_values(%s, %s): %v (error %v), want it to offer %q", v.Name, v.Metric, v.Label, values, err, want)
		}
		all[v.Name] = v.AllValue
		if v.AllValue == "" {
			all[v.Name] = ".*"
		}
	}

	var failures []string
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		w := want()
		failures = nil
		for _, q := range queries {
			for _, sub := range []struct {
				name string
				vars map[string]string
			}{{"node and namespace", specific}, {"All", all}} {
				expr, err := substitute(q.Expr, sub.vars)
				if err != nil {
					failures = append(failures, fmt.Sprintf("%s: %v", q.Key(), err))
					continue
				}
				// Each query has its own deadline, not the poll's: a poll ending in the middle of a
				// round would report every query of its last round as "context deadline exceeded"
				// instead of what was wrong.
				qctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				vec, err := p.query(qctx, expr)
				cancel()
				why, empty := exp.empty[q.Key()]
				switch {
				case err != nil:
					failures = append(failures, fmt.Sprintf("%s (%s): %s: %v", q.Key(), sub.name, expr, err))
				case empty:
					if len(vec) > 0 {
						failures = append(failures, fmt.Sprintf("%s (%s): %s: %v, want no series (%s)", q.Key(), sub.name, expr, vec, why))
					}
				case len(vec) == 0:
					failures = append(failures, fmt.Sprintf("%s (%s): %s: no series", q.Key(), sub.name, expr))
				case sub.name == "node and namespace" && exp.checks[q.Key()] != nil:
					if err := exp.checks[q.Key()](w, vec); err != nil {
						failures = append(failures, fmt.Sprintf("%s: %s: %v", q.Key(), expr, err))
					}
				}
			}
		}
		return len(failures) == 0, nil
	})
	if err != nil {
		sort.Strings(failures)
		t.Fatalf("%d of %d dashboard evaluations still wrong after %v:\n  %s", len(failures), 2*len(queries), time.Minute, strings.Join(failures, "\n  "))
	}
	t.Logf("%d dashboard expressions x 2 substitutions (%d with series checked, %d expected empty) and %d variables right %v after the second slice ran (slices %v)",
		len(queries), len(exp.checks), len(exp.empty), len(vars), time.Since(start).Round(time.Millisecond), want().slices)
}

func keysOf[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// waitNonEmpty waits until the query returns a series.
func (p *prom) waitNonEmpty(t testing.TB, q string, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		vec, err := p.query(ctx, q)
		return err == nil && len(vec) > 0, nil
	})
	if err != nil {
		t.Fatalf("prometheus: %s returned no series within %v", q, timeout)
	}
}

// checkXIDAlert injects a fatal XID (79) on a GPU no slice of the node holds, waits for
// HamiGoGPUUnhealthy to fire for it, then lets the GPU recover and waits for the alert to
// resolve (the node's allocatable count comes back too; the caller waits for that).
func (c *Cluster) checkXIDAlert(t *testing.T, p *prom, inv device.Inventory) {
	w := c.promWant(t, inv, "")
	var g device.GPU
	for i := len(inv.GPUs) - 1; i >= 0; i-- {
		if w.booked(inv.GPUs[i].UUID).sharers == 0 {
			g = inv.GPUs[i]
			break
		}
	}
	if g.UUID == "" {
		t.Fatalf("every GPU of %s holds a slice: no GPU to inject an XID on", c.NodeName)
	}
	c.xidAlert(t, p, g, jobDevicePlugin, nil)
}

// xidAlert injects XID 79 on g through the fake backend's fault API (the device plugin's or the
// DRA driver's), waits for HamiGoGPUUnhealthy to fire for it with the labels and summary the
// chart's rule gives (job: the node agent's), lets the GPU recover, waits for the alert to
// resolve, while calling back (if not nil: the node agent's GPU is offered again).
func (c *Cluster) xidAlert(t *testing.T, p *prom, g device.GPU, job string, back func()) {
	match := model.LabelSet{"uuid": model.LabelValue(g.UUID), "node": model.LabelValue(c.NodeName)}
	if _, state, err := p.alertState(context.Background(), "HamiGoGPUUnhealthy", match); err != nil || state != "" {
		t.Fatalf("HamiGoGPUUnhealthy for %s is %q (error %v) before the XID, want inactive", g.UUID, state, err)
	}
	recovered := false
	t.Cleanup(func() {
		if !recovered {
			c.fakeFault(t, "recover", g.UUID, 0)
			if back != nil {
				back()
			}
		}
	})
	c.fakeFault(t, "xid", g.UUID, 79)
	a, took := p.waitAlert(t, "HamiGoGPUUnhealthy", match, "firing", time.Minute)
	t.Logf("HamiGoGPUUnhealthy firing %v after XID 79 on GPU %d (%s): labels %v, summary %q", took.Round(time.Millisecond), g.Index, g.UUID, a.Labels, a.Annotations["summary"])
	if a.Labels["severity"] != "critical" || a.Labels["index"] != model.LabelValue(fmt.Sprint(g.Index)) || a.Labels["job"] != model.LabelValue(job) {
		t.Errorf("alert labels %v: want severity critical, index %d, job %s", a.Labels, g.Index, job)
	}
	if want := fmt.Sprintf("GPU %d (%s) on node %s is unhealthy.", g.Index, g.UUID, c.NodeName); string(a.Annotations["summary"]) != want {
		t.Errorf("summary %q, want %q", a.Annotations["summary"], want)
	}
	c.fakeFault(t, "recover", g.UUID, 0)
	// The alert resolves once the agent's probes find the GPU well (recoveryProbes ×
	// probeInterval) and Prometheus scraped and evaluated that; meanwhile the agent offers the
	// GPU again, which back waits for (the kubelet reports it within its status period).
	resolved := p.startAlertWait(t, "HamiGoGPUUnhealthy", match, "", 2*time.Minute)
	recovered = true
	if back != nil {
		back()
	}
	_, took = resolved(t)
	t.Logf("HamiGoGPUUnhealthy resolved %v after the GPU recovered", took.Round(time.Millisecond))
}

// checkAgentDownAlert keeps the device plugin off the node (noNodeLabel in its DaemonSet's
// nodeSelector: the DaemonSet controller deletes its pod), waits for HamiGoNodeAgentDown to fire,
// restores the DaemonSet, and waits for the alert to resolve and the node's GPUs to come back.
// The GPU pods of ns are deleted first: an agent taken off its node while pods hold its slices
// drains, serving them (and its metrics) until they end (issue 28, docs/design.md "Mode
// switch"), so it would not be down.
func (c *Cluster) checkAgentDownAlert(t *testing.T, p *prom, ns string, allocatable int64) {
	ctx := context.Background()
	zero := int64(0)
	if err := c.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete the pods of %s: %v", ns, err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	}); err != nil {
		t.Fatalf("the pods of %s are not gone after 2m", ns)
	}
	match := model.LabelSet{"job": jobDevicePlugin}
	if _, state, err := p.alertState(ctx, "HamiGoNodeAgentDown", match); err != nil || state != "" {
		t.Fatalf("HamiGoNodeAgentDown is %q (error %v) before the device plugin stopped, want inactive", state, err)
	}
	ds := c.devicePluginDaemonSet(t)
	if _, ok := ds.Spec.Template.Spec.NodeSelector[noNodeLabel]; ok {
		t.Fatalf("daemonset %s/%s already has nodeSelector %s (an earlier run did not restore it)", chartNamespace, ds.Name, noNodeLabel)
	}
	old := c.devicePluginPods(t)
	patch := func(value any) error {
		b, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"nodeSelector": map[string]any{noNodeLabel: value}}}}})
		if err != nil {
			return err
		}
		_, err = c.Client.AppsV1().DaemonSets(chartNamespace).Patch(ctx, ds.Name, types.MergePatchType, b, metav1.PatchOptions{})
		return err
	}
	restored := false
	// restore removes the nodeSelector, calls started (if any) once that is done, and waits
	// for a new device plugin and the node's GPUs.
	restore := func(started func()) {
		if restored {
			return
		}
		restored = true
		if err := patch(nil); err != nil {
			t.Errorf("restore daemonset %s/%s (remove nodeSelector %s): %v", chartNamespace, ds.Name, noNodeLabel, err)
			return
		}
		if started != nil {
			started()
		}
		c.waitNewDevicePlugin(t, old, 2*time.Minute)
		c.waitAllocatable(t, allocatable, 2*time.Minute)
	}
	t.Cleanup(func() { restore(nil) })
	if err := patch("prometheus-e2e"); err != nil {
		t.Fatalf("patch daemonset %s/%s nodeSelector %s: %v", chartNamespace, ds.Name, noNodeLabel, err)
	}
	a, took := p.waitAlert(t, "HamiGoNodeAgentDown", match, "firing", 2*time.Minute)
	t.Logf("HamiGoNodeAgentDown firing %v after the device plugin's DaemonSet left the node: labels %v, summary %q", took.Round(time.Millisecond), a.Labels, a.Annotations["summary"])
	if a.Labels["severity"] != "critical" {
		t.Errorf("alert labels %v: want severity critical", a.Labels)
	}
	// The alert resolves once Prometheus scrapes the new device plugin, which it does while
	// the kubelet has yet to report the node's GPUs again (its status period): wait for both
	// at once.
	var resolved func(testing.TB) (promv1.Alert, time.Duration)
	restore(func() { resolved = p.startAlertWait(t, "HamiGoNodeAgentDown", match, "", time.Minute) })
	if resolved == nil {
		t.FailNow() // restore failed and said why
	}
	_, took = resolved(t)
	t.Logf("HamiGoNodeAgentDown resolved %v after the DaemonSet was restored", took.Round(time.Millisecond))
	p.waitTargets(t, []string{jobDevicePlugin, jobScheduler, jobWebhook}, 30*time.Second)
}

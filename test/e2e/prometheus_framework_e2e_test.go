//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/test/promstack"
)

// The test Prometheus (test/promstack): scrapes and rule evaluations every second, so the
// dashboard's rate(...[5m]) windows hold enough samples within seconds and alerts fire within
// seconds of their condition.
const (
	// promInterval is the ServiceMonitors' interval (serviceMonitor.interval) and the rule
	// evaluation interval of the test Prometheus.
	promInterval = "1s"
	// promDiscoveryReload is how often the test Prometheus applies what Kubernetes service
	// discovery found to its targets (Prometheus's default is 5 s): a node agent that starts or
	// leaves is scraped, or missed, within about a second.
	promDiscoveryReload = time.Second
	// k8sVersion is the local cluster's Kubernetes version (hack/cluster/lib.sh), for helm template.
	k8sVersion = "v1.37.2"
)

// clusterNets are the only networks the test Prometheus may scrape: loopback, and the local
// cluster's own network namespaces (hack/cluster/lib.sh CLUSTER_NET, POD_SUBNET).
var clusterNets = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("10.200.0.0/16"),
	netip.MustParsePrefix("10.244.0.0/24"),
}

// prom is a Prometheus started by a test, with its API client.
type prom struct {
	api    promv1.API
	server *promstack.Server
}

// repoRoot is the checkout's root directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// startPrometheus renders the chart as up.sh installs it (values-local.yaml, the cluster's mode)
// with serviceMonitor and prometheusRule enabled plus sets (rule overrides), and starts a
// Prometheus on a free loopback port that discovers the chart's Services through the cluster's
// API server and loads the PrometheusRule's groups. It is stopped when the test ends (its log is
// printed if the test failed). The tools come from hack/cluster/build-tools.sh (cached).
func (c *Cluster) startPrometheus(t testing.TB, mode string, sets ...string) *prom {
	t.Helper()
	bin := strings.TrimSpace(lastLine(c.clusterScript(t, "build-tools.sh", "prometheus", "helm")))
	root := repoRoot()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	manifests, err := promstack.Render(ctx, promstack.RenderOptions{
		Helm: filepath.Join(bin, "helm"), Chart: filepath.Join(root, "charts", "hami-go"),
		Release: "hami-go", Namespace: chartNamespace, KubeVersion: k8sVersion,
		ValuesFiles: []string{filepath.Join(root, "charts", "hami-go", "values-local.yaml")},
		Set: append([]string{"mode=" + mode, "serviceMonitor.enabled=true", "prometheusRule.enabled=true",
			"serviceMonitor.interval=" + promInterval}, sets...),
	})
	if err != nil {
		t.Fatalf("render the chart: %v", err)
	}
	mon, err := promstack.ParseMonitoring(manifests)
	if err != nil {
		t.Fatalf("the chart's monitoring objects: %v", err)
	}
	rules, err := mon.RuleFile()
	if err != nil || rules == nil {
		t.Fatalf("the chart's PrometheusRule: rule file %v, error %v", rules != nil, err)
	}
	dir := t.TempDir()
	cfg, err := promstack.Config(mon.ServiceMonitors, promstack.ConfigOptions{
		Kubeconfig: filepath.Join(c.State, "kubeconfig"), ScrapeInterval: promInterval,
		EvaluationInterval: promInterval, RuleFile: promstack.RulesPath(dir), AllowedNets: clusterNets,
	})
	if err != nil {
		t.Fatalf("prometheus configuration: %v", err)
	}
	start := time.Now()
	s, err := promstack.Start(ctx, promstack.ServerOptions{
		Binary: filepath.Join(bin, "prometheus"), Dir: dir, Config: cfg, Rules: rules, Listen: "127.0.0.1:0",
		DiscoveryReloadInterval: promDiscoveryReload,
	})
	if err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(s.Log)
			t.Logf("prometheus log (%s):\n%s", s.Log, b)
		}
	})
	client, err := promapi.NewClient(promapi.Config{Address: s.URL})
	if err != nil {
		t.Fatalf("prometheus client: %v", err)
	}
	t.Logf("prometheus %s ready %v after start (%d ServiceMonitors, rules from the chart's PrometheusRule)", s.URL, time.Since(start).Round(time.Millisecond), len(mon.ServiceMonitors))
	return &prom{api: promv1.NewAPI(client), server: s}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// waitTargets waits until Prometheus scrapes exactly one healthy target per job in jobs and no
// other, each at an address of clusterNets, and returns the targets by job.
func (p *prom) waitTargets(t testing.TB, jobs []string, timeout time.Duration) map[string]promv1.ActiveTarget {
	t.Helper()
	var byJob map[string]promv1.ActiveTarget
	var why string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		r, err := p.api.Targets(ctx)
		if err != nil {
			why = err.Error()
			return false, nil
		}
		byJob = map[string]promv1.ActiveTarget{}
		for _, a := range r.Active {
			job := string(a.Labels["job"])
			if _, dup := byJob[job]; dup {
				why = fmt.Sprintf("two targets of job %s", job)
				return false, nil
			}
			byJob[job] = a
		}
		for _, j := range jobs {
			a, ok := byJob[j]
			if !ok || a.Health != promv1.HealthGood {
				why = fmt.Sprintf("job %s: target %+v", j, a)
				return false, nil
			}
		}
		why = ""
		return len(byJob) == len(jobs), nil
	})
	if err != nil {
		t.Fatalf("prometheus targets: want one healthy target for each of %v, got %v (%s)", jobs, targetSummary(byJob), why)
	}
	for job, a := range byJob {
		u, err := url.Parse(a.ScrapeURL)
		if err != nil {
			t.Fatalf("job %s: scrape URL %q: %v", job, a.ScrapeURL, err)
		}
		addr, err := netip.ParseAddr(u.Hostname())
		if err != nil || !inNets(addr) {
			t.Errorf("job %s scrapes %s: not an address of %v", job, a.ScrapeURL, clusterNets)
		}
	}
	return byJob
}

func inNets(a netip.Addr) bool {
	for _, n := range clusterNets {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

func targetSummary(byJob map[string]promv1.ActiveTarget) string {
	var out []string
	for j, a := range byJob {
		out = append(out, fmt.Sprintf("%s=%s %s %s", j, a.ScrapeURL, a.Health, a.LastError))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// waitScraped waits until Prometheus has a series for each of queries (PromQL selectors), each
// within timeout: the first slice's calls were scraped, so the second slice's calls increase
// counters Prometheus already has a sample of, and the dashboard's rate() panels show them.
func (p *prom) waitScraped(t testing.TB, timeout time.Duration, queries ...string) {
	t.Helper()
	for _, q := range queries {
		p.waitNonEmpty(t, q, timeout)
	}
}

// query evaluates an instant PromQL query now; a warning is an error.
func (p *prom) query(ctx context.Context, q string) (model.Vector, error) {
	v, warnings, _, err := p.api.Query(ctx, q, time.Now())
	if err != nil {
		return nil, err
	}
	if len(warnings) > 0 {
		return nil, fmt.Errorf("warnings: %v", warnings)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("result of type %s, want a vector", v.Type())
	}
	return vec, nil
}

// alertState is the state of the alert named name whose labels include match: "firing",
// "pending", or "" when there is none.
func (p *prom) alertState(ctx context.Context, name string, match model.LabelSet) (promv1.Alert, string, error) {
	r, err := p.api.Alerts(ctx)
	if err != nil {
		return promv1.Alert{}, "", err
	}
	var best promv1.Alert
	for _, a := range r.Alerts {
		if string(a.Labels["alertname"]) != name {
			continue
		}
		ok := true
		for k, v := range match {
			ok = ok && a.Labels[k] == v
		}
		if ok && (best.State == "" || a.State == promv1.AlertStateFiring) {
			best = a
		}
	}
	return best, string(best.State), nil
}

// waitAlert waits until the alert is in state want ("firing", or "" for neither pending nor
// firing) and returns it and how long that took.
func (p *prom) waitAlert(t testing.TB, name string, match model.LabelSet, want string, timeout time.Duration) (promv1.Alert, time.Duration) {
	t.Helper()
	return p.startAlertWait(t, name, match, want, timeout)(t)
}

// startAlertWait starts waitAlert's wait in the background, so the test can wait for something
// else meanwhile (the node's GPUs to come back); the function it returns waits for the outcome
// and fails the test (on the test's goroutine) when the alert did not reach want in time. The
// background wait ends with the test at the latest.
func (p *prom) startAlertWait(t testing.TB, name string, match model.LabelSet, want string, timeout time.Duration) func(t testing.TB) (promv1.Alert, time.Duration) {
	type outcome struct {
		a     promv1.Alert
		state string
		took  time.Duration
		err   error
	}
	done := make(chan outcome, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		start := time.Now()
		var o outcome
		o.err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			var err error
			o.a, o.state, err = p.alertState(ctx, name, match)
			return err == nil && o.state == want, nil
		})
		o.took = time.Since(start)
		done <- o
	}()
	return func(t testing.TB) (promv1.Alert, time.Duration) {
		t.Helper()
		o := <-done
		if o.err != nil {
			t.Fatalf("alert %s%v: state %q after %v, want %q (last: %+v)", name, match, o.state, timeout, want, o.a)
		}
		return o.a, o.took
	}
}

// finite reports whether a sample value is a number (not NaN or ±Inf).
func finite(v model.SampleValue) bool {
	f := float64(v)
	return !math.IsNaN(f) && !math.IsInf(f, 0)
}

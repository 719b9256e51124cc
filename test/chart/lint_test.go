package chart_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"

	hmetrics "github.com/hami-go/hami-go/pkg/metrics"
)

// `helm lint` through the SDK, strict: no warning or error for the defaults and each values file.
func TestHelmLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"values.yaml":       nil,
		"values-local.yaml": valuesFile(t, "values-local.yaml"),
		"values-kind.yaml":  valuesFile(t, "values-kind.yaml"),
		"values-kind-dra":   chartutil.CoalesceTables(valuesFile(t, "values-kind-dra.yaml"), valuesFile(t, "values-kind.yaml")),
		"cert-manager":      sets(t, "webhook.certs.mode=certManager", "serviceMonitor.enabled=true"),
		"monitoring":        sets(t, "serviceMonitor.enabled=true", "prometheusRule.enabled=true"),
		"monitoring-dra":    sets(t, "mode=dra", "serviceMonitor.enabled=true", "prometheusRule.enabled=true"),
	} {
		t.Run(name, func(t *testing.T) {
			l := lint.AllWithKubeVersion(chartDir(t), vals, releaseNamespace, &capabilitiesAt(t, kubeVersion).KubeVersion)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m.Error())
				}
			}
		})
	}
}

func TestInvalidValuesFailWithTheirName(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"devicePlugin.backend=cuda", `devicePlugin.backend must be "nvml" or "fake", got "cuda"`},
		{"devicePlugin.enforcement=strict", `devicePlugin.enforcement must be "hami-core", "mps" or "none", got "strict"`},
		{"devicePlugin.deviceListStrategy=volume", `devicePlugin.deviceListStrategy must be "envvar", "cdi" or "" (cdi for nvml, envvar for fake), got "volume"`},
		{"webhook.resourceAnnotations=ignore", `webhook.resourceAnnotations must be "deny" or "warn", got "ignore"`},
		{"devicePlugin.nriSocket=", "mode deviceplugin needs the NRI plugin, which applies each pod's plan at container creation, but devicePlugin.nriSocket is empty"},
		{"devicePlugin.deviceListStrategy=envvar", "devicePlugin.deviceListStrategy=envvar does not serve real GPUs (backend nvml)"},
		{"devicePlugin.splitCount=0", "devicePlugin.splitCount must be >= 1, got 0"},
		{"devicePlugin.drainTimeout=-1", "devicePlugin.drainTimeout must be a whole number of seconds >= 0, got -1"},
		{"devicePlugin.drainTimeout=1.5", "devicePlugin.drainTimeout must be a whole number of seconds >= 0, got 1.5"},
		{"devicePlugin.drainTimeout=1h", "devicePlugin.drainTimeout must be a whole number of seconds >= 0, got 1h"},
		{"devicePlugin.memoryScaling=0.5", "devicePlugin.memoryScaling must be >= 1, got 0.5"},
		{"scheduler.extender.nodePolicy=pack", `scheduler.extender.nodePolicy must be "binpack" or "spread", got "pack"`},
		{"scheduler.extender.gpuPolicy=random", `scheduler.extender.gpuPolicy must be "binpack" or "spread", got "random"`},
		{"scheduler.replicas=0", "scheduler.replicas must be >= 1, got 0"},
		{"scheduler.leaderElection.leaseDuration=11s", "scheduler.leaderElection.leaseDuration must exceed the extender's bind API timeout (10s) plus retryPeriod (2000ms), got 11000ms"},
		{"scheduler.leaderElection.leaseDuration=1m,scheduler.leaderElection.retryPeriod=55s", "plus retryPeriod (55000ms), got 60000ms"},
		{"scheduler.leaderElection.leaseDuration=12000ms", "plus retryPeriod (2000ms), got 12000ms"},
		{"scheduler.leaderElection.leaseDuration=fast", `scheduler.leaderElection.leaseDuration must be a Go duration of whole units such as 15s or 1m30s, got "fast"`},
		{"scheduler.leaderElection.retryPeriod=1.5s", `scheduler.leaderElection.retryPeriod must be a Go duration of whole units such as 15s or 1m30s, got "1.5s"`},
		{"scheduler.leaderElection.renewDeadline=20s", "scheduler.leaderElection.renewDeadline (20000ms) must be less than leaseDuration (15000ms)"},
		{"hamiCore.image.repository=", "hamiCore.image.repository is empty"},
		{"hamiCore.image.tag=", "hamiCore.image needs a tag or a digest"},
		{"hamiCore.image.digest=sha256:abc", `hamiCore.image.digest must be "sha256:<64 lowercase hex digits>", got "sha256:abc"`},
		{"hamiCore.image.pullPolicy=Sometimes", `hamiCore.image.pullPolicy must be "Always", "IfNotPresent" or "Never", got "Sometimes"`},
		{"hamiCore.libraryPath=/k8s-vgpu/lib/nvidia/libvgpu.so", `hamiCore.libraryPath must be a pattern relative to the image's root, got "/k8s-vgpu/lib/nvidia/libvgpu.so"`},
		{"hamiCore.hostDir=vgpu", `hamiCore.hostDir must be an absolute host path, got "vgpu"`},
		{"devicePlugin.driverRoot=run/nvidia/driver", `devicePlugin.driverRoot must be an absolute host path ("/" for a driver installed on the host), got "run/nvidia/driver"`},
		{"devicePlugin.toolkitCDIKind=gpu", `devicePlugin.toolkitCDIKind must be a CDI kind <vendor>/<class> such as nvidia.com/gpu, or "" for none, got "gpu"`},
		{"webhook.failurePolicy=fail", `webhook.failurePolicy must be "Fail" or "Ignore", got "fail"`},
		{"webhook.privileged=allow", `webhook.privileged must be "deny" or "ignore", got "allow"`},
		{"webhook.draSchedulerName=packed", `webhook.draSchedulerName is for mode dra (mode deviceplugin sets scheduler.name on GPU pods), got "packed"`},
		{"webhook.gpuMemoryNodeAffinity=true,mode=dra", `webhook.gpuMemoryNodeAffinity is for mode deviceplugin`},
		{"webhook.certs.mode=vault", `webhook.certs.mode must be "generate", "certManager" or "secret", got "vault"`},
		{"webhook.certs.mode=secret", `webhook.certs.mode "secret" needs webhook.certs.secretName and webhook.certs.caBundle`},
		{"webhook.url=http://10.0.0.1:9443", `webhook.url must start with https://, got "http://10.0.0.1:9443"`},
	} {
		t.Run(c.set, func(t *testing.T) {
			_, err := renderFiles(t, sets(t, c.set))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v\nwant it to contain %q", err, c.want)
			}
		})
	}
}

// The dashboard is valid JSON whose queries use only metrics defined in pkg/ or kube-scheduler's
// scheduler_* series (placement plugin; their names, labels and values are checked against
// kube-scheduler v1.37.2 by cmd/kube-scheduler-hami-go's TestChartKubeSchedulerSeries) and the
// labels of pkg/metrics (the DRA driver's claim too, plus each metric's own: verb, outcome,
// resource, result, le, method, code; kube-scheduler's profile and extension_point).
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir(t), "dashboards", "hami-go.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr   string `json:"expr"`
				Legend string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	defined := definedMetrics(t)
	allowed := append(slices.Clone(hmetrics.SliceLabels), hmetrics.LabelClaim, "verb", "outcome", "resource", "result", "le", "method", "code",
		"profile", "extension_point")
	metricRE := regexp.MustCompile(`\bhami_go_[a-z0-9_]+`)
	schedRE := regexp.MustCompile(`\bscheduler_[a-z0-9_]+`)
	byRE := regexp.MustCompile(`by \(([^)]*)\)`)
	legendRE := regexp.MustCompile(`\{\{(\w+)\}\}`)
	used := map[string]bool{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			names := metricRE.FindAllString(tg.Expr, -1)
			sched := schedRE.FindAllString(tg.Expr, -1)
			if len(names) == 0 && len(sched) == 0 {
				t.Errorf("panel %q: %q uses no hami_go_ metric nor kube-scheduler's", p.Title, tg.Expr)
			}
			for _, n := range sched {
				used[strings.TrimSuffix(n, "_bucket")] = true
			}
			for _, n := range names {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
				if !defined[base] {
					t.Errorf("panel %q: metric %s is defined nowhere in pkg/", p.Title, n)
				}
				used[base] = true
			}
			var labels []string
			for _, m := range byRE.FindAllStringSubmatch(tg.Expr, -1) {
				for _, l := range strings.Split(m[1], ",") {
					labels = append(labels, strings.TrimSpace(l))
				}
			}
			for _, m := range legendRE.FindAllStringSubmatch(tg.Legend, -1) {
				labels = append(labels, m[1])
			}
			for _, l := range labels {
				if !slices.Contains(allowed, l) {
					t.Errorf("panel %q: label %q is not one of %v", p.Title, l, allowed)
				}
			}
		}
	}
	// Per-GPU and per-slice series are both shown: what the extender booked and what each node's
	// device plugin handed out, uses and reports as health.
	for _, n := range []string{"hami_go_extender_gpu_allocated_memory_mib", "hami_go_extender_pod_allocated_memory_mib",
		"hami_go_gpu_memory_total_bytes", "hami_go_gpu_memory_allocated_bytes", "hami_go_gpu_memory_used_bytes",
		"hami_go_gpu_cores_allocated_percent", "hami_go_gpu_sharers", "hami_go_gpu_healthy",
		"hami_go_slice_memory_limit_bytes", "hami_go_slice_memory_used_bytes", "hami_go_slice_cores_limit_percent",
		"hami_go_device_plugin_request_duration_seconds",
		// The HamiGo plugin's work in kube-scheduler (placement plugin).
		"scheduler_schedule_attempts_total", "scheduler_plugin_execution_duration_seconds"} {
		if !used[n] {
			t.Errorf("dashboard does not show %s", n)
		}
	}
	// The ConfigMap carries the file unchanged.
	cm := renderChart(t, nil).get(t, "ConfigMap/hami-go-dashboard").raw
	if got := field(t, cm, "data", "hami-go.json"); strings.TrimSpace(got.(string)) != strings.TrimSpace(string(b)) {
		t.Error("dashboard ConfigMap differs from dashboards/hami-go.json")
	}
}

// dashboardExprs returns the expressions of the dashboard's panels' targets, in order.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(t), "dashboards", "hami-go.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	return out
}

// Every query of the dashboard is PromQL that Prometheus parses: promtool check rules on one
// recording rule per query, Grafana's variables substituted ($node, $namespace: ".*", as "All"
// gives them; the interval built-ins: 1m).
func TestDashboardQueriesParse(t *testing.T) {
	bin := promtool(t)
	vars := regexp.MustCompile(`\$\{?(\w+)\}?`)
	builtins := map[string]string{"__rate_interval": "1m", "__interval": "1m", "__range": "5m"}
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for i, e := range dashboardExprs(t) {
		e = vars.ReplaceAllStringFunc(e, func(v string) string {
			if b, ok := builtins[vars.FindStringSubmatch(v)[1]]; ok {
				return b
			}
			return ".*"
		})
		rules = append(rules, rule{Record: fmt.Sprintf("hami_go_dashboard:query%d", i), Expr: e})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, bin, "check", "rules", f)
}

// definedMetrics scans the Go sources under pkg/ for metric names: Namespace+"_<rest>" and
// Namespace/Subsystem/Name options.
func definedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	root := filepath.Join(chartDir(t), "..", "..", "pkg")
	concat := regexp.MustCompile(`Namespace\s*\+\s*"_([a-z0-9_]+)"`)
	opts := regexp.MustCompile(`(?s)Subsystem:\s*"([a-z0-9_]+)",\s*Name:\s*"([a-z0-9_]+)"`)
	out := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range concat.FindAllSubmatch(b, -1) {
			out[hmetrics.Namespace+"_"+string(m[1])] = true
		}
		for _, m := range opts.FindAllSubmatch(b, -1) {
			out[hmetrics.Namespace+"_"+string(m[1])+"_"+string(m[2])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

package chart_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The rules file the alert tests (alerts/<variant>/*.yaml) name in rule_files: the groups of the
// rendered PrometheusRule's spec, written beside a copy of the tests.
const rulesFile = "hami-go-rules.yaml"

// alertVariants are the chart values each directory of alert tests (alerts/<name>) is run
// against. The first is the default install, whose tests cover every alert; a later variant's
// tests cover the alerts whose expression differs from the default install's (or that only it
// renders).
var alertVariants = []struct {
	name string
	set  []string
}{
	// The default install: device plugin, scheduler extender, webhook.
	{"deviceplugin", []string{"prometheusRule.enabled=true"}},
	// Mode dra: the DRA driver is the node agent, no extender runs.
	{"dra", []string{"prometheusRule.enabled=true", "mode=dra"}},
	// Placement plugin: kube-scheduler-hami-go instead of the extender sidecar.
	{"plugin", []string{"prometheusRule.enabled=true", "scheduler.placement=plugin"}},
}

// promtool returns the promtool binary: $HAMI_GO_PROMTOOL, else the one hack/cluster/build-tools.sh
// links into its cache ($HAMI_GO_CACHE, default ~/.cache/hami-go, /tools/bin/promtool). Without
// one the test fails in CI (CI=true) and is skipped elsewhere, saying how to build it.
func promtool(t *testing.T) string {
	t.Helper()
	p := os.Getenv("HAMI_GO_PROMTOOL")
	if p == "" {
		cache := os.Getenv("HAMI_GO_CACHE")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				t.Fatal(err)
			}
			cache = filepath.Join(home, ".cache", "hami-go")
		}
		p = filepath.Join(cache, "tools", "bin", "promtool")
	}
	if _, err := os.Stat(p); err != nil {
		msg := "no promtool at " + p + " (build it: hack/cluster/build-tools.sh promtool, or set HAMI_GO_PROMTOOL); make test-unit builds it"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// ruleGroups renders the chart with vals and returns the PrometheusRule's spec (its groups) as a
// Prometheus rules file.
func ruleGroups(t *testing.T, vals map[string]any) []byte {
	t.Helper()
	o := renderChart(t, vals).get(t, "PrometheusRule/hami-go").raw
	b, err := yaml.Marshal(field(t, o, "spec"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// alertRules lists the rules' alert names and expressions.
func alertRules(t *testing.T, rules []byte) map[string]string {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(rules, &f); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r.Expr
		}
	}
	return out
}

// coverage reads promtool test files and returns, per alert name, whether some test expects it
// to fire (exp_alerts not empty) and whether some test expects it silent.
func coverage(t *testing.T, files []string) (fires, silent map[string]bool) {
	t.Helper()
	fires, silent = map[string]bool{}, map[string]bool{}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			RuleFiles []string `json:"rule_files"`
			Tests     []struct {
				AlertRuleTests []struct {
					Alertname string `json:"alertname"`
					ExpAlerts []any  `json:"exp_alerts"`
				} `json:"alert_rule_test"`
			} `json:"tests"`
		}
		if err := yaml.Unmarshal(b, &f); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if !slices.Equal(f.RuleFiles, []string{rulesFile}) {
			t.Errorf("%s: rule_files %v, want [%s] (the rules extracted from the chart)", p, f.RuleFiles, rulesFile)
		}
		for _, tc := range f.Tests {
			for _, a := range tc.AlertRuleTests {
				if len(a.ExpAlerts) > 0 {
					fires[a.Alertname] = true
				} else {
					silent[a.Alertname] = true
				}
			}
		}
	}
	return fires, silent
}

// The chart's alerts pass promtool's rule checks and unit tests (`promtool test rules`, the
// Prometheus ecosystem's way), run on the rules file extracted from the rendered PrometheusRule:
// for each variant of the values, every alert it renders has a test where it fires and one
// where it stays silent, and every hami_go_ metric an expression reads is defined in pkg/.
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	defined := definedMetrics(t)
	metricRE := regexp.MustCompile(`\bhami_go_[a-z0-9_]+`)
	base := alertRules(t, ruleGroups(t, sets(t, alertVariants[0].set...))) // the default install's
	for _, v := range alertVariants {
		t.Run(v.name, func(t *testing.T) {
			rules := ruleGroups(t, sets(t, v.set...))
			alerts := alertRules(t, rules)
			for name, expr := range alerts {
				for _, m := range metricRE.FindAllString(expr, -1) {
					if !defined[m] {
						t.Errorf("%s: metric %s is defined nowhere in pkg/", name, m)
					}
				}
			}
			src := filepath.Join("alerts", v.name)
			tests, err := filepath.Glob(filepath.Join(src, "*.yaml"))
			if err != nil || len(tests) == 0 {
				t.Fatalf("no alert tests in %s (%v)", src, err)
			}
			fires, silent := coverage(t, tests)
			var names []string
			for n, expr := range alerts {
				names = append(names, n)
				if b, ok := base[n]; ok && b == expr && v.name != alertVariants[0].name {
					continue // tested with the default install's rules
				}
				if !fires[n] || !silent[n] {
					t.Errorf("alert %s: tested firing %v, tested silent %v; want both (%s)", n, fires[n], silent[n], src)
				}
			}
			for n := range fires {
				if _, ok := alerts[n]; !ok {
					t.Errorf("%s tests alert %s, which the chart does not render there", src, n)
				}
			}
			sort.Strings(names)
			t.Logf("alerts: %s", strings.Join(names, " "))

			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, rulesFile), rules, 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"test", "rules"}
			for _, p := range tests {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				dst := filepath.Join(dir, filepath.Base(p))
				if err := os.WriteFile(dst, b, 0o644); err != nil {
					t.Fatal(err)
				}
				args = append(args, dst)
			}
			runPromtool(t, bin, "check", "rules", filepath.Join(dir, rulesFile))
			runPromtool(t, bin, args...)
		})
	}
}

// runPromtool runs promtool with args and fails the test with its output when it fails.
func runPromtool(t *testing.T, bin string, args ...string) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args[:2], " "), err, out.String())
	}
	t.Logf("promtool %s: %s", strings.Join(args[:2], " "), strings.TrimSpace(lastLine(out.String())))
}

// lastLine is s's last non-empty line.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// With the rule off (the default) nothing is rendered; on, it is one PrometheusRule in the
// release's namespace whose groups all have rules.
func TestPrometheusRuleOffByDefault(t *testing.T) {
	for k := range renderChart(t, nil).objs {
		if strings.HasPrefix(k, "PrometheusRule/") {
			t.Errorf("default install renders %s", k)
		}
	}
	for _, v := range alertVariants {
		r := renderChart(t, sets(t, v.set...))
		o := r.get(t, "PrometheusRule/hami-go")
		if o.ns != releaseNamespace {
			t.Errorf("%s: PrometheusRule in namespace %q, want %q", v.name, o.ns, releaseNamespace)
		}
		for _, g := range field(t, o.raw, "spec", "groups").([]any) {
			if rs, _ := g.(map[string]any)["rules"].([]any); len(rs) == 0 {
				t.Errorf("%s: group %v has no rules", v.name, g.(map[string]any)["name"])
			}
		}
	}
}

// alertField returns an extractor of one field (for, expr, or a label as labels.<name>) of the
// alert name in the release's PrometheusRule; it fails when the alert or field is missing.
func alertField(name, key string) func(testing.TB, rendered) string {
	return func(t testing.TB, r rendered) string {
		t.Helper()
		var rule []string
		for k := range r.objs {
			if strings.HasPrefix(k, "PrometheusRule/") {
				rule = append(rule, k)
			}
		}
		if len(rule) != 1 {
			t.Fatalf("PrometheusRules %v, want one", rule)
		}
		for _, g := range field(t, r.get(t, rule[0]).raw, "spec", "groups").([]any) {
			for _, rule := range g.(map[string]any)["rules"].([]any) {
				m := rule.(map[string]any)
				if m["alert"] != name {
					continue
				}
				if l, ok := strings.CutPrefix(key, "labels."); ok {
					v, _ := m["labels"].(map[string]any)[l].(string)
					return v
				}
				v, ok := m[key].(string)
				if !ok {
					t.Fatalf("alert %s has no %s", name, key)
				}
				return v
			}
		}
		t.Fatalf("no alert %s", name)
		return ""
	}
}

// Each prometheusRule value changes the rendered rule: compared with the rule enabled and
// every other value at its default.
func TestPrometheusRuleValues(t *testing.T) {
	on := "prometheusRule.enabled=true"
	cases := []struct {
		set  []string
		get  func(testing.TB, rendered) string
		want string
	}{
		{[]string{"prometheusRule.labels.release=prom"}, func(t testing.TB, r rendered) string {
			return r.get(t, "PrometheusRule/hami-go").raw.GetLabels()["release"]
		}, "prom"},
		{[]string{"prometheusRule.alertLabels.team=gpu"}, func(t testing.TB, r rendered) string {
			return alertField("HamiGoGPUUnhealthy", "labels.team")(t, r) + " " + alertField("HamiGoWebhookErrors", "labels.team")(t, r)
		}, "gpu gpu"},
		{[]string{"prometheusRule.sliceOverLimit.ratio=1.2"}, alertField("HamiGoSliceMemoryOverLimit", "expr"), "hami_go_slice_memory_used_bytes > 1.2 * hami_go_slice_memory_limit_bytes"},
		{[]string{"prometheusRule.extenderErrors.window=30m", "prometheusRule.extenderErrors.threshold=5"}, alertField("HamiGoExtenderErrors", "expr"),
			`sum by (job, verb, outcome) (increase(hami_go_extender_requests_total{outcome=~"error|bad_request"}[30m])) > 5` + "\n" +
				`  or sum by (job, verb, outcome) (increase(hami_go_extender_requests_total{verb="bind", outcome="refused"}[30m])) > 5`},
		{[]string{"prometheusRule.webhookErrors.window=30m", "prometheusRule.webhookErrors.threshold=5"}, alertField("HamiGoWebhookErrors", "expr"),
			`sum by (job, webhook, code) (increase(controller_runtime_webhook_requests_total{job="hami-go-webhook", code=~"5.."}[30m])) > 5`},
		{[]string{"prometheusRule.gpuPodPending.enabled=false"}, func(t testing.TB, r rendered) string {
			_, ok := tryGet(t, alertField("HamiGoGPUPodPending", "expr"), r)
			return words(ok)
		}, "false"},
		// The pending pods' GPU resource, as kube-state-metrics spells it.
		{[]string{"resourceNames.count=example.com/gpu-v2"}, func(t testing.TB, r rendered) string {
			e := alertField("HamiGoGPUPodPending", "expr")(t, r)
			return e[strings.Index(e, "resource="):]
		}, `resource="example_com_gpu_v2"} > 0)`},
		// The jobs are the Services' names.
		{[]string{"fullnameOverride=gpu"}, func(t testing.TB, r rendered) string {
			get := func(a string) string { return alertField(a, "expr")(t, r) }
			return words(get("HamiGoNodeAgentDown"), get("HamiGoWebhookDown"), get("HamiGoExtenderDown"))
		}, `up{job="gpu-device-plugin"} == 0 or absent(up{job="gpu-device-plugin"}) up{job="gpu-webhook"} == 0 or absent(up{job="gpu-webhook"}) up{job="gpu-scheduler"} == 0 or absent(up{job="gpu-scheduler"})`},
		{[]string{"mode=dra"}, alertField("HamiGoNodeAgentDown", "expr"), `up{job="hami-go-dra-driver"} == 0 or absent(up{job="hami-go-dra-driver"})`},
		// Placement plugin: kube-scheduler's attempts of the profile scheduler.name on the
		// scheduler's job (the Service's name).
		{[]string{"scheduler.placement=plugin", "prometheusRule.schedulerPluginErrors.window=30m", "prometheusRule.schedulerPluginErrors.threshold=5"}, alertField("HamiGoSchedulerPluginErrors", "expr"),
			`sum by (job, profile) (increase(scheduler_schedule_attempts_total{job="hami-go-scheduler", profile="hami-go-scheduler", result="error"}[30m])) > 5`},
		{[]string{"scheduler.placement=plugin", "scheduler.name=gpu-sched", "fullnameOverride=gpu"}, func(t testing.TB, r rendered) string {
			return alertField("HamiGoSchedulerPluginDown", "expr")(t, r) + " " + alertField("HamiGoSchedulerPluginErrors", "expr")(t, r)
		}, `up{job="gpu-scheduler"} == 0 or absent(up{job="gpu-scheduler"}) sum by (job, profile) (increase(scheduler_schedule_attempts_total{job="gpu-scheduler", profile="gpu-sched", result="error"}[10m])) > 0`},
		{[]string{"scheduler.placement=plugin", "prometheusRule.schedulerPluginDown.for=42m"}, alertField("HamiGoSchedulerPluginDown", "for"), "42m"},
		{[]string{"scheduler.placement=plugin", "prometheusRule.schedulerPluginErrors.for=42m"}, alertField("HamiGoSchedulerPluginErrors", "for"), "42m"},
		{[]string{"scheduler.placement=plugin", "prometheusRule.alertLabels.team=gpu"}, func(t testing.TB, r rendered) string {
			return alertField("HamiGoSchedulerPluginDown", "labels.team")(t, r) + " " + alertField("HamiGoSchedulerPluginErrors", "labels.team")(t, r)
		}, "gpu gpu"},
	}
	for value, alert := range map[string]string{
		"gpuUnhealthy": "HamiGoGPUUnhealthy", "nodeAgentDown": "HamiGoNodeAgentDown", "inventoryStale": "HamiGoNodeInventoryStale",
		"enforcementMissing": "HamiGoNodeEnforcementMissing", "enforcementFailOpen": "HamiGoNodeEnforcementFailOpen",
		"memoryOvercommitted": "HamiGoGPUMemoryOvercommitted", "sliceOverLimit": "HamiGoSliceMemoryOverLimit",
		"gpuPodPending": "HamiGoGPUPodPending", "webhookDown": "HamiGoWebhookDown", "extenderDown": "HamiGoExtenderDown",
		"webhookErrors": "HamiGoWebhookErrors", "extenderErrors": "HamiGoExtenderErrors",
	} {
		cases = append(cases, struct {
			set  []string
			get  func(testing.TB, rendered) string
			want string
		}{[]string{"prometheusRule." + value + ".for=42m"}, alertField(alert, "for"), "42m"})
	}
	defaults := renderChart(t, sets(t, on))
	for _, c := range cases {
		t.Run(strings.Join(c.set, ","), func(t *testing.T) {
			if got := c.get(t, renderChart(t, sets(t, append([]string{on}, c.set...)...))); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
			if def, ok := tryGet(t, c.get, defaults); ok && def == c.want {
				t.Errorf("the defaults already give %q: the case proves nothing", def)
			}
		})
	}
}

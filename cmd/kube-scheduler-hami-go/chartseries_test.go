package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/kubernetes/pkg/scheduler/metrics"

	"github.com/hami-go/hami-go/pkg/schedplugin"
)

// chartDir is the Helm chart, relative to this package.
var chartDir = filepath.Join("..", "..", "charts", "hami-go")

// targetLabels are the labels a Prometheus Operator scrape adds to every series (job = the
// Service's name): an expression may match or group by them beside a family's own.
var targetLabels = []string{"job", "instance", "pod", "namespace", "service", "endpoint", "container"}

// chartExpr is one PromQL expression of the chart that reads kube-scheduler's series: where it
// is, the expression and the labels its legend prints (dashboard targets only).
type chartExpr struct {
	where, expr string
	legend      []string
}

// TestChartKubeSchedulerSeries: the kube-scheduler series that the chart's dashboard and its
// PrometheusRule read with placement plugin (scheduler_*) are kube-scheduler v1.37.2's own, as
// this binary registers them on component-base's legacyregistry (k8s.io/kubernetes
// pkg/scheduler/metrics): each family exists, every label an expression matches, groups by or
// prints is the family's or the scrape's, and the values it matches exactly are values
// kube-scheduler writes (result, extension_point) or the plugin's name. A kube-scheduler upgrade
// that renames one fails here instead of leaving a panel or an alert silently empty.
func TestChartKubeSchedulerSeries(t *testing.T) {
	// A vector is scraped only once it has a series: record one through the calls the framework
	// makes (schedule_one.go, framework.go).
	metrics.Register()
	const profile = "hami-go-scheduler"
	metrics.PodScheduled(profile, 0.01)
	metrics.PluginEvaluationTotal.WithLabelValues(schedplugin.Name, metrics.PreFilter, profile).Inc()
	metrics.PluginExecutionDuration.WithLabelValues(schedplugin.Name, metrics.PreFilter, "Success").Observe(0.001)
	fams, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels, types := map[string][]string{}, map[string]string{}
	for _, mf := range fams {
		types[mf.GetName()] = mf.GetType().String()
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels[mf.GetName()], l.GetName()) {
					labels[mf.GetName()] = append(labels[mf.GetName()], l.GetName())
				}
			}
		}
	}
	values := map[string][]string{
		"plugin":          {schedplugin.Name},
		"result":          {metrics.ScheduledResult, metrics.UnschedulableResult, metrics.ErrorResult},
		"extension_point": {metrics.PreFilter, metrics.Filter, metrics.PostFilter, metrics.PreScore, metrics.Score, metrics.Reserve, metrics.Unreserve, metrics.Bind},
	}

	nameRE := regexp.MustCompile(`\bscheduler_[a-z0-9_]+`)
	groupRE := regexp.MustCompile(`\b(?:by|on|without|ignoring)\s*\(([^)]*)\)`)
	matcherRE := regexp.MustCompile(`(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	exprs := chartExprs(t)
	seen := map[string]bool{}
	for _, e := range exprs {
		var own []string // the labels of the families e reads
		for _, loc := range nameRE.FindAllStringIndex(e.expr, -1) {
			name := e.expr[loc[0]:loc[1]]
			fam := name
			if base, ok := strings.CutSuffix(name, "_bucket"); ok && types[base] == "HISTOGRAM" {
				fam = base
			}
			if _, ok := types[fam]; !ok {
				t.Errorf("%s: %s is no series of kube-scheduler v1.37.2: %s", e.where, name, e.expr)
				continue
			}
			seen[fam] = true
			own = append(own, labels[fam]...)
			for _, m := range matcherRE.FindAllStringSubmatch(selector(e.expr[loc[1]:]), -1) {
				if !slices.Contains(labels[fam], m[1]) && !slices.Contains(targetLabels, m[1]) {
					t.Errorf("%s: %s has no label %s (its labels: %v)", e.where, fam, m[1], labels[fam])
				}
				if vs, ok := values[m[1]]; ok && m[2] == "=" && !slices.Contains(vs, m[3]) {
					t.Errorf("%s: %s{%s=%q}: kube-scheduler writes %v", e.where, fam, m[1], m[3], vs)
				}
			}
		}
		used := slices.Clone(e.legend)
		for _, g := range groupRE.FindAllStringSubmatch(e.expr, -1) {
			for _, l := range strings.Split(g[1], ",") {
				used = append(used, strings.TrimSpace(l))
			}
		}
		for _, l := range used {
			if !slices.Contains(own, l) && !slices.Contains(targetLabels, l) && l != "le" {
				t.Errorf("%s: label %s is none of the labels of the kube-scheduler series it reads, nor the scrape's: %s", e.where, l, e.expr)
			}
		}
	}
	for _, want := range []string{"scheduler_schedule_attempts_total", "scheduler_plugin_evaluation_total", "scheduler_plugin_execution_duration_seconds"} {
		if !seen[want] {
			t.Errorf("the chart reads no %s (read: %v in %d expressions)", want, seen, len(exprs))
		}
	}
}

// selector returns the label matchers that open rest (the text after a metric's name), without
// the braces, or "" when rest does not start with one. Template actions ({{ ... }}) inside it
// are skipped by counting braces.
func selector(rest string) string {
	if !strings.HasPrefix(rest, "{") {
		return ""
	}
	depth := 0
	for i, c := range rest {
		switch c {
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				return rest[1:i]
			}
		}
	}
	return rest[1:]
}

// chartExprs returns the dashboard's targets and the PrometheusRule template's expressions that
// read kube-scheduler's series (scheduler_*), the template's as written (template actions in
// the values of their matchers).
func chartExprs(t *testing.T) []chartExpr {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "hami-go.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr   string `json:"expr"`
				Legend string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	legendRE := regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)
	var out []chartExpr
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			if !strings.Contains(tg.Expr, "scheduler_") {
				continue
			}
			e := chartExpr{where: "dashboard panel " + p.Title + " target " + string(rune('A'+i)), expr: tg.Expr}
			for _, m := range legendRE.FindAllStringSubmatch(tg.Legend, -1) {
				e.legend = append(e.legend, m[1])
			}
			out = append(out, e)
		}
	}
	rules, err := os.ReadFile(filepath.Join(chartDir, "templates", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ruleRE := regexp.MustCompile(`(?s)- alert: (\w+)\n\s*expr: (.*?)\n\s*for:`)
	n := 0
	for _, m := range ruleRE.FindAllStringSubmatch(string(rules), -1) {
		n++
		if strings.Contains(m[2], "scheduler_") {
			out = append(out, chartExpr{where: "alert " + m[1], expr: m[2]})
		}
	}
	if n == 0 {
		t.Fatal("no alert expressions found in prometheusrule.yaml")
	}
	return out
}

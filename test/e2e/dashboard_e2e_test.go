//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dashboardPath is the chart's Grafana dashboard, relative to the checkout's root.
var dashboardPath = filepath.Join("charts", "hami-go", "dashboards", "hami-go.json")

// dashboardQuery is one PromQL expression of the dashboard: a panel's target.
type dashboardQuery struct {
	// Panel is the panel's title; Target the target's position in the panel (0-based).
	Panel  string
	Target int
	// Expr is the target's expression, Grafana variables not yet substituted.
	Expr string
}

// Key names the query in the test's expectations: "<panel title>#<target>".
func (q dashboardQuery) Key() string { return fmt.Sprintf("%s#%d", q.Panel, q.Target) }

// dashboardVariable is a template variable whose values a query gives (label_values(metric, label)).
type dashboardVariable struct {
	Name, Metric, Label, AllValue string
}

type grafanaPanel struct {
	Title   string         `json:"title"`
	Panels  []grafanaPanel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// labelValuesQuery is Grafana's label_values(<metric>, <label>).
var labelValuesQuery = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// readDashboard returns every PromQL expression of the dashboard's panels (rows' nested panels
// too) and its query variables. It fails the test on a panel target without an expression or a
// query variable that is not label_values(metric, label).
func readDashboard(t testing.TB) ([]dashboardQuery, []dashboardVariable) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), dashboardPath))
	if err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	var d struct {
		Panels     []grafanaPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name     string          `json:"name"`
				Type     string          `json:"type"`
				AllValue string          `json:"allValue"`
				Query    json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard %s: %v", dashboardPath, err)
	}
	var queries []dashboardQuery
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			for i, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("dashboard panel %q target %d has no expression", p.Title, i)
					continue
				}
				queries = append(queries, dashboardQuery{Panel: p.Title, Target: i, Expr: tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	var vars []dashboardVariable
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			_ = json.Unmarshal(v.Query, &q.Query) // a plain string query
		}
		m := labelValuesQuery.FindStringSubmatch(strings.TrimSpace(q.Query))
		if m == nil {
			t.Errorf("dashboard variable %s: query %q is not label_values(metric, label)", v.Name, q.Query)
			continue
		}
		vars = append(vars, dashboardVariable{Name: v.Name, Metric: m[1], Label: m[2], AllValue: v.AllValue})
	}
	if len(queries) == 0 {
		t.Fatalf("dashboard %s has no PromQL expression", dashboardPath)
	}
	return queries, vars
}

// grafanaVariable is a variable reference: $name, ${name}, ${name:format} or [[name]].
var grafanaVariable = regexp.MustCompile(`\$\{([a-zA-Z0-9_]+)(?::[a-zA-Z0-9_]+)?\}|\$([a-zA-Z0-9_]+)|\[\[([a-zA-Z0-9_]+)\]\]`)

// substitute replaces Grafana's variables in expr by vars' values (a regex, as Grafana
// interpolates multi-value variables into =~ matchers); an unknown variable is an error.
func substitute(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := grafanaVariable.ReplaceAllStringFunc(expr, func(ref string) string {
		m := grafanaVariable.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
			return ref
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("unknown Grafana variable(s) %v in %s", missing, expr)
	}
	return out, nil
}

// grafanaBuiltins are the values given to Grafana's built-in interval variables (none of the
// dashboard's expressions uses one today): with the test's 1 s scrapes, a minute holds many samples.
var grafanaBuiltins = map[string]string{"__rate_interval": "1m", "__interval": "1m", "__range": "5m"}

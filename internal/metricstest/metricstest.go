// Package metricstest checks what a hami-go component serves on /metrics, for the components'
// unit tests: Check scrapes the handler the binary serves, lints the scrape with client_golang's
// promlint (what `promtool check metrics` runs: names, units, help, counter suffixes) and
// compares its metric families with the metric reference in docs/components.md.
package metricstest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Components returns the names of the components in the reference's "Exposed by" column.
func Components() []string {
	return []string{"device-plugin", "dra-driver", "scheduler-extender", "kube-scheduler-hami-go", "webhook"}
}

// referenceHeading starts the metric reference's section in docs/components.md.
const referenceHeading = "## Metric reference"

// Row is one row of the metric reference: a metric family (or, when Name ends in "*", every
// family whose name starts with what comes before it: third-party collectors), its type and
// label names (none for a pattern), and the components that expose it.
type Row struct {
	Name      string
	Type      string
	Labels    []string
	ExposedBy []string
}

// Pattern reports whether the row stands for the families whose names start with a prefix.
func (r Row) Pattern() bool { return strings.HasSuffix(r.Name, "*") }

// Matches reports whether family name is the row's (or under its pattern).
func (r Row) Matches(name string) bool {
	if r.Pattern() {
		return strings.HasPrefix(name, strings.TrimSuffix(r.Name, "*"))
	}
	return name == r.Name
}

// ReferencePath is docs/components.md, found from this file's location.
func ReferencePath(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate metricstest's source")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "docs", "components.md")
}

// ParseReference reads the metric reference table from markdown: the first table after the
// "## Metric reference" heading, columns Metric, Type, Labels, Exposed by (and a description).
// Cells are `code` or plain; "—" is an empty cell; lists are comma-separated.
func ParseReference(md []byte) ([]Row, error) {
	s := string(md)
	i := strings.Index(s, "\n"+referenceHeading+"\n")
	if i < 0 {
		return nil, fmt.Errorf("no %q section", referenceHeading)
	}
	var rows []Row
	header := true
	for _, line := range strings.Split(s[i+1:], "\n")[1:] {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if len(rows) > 0 || !header {
				break // the table ended
			}
			continue // prose before the table
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for k := range cells {
			cells[k] = strings.Trim(strings.TrimSpace(cells[k]), "`")
		}
		if header {
			if len(cells) < 4 || cells[0] != "Metric" || cells[1] != "Type" || cells[2] != "Labels" || cells[3] != "Exposed by" {
				return nil, fmt.Errorf("table header %q, want | Metric | Type | Labels | Exposed by | ...", line)
			}
			header = false
			continue
		}
		if strings.Trim(cells[0], "-: ") == "" {
			continue // the separator line
		}
		if len(cells) < 4 {
			return nil, fmt.Errorf("row %q has %d cells, want at least 4", line, len(cells))
		}
		r := Row{Name: cells[0], Type: dash(cells[1]), Labels: list(cells[2]), ExposedBy: list(cells[3])}
		for _, c := range r.ExposedBy {
			if !slices.Contains(Components(), c) {
				return nil, fmt.Errorf("row %s: component %q is none of %v", r.Name, c, Components())
			}
		}
		if len(r.ExposedBy) == 0 {
			return nil, fmt.Errorf("row %s names no component", r.Name)
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no rows in the %q table", referenceHeading)
	}
	return rows, nil
}

// dash maps the empty-cell mark to "".
func dash(s string) string {
	if s == "—" || s == "-" {
		return ""
	}
	return s
}

// list splits a comma-separated cell ("—": none), each item without backquotes.
func list(s string) []string {
	if dash(s) == "" {
		return nil
	}
	var out []string
	for _, v := range strings.Split(s, ",") {
		out = append(out, strings.Trim(strings.TrimSpace(v), "`"))
	}
	return out
}

// Scrape GETs /metrics from h in Prometheus' text format, as `promtool check metrics` reads it
// from curl, and fails the test unless it answers 200.
func Scrape(t testing.TB, h http.Handler) []byte {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// Lint returns promlint's problems with the scrape, one "metric: text" each.
func Lint(body []byte) ([]string, error) {
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(problems))
	for i, p := range problems {
		out[i] = p.Metric + ": " + p.Text
	}
	return out, nil
}

// Families parses the scrape's metric families.
func Families(body []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(io.NopCloser(bytes.NewReader(body)))
}

// Compare checks families (what component serves) against the reference rows: every family
// is in exactly one row naming component, with that row's type and label names; every row
// naming component matches at least one family. It returns one message per difference.
func Compare(component string, rows []Row, families map[string]*dto.MetricFamily) []string {
	var mine []Row
	for _, r := range rows {
		if slices.Contains(r.ExposedBy, component) {
			mine = append(mine, r)
		}
	}
	var diffs []string
	used := make([]bool, len(mine))
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		mf := families[n]
		var hits []int
		for i, r := range mine {
			if r.Matches(n) {
				hits = append(hits, i)
			}
		}
		switch {
		case len(hits) == 0:
			diffs = append(diffs, fmt.Sprintf("%s is served by %s but not in its metric reference rows", n, component))
			continue
		case len(hits) > 1:
			diffs = append(diffs, fmt.Sprintf("%s matches %d rows of %s", n, len(hits), component))
		}
		r := mine[hits[0]]
		used[hits[0]] = true
		if r.Pattern() {
			continue
		}
		if typ := strings.ToLower(mf.GetType().String()); typ != r.Type {
			diffs = append(diffs, fmt.Sprintf("%s: type %s, the reference says %s", n, typ, r.Type))
		}
		if got, want := labelNames(mf), sorted(r.Labels); !slices.Equal(got, want) {
			diffs = append(diffs, fmt.Sprintf("%s: labels %v, the reference says %v", n, got, want))
		}
	}
	for i, r := range mine {
		if !used[i] {
			diffs = append(diffs, fmt.Sprintf("%s (reference: exposed by %s) is not served by %s", r.Name, strings.Join(r.ExposedBy, ", "), component))
		}
	}
	return diffs
}

// labelNames are the sorted label names of a family's series (histograms' le left out).
func labelNames(mf *dto.MetricFamily) []string {
	seen := map[string]bool{}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			seen[l.GetName()] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	if out == nil {
		out = []string{}
	}
	return out
}

// Check scrapes h (what component serves on /metrics, fed with representative data by the
// caller), fails the test on any promlint problem, and compares the families with
// docs/components.md's metric reference (Compare). It returns the scrape's families.
func Check(t testing.TB, component string, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	body := Scrape(t, h)
	problems, err := Lint(body)
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint (%s): %s", component, p)
	}
	families, err := Families(body)
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	md, err := os.ReadFile(ReferencePath(t))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ParseReference(md)
	if err != nil {
		t.Fatalf("docs/components.md: %v", err)
	}
	for _, d := range Compare(component, rows, families) {
		t.Errorf("docs/components.md metric reference: %s", d)
	}
	return families
}

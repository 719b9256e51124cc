package metricstest

import (
	"os"
	"slices"
	"strings"
	"testing"
)

const table = `# doc

## Metric reference

Prose before the table.

| Metric | Type | Labels | Exposed by | Meaning |
| --- | --- | --- | --- | --- |
| ` + "`a_total`" + ` | counter | verb, outcome | webhook | a |
| ` + "`b_bytes`" + ` | gauge | — | webhook, device-plugin | b |
| ` + "`go_*`" + ` | — | — | webhook | Go |

## Next
| x | y |
`

func TestParseReference(t *testing.T) {
	rows, err := ParseReference([]byte(table))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3: %+v", len(rows), rows)
	}
	if r := rows[0]; r.Name != "a_total" || r.Type != "counter" || !slices.Equal(r.Labels, []string{"verb", "outcome"}) || !slices.Equal(r.ExposedBy, []string{"webhook"}) {
		t.Errorf("row 0 %+v", r)
	}
	if r := rows[1]; r.Labels != nil || !slices.Equal(r.ExposedBy, []string{"webhook", "device-plugin"}) {
		t.Errorf("row 1 %+v", r)
	}
	if r := rows[2]; !r.Pattern() || !r.Matches("go_goroutines") || r.Matches("process_open_fds") {
		t.Errorf("row 2 %+v: want the pattern go_*", r)
	}
	for name, md := range map[string]string{
		"no section":        "# doc\n",
		"bad header":        "\n## Metric reference\n\n| Name | Type |\n| --- | --- |\n",
		"unknown component": strings.Replace(table, "| webhook | a |", "| kubelet | a |", 1),
		"no rows":           "\n## Metric reference\n\n| Metric | Type | Labels | Exposed by |\n| --- | --- | --- | --- |\n",
	} {
		if _, err := ParseReference([]byte(md)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// Compare reports a family not in the rows, a row not served, a wrong type and wrong labels;
// pattern rows match families by prefix without type or label checks.
func TestCompare(t *testing.T) {
	rows, err := ParseReference([]byte(table))
	if err != nil {
		t.Fatal(err)
	}
	scrape := `# HELP a_total a
# TYPE a_total counter
a_total{verb="x",outcome="ok"} 1
# HELP b_bytes b
# TYPE b_bytes gauge
b_bytes 2
# HELP go_goroutines g
# TYPE go_goroutines gauge
go_goroutines 3
`
	fams, err := Families([]byte(scrape))
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare("webhook", rows, fams); len(d) != 0 {
		t.Errorf("webhook: %v, want no differences", d)
	}
	want := []string{
		"a_total is served by device-plugin but not in its metric reference rows",
		"go_goroutines is served by device-plugin but not in its metric reference rows",
	}
	if d := Compare("device-plugin", rows, fams); !slices.Equal(d, want) {
		t.Errorf("device-plugin: %q, want %q", d, want)
	}
	bad := strings.NewReplacer("# TYPE b_bytes gauge", "# TYPE b_bytes counter", "b_bytes 2", `b_bytes{node="n"} 2`,
		"go_goroutines", "process_open_fds").Replace(scrape)
	if fams, err = Families([]byte(bad)); err != nil {
		t.Fatal(err)
	}
	want = []string{
		"b_bytes: type counter, the reference says gauge",
		"b_bytes: labels [node], the reference says []",
		"process_open_fds is served by webhook but not in its metric reference rows",
		"go_* (reference: exposed by webhook) is not served by webhook",
	}
	if d := Compare("webhook", rows, fams); !slices.Equal(d, want) {
		t.Errorf("webhook, wrong scrape: %q, want %q", d, want)
	}
}

// Lint reports what promtool check metrics reports: here a counter without _total.
func TestLint(t *testing.T) {
	problems, err := Lint([]byte("# HELP requests r\n# TYPE requests counter\nrequests 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(problems, []string{`requests: counter metrics should have "_total" suffix`}) {
		t.Errorf("problems %q", problems)
	}
}

// The repository's reference parses, and each component has rows.
func TestReferenceParses(t *testing.T) {
	md, err := os.ReadFile(ReferencePath(t))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ParseReference(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Components() {
		if !slices.ContainsFunc(rows, func(r Row) bool { return slices.Contains(r.ExposedBy, c) }) {
			t.Errorf("no row for %s", c)
		}
	}
}

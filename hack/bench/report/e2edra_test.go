package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// writeE2E writes the benchmark sample and js as e2esched.json and returns the report.
func writeE2E(t *testing.T, js string) string {
	t.Helper()
	in, out := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(in, "go-bench.txt"), []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in, "e2esched.json"), []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(Config{In: in, Out: out, Commit: "abc123"}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(md)
}

func TestE2EDRARows(t *testing.T) {
	run := func(variant string, n, bound int, pps, cpu float64) string {
		return `{"variant":"` + variant + `","run":` + itoa(n) + `,"bound":` + itoa(bound) + `,"podsPerSecond":` + ftoa(pps) +
			`,"claimsSeconds":2,"schedulerCPUSeconds":` + ftoa(cpu) + `,"selfCPUSeconds":0.01}`
	}
	js := `{"nodes":1000,"pods":10,"draPods":5,"draCores":10,"qps":1000,"gpumemMiB":4000,"runs":[` + strings.Join([]string{
		run("extender", 1, 10, 80, 0.16), run("baseline", 1, 10, 100, 0.08), run("dra-plain", 1, 5, 40, 0.1), run("dra-slices", 1, 5, 36, 0.1),
		run("extender", 2, 10, 90, 0.16), run("baseline", 2, 10, 100, 0.08), run("dra-plain", 2, 5, 40, 0.1), run("dra-slices", 2, 5, 32, 0.2),
		run("extender", 3, 10, 90, 0.16), run("baseline", 3, 10, 100, 0.08), run("dra-plain", 3, 5, 40, 0.1), run("dra-slices", 3, 4, 50, 0.2),
	}, ",") + `]}`
	md := writeE2E(t, js)
	for _, want := range []string{
		"**DRA variants (issue 14).**", "places 5 pods per run", "memory 4000 MiB and cores 10",
		"| 1 | 100.0 | 80.0 | 40.0 | 36.0 | 0.90 | 0.36 | 0.45 |",
		"| 2 | 100.0 | 90.0 | 40.0 | 32.0 | 0.80 | 0.32 | 0.36 |",
		"| **median (min–max)** | **100.0** | **85.0 (80.0–90.0)** | **40.0** | **34.0 (32.0–36.0)** | **0.85 (0.80–0.90)** | **0.34 (0.32–0.36)** | **0.40 (0.36–0.45)** |",
		"(a) kube-scheduler placing whole-device DRA claims (dra-plain): **0.85** (2 paired runs; goal ≥ 0.9: **not met**)",
		"(b) kube-scheduler alone with device-plugin whole GPUs (baseline): **0.34** (2 paired runs)",
		"(c) the extender mode (extender): **0.40** (2 paired runs)",
		"| kube-scheduler | 20.0 | 30.0 (20.0–40.0) |", "took 2.0 s",
		"| 3 | 90.0 | 100.0 | 0.90 |", // the extender/baseline table keeps run 3 (its dra-slices run bound 4 of 5)
		draUpstreamCause,              // (a) not met: where the cause and the proposal are
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "| 3 | 100.0 | 90.0 | 40.0 |") {
		t.Error("run 3's incomplete dra-slices run is paired")
	}
	met := strings.ReplaceAll(js, `"dra-slices","run":2,"bound":5,"podsPerSecond":32`, `"dra-slices","run":2,"bound":5,"podsPerSecond":38`)
	if md := writeE2E(t, met); !strings.Contains(md, "(dra-plain): **0.93** (2 paired runs; goal ≥ 0.9: met)") || strings.Contains(md, draUpstreamCause) {
		t.Errorf("with (a) met, the report should give the ratio as met and no upstream cause:\n%s", md)
	}
}

// An e2esched.json from before the DRA variants renders without DRA rows.
func TestE2EWithoutDRA(t *testing.T) {
	md := writeE2E(t, `{"nodes":1000,"pods":10,"qps":1000,"gpumemMiB":4000,"runs":[`+
		`{"variant":"extender","run":1,"bound":10,"podsPerSecond":80},{"variant":"baseline","run":1,"bound":10,"podsPerSecond":100}]}`)
	if !strings.Contains(md, "| 1 | 80.0 | 100.0 | 0.80 |") {
		t.Errorf("extender/baseline row missing:\n%s", md)
	}
	if strings.Contains(md, "DRA variants") || strings.Contains(md, "dra-slices") {
		t.Errorf("DRA rows from a result without DRA runs:\n%s", md)
	}
}

func itoa(n int) string     { return strconv.Itoa(n) }
func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// The plugins variant gets its own rows, paired with the baseline and the extender run by run,
// and its ratio against the plugin build's target (0.95); a run without it shows no section.
func TestE2EPluginsRows(t *testing.T) {
	run := func(variant string, n int, pps float64) string {
		return `{"variant":"` + variant + `","run":` + itoa(n) + `,"bound":10,"podsPerSecond":` + ftoa(pps) + `,"schedulerCPUSeconds":0.1,"selfCPUSeconds":0.01}`
	}
	js := func(withPlugins bool) string {
		var runs []string
		for i, r := range []struct{ ext, base, plug float64 }{{60, 100, 80}, {70, 100, 96}, {65, 100, 90}} {
			runs = append(runs, run("extender", i+1, r.ext), run("baseline", i+1, r.base))
			if withPlugins {
				runs = append(runs, run("plugins", i+1, r.plug))
			}
		}
		return `{"nodes":1000,"pods":10,"qps":1000,"gpumemMiB":4000,"runs":[` + strings.Join(runs, ",") + `]}`
	}
	md := writeE2E(t, js(true))
	for _, want := range []string{
		"| 1 | 80.0 | 100.0 | 0.80 | 1.33 |",
		"| 2 | 96.0 | 100.0 | 0.96 | 1.37 |",
		"| **median (min–max)** | **90.0 (80.0–96.0)** | **100.0** | **0.90 (0.80–0.96)** | **1.37 (1.33–1.38)** |",
		"Ratio plugin build / kube-scheduler alone: **0.90** (median of 3 paired runs; target ≥ 0.95 for a plugin build: **not met**).",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md[strings.Index(md, "## 2."):])
		}
	}
	if md := writeE2E(t, js(false)); strings.Contains(md, "framework-plugin build") {
		t.Error("a run without the plugins variant has a plugins section")
	}
}

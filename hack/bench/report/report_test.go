package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/hami-go/hami-go/pkg/extender
cpu: AMD EPYC
BenchmarkExtenderScale/nodes=100/filter-2        	     100	   1000000 ns/op	  5.5 cache-MiB	  9.0 objects-MiB	 200 B/op	 10 allocs/op
BenchmarkExtenderScale/nodes=100/filter#01-2     	     100	   3000000 ns/op	  5.5 cache-MiB	  9.0 objects-MiB	 200 B/op	 12 allocs/op
BenchmarkExtenderScale/nodes=100/filter#02-2     	     100	   2000000 ns/op	  5.5 cache-MiB	  9.0 objects-MiB	 200 B/op	 11 allocs/op
BenchmarkExtenderScale/nodes=1000/filter-2       	     100	  20000000 ns/op	  55 cache-MiB	  90 objects-MiB	 200 B/op	 10 allocs/op
BenchmarkExtenderScale/nodes=100/filter-http-2   	     100	    300000 ns/op	 250.0 p50-µs	 400.0 p99-µs
PASS
pkg: github.com/hami-go/hami-go/pkg/allocator
BenchmarkFilter     	     100	   1500000 ns/op	   0 B/op	   0 allocs/op
BenchmarkFilter     	     100	   2500000 ns/op	   0 B/op	   0 allocs/op
pkg: github.com/hami-go/hami-go/pkg/webhook
BenchmarkPodReviewDRA-2	    3000	    250062 ns/op	       304.9 cpu-µs/op	       211.0 p50-µs	       964.0 p99-µs	   74492 B/op	    1116 allocs/op
pkg: github.com/hami-go/hami-go/pkg/dra
BenchmarkNodePrepareResourcesGRPC-2	    3000	    900000 ns/op	       800.0 p50-µs	      6300.0 p99-µs
`

func TestReadBenchmarksGroupsRepeats(t *testing.T) {
	b, err := ReadBenchmarks(strings.NewReader(sample), "sample")
	if err != nil {
		t.Fatal(err)
	}
	s := b.Get("extender.ExtenderScale/nodes=100/filter", "ns/op")
	if s.N != 3 || s.Median != 2e6 || s.Min != 1e6 || s.Max != 3e6 {
		t.Errorf("filter ns/op %+v, want 3 values, median 2e6, 1e6–3e6", s)
	}
	if s := b.Get("extender.ExtenderScale/nodes=100/filter", "allocs/op"); s.Median != 11 {
		t.Errorf("allocs/op median %v, want 11", s.Median)
	}
	if s := b.Get("extender.ExtenderScale/nodes=100/filter-http", "p99-µs"); s.N != 1 || s.Median != 400 {
		t.Errorf("p99-µs %+v, want 400", s)
	}
	if s := b.Get("allocator.Filter", "ns/op"); s.N != 2 || s.Median != 2e6 {
		t.Errorf("allocator.Filter %+v, want median of two = 2e6", s)
	}
	if s := b.Get("extender.ExtenderScale/nodes=5000/filter", "ns/op"); s.N != 0 {
		t.Errorf("absent benchmark %+v", s)
	}
}

func TestFitLine(t *testing.T) {
	xs := []float64{100, 1000, 5000, 10000}
	lin := []float64{2 + 0.01*100, 2 + 0.01*1000, 2 + 0.01*5000, 2 + 0.01*10000}
	f, err := FitLine(xs, lin)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(f.Slope-0.01) > 1e-9 || math.Abs(f.Intercept-2) > 1e-6 || math.Abs(f.R2-1) > 1e-9 {
		t.Errorf("linear fit %+v, want slope 0.01, intercept 2, R² 1", f)
	}
	if f.Exponent > 1 || f.Exponent < 0.5 {
		t.Errorf("exponent %v of an affine series, want in (0.5, 1]", f.Exponent)
	}
	sq := []float64{1e4, 1e6, 25e6, 1e8}
	if f, _ := FitLine(xs, sq); math.Abs(f.Exponent-2) > 1e-9 {
		t.Errorf("exponent of x² = %v, want 2", f.Exponent)
	}
	if k := LocalExponent(1000, 2, 5000, 50); math.Abs(k-2) > 1e-9 {
		t.Errorf("local exponent of 5x nodes, 25x time = %v, want 2", k)
	}
	if _, err := FitLine(xs[:1], sq[:1]); err == nil {
		t.Error("one point: want an error")
	}
	if _, err := FitLine(xs, []float64{1, 0, 1, 1}); err == nil || !strings.Contains(err.Error(), "point 1") {
		t.Errorf("zero y: err %v, want one naming point 1", err)
	}
}

func TestWriteReport(t *testing.T) {
	in, out := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(in, "go-bench.txt"), []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	js := `{"nodes":1000,"pods":10,"qps":1000,"gpumemMiB":4000,"runs":[` +
		`{"variant":"extender","run":1,"bound":10,"podsPerSecond":80,"schedulerCPUSeconds":0.16,"selfCPUSeconds":0.05},` +
		`{"variant":"baseline","run":1,"bound":10,"podsPerSecond":100,"schedulerCPUSeconds":0.08,"selfCPUSeconds":0.01}]}`
	if err := os.WriteFile(filepath.Join(in, "e2esched.json"), []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	const placement = "## Placement in DRA mode (fragmentation)\n\n| nodes | ratio |\n"
	if err := os.WriteFile(filepath.Join(in, "placement.md"), []byte(placement), 0o644); err != nil {
		t.Fatal(err)
	}
	const drapack = "## DRA packing under concurrency (GPUs touched by a burst)\n\n| nodes | pods |\n"
	if err := os.WriteFile(filepath.Join(in, "drapack.md"), []byte(drapack), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(Config{In: in, Out: out, Commit: "abc123"}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"(pkg/webhook BenchmarkPodReviewDRA) | 211.0 | 964.0 | 250.1 | 1116 | 1000 | met |",
		"(pkg/dra BenchmarkPrepareResourceClaims) | – | – | – | – | 1000 | not measured |",
		"(pkg/dra BenchmarkNodePrepareResourcesGRPC) | 800.0 | 6300.0 | 900.0 | – | — | reported apart |",
	} {
		if !strings.Contains(string(md), row) {
			t.Errorf("latency table lacks %q", row)
		}
	}
	if !strings.HasSuffix(string(md), "\n"+placement+"\n"+drapack) {
		t.Errorf("report does not end with placement.md's and drapack.md's sections:\n%s", md)
	}
	for _, want := range []string{"`abc123`", "| 100 | 3200 | 2.00 (1.00–3.00) |", "| 1 | 80.0 | 100.0 | 0.80 |", "target ≥ 0.8: met",
		"| 1 | 16.0 | 8.0 | 5.0 | 1.0 |", "![time per call vs nodes](scale.png)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	for _, png := range []string{"scale.png", "memory.png", "e2e.png"} {
		b, err := os.ReadFile(filepath.Join(out, png))
		if err != nil || len(b) < 1000 || string(b[1:4]) != "PNG" {
			t.Errorf("%s: %d bytes, err %v; want a PNG", png, len(b), err)
		}
	}
}

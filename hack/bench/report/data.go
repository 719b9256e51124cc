package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/perf/benchfmt"
	"gonum.org/v1/gonum/stat"

	"github.com/hami-go/hami-go/hack/bench/e2eresult"
)

// Series is every measurement of one benchmark (all repetitions), by unit as go test printed it
// ("ns/op", "B/op", "allocs/op", "p99-µs", "cache-MiB", ...).
type Series map[string][]float64

// Benchmarks maps "<package base>.<name>" (name without "Benchmark", repetition suffix #NN and
// GOMAXPROCS suffix, e.g. "extender.ExtenderScale/nodes=1000/filter") to its series.
type Benchmarks map[string]Series

var repeatSuffix = regexp.MustCompile(`#\d+$`)

// ReadBenchmarks parses go test -bench output (any number of packages) with benchfmt.
func ReadBenchmarks(r io.Reader, fileName string) (Benchmarks, error) {
	out := Benchmarks{}
	br := benchfmt.NewReader(r, fileName)
	for br.Scan() {
		res, ok := br.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		base, parts := res.Name.Parts()
		name := strings.TrimPrefix(string(base), "Benchmark")
		for _, p := range parts {
			if len(p) > 0 && p[0] == '-' {
				continue // GOMAXPROCS
			}
			name += repeatSuffix.ReplaceAllString(string(p), "")
		}
		pkg := res.GetConfig("pkg")
		key := pkg[strings.LastIndex(pkg, "/")+1:] + "." + name
		s := out[key]
		if s == nil {
			s = Series{}
			out[key] = s
		}
		for _, v := range res.Values {
			unit := v.Unit
			val := v.Value
			if v.OrigUnit != "" {
				unit, val = v.OrigUnit, v.OrigValue
			}
			s[unit] = append(s[unit], val)
		}
	}
	if err := br.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", fileName, err)
	}
	return out, nil
}

// Stat is the median and spread of repeated measurements.
type Stat struct {
	Median, Min, Max float64
	N                int
}

// Summarize returns the median, min and max of xs (N = 0 when xs is empty).
func Summarize(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// Get returns the summary of key's unit (zero Stat when absent).
func (b Benchmarks) Get(key, unit string) Stat { return Summarize(b[key][unit]) }

// Fit is a least-squares line y = Intercept + Slope·x, its R², and the exponent k of the
// power law y ∝ x^k fitted on log-log axes (k ≤ 1: linear or better).
type Fit struct {
	Intercept, Slope, R2, Exponent float64
}

// FitLine fits xs, ys (at least two points, xs and ys positive for the exponent) with
// gonum's stat.LinearRegression.
func FitLine(xs, ys []float64) (Fit, error) {
	if len(xs) != len(ys) || len(xs) < 2 {
		return Fit{}, fmt.Errorf("fit: need two or more points, got %d x and %d y", len(xs), len(ys))
	}
	var f Fit
	f.Intercept, f.Slope = stat.LinearRegression(xs, ys, nil, false)
	f.R2 = stat.RSquared(xs, ys, nil, f.Intercept, f.Slope)
	lx, ly := make([]float64, len(xs)), make([]float64, len(ys))
	for i := range xs {
		if xs[i] <= 0 || ys[i] <= 0 {
			return f, fmt.Errorf("fit: point %d (%g, %g) is not positive", i, xs[i], ys[i])
		}
		lx[i], ly[i] = math.Log(xs[i]), math.Log(ys[i])
	}
	_, f.Exponent = stat.LinearRegression(lx, ly, nil, false)
	return f, nil
}

// LocalExponent is k of y ∝ x^k through two points (x0, y0), (x1, y1), all positive.
func LocalExponent(x0, y0, x1, y1 float64) float64 {
	return math.Log(y1/y0) / math.Log(x1/x0)
}

// E2E, E2ERun and RunPair are hack/bench/e2esched's JSON (package e2eresult).
type (
	E2E     = e2eresult.Result
	E2ERun  = e2eresult.Run
	RunPair = e2eresult.RunPair
)

// ReadE2E reads e2esched's JSON; a missing file is (nil, nil).
func ReadE2E(path string) (*E2E, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var e E2E
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &e, nil
}

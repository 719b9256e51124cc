package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	kmetrics "k8s.io/component-base/metrics"
)

// badCollector emits one series that fails to encode (a const metric with a label value
// missing) and one good one.
type badCollector struct{ d, ok *prometheus.Desc }

func (c badCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.d; ch <- c.ok }
func (c badCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(c.d, errors.New("broken"))
	ch <- prometheus.MustNewConstMetric(c.ok, prometheus.GaugeValue, 7)
}

// scrapeKube serves reg as kube-scheduler serves its /metrics (component-base's handler, which
// answers 500 on any gathering error) and returns the status and body of one scrape.
func scrapeKube(t *testing.T, reg kmetrics.KubeRegistry) (int, string) {
	t.Helper()
	srv := httptest.NewServer(kmetrics.HandlerFor(reg, kmetrics.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// case C35 in a registry hami-go does not serve: kube-scheduler's handler fails the whole scrape
// on one duplicate series; through Collectors the duplicate and a series that does not encode
// are left out, the rest (and kube-scheduler's own) served, the drops counted.
func TestC35CollectorsKeepKubeSchedulerScrape(t *testing.T) {
	dup := dupCollector{
		d:  prometheus.NewDesc("hami_go_test_dup", "dup", []string{LabelNamespace, LabelPod}, nil),
		ok: prometheus.NewDesc("hami_go_test_ok", "ok", nil, nil),
	}
	bad := badCollector{
		d:  prometheus.NewDesc("hami_go_test_bad", "bad", []string{LabelPod}, nil),
		ok: prometheus.NewDesc("hami_go_test_fine", "fine", nil, nil),
	}
	own := prometheus.NewGauge(prometheus.GaugeOpts{Name: "scheduler_test_own", Help: "kube-scheduler's own"})
	own.Set(3)

	bare := kmetrics.NewKubeRegistry()
	bare.Registerer().MustRegister(own, dup)
	if code, body := scrapeKube(t, bare); code != http.StatusInternalServerError {
		t.Fatalf("without Collectors: status %d, want 500 (what C35 is about):\n%s", code, body)
	}

	cols := NewCollectors()
	cols.MustRegister(dup, bad)
	reg := kmetrics.NewKubeRegistry()
	reg.Registerer().MustRegister(own, cols)
	for i := 1; i <= 2; i++ {
		code, body := scrapeKube(t, reg)
		if code != http.StatusOK {
			t.Fatalf("scrape %d: status %d, want 200:\n%s", i, code, body)
		}
		for _, want := range []string{
			"scheduler_test_own 3\n",
			"hami_go_test_ok 42\n",
			"hami_go_test_fine 7\n",
			`hami_go_test_dup{namespace="ns",pod="p"} 1` + "\n",
			`promhttp_metric_handler_errors_total{cause="gathering"} ` + map[int]string{1: "2", 2: "4"}[i] + "\n",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("scrape %d lacks %q:\n%s", i, want, body)
			}
		}
		if n := strings.Count(body, "hami_go_test_dup{"); n != 1 {
			t.Errorf("scrape %d: %d series hami_go_test_dup, want 1 (the first collected)", i, n)
		}
		if strings.Contains(body, "hami_go_test_bad") {
			t.Errorf("scrape %d serves the series that does not encode:\n%s", i, body)
		}
	}
}

// mapCollector is a collector value whose type is not comparable (a map field): Unregister must
// not compare collectors with ==.
type mapCollector struct {
	d *prometheus.Desc
	m map[string]float64
}

func (c mapCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.d }
func (c mapCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.d, prometheus.GaugeValue, c.m["v"])
}

// Collectors' registration is client_golang's: a second collector of one series is refused with
// AlreadyRegisteredError naming the first; Unregister matches by descriptors (an uncomparable
// collector value too). Two Collectors can never share a registry (both serve the drop counter:
// HamiGo in two profiles of one kube-scheduler), even over different series; Unregister makes
// room again.
func TestCollectorsRegistration(t *testing.T) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "hami_go_test_g", Help: "g"})
	a, b := NewCollectors(), NewCollectors()
	a.MustRegister(g)
	var are prometheus.AlreadyRegisteredError
	if err := a.Register(prometheus.NewGauge(prometheus.GaugeOpts{Name: "hami_go_test_g", Help: "g"})); !errors.As(err, &are) || are.ExistingCollector != g {
		t.Fatalf("second gauge of one name: %v, want AlreadyRegisteredError naming the first", err)
	}
	m := mapCollector{d: prometheus.NewDesc("hami_go_test_m", "m", nil, nil), m: map[string]float64{"v": 1}}
	a.MustRegister(m)
	if !a.Unregister(mapCollector{d: m.d}) || a.Unregister(m) {
		t.Error("Unregister of an uncomparable collector: want true once, then false")
	}
	b.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "hami_go_test_other", Help: "other"}))
	reg := kmetrics.NewKubeRegistry()
	if err := reg.Registerer().Register(a); err != nil {
		t.Fatal(err)
	}
	if err := reg.Registerer().Register(b); err == nil {
		t.Fatal("a second Collectors registered beside the first; want it refused (the drop counter would be served twice)")
	}
	if !reg.Registerer().Unregister(a) {
		t.Fatal("Unregister(a) = false")
	}
	if err := reg.Registerer().Register(b); err != nil {
		t.Fatalf("after a is unregistered: %v", err)
	}
	if !a.Unregister(g) || a.Unregister(g) {
		t.Error("Collectors.Unregister: want true once, then false")
	}
}

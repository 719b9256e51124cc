package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// dupCollector emits the same series twice (two objects with one label set) and one good one.
type dupCollector struct{ d, ok *prometheus.Desc }

func (c dupCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.d; ch <- c.ok }
func (c dupCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.d, prometheus.GaugeValue, 1, "ns", "p")
	ch <- prometheus.MustNewConstMetric(c.d, prometheus.GaugeValue, 2, "ns", "p")
	ch <- prometheus.MustNewConstMetric(c.ok, prometheus.GaugeValue, 42)
}

// case C35: a duplicate series leaves out that series, not the scrape: 200, the other series
// served, the error counted.
func TestC35DuplicateSeriesKeepsScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(dupCollector{
		d:  prometheus.NewDesc("hami_go_test_dup", "dup", []string{LabelNamespace, LabelPod}, nil),
		ok: prometheus.NewDesc("hami_go_test_ok", "ok", nil, nil),
	})
	srv := httptest.NewServer(Handler(reg, reg))
	defer srv.Close()
	for i := 1; i <= 2; i++ {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("scrape %d: status %d, want 200:\n%s", i, resp.StatusCode, b)
		}
		if !strings.Contains(string(b), "hami_go_test_ok 42") {
			t.Fatalf("scrape %d lacks the good series:\n%s", i, b)
		}
		if n := testutil.ToFloat64(counter(t, reg)); n != float64(i) {
			t.Fatalf("after scrape %d: promhttp_metric_handler_errors_total{cause=gathering} = %v, want %d", i, n, i)
		}
	}
}

func counter(t *testing.T, reg *prometheus.Registry) prometheus.Collector {
	t.Helper()
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "promhttp_metric_handler_errors_total", Help: "Total number of internal errors encountered by the promhttp metric handler."}, []string{"cause"})
	if err := reg.Register(errs); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			return are.ExistingCollector.(*prometheus.CounterVec).WithLabelValues("gathering")
		}
		t.Fatal(err)
	}
	t.Fatal("the handler registered no error counter")
	return nil
}

package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/extender"
)

// newTestExtender is an extender on a fake clientset (unit test only; it is never run).
func newTestExtender(t *testing.T) (*extender.Extender, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	ext, err := extender.New(extender.DefaultConfig(), fake.NewClientset(), record.NewFakeRecorder(10), clock.RealClock{}, reg)
	if err != nil {
		t.Fatal(err)
	}
	return ext, reg
}

// status serves the listener's server until the test ends and returns the status of method path.
func status(t *testing.T, l listener, method, path string) int {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+l.ln.Addr().String()+path, strings.NewReader("{}"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// --metrics-address opens a second listener with /metrics and health but not /bind; the API
// listener keeps /bind and loses /metrics (issue 18). With it empty, one listener serves both.
func TestServeMetricsAddress(t *testing.T) {
	ext, reg := newTestExtender(t)
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "test_total"}))
	o, err := parseOptions([]string{"--address=127.0.0.1:0", "--metrics-address=127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := serve(o, ext, reg)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 {
		t.Fatalf("%d listeners, want 2", len(ls))
	}
	for _, l := range ls {
		go func() { _ = l.srv.Serve(l.ln) }()
		defer l.srv.Close()
	}
	api, metrics := ls[0], ls[1]
	for _, tc := range []struct {
		l            listener
		method, path string
		want         int
	}{
		{metrics, "POST", "/bind", 404}, {metrics, "POST", "/filter", 404}, {metrics, "GET", "/metrics", 200},
		{metrics, "GET", "/healthz", 200},
		{api, "POST", "/bind", 400}, {api, "GET", "/metrics", 404},
	} {
		if got := status(t, tc.l, tc.method, tc.path); got != tc.want {
			t.Errorf("%s %s %s: %d, want %d", tc.l.what, tc.method, tc.path, got, tc.want)
		}
	}

	o.MetricsAddress = ""
	one, err := serve(o, ext, reg)
	if err != nil {
		t.Fatal(err)
	}
	if len(one) != 1 {
		t.Fatalf("%d listeners with --metrics-address empty, want 1", len(one))
	}
	go func() { _ = one[0].srv.Serve(one[0].ln) }()
	defer one[0].srv.Close()
	if got := status(t, one[0], "GET", "/metrics"); got != 200 {
		t.Errorf("--metrics-address empty: /metrics on --address %d, want 200", got)
	}
}

// A metrics address that cannot be opened fails with the flag's name and closes the API socket.
func TestServeMetricsAddressBusy(t *testing.T) {
	ext, reg := newTestExtender(t)
	o, _ := parseOptions([]string{"--address=127.0.0.1:0", "--metrics-address=256.0.0.1:1"})
	if _, err := serve(o, ext, reg); err == nil || !strings.Contains(err.Error(), `--metrics-address "256.0.0.1:1"`) {
		t.Fatalf("err %v", err)
	}
}

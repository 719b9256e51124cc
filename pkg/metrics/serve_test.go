package metrics

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestNewMuxServesMetricsAndHealthz(t *testing.T) {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "hami_go_test_total", Help: "t"})
	c.Inc()
	mux := NewMux(NewRegistry(c))
	for path, want := range map[string]string{"/healthz": "ok\n", "/metrics": "hami_go_test_total 1"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%s: %d %q, want %q", path, rec.Code, rec.Body.String(), want)
		}
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "go_goroutines") || !strings.Contains(rec.Body.String(), "process_") {
		t.Errorf("/metrics lacks the Go and process collectors")
	}
}

func TestServeNamesTheFlag(t *testing.T) {
	if _, err := Serve("bad:address:x", http.NotFoundHandler()); err == nil || !strings.HasPrefix(err.Error(), "--metrics-address bad:address:x: ") {
		t.Fatalf("err = %v", err)
	}
	stop, err := Serve("127.0.0.1:0", http.NotFoundHandler())
	if err != nil {
		t.Fatal(err)
	}
	stop()
}

// An address in use is retried (case C45: the agent being replaced still holds the port while it
// hands over), and given up after the retry time with the flag's name.
func TestServeRetriesAnAddressInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := held.Addr().String()
	if _, err := serve(addr, http.NotFoundHandler(), 300*time.Millisecond); err == nil || !strings.HasPrefix(err.Error(), "--metrics-address "+addr+": ") {
		t.Fatalf("address held throughout: err = %v, want the flag named", err)
	}
	go func() { time.Sleep(400 * time.Millisecond); held.Close() }()
	stop, err := serve(addr, http.NotFoundHandler(), 5*time.Second)
	if err != nil {
		t.Fatalf("address freed after 400 ms: %v", err)
	}
	stop()
}

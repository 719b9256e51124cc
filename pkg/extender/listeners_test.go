package extender

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// get returns the status and body of a GET.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The metrics listener (--metrics-address, reachable by Prometheus) serves /metrics, /healthz and
// /readyz and none of the scheduler verbs; the API listener (loopback) serves the verbs and no
// metrics (issue 18).
func TestMetricsHandlerServesNoSchedulerVerbs(t *testing.T) {
	e := newEnv(t, nil)
	metrics := httptest.NewServer(e.ext.MetricsHandler(e.reg))
	defer metrics.Close()
	api := httptest.NewServer(e.ext.APIHandler())
	defer api.Close()

	for _, verb := range []string{"/filter", "/prioritize", "/bind", "/preempt"} {
		if code, body := post(t, metrics.URL+verb, []byte(`{"PodName":"p","PodNamespace":"default","PodUID":"u","Node":"n"}`)); code != http.StatusNotFound {
			t.Errorf("metrics listener POST %s: %d %s, want 404", verb, code, body)
		}
		// The same body on the API listener reaches the verb (a 200 reply or the verb's own 400).
		if code, body := post(t, api.URL+verb, []byte(`{}`)); code == http.StatusNotFound {
			t.Errorf("API listener POST %s: 404 %s", verb, body)
		}
	}
	if code, body := get(t, metrics.URL+"/metrics"); code != 200 || !strings.Contains(body, "hami_go_extender_") {
		t.Errorf("metrics listener /metrics: %d, hami_go_extender_ series missing", code)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, metrics.URL+p); code != 200 || body != "ok\n" {
			t.Errorf("metrics listener %s: %d %q", p, code, body)
		}
	}
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		if code, _ := get(t, api.URL+p); code != http.StatusNotFound {
			t.Errorf("API listener %s: %d, want 404", p, code)
		}
	}
}

package dra

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, strings.TrimSpace(string(b))
}

// /readyz is 503 until the kubelet has registered the driver (before the helper starts, while
// unregistered, and with the kubelet's refusal), then 200; the other paths are the wrapped
// handler's.
func TestReadyzFollowsRegistration(t *testing.T) {
	inner := http.NewServeMux()
	inner.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	r := &Registration{}
	h := withReadyz(inner, r)
	if code, body := get(t, h, "/readyz"); code != 503 || body != "the kubelet plugin helper has not started" {
		t.Errorf("before start: %d %q", code, body)
	}
	registered, reason := false, ""
	r.setFunc(func() (bool, string) { return registered, reason })
	if code, body := get(t, h, "/readyz"); code != 503 || body != "not registered with the kubelet yet" {
		t.Errorf("unregistered: %d %q", code, body)
	}
	reason = "version 9 not supported"
	if code, body := get(t, h, "/readyz"); code != 503 || body != "the kubelet refused the registration: version 9 not supported" {
		t.Errorf("refused: %d %q", code, body)
	}
	registered, reason = true, ""
	if code, body := get(t, h, "/readyz"); code != 200 || body != "ok" {
		t.Errorf("registered: %d %q", code, body)
	}
	if code, body := get(t, h, "/healthz"); code != 200 || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
}

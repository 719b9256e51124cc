package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseWgetKubeRayProbe(t *testing.T) {
	// The command KubeRay v1.5 puts in its probes (utils.BaseWgetHealthCommand).
	o, err := parseWget(strings.Fields("--tries 1 -T 2 -q -O- http://localhost:52365/api/local_raylet_healthz"))
	if err != nil {
		t.Fatal(err)
	}
	if o.Tries != 1 || o.Timeout != 2*time.Second || !o.Quiet || o.Output != "-" || o.URL != "http://localhost:52365/api/local_raylet_healthz" {
		t.Fatalf("parsed %+v", o)
	}
	o, err = parseWget([]string{"--timeout=1.5", "--tries=3", "--output-document", "f", "http://x/"})
	if err != nil || o.Timeout != 1500*time.Millisecond || o.Tries != 3 || o.Output != "f" {
		t.Fatalf("parsed %+v %v", o, err)
	}
	for _, bad := range [][]string{{"-q"}, {"-T", "x", "http://a"}, {"http://a", "http://b"}} {
		if _, err := parseWget(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestRunWget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/gcs_healthz" {
			fmt.Fprint(w, "success")
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	if code := runWget(context.Background(), []string{"-q", "-O-", srv.URL + "/api/gcs_healthz"}, &out, &errOut); code != 0 || out.String() != "success" {
		t.Fatalf("exit %d, out %q, err %q", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := runWget(context.Background(), []string{"-q", "-O-", srv.URL + "/nope"}, &out, &errOut); code != 1 || out.Len() != 0 || !strings.Contains(errOut.String(), "404") {
		t.Fatalf("404: exit %d, out %q, err %q", code, out.String(), errOut.String())
	}
}

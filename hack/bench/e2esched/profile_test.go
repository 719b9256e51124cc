package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestProfilePath(t *testing.T) {
	if got, want := profilePath("/p", "dra-slices", 3, whoScheduler), "/p/dra-slices-run3-kube-scheduler.pprof"; got != want {
		t.Errorf("profilePath = %q, want %q", got, want)
	}
	if got, want := profilePath("d", "extender", 12, whoBench), filepath.Join("d", "extender-run12-bench.pprof"); got != want {
		t.Errorf("profilePath = %q, want %q", got, want)
	}
}

func TestSchedulerArgs(t *testing.T) {
	allow := "--authorization-always-allow-paths=/healthz,/readyz,/livez,/debug/pprof,/debug/pprof/*"
	for _, tc := range []struct {
		profile string
		port    int
		want    []string
	}{
		{BaselineScheduler, 0, []string{"--config=c.yaml", "--secure-port=0", "--v=1"}},
		{ExtenderScheduler, 0, []string{"--config=c.yaml", "--secure-port=0", "--v=1"}},
		{DRAScheduler, 0, []string{"--config=c.yaml", "--secure-port=0", "--v=1", "--feature-gates=" + draFeatureGates}},
		{ExtenderScheduler, 40123, []string{"--config=c.yaml", "--secure-port=40123", "--v=1", "--bind-address=127.0.0.1", allow}},
		{DRAScheduler, 40123, []string{"--config=c.yaml", "--secure-port=40123", "--v=1", "--bind-address=127.0.0.1", allow, "--feature-gates=" + draFeatureGates}},
	} {
		if got := schedulerArgs("c.yaml", tc.profile, tc.port); !slices.Equal(got, tc.want) {
			t.Errorf("schedulerArgs(%s, %d) = %q, want %q", tc.profile, tc.port, got, tc.want)
		}
	}
}

// burn uses some CPU, so that a profile has samples.
func burn(d time.Duration) {
	x := 0
	for t := time.Now(); time.Since(t) < d; {
		for i := 0; i < 1e5; i++ {
			x += i * i
		}
	}
	_ = x
}

// isProfile fails t unless path is a non-empty gzipped file (a pprof profile).
func isProfile(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 20 || !bytes.HasPrefix(b, gzipMagic) {
		t.Errorf("%s: %d bytes starting %x, want a gzipped profile", path, len(b), b[:min(len(b), 2)])
	}
}

func TestSelfProfilePairing(t *testing.T) {
	// Each step starts ("+name") or stops ("-name") a profile; a start fails while another runs.
	for _, tc := range []struct {
		name  string
		steps []string
		fail  []string // starts that fail
	}{
		{"one", []string{"+a", "-a"}, nil},
		{"stop twice", []string{"+a", "-a", "-a"}, nil},
		{"stop never started", []string{"-a"}, nil},
		{"second while first runs", []string{"+a", "+b", "-b", "-a", "+b", "-b"}, []string{"+b"}},
		{"one after another", []string{"+a", "-a", "+b", "-b"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			profs := map[string]*selfProfile{}
			failed := []string{}
			for _, s := range tc.steps {
				name := s[1:]
				path := filepath.Join(dir, name+".pprof")
				if s[0] == '-' {
					if err := profs[name].Stop(); err != nil {
						t.Fatalf("%s: %v", s, err)
					}
					continue
				}
				p, err := startSelfProfile(path)
				if err != nil {
					failed = append(failed, s)
					if _, serr := os.Stat(path); serr == nil && profs[name] == nil {
						t.Errorf("%s failed (%v) but left %s", s, err, path)
					}
					continue
				}
				profs[name] = p
				burn(30 * time.Millisecond)
			}
			if !slices.Equal(failed, append([]string{}, tc.fail...)) {
				t.Errorf("failed starts %q, want %q", failed, tc.fail)
			}
			for name := range profs {
				isProfile(t, filepath.Join(dir, name+".pprof"))
			}
			// Every start was paired: a new profile starts.
			p, err := startSelfProfile(filepath.Join(dir, "after.pprof"))
			if err != nil {
				t.Fatalf("a profile is still active: %v", err)
			}
			_ = p.Stop()
		})
	}
}

// pprofServer is an HTTPS server with net/http/pprof's index and CPU profile (as kube-scheduler
// serves them); forbid answers 403 instead.
func pprofServer(t *testing.T, forbid bool) string {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	var h http.Handler = mux
	if forbid {
		h = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "forbidden", http.StatusForbidden) })
	}
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "https://")
}

func TestSchedProfileEndsWithTheWindow(t *testing.T) {
	addr := pprofServer(t, false)
	path := filepath.Join(t.TempDir(), "s.pprof")
	t0 := time.Now()
	p := startSchedProfile(context.Background(), addr, 300, path)
	burn(300 * time.Millisecond)
	p.Stop()
	p.Stop() // idempotent
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("Stop took until %v; the profile asked 300 s must end with the window", d)
	}
	isProfile(t, path)
	if _, err := os.Stat(path + ".tmp"); err == nil {
		t.Errorf("%s.tmp left", path)
	}
}

func TestSchedProfileFailuresLeaveNoFile(t *testing.T) {
	for name, addr := range map[string]string{"forbidden": pprofServer(t, true), "nothing listens": "127.0.0.1:1"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.pprof")
			p := startSchedProfile(context.Background(), addr, 300, path)
			time.Sleep(200 * time.Millisecond)
			p.Stop()
			if _, err := os.Stat(path); err == nil {
				t.Errorf("%s written", path)
			}
		})
	}
	// The scheduler's context ends first: the fetch gives up.
	ctx, cancel := context.WithCancel(context.Background())
	p := startSchedProfile(ctx, "127.0.0.1:1", 300, filepath.Join(t.TempDir(), "s.pprof"))
	cancel()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatal("fetch still running after its context ended")
	}
	p.Stop()
}

func TestRunProfiles(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		dir string
		run int
	}{{"", 1}, {dir, 0}} {
		p := startRunProfiles(Config{CPUProfileDir: tc.dir, RunTimeout: time.Minute}, "baseline", tc.run)
		if p != nil {
			t.Errorf("dir %q run %d: profiles %+v, want none", tc.dir, tc.run, p)
		}
		if p.schedulerPort() != 0 {
			t.Errorf("off: port %d", p.schedulerPort())
		}
		p.schedulerStarted(context.Background()) // nil-safe
		p.endScheduler()
		p.stop()
	}
	p := startRunProfiles(Config{CPUProfileDir: dir, RunTimeout: time.Minute}, "baseline", 2)
	defer p.stop()
	if p == nil || p.schedulerPort() == 0 || p.maxSeconds != 120 {
		t.Fatalf("profiles %+v, want a port and 120 s", p)
	}
	burn(50 * time.Millisecond)
	p.stop()
	p.stop()
	isProfile(t, filepath.Join(dir, "baseline-run2-bench.pprof"))
}

// TestRealSchedulerProfile runs the kube-scheduler binary named by $E2ESCHED_KUBE_SCHEDULER
// (skipped where unset) with schedulerArgs against an API server that does not exist (no
// cluster is used) and fetches its CPU profile: the flags open /debug/pprof/* to anonymous
// requests.
func TestRealSchedulerProfile(t *testing.T) {
	bin := os.Getenv("E2ESCHED_KUBE_SCHEDULER")
	if bin == "" {
		t.Skip("E2ESCHED_KUBE_SCHEDULER unset")
	}
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters:\n- cluster: {server: \"https://127.0.0.1:1\"}\n  name: none\n"+
		"contexts:\n- context: {cluster: none, user: u}\n  name: none\ncurrent-context: none\nusers:\n- name: u\n  user: {token: x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(conf, []byte(schedulerConfig(Config{Kubeconfig: kc, QPS: 10, Burst: 10}, BaselineScheduler, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := freeLoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, schedulerArgs(conf, BaselineScheduler, port)...)
	log, _ := os.Create(filepath.Join(dir, "log"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	path := filepath.Join(dir, "s.pprof")
	p := startSchedProfile(ctx, "127.0.0.1:"+strconv.Itoa(port), 300, path)
	time.Sleep(3 * time.Second)
	p.Stop()
	isProfile(t, path)
}

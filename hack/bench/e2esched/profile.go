package main

// CPU profiles of the measured runs (--cpu-profile-dir, Config.CPUProfileDir): per run, one of
// this process (runtime/pprof) and one of that run's kube-scheduler (its /debug/pprof/profile on
// a loopback HTTPS port), both pprof's gzipped protobuf, readable by `go tool pprof`.
//
// kube-scheduler's /debug/pprof/profile?seconds=S profiles until S seconds have passed or the
// request's context ends, then writes the profile. fetchSchedProfile asks for S longer than any
// run (RunTimeout + 60 s) over a plain HTTP/1.1 connection of its own, and ends the window at the
// run's end by closing its side of the connection for writing (TLS close_notify, TCP half-close):
// Go's HTTP server reads EOF, cancels the request's context, and the handler stops the profile and
// still writes it to the half that is open. The profile covers the run's window exactly, whatever
// its length.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

const (
	// whoBench and whoScheduler name the process a profile file is of (profilePath).
	whoBench     = "bench"
	whoScheduler = "kube-scheduler"
	// pprofAllowPaths are the paths kube-scheduler serves without authorization when it is
	// profiled: its defaults (/healthz, /readyz, /livez) and net/http/pprof's. Anonymous
	// requests are authenticated as system:anonymous (no --authentication-kubeconfig), and
	// without --authorization-kubeconfig every path not listed here is forbidden.
	pprofAllowPaths = "/healthz,/readyz,/livez,/debug/pprof,/debug/pprof/*"
	// schedProfileReadTimeout bounds reading kube-scheduler's profile once its window ended.
	schedProfileReadTimeout = 30 * time.Second
)

// gzipMagic starts every pprof profile (gzipped protobuf).
var gzipMagic = []byte{0x1f, 0x8b}

// profilePath is the file of a run's CPU profile: dir/<variant>-run<run>-<who>.pprof, who
// whoBench or whoScheduler (e.g. extender-run3-kube-scheduler.pprof).
func profilePath(dir, variant string, run int, who string) string {
	return filepath.Join(dir, fmt.Sprintf("%s-run%d-%s.pprof", variant, run, who))
}

// schedulerArgs are kube-scheduler's arguments for config file conf and scheduler profile
// profile: without HTTPS (--secure-port=0) where pprofPort is 0, else HTTPS on
// 127.0.0.1:pprofPort with /debug/pprof/* open to anonymous requests; the DRA feature gates for
// DRAScheduler.
func schedulerArgs(conf, profile string, pprofPort int) []string {
	args := []string{"--config=" + conf, "--secure-port=0", "--v=1"}
	if pprofPort > 0 {
		args[1] = "--secure-port=" + strconv.Itoa(pprofPort)
		args = append(args, "--bind-address=127.0.0.1", "--authorization-always-allow-paths="+pprofAllowPaths)
	}
	if profile == DRAScheduler {
		args = append(args, "--feature-gates="+draFeatureGates)
	}
	return args
}

// freeLoopbackPort is a TCP port on 127.0.0.1 that was free a moment ago.
func freeLoopbackPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// selfProfile is this process's CPU profile (runtime/pprof, one at a time per process) going to
// one file. Its Stop is nil-safe and idempotent, so a deferred Stop pairs with every start.
type selfProfile struct {
	mu sync.Mutex
	f  *os.File // nil once stopped
}

// startSelfProfile starts this process's CPU profile into path (created or truncated); it fails
// where another CPU profile of this process is active.
func startSelfProfile(path string) (*selfProfile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return &selfProfile{f: f}, nil
}

// Stop ends the profile and closes its file (the profile is complete once Stop returns).
func (p *selfProfile) Stop() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f == nil {
		return nil
	}
	pprof.StopCPUProfile()
	err := p.f.Close()
	p.f = nil
	return err
}

// schedProfile is a kube-scheduler CPU profile being fetched (fetchSchedProfile) in a goroutine.
type schedProfile struct {
	end  chan struct{} // closed by Stop: the window ends
	done chan struct{} // closed once the goroutine is done (profile written or failure logged)
	once sync.Once
}

// startSchedProfile fetches the CPU profile of the kube-scheduler serving HTTPS on addr
// (host:port) into path, from the moment it answers until Stop (at most maxSeconds, s); a
// failure is logged. It gives up when ctx ends.
func startSchedProfile(ctx context.Context, addr string, maxSeconds int, path string) *schedProfile {
	p := &schedProfile{end: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		if err := fetchSchedProfile(ctx, addr, maxSeconds, path, p.end); err != nil {
			klog.ErrorS(err, "No kube-scheduler CPU profile", "file", path)
		}
	}()
	return p
}

// Stop ends the window and waits until the profile is written (or its failure logged). Nil-safe
// and idempotent.
func (p *schedProfile) Stop() {
	if p == nil {
		return
	}
	p.once.Do(func() { close(p.end) })
	<-p.done
}

// fetchSchedProfile waits until kube-scheduler's /debug/pprof/ on addr answers 200, asks for
// /debug/pprof/profile?seconds=maxSeconds, half-closes the connection once end is closed, and
// writes the profile into path (through path.tmp, renamed once complete).
func fetchSchedProfile(ctx context.Context, addr string, maxSeconds int, path string, end <-chan struct{}) error {
	tlsCfg := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}} // loopback, self-signed
	if err := waitPprof(ctx, addr, tlsCfg, end); err != nil {
		return err
	}
	d := tls.Dialer{Config: tlsCfg}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	conn := nc.(*tls.Conn)
	defer conn.Close()
	req := fmt.Sprintf("GET /debug/pprof/profile?seconds=%d HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", maxSeconds, addr)
	if _, err := io.WriteString(conn, req); err != nil {
		return err
	}
	select {
	case <-end:
	case <-ctx.Done():
		return fmt.Errorf("kube-scheduler stopped before the window ended: %w", ctx.Err())
	}
	if err := conn.CloseWrite(); err != nil {
		return fmt.Errorf("end the window: %w", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(schedProfileReadTimeout))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return fmt.Errorf("read the profile: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return fmt.Errorf("read the profile: %w", err)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("GET /debug/pprof/profile: %s: %.200s", resp.Status, body)
	case !bytes.HasPrefix(body, gzipMagic):
		return fmt.Errorf("GET /debug/pprof/profile: %d bytes that are no gzipped profile: %.200q", len(body), body)
	}
	if err := os.WriteFile(path+".tmp", body, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// waitPprof polls https://addr/debug/pprof/ every 50 ms until it answers 200 (serving, and
// pprof authorized); it fails once end is closed or ctx ends first.
func waitPprof(ctx context.Context, addr string, tlsCfg *tls.Config, end <-chan struct{}) error {
	tr := &http.Transport{TLSClientConfig: tlsCfg}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	var last string
	for {
		resp, err := c.Get("https://" + addr + "/debug/pprof/")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-end:
			return fmt.Errorf("the run ended before kube-scheduler served /debug/pprof/ (last: %s)", last)
		case <-ctx.Done():
			return fmt.Errorf("kube-scheduler stopped before serving /debug/pprof/ (last: %s): %w", last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runProfiles are the CPU profiles of one run of one variant (Config.CPUProfileDir). A nil
// *runProfiles (profiling off, or a warm-up run) does nothing; a profile that cannot be made is
// logged and left out, and the run goes on.
type runProfiles struct {
	dir, variant string
	run          int
	maxSeconds   int // kube-scheduler profile's seconds: longer than any run
	port         int // kube-scheduler's HTTPS port on 127.0.0.1; 0: none
	self         *selfProfile
	sched        *schedProfile
}

// startRunProfiles starts this process's CPU profile for run (≥ 1) of variant and picks
// kube-scheduler's HTTPS port; nil where cfg.CPUProfileDir is "" or run is a warm-up (0).
func startRunProfiles(cfg Config, variant string, run int) *runProfiles {
	if cfg.CPUProfileDir == "" || run < 1 {
		return nil
	}
	p := &runProfiles{dir: cfg.CPUProfileDir, variant: variant, run: run, maxSeconds: int(cfg.RunTimeout/time.Second) + 60}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		klog.ErrorS(err, "No CPU profiles", "variant", variant, "run", run)
		return nil
	}
	var err error
	if p.port, err = freeLoopbackPort(); err != nil {
		klog.ErrorS(err, "No kube-scheduler CPU profile: no free loopback port", "variant", variant, "run", run)
	}
	path := profilePath(p.dir, variant, run, whoBench)
	if p.self, err = startSelfProfile(path); err != nil {
		klog.ErrorS(err, "No CPU profile of this process", "file", path)
	}
	return p
}

// schedulerPort is the --secure-port kube-scheduler is to serve pprof on (0: none).
func (p *runProfiles) schedulerPort() int {
	if p == nil {
		return 0
	}
	return p.port
}

// schedulerStarted starts fetching the profile of the kube-scheduler just started on
// schedulerPort; ctx is that scheduler's lifetime.
func (p *runProfiles) schedulerStarted(ctx context.Context) {
	if p == nil || p.port == 0 {
		return
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
	p.sched = startSchedProfile(ctx, addr, p.maxSeconds, profilePath(p.dir, p.variant, p.run, whoScheduler))
}

// endScheduler ends kube-scheduler's window and waits until its profile is written; call it
// before stopping kube-scheduler.
func (p *runProfiles) endScheduler() {
	if p != nil {
		p.sched.Stop()
	}
}

// stop ends both profiles (idempotent; defer it right after startRunProfiles).
func (p *runProfiles) stop() {
	if p == nil {
		return
	}
	p.endScheduler()
	if err := p.self.Stop(); err != nil {
		klog.ErrorS(err, "CPU profile of this process incomplete", "variant", p.variant, "run", p.run)
	}
}

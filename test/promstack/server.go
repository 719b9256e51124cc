package promstack

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// ServerOptions say how to run Prometheus.
type ServerOptions struct {
	// Binary is the prometheus program (hack/cluster/build-tools.sh prometheus).
	Binary string
	// Dir holds prometheus.yml, the rule file, the TSDB (data/) and prometheus.log.
	Dir string
	// Config is the configuration (Config); Rules the rule file (Monitoring.RuleFile), if any:
	// written to Dir/prometheus.yml and Dir/rules.yaml. Config's RuleFile must name RulesPath(Dir).
	Config, Rules []byte
	// Listen is the HTTP API's address; it must be a loopback address. Port 0: a free port.
	Listen string
	// ReadyTimeout bounds the wait for /-/ready (default 60 s).
	ReadyTimeout time.Duration
	// DiscoveryReloadInterval is how often Prometheus applies what service discovery found to
	// its scrape targets (ArgsOptions.DiscoveryReloadInterval); 0: Prometheus's 5 s.
	DiscoveryReloadInterval time.Duration
}

// Server is a running Prometheus.
type Server struct {
	// URL is the HTTP API's base URL (http://127.0.0.1:<port>).
	URL string
	// Log is the path of its log (stdout and stderr).
	Log  string
	cmd  *exec.Cmd
	done chan error
}

// RulesPath is where Start writes the rule file in dir.
func RulesPath(dir string) string { return filepath.Join(dir, "rules.yaml") }

// ArgsOptions say what Args puts on Prometheus's command line.
type ArgsOptions struct {
	// Dir holds prometheus.yml and the TSDB (data/).
	Dir string
	// Listen is the HTTP API's address.
	Listen string
	// DiscoveryReloadInterval is how often Prometheus's scrape manager applies what service
	// discovery found (--scrape.discovery-reload-interval, whole milliseconds): a new target is
	// scraped, and a gone one dropped, up to this long after its EndpointSlice changed. 0:
	// Prometheus's default, 5 s, which a test that scrapes every second would wait through.
	DiscoveryReloadInterval time.Duration
}

// Args are Prometheus's command-line arguments for a configuration and TSDB in o.Dir, the HTTP
// API on o.Listen (admin and lifecycle APIs off, no remote write receiver). Error: a negative
// or fractional-millisecond DiscoveryReloadInterval.
func Args(o ArgsOptions) ([]string, error) {
	args := []string{
		"--config.file=" + filepath.Join(o.Dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(o.Dir, "data"),
		"--web.listen-address=" + o.Listen,
		"--log.level=warn",
	}
	if d := o.DiscoveryReloadInterval; d != 0 {
		if d < 0 || d%time.Millisecond != 0 {
			return nil, fmt.Errorf("discovery reload interval %v: want a positive whole number of milliseconds", d)
		}
		// A Prometheus duration: no fractions, so in milliseconds.
		args = append(args, fmt.Sprintf("--scrape.discovery-reload-interval=%dms", d.Milliseconds()))
	}
	return args, nil
}

// WriteFiles writes the configuration and the rule file (when rules is not nil) into dir.
func WriteFiles(dir string, config, rules []byte) error {
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), config, 0o644); err != nil {
		return err
	}
	if rules != nil {
		return os.WriteFile(RulesPath(dir), rules, 0o644)
	}
	return nil
}

// LoopbackAddress checks that addr ("host:port") is on a loopback address and, when its port is
// 0, returns it with a port that was free a moment ago.
func LoopbackAddress(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("listen address %q: Prometheus listens on a loopback address only", addr)
	}
	if port != "0" {
		return addr, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("find a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Start writes the files and starts Prometheus as a child process, and returns once /-/ready
// answers. Stop it with Stop.
func Start(ctx context.Context, o ServerOptions) (*Server, error) {
	listen, err := LoopbackAddress(o.Listen)
	if err != nil {
		return nil, err
	}
	args, err := Args(ArgsOptions{Dir: o.Dir, Listen: listen, DiscoveryReloadInterval: o.DiscoveryReloadInterval})
	if err != nil {
		return nil, err
	}
	if err := WriteFiles(o.Dir, o.Config, o.Rules); err != nil {
		return nil, err
	}
	logPath := filepath.Join(o.Dir, "prometheus.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(o.Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Binary, err)
	}
	s := &Server{URL: "http://" + listen, Log: logPath, cmd: cmd, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	timeout := o.ReadyTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	if err := s.waitReady(ctx, timeout); err != nil {
		s.Stop()
		b, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%w; log %s:\n%s", err, logPath, b)
	}
	return s, nil
}

// waitReady polls /-/ready every 100 ms until it answers 200, the process exits, or timeout.
func (s *Server) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/-/ready", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("prometheus exited before it was ready: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("prometheus not ready on %s after %v", s.URL, timeout)
		case <-tick.C:
		}
	}
}

// Stop sends SIGTERM and waits up to 10 s for Prometheus to exit, then kills it. Safe to call
// twice.
func (s *Server) Stop() {
	if s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		err := <-s.done
		s.done <- err
	}
}

package metrics

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/klog/v2"
)

// NewRegistry returns a registry holding cs and client_golang's Go and process collectors.
func NewRegistry(cs ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))...)
	return reg
}

// NewMux serves /metrics (reg) and /healthz ("ok"); callers may add routes.
func NewMux(reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", Handler(reg, reg)) // a bad series is left out, not the scrape (C35)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}

// bindRetry is how long Serve retries an address in use: a node agent on the host network is
// started while the one it replaces still hands over on the same port (case C45: a force-deleted
// pod's replacement, the next agent after a crash).
const bindRetry = 30 * time.Second

// Serve listens on addr (TCP) and serves h in the background until the returned stop is
// called; a serve error after the start is logged. An address in use is retried every 250 ms
// for 30 s. Errors name --metrics-address and addr.
func Serve(addr string, h http.Handler) (stop func(), err error) { return serve(addr, h, bindRetry) }

func serve(addr string, h http.Handler, retry time.Duration) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		klog.InfoS("Metrics address in use (the agent this one replaces still stopping?); retrying", "address", addr, "for", retry)
		for deadline := time.Now().Add(retry); errors.Is(err, syscall.EADDRINUSE) && time.Now().Before(deadline); {
			time.Sleep(250 * time.Millisecond)
			ln, err = net.Listen("tcp", addr)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("--metrics-address %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Metrics server stopped", "address", addr)
		}
	}()
	return func() { _ = srv.Close() }, nil
}

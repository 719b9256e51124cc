package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Ray's health endpoints that KubeRay v1.5's exec probes read with
// `wget --tries 1 -T <s> -q -O- http://localhost:<port>/<path> | grep success`
// (ray-operator/controllers/ray/common/pod.go initLivenessAndReadinessProbe;
// utils/constant.go: DefaultDashboardAgentListenPort 52365, DefaultDashboardPort 8265).
const (
	pathRayletHealth = "/api/local_raylet_healthz"
	pathGCSHealth    = "/api/gcs_healthz"
)

// probeAddrs are the listen addresses of the dashboard agent (every node) and the dashboard
// (head only).
type probeAddrs struct {
	Agent     string
	Dashboard string
}

// defaultProbeAddrs listens on the pod's loopback only: 127.0.0.1:52365 and 127.0.0.1:8265.
func defaultProbeAddrs() probeAddrs {
	return probeAddrs{Agent: "127.0.0.1:52365", Dashboard: "127.0.0.1:8265"}
}

// serveProbes answers "success" on the raylet health path (agent address) and, on a head, on
// the GCS health path (dashboard address), until ctx ends. It prints one "ray-standin: serving"
// line per listener once it listens.
func serveProbes(ctx context.Context, addrs probeAddrs, head bool, stdout io.Writer) error {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "success") }
	mux.HandleFunc(pathRayletHealth, ok)
	mux.HandleFunc(pathGCSHealth, ok)
	listen := []string{addrs.Agent}
	if head {
		listen = append(listen, addrs.Dashboard)
	}
	errc := make(chan error, len(listen))
	var servers []*http.Server
	for _, a := range listen {
		l, err := net.Listen("tcp", a)
		if err != nil {
			for _, s := range servers {
				_ = s.Close()
			}
			return fmt.Errorf("listen %s: %w", a, err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, srv)
		fmt.Fprintf(stdout, "ray-standin: serving health on %s\n", l.Addr())
		go func() { errc <- srv.Serve(l) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(sctx)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

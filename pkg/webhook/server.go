package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	hmetrics "github.com/hami-go/hami-go/pkg/metrics"
)

// Paths served on the TLS port (docs/components.md).
const (
	PathPods        = "/mutate-pods"
	PathRayClusters = "/mutate-rayclusters"
)

// ServerConfig is the webhook binary's configuration (flags of docs/components.md).
type ServerConfig struct {
	// Host and Port are the TLS admission address (Host "" = all addresses; Port default 9443).
	Host string
	Port int
	// CertDir holds tls.crt and tls.key; controller-runtime's certificate watcher reloads them
	// when the files change.
	CertDir string
	// HealthAddress serves /healthz (the process runs) and /readyz (the TLS port answers).
	HealthAddress string
	// MetricsAddress serves /metrics: hami_go_webhook_* and controller-runtime's webhook series.
	MetricsAddress string
	// Admission configures the handlers.
	Admission Config
	// Kubeconfig is the kubeconfig path the command builds Client from ("" = in-cluster).
	Kubeconfig string
	// Client is the API client: both modes read the namespaces' ResourceQuotas through it (a
	// percentage of GPU memory is refused where a quota caps requests.hami-go.io/gpu-memory;
	// nil: no quota is looked up, for tests), and DRA mode (Admission.Mode ModeDRA) creates
	// templates and reads ResourceSlices through it (required there).
	Client kubernetes.Interface
	// CacheSyncTimeout bounds the wait for the caches at Start (0: 60 s).
	CacheSyncTimeout time.Duration
}

// Server is the running webhook: the TLS admission server and the plain-HTTP health and
// metrics servers.
type Server struct {
	cfg      ServerConfig
	hook     webhook.Server
	reg      *prometheus.Registry
	health   net.Listener
	metrics  net.Listener
	handlers map[string]http.Handler
	dra      *DRABackend // DRA mode only
	quotas   *QuotaCache // nil without a client
}

// NewServer validates cfg, registers the handlers and opens the health and metrics listeners
// (so their addresses are known before Start). It serves nothing until Start.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Admission.Validate(); err != nil {
		return nil, err
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return nil, fmt.Errorf("port: %d is not a TCP port", cfg.Port)
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	s := &Server{cfg: cfg, reg: reg, hook: webhook.NewServer(webhook.Options{Host: cfg.Host, Port: cfg.Port, CertDir: cfg.CertDir})}
	pods := NewPodHandler(cfg.Admission, m)
	if cfg.Admission.Mode == ModeDRA {
		if cfg.Client == nil {
			return nil, fmt.Errorf("mode dra: no API client")
		}
		s.dra = NewDRABackend(cfg.Client)
		pods = NewDRAPodHandler(cfg.Admission, m, s.dra, s.dra)
	}
	if cfg.Client != nil {
		s.quotas = NewQuotaCache(cfg.Client)
		pods.SetQuotas(s.quotas)
	}
	s.handlers = map[string]http.Handler{
		PathPods:        &admission.Webhook{Handler: pods},
		PathRayClusters: &admission.Webhook{Handler: NewRayClusterHandler(cfg.Admission, m)},
	}
	for p, h := range s.handlers {
		s.hook.Register(p, h)
	}
	var err error
	if s.health, err = net.Listen("tcp", cfg.HealthAddress); err != nil {
		return nil, fmt.Errorf("health address %q: %w", cfg.HealthAddress, err)
	}
	if s.metrics, err = net.Listen("tcp", cfg.MetricsAddress); err != nil {
		s.health.Close()
		return nil, fmt.Errorf("metrics address %q: %w", cfg.MetricsAddress, err)
	}
	return s, nil
}

// HealthAddr and MetricsAddr are the addresses the listeners really have (":0" resolved).
func (s *Server) HealthAddr() string  { return s.health.Addr().String() }
func (s *Server) MetricsAddr() string { return s.metrics.Addr().String() }

// MetricsHandler serves the webhook's own series and controller-runtime's process-wide ones
// (its controller_runtime_webhook_* among them); a bad series is left out, not the scrape
// (pkg/metrics Handler). Start serves it on /metrics of MetricsAddress.
func (s *Server) MetricsHandler() http.Handler {
	return hmetrics.Handler(prometheus.Gatherers{s.reg, ctrlmetrics.Registry}, s.reg)
}

// Start serves until ctx ends or a server fails; it returns the first error (nil after ctx ends).
func (s *Server) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timeout := s.cfg.CacheSyncTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	if s.dra != nil {
		if err := s.dra.Start(ctx, timeout); err != nil {
			return err
		}
	}
	if s.quotas != nil {
		if err := s.quotas.Start(ctx, timeout); err != nil {
			return err
		}
	}
	ready := s.hook.StartedChecker()
	hmux := http.NewServeMux()
	hmux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	hmux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mmux := http.NewServeMux()
	mmux.Handle("/metrics", s.MetricsHandler())
	servers := []*http.Server{
		{Handler: hmux, ReadHeaderTimeout: 10 * time.Second},
		{Handler: mmux, ReadHeaderTimeout: 10 * time.Second},
	}
	errs := make(chan error, 3)
	go func() { errs <- s.hook.Start(ctx) }()
	for i, l := range []net.Listener{s.health, s.metrics} {
		srv, l := servers[i], l
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- err
				return
			}
			errs <- nil
		}()
	}
	klog.InfoS("Webhook serving", "mode", s.cfg.Admission.Mode, "port", s.cfg.Port, "certDir", s.cfg.CertDir, "health", s.HealthAddr(), "metrics", s.MetricsAddr())
	var first error
	select {
	case <-ctx.Done():
	case first = <-errs:
	}
	cancel()
	for _, srv := range servers {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		c()
	}
	return first
}

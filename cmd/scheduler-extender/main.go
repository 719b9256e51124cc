// Command scheduler-extender is hami-go's kube-scheduler extender (sidecar of kube-scheduler,
// reached on localhost). It only parses flags and wires pkg/extender; see docs/components.md.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/extender"
	hmetrics "github.com/hami-go/hami-go/pkg/metrics"
)

func main() {
	o, err := parseOptions(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "scheduler-extender:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		klog.ErrorS(err, "scheduler-extender failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run(ctx context.Context, o options) error {
	rc, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig %q: %w", o.Kubeconfig, err)
	}
	// Binds run concurrently during bursts; the default client rate (5 qps) would throttle them.
	rc.QPS, rc.Burst = 500, 1000
	rc.UserAgent = "hami-go-scheduler-extender"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	bc := record.NewBroadcaster(record.WithContext(ctx))
	bc.StartStructuredLogging(4)
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer bc.Shutdown()
	recorder := bc.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "hami-go-scheduler-extender"})

	reg := hmetrics.NewRegistry() // the Go and process collectors; the extender adds its own
	ext, err := extender.New(o.Extender, client, recorder, clock.RealClock{}, reg)
	if err != nil {
		return err
	}
	// The listeners open before ext.Run has rebuilt the cache: /readyz must answer the chart's
	// startupProbe (kube-scheduler, started after it passes, then finds the extender ready). Until
	// ready the verbs refuse (extender.ErrNotReady), also after a restart of the extender alone.
	servers, err := serve(o, ext, reg)
	if err != nil {
		return err
	}
	srvErr := make(chan error, len(servers))
	for _, s := range servers {
		go func() { srvErr <- s.srv.Serve(s.ln) }()
		klog.InfoS("Serving", "what", s.what, "address", s.ln.Addr().String(), "schedulerName", o.Extender.SchedulerName)
	}

	// At SIGTERM (ctx ends) Run stops the own preemption, closes the verbs (they refuse, /readyz
	// 503) and returns once the binds in flight finished (at most twice the bind API timeout);
	// only then are the listeners shut down, so no Bind is cut off mid-way (pkg/extender
	// leader.go).
	runErr := make(chan error, 1)
	go func() { runErr <- ext.Run(ctx) }()
	select {
	case err = <-srvErr:
	case err = <-runErr:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.srv.Shutdown(sctx)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// listener is one HTTP server of the extender and the socket it serves.
type listener struct {
	what string // what it serves, for the log
	ln   net.Listener
	srv  *http.Server
}

// serve opens the extender's listeners: the scheduler API on o.Address and, unless
// o.MetricsAddress is empty (then the API listener serves them too), /metrics, /healthz and
// /readyz on o.MetricsAddress. With o.TLS set, the API listener serves HTTPS and its verbs only to
// clients with a certificate of the client CA (case C36). Errors name the flag; on error no socket
// stays open.
func serve(o options, ext *extender.Extender, reg prometheus.Gatherer) ([]listener, error) {
	api := ext.APIHandler()
	if o.MetricsAddress == "" {
		api = ext.Handler(reg)
	}
	ln, err := net.Listen("tcp", o.Address)
	if err != nil {
		return nil, fmt.Errorf("--address %q: %w", o.Address, err)
	}
	what := "extender API (https, client certificate required)"
	if o.TLS.Enabled() {
		cfg, err := extender.ServerTLSConfig(o.TLS)
		if err != nil {
			_ = ln.Close()
			return nil, err
		}
		ln, api = tls.NewListener(ln, cfg), extender.RequireClientCert(api)
	} else {
		what = "extender API (http)"
		klog.InfoS("Serving the extender API without TLS: any process that reaches the address may call /bind (set --tls-cert-file, --tls-private-key-file and --client-ca-file)")
	}
	out := []listener{{what: what, ln: ln, srv: &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}}}
	if o.MetricsAddress == "" {
		return out, nil
	}
	mln, err := net.Listen("tcp", o.MetricsAddress)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("--metrics-address %q: %w", o.MetricsAddress, err)
	}
	return append(out, listener{what: "metrics and health", ln: mln, srv: &http.Server{Handler: ext.MetricsHandler(reg), ReadHeaderTimeout: 10 * time.Second}}), nil
}

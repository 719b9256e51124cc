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
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/extender"
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

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ext, err := extender.New(o.Extender, client, recorder, clock.RealClock{}, reg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Address)
	if err != nil {
		return fmt.Errorf("--address %q: %w", o.Address, err)
	}
	handler, scheme := ext.Handler(reg), "http"
	if o.TLS.Enabled() {
		cfg, err := extender.ServerTLSConfig(o.TLS)
		if err != nil {
			ln.Close()
			return err
		}
		ln, handler, scheme = tls.NewListener(ln, cfg), extender.RequireClientCert(handler), "https"
	} else {
		klog.InfoS("Serving the extender API without TLS: any process that reaches the address may call /bind (set --tls-cert-file, --tls-private-key-file and --client-ca-file)")
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.Serve(ln) }()
	klog.InfoS("Serving the extender API", "address", ln.Addr().String(), "scheme", scheme, "schedulerName", o.Extender.SchedulerName)

	runErr := make(chan error, 1)
	go func() { runErr <- ext.Run(ctx) }()
	select {
	case err = <-srvErr:
	case err = <-runErr:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

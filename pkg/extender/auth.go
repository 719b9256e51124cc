package extender

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"

	"k8s.io/klog/v2"
)

// TLSFiles are the PEM files of the extender API's TLS (flags --tls-cert-file,
// --tls-private-key-file, --client-ca-file). With them, only a client holding a certificate
// signed by the client CA (kube-scheduler: KubeSchedulerConfiguration extenders[].tlsConfig
// certFile/keyFile, k8s.io/kube-scheduler/config/v1 ExtenderTLSConfig) may call the scheduler
// verbs (case C36): another process on the node, even on the host network, can reach the port
// but holds no such certificate.
type TLSFiles struct {
	// CertFile and KeyFile are the server certificate (chain) and its private key.
	CertFile, KeyFile string
	// ClientCAFile holds the CA certificates that client certificates must chain to.
	ClientCAFile string
}

// Enabled reports whether any file is set.
func (f TLSFiles) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.ClientCAFile != "" }

// Validate requires all three files or none (errors name the flag that is missing).
func (f TLSFiles) Validate() error {
	if !f.Enabled() {
		return nil
	}
	for _, x := range []struct{ flag, v string }{{"--tls-cert-file", f.CertFile}, {"--tls-private-key-file", f.KeyFile}, {"--client-ca-file", f.ClientCAFile}} {
		if x.v == "" {
			return fmt.Errorf("%s is empty: --tls-cert-file, --tls-private-key-file and --client-ca-file go together (TLS without client certificates would let any local process call /bind)", x.flag)
		}
	}
	return nil
}

// ServerTLSConfig loads the files into a server TLS configuration (TLS 1.2 or later) that asks
// every client for a certificate and verifies one that is given against the client CA
// (tls.VerifyClientCertIfGiven: probes of /healthz and /readyz need none; RequireClientCert
// guards the verbs). Errors name the file.
func ServerTLSConfig(f TLSFiles) (*tls.Config, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file %q / --tls-private-key-file %q: %w", f.CertFile, f.KeyFile, err)
	}
	pem, err := os.ReadFile(f.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("--client-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--client-ca-file %q: no PEM certificate in it", f.ClientCAFile)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    pool,
	}, nil
}

// verbPaths are the scheduler verbs of Handler: only kube-scheduler may call them.
var verbPaths = map[string]bool{"/filter": true, "/prioritize": true, "/bind": true, "/preempt": true}

// RequireClientCert wraps the extender API (Handler): a request for a scheduler verb (/filter,
// /prioritize, /bind, /preempt) is answered 403 Forbidden unless it came over TLS with a client
// certificate that verified against the client CA (ServerTLSConfig); every other path (the
// probes) passes. Use it with a listener serving ServerTLSConfig.
func RequireClientCert(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if verbPaths[strings.TrimSuffix(r.URL.Path, "/")] && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			klog.V(2).InfoS("Refused an extender call without a verified client certificate", "path", r.URL.Path, "remote", r.RemoteAddr)
			http.Error(w, "the extender's verbs are served only to kube-scheduler: a client certificate signed by the extender's client CA is required", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

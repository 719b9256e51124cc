package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/hami-go/hami-go/internal/metricstest"
)

// writeCert writes a self-signed certificate for 127.0.0.1 with the given serial into dir
// (key first, then certificate, each by rename, so a reader never sees half a file).
func writeCert(t *testing.T, dir string, serial int64) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "hami-go-webhook"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	put := func(name string, block *pem.Block) {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	put("tls.key", &pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	put("tls.crt", &pem.Block{Type: "CERTIFICATE", Bytes: der})
	c, _ := x509.ParseCertificate(der)
	return c
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// servedSerial connects to addr and returns the serial of the certificate it serves (0 on error).
func servedSerial(addr string) int64 {
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // we only read the served certificate
	if err != nil {
		return 0
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServerTLSReloadHealthMetrics runs the real server on 127.0.0.1 with a generated
// certificate: it answers an AdmissionReview over HTTPS, reloads a replaced certificate, and
// serves /healthz, /readyz and /metrics.
func TestServerTLSReloadHealthMetrics(t *testing.T) {
	dir := t.TempDir()
	first := writeCert(t, dir, 1001)
	port := freePort(t)
	s, err := NewServer(ServerConfig{
		Host: "127.0.0.1", Port: port, CertDir: dir,
		HealthAddress: "127.0.0.1:0", MetricsAddress: "127.0.0.1:0",
		Admission: DefaultConfig(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	waitFor(t, "the TLS port", func() bool { return servedSerial(addr) == 1001 })

	// One review over HTTPS, verified against the first certificate.
	pool := x509.NewCertPool()
	pool.AddCert(first)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	podRaw, _ := json.Marshal(newPod(ctr("main", "nvidia.com/gpumem", "3000")))
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u-1", Operation: admissionv1.Create, Namespace: "team-a",
			Object: runtime.RawExtension{Raw: podRaw}},
	}
	body, _ := json.Marshal(review)
	ctrlBefore := ctrlWebhookRequests(t)
	resp, err := client.Post("https://"+addr+PathPods, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if out.Response == nil || out.Response.UID != "u-1" || !out.Response.Allowed || !strings.Contains(string(out.Response.Patch), `"path":"/spec/schedulerName","value":"hami-go-scheduler"`) {
		t.Fatalf("response %+v patch %s", out.Response, out.Response.Patch)
	}

	// Replace the certificate files: the new one is served without a restart.
	writeCert(t, dir, 2002)
	waitFor(t, "the replaced certificate", func() bool { return servedSerial(addr) == 2002 })

	if code, b := get(t, "http://"+s.HealthAddr()+"/healthz"); code != 200 || b != "ok\n" {
		t.Errorf("/healthz %d %q", code, b)
	}
	if code, b := get(t, "http://"+s.HealthAddr()+"/readyz"); code != 200 {
		t.Errorf("/readyz %d %q", code, b)
	}
	// controller-runtime's series live in its process-wide registry, so they count every server
	// this test binary started (go test -count=N): compare with the count before the review.
	code, b := get(t, "http://"+s.MetricsAddr()+"/metrics")
	if code != 200 || !strings.Contains(b, `hami_go_webhook_admissions_total{resource="pods",result="patched"} 1`) ||
		!strings.Contains(b, fmt.Sprintf(`controller_runtime_webhook_requests_total{code="200",webhook="/mutate-pods"} %d`, ctrlBefore+1)) {
		t.Errorf("/metrics %d (controller-runtime count before the review: %d):\n%s", code, ctrlBefore, grep(b, "webhook"))
	}
	// After a review it passes promlint (`promtool check metrics`) and is exactly the webhook's
	// rows of the metric reference in docs/components.md.
	metricstest.Check(t, "webhook", s.MetricsHandler())
}

// ctrlWebhookRequests reads controller-runtime's count of answered reviews for /mutate-pods
// from its process-wide registry (0 before the first).
func ctrlWebhookRequests(t *testing.T) int {
	t.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "controller_runtime_webhook_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["code"] == "200" && labels["webhook"] == PathPods {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

func TestNewServerRejectsBadConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Privileged = "allow"
	if _, err := NewServer(ServerConfig{Port: 9443, Admission: cfg}); err == nil || !strings.Contains(err.Error(), `privileged: "allow" is not deny or ignore`) {
		t.Fatalf("err = %v", err)
	}
	if _, err := NewServer(ServerConfig{Port: 0, Admission: DefaultConfig()}); err == nil || !strings.Contains(err.Error(), "port: 0") {
		t.Fatalf("err = %v", err)
	}
	if _, err := NewServer(ServerConfig{Port: 9443, HealthAddress: "256.0.0.1:1", Admission: DefaultConfig()}); err == nil || !strings.Contains(err.Error(), "health address") {
		t.Fatalf("err = %v", err)
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

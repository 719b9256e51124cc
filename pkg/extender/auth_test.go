package extender

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hami-go/hami-go/internal/podtest"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// testCA is a throwaway certificate authority (unit tests only).
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key signed by ca, for a server (IP 127.0.0.1) or a client.
func (ca *testCA) issue(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// case C36: with TLS files, /bind (and every scheduler verb) is served only to a client
// presenting a certificate of the client CA, as kube-scheduler's extender tlsConfig does; a
// local process without it (no certificate, one of another CA, plain HTTP) is refused and the
// pod is not bound; the probes stay open.
func TestBindNeedsClientCertC36(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 1, 24576, 10))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	p := podtest.Pending("default", "web", podtest.GPU("main", 1, "8000", 0))
	e.create(p)

	dir := t.TempDir()
	serverCA, clientCA, otherCA := newTestCA(t, "server-ca"), newTestCA(t, "client-ca"), newTestCA(t, "other")
	sc, sk := serverCA.issue(t, "extender", true)
	files := TLSFiles{CertFile: writeFile(t, dir, "tls.crt", sc), KeyFile: writeFile(t, dir, "tls.key", sk), ClientCAFile: writeFile(t, dir, "client-ca.crt", clientCA.pem)}
	cfg, err := ServerTLSConfig(files)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(RequireClientCert(e.ext.Handler(e.reg)))
	srv.TLS = cfg
	srv.StartTLS()
	defer srv.Close()

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(serverCA.pem)
	client := func(ca *testCA) *http.Client {
		tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if ca != nil {
			c, k := ca.issue(t, "kube-scheduler", false)
			pair, err := tls.X509KeyPair(c, k)
			if err != nil {
				t.Fatal(err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
	}
	bind := mustJSON(t, extenderv1.ExtenderBindingArgs{PodName: "web", PodNamespace: "default", PodUID: p.UID, Node: "node-1"})
	do := func(c *http.Client, url string) (int, string, error) {
		resp, err := c.Post(url, "application/json", strings.NewReader(string(bind)))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	if code, body, err := do(client(nil), srv.URL+"/bind"); err != nil || code != http.StatusForbidden || !strings.Contains(body, "client certificate") {
		t.Fatalf("/bind without a client certificate: %d %q %v, want 403", code, body, err)
	}
	if code, _, err := do(client(otherCA), srv.URL+"/bind"); err == nil && code != http.StatusForbidden {
		t.Fatalf("/bind with another CA's certificate answered %d", code)
	}
	if code, _, err := do(http.DefaultClient, strings.Replace(srv.URL, "https://", "http://", 1)+"/bind"); err == nil && code < 400 {
		t.Fatalf("/bind over plain HTTP answered %d", code)
	}
	for _, path := range []string{"/filter", "/prioritize", "/preempt"} {
		if code, _, err := do(client(nil), srv.URL+path); err != nil || code != http.StatusForbidden {
			t.Fatalf("%s without a client certificate: %d %v, want 403", path, code, err)
		}
	}
	if got := e.getPod("default", "web"); got.Spec.NodeName != "" {
		t.Fatalf("pod bound to %q by a refused call", got.Spec.NodeName)
	}
	resp, err := client(nil).Get(srv.URL + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz without a client certificate: %v %v", resp, err)
	}
	resp.Body.Close()
	// kube-scheduler, with its certificate: served.
	if code, body, err := do(client(clientCA), srv.URL+"/bind"); err != nil || code != http.StatusOK || strings.Contains(body, `"Error":"`) && !strings.Contains(body, `"Error":""`) {
		t.Fatalf("/bind with the client certificate: %d %q %v", code, body, err)
	}
	eventually(t, "pod bound by kube-scheduler's call", func() bool { return e.getPod("default", "web").Spec.NodeName == "node-1" })

	if _, err := ServerTLSConfig(TLSFiles{CertFile: files.CertFile, KeyFile: files.KeyFile}); err == nil || !strings.Contains(err.Error(), "--client-ca-file") {
		t.Fatalf("TLS without client CA: %v", err)
	}
}

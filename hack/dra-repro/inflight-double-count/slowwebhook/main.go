// Command slowwebhook is a validating admission webhook that admits everything and delays
// the status updates of ResourceClaims labelled repro.example.com/slow=true that write an
// allocation, by --delay: it stands in for a slow API server during kube-scheduler's PreBind,
// so that the reproducer in hack/dra-repro/inflight-double-count hits kube-scheduler's
// in-flight window every time instead of now and then.
//
// It serves HTTPS on --listen (loopback) with a self-signed certificate for 127.0.0.1 whose PEM
// it writes to --ca-out (the webhook configuration's caBundle), and logs each delay.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// slowLabel marks the claims whose allocation write is delayed.
const slowLabel = "repro.example.com/slow"

func main() {
	listen := flag.String("listen", "127.0.0.1:36444", "HTTPS address (loopback)")
	delay := flag.Duration("delay", 10*time.Second, "how long an allocation write of a slow claim is held")
	caOut := flag.String("ca-out", "slowwebhook-ca.pem", "where the self-signed certificate's PEM is written")
	flag.Parse()
	cert, pemBytes, err := selfSigned()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*caOut, pemBytes, 0o644); err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/validate", func(w http.ResponseWriter, r *http.Request) {
		var rev admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&rev); err != nil || rev.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		var claim resourceapi.ResourceClaim
		if err := json.Unmarshal(rev.Request.Object.Raw, &claim); err == nil &&
			claim.Labels[slowLabel] == "true" && claim.Status.Allocation != nil && rev.Request.SubResource == "status" {
			log.Printf("holding the allocation write of claim %s/%s for %s", claim.Namespace, claim.Name, *delay)
			time.Sleep(*delay)
			log.Printf("releasing the allocation write of claim %s/%s", claim.Namespace, claim.Name)
		}
		rev.Response = &admissionv1.AdmissionResponse{UID: rev.Request.UID, Allowed: true}
		rev.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rev)
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	log.Printf("serving on https://%s/validate", *listen)
	log.Fatal(srv.ListenAndServeTLS("", ""))
}

// selfSigned returns a certificate for 127.0.0.1 (valid one day) and its PEM.
func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "slowwebhook"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("create certificate: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return cert, certPEM, err
}

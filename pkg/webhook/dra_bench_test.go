package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/hami-go/hami-go/pkg/device"
)

// BenchmarkPodReviewDRA is BenchmarkPodReview in DRA mode: one AdmissionReview handled
// in-process (decode, handler, encode), for a KubeRay worker asking 1 GPU with 50 % of its
// memory and a model filter on a fleet of two GPU sizes (the heaviest path: firstAvailable
// from the cached ResourceSlices, CEL selectors, template lookup, ray start rewrite). The
// template exists (the informer's cache has it), as for every pod but the first of a shape in
// a namespace. Reports the p99 latency (target <= 1 ms) and the CPU time per review.
func BenchmarkPodReviewDRA(b *testing.B) {
	e := newDRAEnv(b, defaultFleet()...)
	hook := &admission.Webhook{Handler: e.h}
	pod := kubeRayPod("worker", workerLine, withRequests(ctr("", "cpu", "2", "memory", "4G", "nvidia.com/gpumem-percentage", "50")))
	pod.Annotations = map[string]string{device.AnnoUseGPUType: "H100,A100"}
	raw, _ := json.Marshal(pod)
	body, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Namespace: "team-a",
			Object: runtime.RawExtension{Raw: raw}},
	})
	review := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, PathPods, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		hook.ServeHTTP(w, req)
		return w
	}
	if w := review(); !bytes.Contains(w.Body.Bytes(), []byte(`"patch"`)) {
		b.Fatalf("first review: %s", w.Body.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(mustList(b, e)) == 0 || !e.cached() {
		if time.Now().After(deadline) {
			b.Fatal("template not in the informer's cache after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.client.ClearActions()
	lat := make([]time.Duration, 0, b.N)
	cpu0 := cpuTime()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		w := review()
		lat = append(lat, time.Since(start))
		if w.Code != http.StatusOK || !bytes.Contains(w.Body.Bytes(), []byte(`"patch"`)) {
			b.Fatalf("status %d body %s", w.Code, w.Body.String())
		}
	}
	b.StopTimer()
	if n := len(e.client.Actions()); n != 0 {
		b.Fatalf("%d API calls during the benchmark, want 0 (cached)", n)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
}

func mustList(b *testing.B, e draEnv) []string {
	var out []string
	for n := range e.templates(b, "team-a") {
		out = append(out, n)
	}
	return out
}

// cached reports whether every template in the fake API is in the backend's lister.
func (e draEnv) cached() bool {
	l, err := e.be.templates.List(labels.Everything())
	return err == nil && len(l) > 0
}

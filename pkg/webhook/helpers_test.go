package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// result is one admission review run through a handler, with its patch applied.
type result struct {
	resp    admission.Response
	raw     []byte // the object as sent
	patched []byte // the object after the patch (raw when there is none)
	paths   []string
}

func (r result) pod(t *testing.T) corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := json.Unmarshal(r.patched, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func (r result) object(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.patched, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// run builds an admission.Request for obj, runs h, and applies the patch with evanphx/json-patch.
func run(t *testing.T, h admission.Handler, op admissionv1.Operation, ns string, obj any) result {
	t.Helper()
	raw, ok := obj.([]byte)
	if !ok {
		var err error
		if raw, err = json.Marshal(obj); err != nil {
			t.Fatal(err)
		}
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "uid-1", Operation: op, Namespace: ns, Object: runtime.RawExtension{Raw: raw},
	}}
	resp := h.Handle(context.Background(), req)
	r := result{resp: resp, raw: raw, patched: raw}
	if len(resp.Patches) > 0 {
		if !resp.Allowed {
			t.Fatalf("denied with patches %v", resp.Patches)
		}
		b, err := json.Marshal(resp.Patches)
		if err != nil {
			t.Fatal(err)
		}
		p, err := jsonpatch.DecodePatch(b)
		if err != nil {
			t.Fatalf("patch %s: %v", b, err)
		}
		if r.patched, err = p.Apply(raw); err != nil {
			t.Fatalf("applying %s: %v", b, err)
		}
		for _, o := range resp.Patches {
			r.paths = append(r.paths, o.Operation+" "+o.Path)
		}
	}
	return r
}

func q(s string) resource.Quantity { return resource.MustParse(s) }

// ctr is a container with the given limits (name, value pairs).
func ctr(name string, kv ...string) corev1.Container {
	c := corev1.Container{Name: name, Image: "busybox"}
	if len(kv) > 0 {
		c.Resources.Limits = corev1.ResourceList{}
		for i := 0; i+1 < len(kv); i += 2 {
			c.Resources.Limits[corev1.ResourceName(kv[i])] = q(kv[i+1])
		}
	}
	return c
}

// withRequests copies the container's limits into its requests, as the API server's defaulting does.
func withRequests(c corev1.Container) corev1.Container {
	c.Resources.Requests = c.Resources.Limits.DeepCopy()
	return c
}

func newPod(cs ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team-a"},
		Spec:       corev1.PodSpec{SchedulerName: DefaultScheduler, Containers: cs},
	}
}

func testHandlers(mod func(*Config)) (*PodHandler, *RayClusterHandler, *Metrics) {
	cfg := DefaultConfig()
	cfg.Namespace = "hami-go-system"
	if mod != nil {
		mod(&cfg)
	}
	m := NewMetrics(nil)
	return NewPodHandler(cfg, m), NewRayClusterHandler(cfg, m), m
}

// normalize re-encodes JSON with sorted keys.
func normalize(t *testing.T, b []byte) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(v)
	return out
}

// counter reads hami_go_webhook_admissions_total{resource, result}.
func counter(t *testing.T, m *Metrics, res, result string) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Admissions.WithLabelValues(res, result).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

// admitted checks r against deny: with deny set, that r is a denial whose message contains it
// (ok false: nothing more to check); with deny empty, that r is allowed, and returns the pod as
// patched (ok true).
func (r result) admitted(t *testing.T, deny string) (p corev1.Pod, ok bool) {
	t.Helper()
	if deny != "" {
		if r.resp.Allowed || !strings.Contains(r.resp.Result.Message, deny) {
			t.Fatalf("allowed %v, message %q; want a denial containing %q", r.resp.Allowed, r.resp.Result.Message, deny)
		}
		return corev1.Pod{}, false
	}
	if !r.resp.Allowed {
		t.Fatalf("denied: %s", r.resp.Result.Message)
	}
	return r.pod(t), true
}

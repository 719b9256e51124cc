package extender

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hami-go/hami-go/internal/podtest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// The codec must read exactly what kube-scheduler's encoding/json writes and write exactly what
// encoding/json would: a pod with quantities, times, maps and escaped strings round-trips to a
// deep-equal value, and every reply type is byte-identical to json.Marshal (HTML escaping and
// sorted map keys included).
func TestCodecMatchesEncodingJSON(t *testing.T) {
	names := []string{"node-a", "node-<b>&\u00e9", `node-"q"`}
	created := metav1.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "w-0", UID: "u-1", CreationTimestamp: created,
			Annotations: map[string]string{"z": "1", "a": "<script>"}, Labels: map[string]string{"app": "ray"}},
		Spec: corev1.PodSpec{SchedulerName: "hami-go-scheduler", Containers: []corev1.Container{{Name: "main", Image: "img",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				"nvidia.com/gpu": resource.MustParse("2"), "nvidia.com/gpumem": resource.MustParse("8000"), "cpu": resource.MustParse("1500m"),
			}}}}},
	}
	in, err := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	if err != nil {
		t.Fatal(err)
	}
	var got, want extenderv1.ExtenderArgs
	if err := json.Unmarshal(in, &want); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	if !decode(rec, httptest.NewRequest(http.MethodPost, "/filter", bytes.NewReader(in)), &got) {
		t.Fatalf("decode refused: %d %s", rec.Code, rec.Body)
	}
	if !reflect.DeepEqual(got.NodeNames, want.NodeNames) || got.Pod.CreationTimestamp != want.Pod.CreationTimestamp ||
		!reflect.DeepEqual(got.Pod.Annotations, want.Pod.Annotations) {
		t.Fatalf("decoded %+v\nwant %+v", got, want)
	}
	for name, q := range want.Pod.Spec.Containers[0].Resources.Limits {
		g := got.Pod.Spec.Containers[0].Resources.Limits[name]
		if g.Cmp(q) != 0 {
			t.Errorf("limit %s decoded as %s, want %s", name, g.String(), q.String())
		}
	}

	failed := extenderv1.FailedNodesMap{"node-z": "GPU-0 2000 of 24576 MiB free", "node-<b>": "a & b"}
	for _, v := range []any{
		extenderv1.ExtenderFilterResult{NodeNames: &names, FailedNodes: failed, FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{"x": "no inventory from device plugin"}},
		extenderv1.HostPriorityList{{Host: "node-a", Score: 10}, {Host: "node-<b>", Score: 0}},
		extenderv1.ExtenderBindingResult{Error: `GPU-3 "full" <now>`},
		extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"n2": {Pods: []*extenderv1.MetaPod{{UID: "b"}}, NumPDBViolations: 1}, "n1": {}}},
	} {
		wantB, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		reply(rec, v)
		if rec.Body.String() != string(wantB) || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("reply(%T) = %s (%s)\nencoding/json: %s", v, rec.Body, rec.Header().Get("Content-Type"), wantB)
		}
	}
}

// A malformed body is refused with 400 and a reason naming the Go type and the field.
func TestCodecMalformed(t *testing.T) {
	rec := httptest.NewRecorder()
	var args extenderv1.ExtenderArgs
	if decode(rec, httptest.NewRequest(http.MethodPost, "/filter", strings.NewReader(`{"NodeNames":"node-1"}`)), &args) {
		t.Fatal("a string for NodeNames was accepted")
	}
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "malformed *v1.ExtenderArgs") || !strings.Contains(rec.Body.String(), "NodeNames") {
		t.Fatalf("got %d %q", rec.Code, rec.Body)
	}
}

// A body nested 2,000,000 levels deep (4 MB, well under the body limit) crashed the process: the
// decoder recurses per level and a stack overflow cannot be recovered. It is refused with 400
// before decoding, at encoding/json's limit of 10,000 levels; brackets inside strings (with
// escaped quotes) do not count, and a pod's ordinary nesting passes.
func TestCodecRefusesDeepNesting(t *testing.T) {
	deep := `{"Unknown":` + strings.Repeat("[", 2_000_000) + strings.Repeat("]", 2_000_000) + `,"NodeNames":["a"]}`
	rec := httptest.NewRecorder()
	var args extenderv1.ExtenderArgs
	if decode(rec, httptest.NewRequest(http.MethodPost, "/filter", strings.NewReader(deep)), &args) {
		t.Fatal("a body nested 2,000,000 deep was accepted")
	}
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "nesting deeper than 10000 levels at byte 10010") {
		t.Fatalf("got %d %q", rec.Code, rec.Body)
	}
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"NodeNames":["` + strings.Repeat("[", 20000) + `"]}`, true},                   // brackets in a string
		{`{"NodeNames":["a\"` + strings.Repeat("{", 20000) + `"]}`, true},                // after an escaped quote
		{`{"U":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, false}, // 10,001 levels
		{`{"U":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`, true},    // 10,000 levels
	} {
		if err := checkDepth([]byte(tc.body), maxDepth); (err == nil) != tc.ok {
			t.Errorf("checkDepth(%.40q...): %v, want ok=%v", tc.body, err, tc.ok)
		}
	}
	ok := httptest.NewRecorder()
	p := podtest.Pending("default", "web", podtest.GPU("main", 1, "8000", 0))
	names := []string{"node-1"}
	if !decode(ok, httptest.NewRequest(http.MethodPost, "/filter", bytes.NewReader(mustJSON(t, extenderv1.ExtenderArgs{Pod: p, NodeNames: &names}))), &args) {
		t.Fatalf("an ordinary filter call was refused: %d %s", ok.Code, ok.Body)
	}
}

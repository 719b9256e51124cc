package webhook

import (
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	"github.com/hami-go/hami-go/pkg/ray"
)

// rayCluster is KubeRay's quick-start layout (head without GPU, a worker group of 2 with
// nvidia.com/gpu: 1) plus a group of slices and a group with the v1.5 top-level resources field.
const rayCluster = `
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: raycluster-kuberay
  namespace: default
spec:
  rayVersion: "2.52.0"
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.52.0
          resources: {limits: {cpu: "1", memory: 2G}, requests: {cpu: "1", memory: 2G}}
          ports: [{containerPort: 6379, name: gcs-server}]
  workerGroupSpecs:
  - groupName: workergroup
    replicas: 2
    minReplicas: 1
    maxReplicas: 5
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.52.0
          resources: {limits: {cpu: "1", memory: 1G, nvidia.com/gpu: "1"}}
  - groupName: slices
    replicas: 1
    rayStartParams: {num-cpus: "2"}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.52.0
          resources: {limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "8000"}}
  - groupName: top
    replicas: 1
    resources: {CPU: "4"}
    labels: {zone: us-a}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.52.0
          resources: {limits: {nvidia.com/gpu: "2", nvidia.com/gpumem: 10Gi}}
`

func clusterJSON(t *testing.T, y string) []byte {
	t.Helper()
	b, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func groupOf(obj map[string]any, i int) map[string]any {
	spec := obj["spec"].(map[string]any)
	if i < 0 {
		return spec["headGroupSpec"].(map[string]any)
	}
	return spec["workerGroupSpecs"].([]any)[i].(map[string]any)
}

func js(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestRayClusterAdmission(t *testing.T) {
	_, rh, _ := testHandlers(nil)
	r := run(t, rh, admissionv1.Create, "default", clusterJSON(t, rayCluster))
	if !r.resp.Allowed || len(r.resp.Warnings) > 0 {
		t.Fatalf("resp %+v", r.resp)
	}
	obj := r.object(t)
	for i, want := range map[int]string{
		-1: `{"num-gpus":"0"}`, // case C33
		0:  `{"num-gpus":"1"}`,
		1:  `{"num-cpus":"2","num-gpus":"1","resources":"'{\"gpu_memory_mib\":8000}'"}`,
	} {
		if got := js(groupOf(obj, i)["rayStartParams"]); got != want {
			t.Errorf("group %d rayStartParams = %s, want %s", i, got, want)
		}
	}
	top := groupOf(obj, 2)
	if got := js(top["resources"]); got != `{"CPU":"4","GPU":"2","gpu_memory_mib":"20480"}` {
		t.Errorf("top-level resources = %s", got)
	}
	if _, has := top["rayStartParams"]; has {
		t.Errorf("rayStartParams added beside top-level resources: %s", js(top["rayStartParams"]))
	}
	if got := js(top["labels"]); got != `{"zone":"us-a"}` {
		t.Errorf("labels = %s", got)
	}
	ann := obj["metadata"].(map[string]any)["annotations"].(map[string]any)[ray.AnnoManaged]
	if ann != `{"head":["rayStartParams.num-gpus"],"worker/slices":["rayStartParams.num-gpus","rayStartParams.resources[gpu_memory_mib]"],"worker/top":["resources[GPU]","resources[gpu_memory_mib]"],"worker/workergroup":["rayStartParams.num-gpus"]}` {
		t.Errorf("managed annotation %v", ann)
	}
	// Minimal: nothing but those fields and the annotation.
	for _, p := range r.paths {
		if !strings.Contains(p, "rayStartParams") && !strings.Contains(p, "/resources/") && p != "add /metadata/annotations" {
			t.Errorf("unexpected patch op %s", p)
		}
	}

	// Update: the user asks for 2 slices of 6000 in "slices" and sends back the webhook's values.
	upd := strings.Replace(string(r.patched), `"nvidia.com/gpu":"1","nvidia.com/gpumem":"8000"`, `"nvidia.com/gpu":"2","nvidia.com/gpumem":"6000"`, 1)
	r2 := run(t, rh, admissionv1.Update, "default", []byte(upd))
	if got := js(groupOf(r2.object(t), 1)["rayStartParams"]); got != `{"num-cpus":"2","num-gpus":"2","resources":"'{\"gpu_memory_mib\":12000}'"}` {
		t.Errorf("after update rayStartParams = %s", got)
	}
	// A second identical update: nothing to patch.
	r3 := run(t, rh, admissionv1.Update, "default", r2.patched)
	if len(r3.resp.Patches) != 0 || !r3.resp.Allowed {
		t.Errorf("idempotent update patched %q", r3.paths)
	}
}

func TestRayClusterUserValueAndDenial(t *testing.T) {
	_, rh, _ := testHandlers(nil)
	y := strings.Replace(rayCluster, "rayStartParams: {num-cpus: \"2\"}", "rayStartParams: {num-cpus: \"2\", num-gpus: \"0.5\"}", 1)
	r := run(t, rh, admissionv1.Create, "default", clusterJSON(t, y))
	if got := js(groupOf(r.object(t), 1)["rayStartParams"]); got != `{"num-cpus":"2","num-gpus":"0.5","resources":"'{\"gpu_memory_mib\":8000}'"}` {
		t.Errorf("C31 user value: rayStartParams = %s", got)
	}
	if len(r.resp.Warnings) != 1 || !strings.Contains(r.resp.Warnings[0], `spec.workerGroupSpecs[slices].rayStartParams[num-gpus]: "0.5" is not a whole number of GPUs`) {
		t.Errorf("warnings %q", r.resp.Warnings)
	}
	bad := strings.Replace(rayCluster, `nvidia.com/gpumem: "8000"`, `nvidia.com/gpumem-percentage: "0"`, 1)
	r = run(t, rh, admissionv1.Create, "default", clusterJSON(t, bad))
	if r.resp.Allowed || !strings.Contains(r.resp.Result.Message, "spec.workerGroupSpecs[slices].template.spec.containers[ray-worker].resources.limits[nvidia.com/gpumem-percentage]: 0 is outside 1..100") {
		t.Errorf("invalid template: %+v", r.resp.Result)
	}
	// Opted out and own namespace: no patch.
	out := strings.Replace(rayCluster, "namespace: default", "namespace: default\n  labels: {hami-go.io/ignore: \"true\"}", 1)
	if r = run(t, rh, admissionv1.Create, "default", clusterJSON(t, out)); !r.resp.Allowed || len(r.resp.Patches) > 0 {
		t.Errorf("opted out: %+v", r.resp)
	}
	if r = run(t, rh, admissionv1.Create, "hami-go-system", clusterJSON(t, rayCluster)); !r.resp.Allowed || len(r.resp.Patches) > 0 {
		t.Errorf("own namespace: %+v", r.resp)
	}
	if r = run(t, rh, admissionv1.Delete, "default", []byte(`{}`)); !r.resp.Allowed {
		t.Errorf("delete: %+v", r.resp)
	}
}

// A panic inside a handler body is answered with a denial that says why; no patch escapes.
func TestReviewRecoversPanic(t *testing.T) {
	m := NewMetrics(nil)
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Namespace: "team-a", Name: "p"}}
	resp := review(m, "pods", req, func() admission.Response {
		var cfg *Config
		_ = cfg.SchedulerName // nil dereference
		return admission.Patched("never")
	})
	if resp.Allowed || !strings.Contains(resp.Result.Message, "internal error while reviewing this pods: runtime error: invalid memory address") || len(resp.Patches) > 0 {
		t.Fatalf("resp %+v", resp)
	}
	if got := counter(t, m, "pods", resultDenied); got != 1 {
		t.Fatalf("denied counter %v", got)
	}
}

package webhook

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// Ray in DRA mode: a KubeRay worker still gets the integer --num-gpus and gpu_memory_mib from
// its limits (read before they are turned into a claim); a Ray pod that carries its own
// resourceClaims keeps its `ray start` line as written.
func TestDRARayPods(t *testing.T) {
	e := newDRAEnv(t, defaultFleet()...)
	r := run(t, e.h, admissionv1.Create, "team-a", kubeRayPod("worker", workerLine, ctr("", "nvidia.com/gpu", "2", "nvidia.com/gpumem", "8000")))
	got := r.pod(t)
	if want := "ulimit -n 65536; " + workerLine[:len(workerLine)-1] + " --num-gpus=2 " + memFlag + " " + labelFlag + " "; got.Spec.Containers[0].Args[0] != want {
		t.Errorf("args %q\nwant %q", got.Spec.Containers[0].Args[0], want)
	}
	if _, tmpl := claimOf(t, got, "ray-worker"); !strings.HasPrefix(tmpl, TemplatePrefix) {
		t.Errorf("template %q", tmpl)
	}
	if _, ok := got.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; ok {
		t.Error("nvidia.com/gpu left in the limits")
	}

	own := kubeRayPod("worker", workerLine, ctr(""))
	tn := "user-gpus"
	own.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: &tn}}
	own.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	r = run(t, e.h, admissionv1.Create, "team-a", own)
	if !r.resp.Allowed || len(r.resp.Patches) != 0 {
		t.Errorf("pod with its own claims: allowed=%v patches %v", r.resp.Allowed, r.resp.Patches)
	}
	if got := r.pod(t).Spec.Containers[0].Args[0]; strings.Contains(got, "--num-gpus") {
		t.Errorf("args rewritten: %q", got)
	}
	// Device-plugin mode still rewrites such a pod (unchanged behaviour).
	ph, _, _ := testHandlers(nil)
	if r := run(t, ph, admissionv1.Create, "team-a", own); !strings.Contains(r.pod(t).Spec.Containers[0].Args[0], "--num-gpus=0") {
		t.Errorf("device-plugin mode: %q", r.pod(t).Spec.Containers[0].Args[0])
	}
}

// Ray in DRA mode, RayCluster: groups with GPU limits get the same figures as in device-plugin
// mode; a group whose template carries its own resourceClaims is left as written (device-plugin
// mode writes num-gpus 0 there).
func TestDRARayCluster(t *testing.T) {
	y := rayCluster + `
  - groupName: claims
    replicas: 1
    rayStartParams: {}
    template:
      spec:
        resourceClaims: [{name: gpus, resourceClaimTemplateName: mine}]
        containers:
        - name: ray-worker
          image: rayproject/ray:2.52.0
          resources: {claims: [{name: gpus}]}
`
	for _, mode := range []Mode{ModeDRA, ModeDevicePlugin} {
		_, rh, _ := testHandlers(func(c *Config) { c.Mode = mode })
		r := run(t, rh, admissionv1.Create, "default", clusterJSON(t, y))
		obj := r.object(t)
		if got := js(groupOf(obj, 1)["rayStartParams"]); got != `{"num-cpus":"2","num-gpus":"1","resources":"'{\"gpu_memory_mib\":8000}'"}` {
			t.Errorf("%s: slices group %s", mode, got)
		}
		want := `{}`
		if mode == ModeDevicePlugin {
			want = `{"num-gpus":"0"}`
		}
		if got := js(groupOf(obj, 3)["rayStartParams"]); got != want {
			t.Errorf("%s: claims group rayStartParams %s, want %s", mode, got, want)
		}
		if _, ok := groupOf(obj, 3)["template"]; !ok {
			t.Errorf("%s: claims group lost its template", mode)
		}
	}
}

package chart_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	apiwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/hami-go/hami-go/pkg/device"
)

// matcherFor compiles a rendered webhook's matchConditions exactly as kube-apiserver does
// (k8s.io/apiserver's webhook accessor, the base CEL environment of this Kubernetes version).
func matcherFor(t *testing.T, w admissionv1.MutatingWebhook) matchconditions.Matcher {
	t.Helper()
	if len(w.MatchConditions) == 0 {
		t.Fatalf("%s has no matchConditions", w.Name)
	}
	acc := apiwebhook.NewMutatingWebhookAccessor("uid", "hami-go-webhook", &w)
	return acc.GetCompiledMatcher(cel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())))
}

// evalMatch evaluates m for a CREATE of obj (JSON) as the API server would; an evaluation
// error fails the test (under failurePolicy Fail it would refuse the object).
func evalMatch(t *testing.T, m matchconditions.Matcher, gvr schema.GroupVersionResource, kind, obj string) bool {
	t.Helper()
	var o map[string]any
	if err := json.Unmarshal([]byte(obj), &o); err != nil {
		t.Fatalf("%s: %v", obj, err)
	}
	u := &unstructured.Unstructured{Object: o}
	gvk := gvr.GroupVersion().WithKind(kind)
	attr := admission.NewAttributesRecord(u, nil, gvk, "team-a", "x", gvr, "", admission.Create, nil, false, &user.DefaultInfo{Name: "tenant"})
	va := &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk}
	va.VersionedObject.Set(runtime.Object(u))
	r := m.Match(context.Background(), va, nil, nil)
	if r.Error != nil {
		t.Fatalf("%s: evaluation error %v (failurePolicy Fail would refuse it)", obj, r.Error)
	}
	return r.Matches
}

func podsHook(t *testing.T, r rendered) admissionv1.MutatingWebhook {
	t.Helper()
	for _, w := range mwc(t, r).Webhooks {
		if w.Name == "gpu-pods.hami-go.io" {
			return w
		}
	}
	t.Fatal("no webhook gpu-pods.hami-go.io")
	return admissionv1.MutatingWebhook{}
}

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// case C38 (and C37, C39): the pods webhook is called only for pods that ask for a slice
// resource in limits or requests of any container kind, set protected env in any container,
// write slice resources as annotations, or are KubeRay pods; never for a plain pod, and no
// pod with missing fields makes the expression fail.
func TestPodMatchConditions(t *testing.T) {
	m := matcherFor(t, podsHook(t, renderChart(t, nil)))
	for _, tc := range []struct {
		name, pod string
		want      bool
	}{
		{"plain", `{"metadata":{"name":"p","labels":{"app":"x"},"annotations":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i","env":[{"name":"PATH","value":"/bin"}],"resources":{"limits":{"cpu":"1","memory":"1Gi"}}}]}}`, false},
		{"count in limits", `{"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`, true},
		{"memory in requests only", `{"spec":{"containers":[{"name":"c","resources":{"requests":{"nvidia.com/gpumem":"3000"}}}]}}`, true},
		{"cores in an init container", `{"spec":{"initContainers":[{"name":"i","resources":{"limits":{"nvidia.com/gpucores":"30"}}}],"containers":[{"name":"c"}]}}`, true},
		{"percentage in the second container", `{"spec":{"containers":[{"name":"a"},{"name":"b","resources":{"limits":{"nvidia.com/gpumem-percentage":"50"}}}]}}`, true},
		{"protected env, non-GPU pod", `{"spec":{"containers":[{"name":"c","env":[{"name":"A","value":"1"},{"name":"NVIDIA_VISIBLE_DEVICES","value":"all"}]}]}}`, true},
		{"protected env in an ephemeral container", `{"spec":{"containers":[{"name":"c"}],"ephemeralContainers":[{"name":"d","env":[{"name":"CUDA_DEVICE_MEMORY_LIMIT_0","value":"81920m"}]}]}}`, true},
		{"env valueFrom without value", `{"spec":{"containers":[{"name":"c","env":[{"name":"LD_PRELOAD","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}}]}]}}`, true},
		{"resource as annotation", `{"metadata":{"annotations":{"nvidia.com/gpumem":"3000"}},"spec":{"containers":[{"name":"c"}]}}`, true},
		{"Ray pod without GPU", `{"metadata":{"labels":{"ray.io/node-type":"head"}},"spec":{"containers":[{"name":"c"}]}}`, true},
		{"hami-go.io/gpu-memory set by the pod (the webhook removes it)", `{"spec":{"containers":[{"name":"c","resources":{"requests":{"hami-go.io/gpu-memory":"80000"}}}]}}`, true},
		{"hami-go.io/gpu-cores set by the pod (the webhook removes it)", `{"spec":{"containers":[{"name":"c","resources":{"limits":{"hami-go.io/gpu-cores":"100"}}}]}}`, true},
		// issue 37 item 4: a pod naming hami-go's claims itself is called, to be refused
		{"names the webhook's claim template", `{"spec":{"resourceClaims":[{"name":"g","resourceClaimTemplateName":"hami-go-gpu-9f2c4e1a0b3d5e6f"}],"containers":[{"name":"c"}]}}`, true},
		{"names a claim generated from one", `{"spec":{"resourceClaims":[{"name":"x"},{"name":"g","resourceClaimName":"trainer-hami-go-gpu-0-x7k2p"}],"containers":[{"name":"c"}]}}`, true},
		{"another driver's claims are not ours", `{"spec":{"resourceClaims":[{"name":"f","resourceClaimTemplateName":"fpga"},{"name":"n","resourceClaimName":"rdma-0"},{}],"containers":[{"name":"c"}]}}`, false},
		{"NVIDIA's MIG resource is not ours", `{"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/mig-1g.10gb":"1"}}}]}}`, false},
		// Missing or empty fields: no error, no match.
		{"empty object", `{}`, false},
		{"empty metadata and spec", `{"metadata":{},"spec":{}}`, false},
		{"empty container", `{"spec":{"containers":[{}]}}`, false},
		{"empty resources and env entry", `{"spec":{"containers":[{"name":"c","resources":{},"env":[{}]}],"initContainers":[],"ephemeralContainers":[{}]}}`, false},
		{"empty limits and requests", `{"spec":{"containers":[{"resources":{"limits":{},"requests":{}}}]}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := evalMatch(t, m, podsGVR, "Pod", tc.pod); got != tc.want {
				t.Fatalf("matches = %v, want %v", got, tc.want)
			}
		})
	}
}

// case C37: the chart's env lists are pkg/device's rule, name for name.
func TestPodMatchConditionsProtectedEnv(t *testing.T) {
	w := podsHook(t, renderChart(t, nil))
	m := matcherFor(t, w) // fails the test when there are no matchConditions
	for _, list := range [][]string{device.ProtectedEnvExact(), device.ProtectedEnvPrefixes()} {
		b, _ := json.Marshal(list)
		if !strings.Contains(w.MatchConditions[0].Expression, string(b)) {
			t.Errorf("expression lacks %s", b)
		}
	}
	env := func(name string) string {
		return `{"spec":{"containers":[{"name":"c","env":[{"name":"` + name + `","value":"x"}]}]}}`
	}
	for _, n := range append(device.ProtectedEnvExact(), "CUDA_DEVICE_MEMORY_LIMIT_3", "CUDA_MPS_PIPE_DIRECTORY", "HAMI_GO_GPU_MODEL") {
		if !evalMatch(t, m, podsGVR, "Pod", env(n)) || !device.IsProtectedEnv(n) {
			t.Errorf("%s: not matched", n)
		}
	}
	for _, n := range []string{"CUDA_HOME", "LD_LIBRARY_PATH", "cuda_visible_devices", "MY_CUDA_VISIBLE_DEVICES", "HAMI_GOX"} {
		if evalMatch(t, m, podsGVR, "Pod", env(n)) || device.IsProtectedEnv(n) {
			t.Errorf("%s: matched", n)
		}
	}
}

// case C38: the configured resource names are matched (and the defaults they replace are not);
// webhook.matchRayPods=false leaves GPU-less Ray pods alone.
func TestPodMatchConditionsFollowValues(t *testing.T) {
	m := matcherFor(t, podsHook(t, renderChart(t, sets(t, "resourceNames.memory=example.com/vmem", "webhook.matchRayPods=false"))))
	for pod, want := range map[string]bool{
		`{"spec":{"containers":[{"resources":{"limits":{"example.com/vmem":"3000"}}}]}}`:                                                true,
		`{"spec":{"containers":[{"resources":{"limits":{"nvidia.com/gpumem":"3000"}}}]}}`:                                               false,
		`{"metadata":{"annotations":{"example.com/vmem":"3000"}}}`:                                                                      true,
		`{"metadata":{"labels":{"ray.io/node-type":"head"}},"spec":{"containers":[{}]}}`:                                                false,
		`{"metadata":{"labels":{"ray.io/node-type":"worker"}},"spec":{"containers":[{"resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`: true,
	} {
		if got := evalMatch(t, m, podsGVR, "Pod", pod); got != want {
			t.Errorf("%s: matches = %v, want %v", pod, got, want)
		}
	}
}

// case C38: the RayCluster webhook is called for clusters whose group templates ask for GPU
// resources (hami-go's and Ray's GPU resources, e.g. MIG) or that carry the webhook's own
// figures (so it can remove them on update); never for a CPU-only cluster.
func TestRayClusterMatchConditions(t *testing.T) {
	var rc admissionv1.MutatingWebhook
	for _, w := range mwc(t, renderChart(t, nil)).Webhooks {
		if w.Name == "gpu-rayclusters.hami-go.io" {
			rc = w
		}
	}
	m := matcherFor(t, rc)
	gvr := schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayclusters"}
	tmpl := func(res string) string {
		return `{"template":{"spec":{"containers":[{"name":"ray","resources":` + res + `}]}}}`
	}
	for _, tc := range []struct {
		name, obj string
		want      bool
	}{
		{"CPU only", `{"spec":{"headGroupSpec":` + tmpl(`{"limits":{"cpu":"2"}}`) + `,"workerGroupSpecs":[` + tmpl(`{"requests":{"cpu":"1"}}`) + `]}}`, false},
		{"GPU worker", `{"spec":{"headGroupSpec":` + tmpl(`{}`) + `,"workerGroupSpecs":[` + tmpl(`{}`) + `,` + tmpl(`{"limits":{"nvidia.com/gpumem":"3000"}}`) + `]}}`, true},
		{"GPU head", `{"spec":{"headGroupSpec":` + tmpl(`{"limits":{"nvidia.com/gpu":"1"}}`) + `}}`, true},
		{"MIG worker", `{"spec":{"workerGroupSpecs":[` + tmpl(`{"limits":{"nvidia.com/mig-1g.10gb":"1"}}`) + `]}}`, true},
		{"managed figures to remove", `{"metadata":{"annotations":{"hami-go.io/ray-managed":"{}"}},"spec":{}}`, true},
		{"empty", `{}`, false},
		{"empty groups", `{"spec":{"headGroupSpec":{},"workerGroupSpecs":[{},{"template":{}},{"template":{"spec":{}}},{"template":{"spec":{"containers":[{}]}}}]}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := evalMatch(t, m, gvr, "RayCluster", tc.obj); got != tc.want {
				t.Fatalf("matches = %v, want %v", got, tc.want)
			}
		})
	}
}

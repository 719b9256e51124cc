package chart_test

import (
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
)

// Case C63 (issue 36 item 7): a pod annotation cdi.k8s.io/<name> naming NVIDIA's or hami-go's
// CDI devices would give the pod those GPUs through NVIDIA's runtime in cdi mode wherever the
// node passes pod annotations on (which devicePlugin.nvidiaDevices=cdi-annotation needs). The
// chart's policy, compiled and evaluated by kube-apiserver's own code, refuses setting or
// changing one on a pod or Binding outside the release's namespace (its binding's namespace
// selector), any vendor case and any place in the list; it admits other vendors' annotations,
// other prefixes, and updates that keep a value the pod already had.
func TestCDIAnnotationPolicy(t *testing.T) {
	r := renderChart(t, sets(t, "devicePlugin.toolkitCDIKind=example.com/gpu"))
	p := typedAs[*admissionv1.ValidatingAdmissionPolicy](t, r, "ValidatingAdmissionPolicy/hami-go-cdi-annotations")
	b := typedAs[*admissionv1.ValidatingAdmissionPolicyBinding](t, r, "ValidatingAdmissionPolicyBinding/hami-go-cdi-annotations")
	if b.Spec.PolicyName != p.Name || len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionv1.Deny {
		t.Fatalf("binding = %+v", b.Spec)
	}
	if mr := b.Spec.MatchResources; mr == nil || mr.NamespaceSelector == nil || len(mr.NamespaceSelector.MatchExpressions) != 1 ||
		mr.NamespaceSelector.MatchExpressions[0].Key != "kubernetes.io/metadata.name" ||
		len(mr.NamespaceSelector.MatchExpressions[0].Values) != 1 || mr.NamespaceSelector.MatchExpressions[0].Values[0] != releaseNamespace {
		t.Fatalf("binding matchResources = %+v, want every namespace but %s", b.Spec.MatchResources, releaseNamespace)
	}
	v := compileVAP(t, p)
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	const key, tenant = "cdi.k8s.io/mine", "alice"
	const msg = "metadata.annotations[cdi.k8s.io/mine]: nvidia.com/gpu=all names GPUs for NVIDIA's container runtime"
	for _, c := range []struct {
		name, value, deny string
	}{
		{"every NVIDIA GPU", "nvidia.com/gpu=all", msg},
		{"a GPU by UUID after another vendor's device", "vendor.example/fpga=0, NVIDIA.com/gpu=GPU-1", "names GPUs"},
		{"the toolkit's management spec", "management.nvidia.com/gpu=all", "names GPUs"},
		{"hami-go's device-plugin spec", "hami-go.io/gpu=GPU-1", "names GPUs"},
		{"another pod's DRA claim", "gpu.hami-go.io/claim=0b5e", "names GPUs"},
		{"devicePlugin.toolkitCDIKind's vendor", "example.com/gpu=0", "names GPUs"},
		{"another vendor", "vendor.example/fpga=0", ""},
		{"a look-alike vendor", "notnvidia.com/gpu=all", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			expectDenial(t, v, pods, vapPod(key, c.value), nil, tenant, c.deny)
		})
	}
	t.Run("other prefix", func(t *testing.T) {
		expectDenial(t, v, pods, vapPod("example.com/devices", "nvidia.com/gpu=all"), nil, tenant, "")
	})
	t.Run("binding", func(t *testing.T) {
		expectDenial(t, v, schema.GroupVersionResource{Version: "v1", Resource: "bindings"}, vapBindingObj(key, "nvidia.com/gpu=all"), nil, "system:kube-scheduler", "names GPUs")
	})
	update := func(old, new runtime.Object) []string {
		return denials(t, v, pods, "", admission.Update, new, old, nil, tenant)
	}
	if d := update(vapPod(key, "nvidia.com/gpu=all", "a", "1"), vapPod(key, "nvidia.com/gpu=all", "a", "2")); len(d) != 0 {
		t.Errorf("update keeping a value the pod had: denied %v", d)
	}
	if d := update(vapPod("a", "1"), vapPod(key, "nvidia.com/gpu=all")); len(d) != 1 {
		t.Errorf("update adding the annotation to a pending pod: denials %v, want one", d)
	}
	if d := update(vapPod(key, "nvidia.com/gpu=0"), vapPod(key, "nvidia.com/gpu=all")); len(d) != 1 {
		t.Errorf("update widening the annotation: denials %v, want one", d)
	}
	if d := update(vapPod(key, "nvidia.com/gpu=all"), vapPod()); len(d) != 0 {
		t.Errorf("update removing the annotation: denied %v", d)
	}
}

package chart_test

import (
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Issue 37 item 4: in a namespace whose quota caps hami-go's GPU memory or compute, only
// hami-go's webhook and Kubernetes' own claim writers create claims and templates on
// gpu.hami-go.io; a tenant's would give its pods a slice the quota does not count. adminAccess
// requests, other classes, and namespaces without such a quota (the binding's params are the
// namespace's ResourceQuotas; none: allowed) stay as they are.
func TestGPUClaimsPolicy(t *testing.T) {
	r := renderChart(t, nil)
	p := typedAs[*admissionv1.ValidatingAdmissionPolicy](t, r, "ValidatingAdmissionPolicy/hami-go-gpu-claims")
	b := typedAs[*admissionv1.ValidatingAdmissionPolicyBinding](t, r, "ValidatingAdmissionPolicyBinding/hami-go-gpu-claims")
	if b.Spec.PolicyName != p.Name || len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionv1.Deny {
		t.Fatalf("binding = %+v", b.Spec)
	}
	if pk := p.Spec.ParamKind; pk == nil || pk.APIVersion != "v1" || pk.Kind != "ResourceQuota" {
		t.Fatalf("paramKind = %+v, want v1 ResourceQuota", pk)
	}
	if pr := b.Spec.ParamRef; pr == nil || pr.Selector == nil || pr.Namespace != "" || pr.ParameterNotFoundAction == nil || *pr.ParameterNotFoundAction != admissionv1.AllowAction {
		t.Fatalf("paramRef = %+v, want every ResourceQuota of the request's namespace, Allow when none", pr)
	}
	quota := func(keys ...string) *corev1.ResourceQuota {
		q := &corev1.ResourceQuota{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ResourceQuota"}, ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "gpu"},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{}}}
		for _, k := range keys {
			q.Spec.Hard[corev1.ResourceName(k)] = resource.MustParse("40000")
		}
		return q
	}
	memQ, coresQ, cpuQ := quota("requests.hami-go.io/gpu-memory", "requests.cpu"), quota("requests.hami-go.io/gpu-cores"), quota("requests.cpu")
	v := compileVAP(t, p)
	yes := true
	exactly := func(class string, admin bool) resourcev1.DeviceRequest {
		e := &resourcev1.ExactDeviceRequest{DeviceClassName: class}
		if admin {
			e.AdminAccess = &yes
		}
		return resourcev1.DeviceRequest{Name: "gpu", Exactly: e}
	}
	first := resourcev1.DeviceRequest{Name: "any", FirstAvailable: []resourcev1.DeviceSubRequest{{Name: "a", DeviceClassName: "fpga.example.com"}, {Name: "b", DeviceClassName: "gpu.hami-go.io"}}}
	spec := func(rs ...resourcev1.DeviceRequest) resourcev1.ResourceClaimSpec {
		return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: rs}}
	}
	claim := func(rs ...resourcev1.DeviceRequest) runtime.Object {
		return &resourcev1.ResourceClaim{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "c"}, Spec: spec(rs...)}
	}
	tmpl := func(rs ...resourcev1.DeviceRequest) runtime.Object {
		return &resourcev1.ResourceClaimTemplate{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaimTemplate"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "t"}, Spec: resourcev1.ResourceClaimTemplateSpec{Spec: spec(rs...)}}
	}
	const tenant, webhookSA = "alice", "system:serviceaccount:hami-go-system:hami-go-webhook"
	for _, c := range []struct {
		name  string
		obj   runtime.Object
		user  string
		quota *corev1.ResourceQuota
		deny  string
	}{
		{"tenant's claim on the class", claim(exactly("gpu.hami-go.io", false)), tenant, memQ,
			"spec.devices.requests gpu: namespace team caps GPU memory or compute (ResourceQuota gpu), which a claim of one's own on DeviceClass gpu.hami-go.io would bypass"},
		{"tenant's template on the class", tmpl(exactly("fpga.example.com", false), exactly("gpu.hami-go.io", false)), tenant, coresQ,
			"spec.spec.devices.requests gpu: namespace team caps GPU memory or compute"},
		{"tenant's firstAvailable naming the class", claim(first), tenant, memQ, "spec.devices.requests any:"},
		{"tenant's adminAccess claim (monitoring)", claim(exactly("gpu.hami-go.io", true)), tenant, memQ, ""},
		{"tenant's claim on another class", claim(exactly("fpga.example.com", false)), tenant, memQ, ""},
		{"tenant's template without requests", tmpl(), tenant, memQ, ""},
		{"the webhook's template", tmpl(exactly("gpu.hami-go.io", false)), webhookSA, memQ, ""},
		{"kube-controller-manager's claim from a template", claim(exactly("gpu.hami-go.io", false)), "system:serviceaccount:kube-system:resource-claim-controller", memQ, ""},
		{"kube-controller-manager under its own credentials", claim(exactly("gpu.hami-go.io", false)), "system:kube-controller-manager", memQ, ""},
		{"kube-scheduler's extended-resource claim", claim(exactly("gpu.hami-go.io", false)), "system:kube-scheduler", memQ, ""},
		{"another ServiceAccount of hami-go's namespace", claim(exactly("gpu.hami-go.io", false)), "system:serviceaccount:hami-go-system:default", memQ, "may not create its own claims on the class here"},
		{"tenant's claim where the quota caps no GPU resource", claim(exactly("gpu.hami-go.io", false)), tenant, cpuQ, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := "resourceclaims"
			if _, ok := c.obj.(*resourcev1.ResourceClaimTemplate); ok {
				res = "resourceclaimtemplates"
			}
			expectDenial(t, v, schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: res}, c.obj, c.quota, c.user, c.deny)
		})
	}
}

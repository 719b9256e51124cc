package chart_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/kubernetes/scheme"
)

const (
	vapKey     = "ValidatingAdmissionPolicy/hami-go-allocation-records"
	vapBinding = "ValidatingAdmissionPolicyBinding/hami-go-allocation-records"
	planned    = "hami-go.io/allocation-planned"
	claimed    = "hami-go.io/allocation-claimed"
	schedSA    = "system:serviceaccount:hami-go-system:hami-go-scheduler"
	dpSA       = "system:serviceaccount:hami-go-system:hami-go-device-plugin"
)

// compileVAP compiles a ValidatingAdmissionPolicy exactly as kube-apiserver's
// ValidatingAdmissionPolicy plugin does (k8s.io/apiserver .../policy/validating plugin.go
// compilePolicy; params declared where the policy has a paramKind): the same environment, variables, match conditions, validations and
// message expressions.
func compileVAP(t *testing.T, p *admissionv1.ValidatingAdmissionPolicy) validating.Validator {
	t.Helper()
	opt := cel.OptionalVariableDeclarations{HasParams: p.Spec.ParamKind != nil, HasAuthorizer: true}
	comp, err := cel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	vars := make([]cel.NamedExpressionAccessor, len(p.Spec.Variables))
	for i, v := range p.Spec.Variables {
		vars[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	comp.CompileAndStoreVariables(vars, opt, environment.StoredExpressions)
	mcs := make([]cel.ExpressionAccessor, len(p.Spec.MatchConditions))
	for i := range p.Spec.MatchConditions {
		mcs[i] = (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
	}
	matcher := matchconditions.NewMatcher(comp.CompileCondition(mcs, opt, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	vals := make([]cel.ExpressionAccessor, len(p.Spec.Validations))
	msgs := make([]cel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		vals[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			msgs[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	return validating.NewValidator(comp.CompileCondition(vals, opt, environment.StoredExpressions), matcher,
		comp.CompileCondition(nil, opt, environment.StoredExpressions),
		comp.CompileCondition(msgs, cel.OptionalVariableDeclarations{HasParams: opt.HasParams}, environment.StoredExpressions), p.Spec.FailurePolicy, nil)
}

func withAnnos(o metav1.Object, kv ...string) {
	a := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		a[kv[i]] = kv[i+1]
	}
	if len(a) > 0 {
		o.SetAnnotations(a)
	}
}

func vapPod(kv ...string) *corev1.Pod {
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p"}}
	withAnnos(p, kv...)
	return p
}

func vapBindingObj(kv ...string) *corev1.Binding {
	b := &corev1.Binding{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Binding"}, ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p"},
		Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}
	withAnnos(b, kv...)
	return b
}

// case C36: the chart's ValidatingAdmissionPolicy, compiled and evaluated by kube-apiserver's own
// code, refuses every write of a hami-go.io/allocation-* annotation by anyone but hami-go's
// scheduler and device-plugin ServiceAccounts, on every path (pod create, update/patch,
// pods/status, pods/binding and legacy bindings), removal included; it admits every other
// write (a pod without annotations, an unrelated annotation, a status update that keeps the
// record) and never fails to evaluate.
func TestAllocationPolicyC36(t *testing.T) {
	r := renderChart(t, nil)
	p := typedAs[*admissionv1.ValidatingAdmissionPolicy](t, r, vapKey)
	b := typedAs[*admissionv1.ValidatingAdmissionPolicyBinding](t, r, vapBinding)
	if b.Spec.PolicyName != p.Name || len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionv1.Deny || b.Spec.MatchResources != nil {
		t.Fatalf("binding = %+v", b.Spec)
	}
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Fail {
		t.Fatalf("failurePolicy = %v, want Fail", p.Spec.FailurePolicy)
	}
	rules := map[string]bool{}
	for _, rr := range p.Spec.MatchConstraints.ResourceRules {
		for _, res := range rr.Resources {
			for _, op := range rr.Operations {
				rules[string(op)+" "+res] = true
			}
		}
	}
	for _, want := range []string{"CREATE pods", "UPDATE pods", "UPDATE pods/status", "CREATE pods/binding", "CREATE bindings", "UPDATE pods/ephemeralcontainers"} {
		if !rules[want] {
			t.Errorf("policy does not match %s (rules %v)", want, rules)
		}
	}
	v := compileVAP(t, p)

	rec := `{"node":"node-1","containers":[]}`
	low := `{"node":"node-1","containers":[{"name":"c"}]}`
	type call struct {
		name     string
		user     string
		op       admission.Operation
		resource string
		sub      string
		obj, old runtime.Object
		deny     string // "" = admitted; else a part of the message
	}
	pod, binding := "pods", "bindings"
	calls := []call{
		{"tenant creates a pod with a forged plan", "alice", admission.Create, pod, "", vapPod(planned, rec), nil, planned},
		{"tenant creates a plain pod", "alice", admission.Create, pod, "", vapPod(), nil, ""},
		{"tenant creates a pod with other annotations", "alice", admission.Create, pod, "", vapPod("team/x", "1", "hami-go.io/requeue", "t"), nil, ""},
		{"tenant patches the claimed record", "alice", admission.Update, pod, "", vapPod(planned, rec, claimed, low), vapPod(planned, rec, claimed, rec), claimed},
		{"tenant removes the claimed record", "alice", admission.Update, pod, "", vapPod(planned, rec), vapPod(planned, rec, claimed, rec), claimed},
		{"tenant removes every annotation", "alice", admission.Update, pod, "", vapPod(), vapPod(planned, rec), planned},
		{"tenant adds a new allocation-* key", "alice", admission.Update, pod, "", vapPod("hami-go.io/allocation-extra", "1"), vapPod(), "hami-go.io/allocation-extra"},
		{"tenant updates labels, records kept", "alice", admission.Update, pod, "", vapPod(planned, rec, claimed, rec, "x", "y"), vapPod(planned, rec, claimed, rec), ""},
		{"kubelet status update keeps records", "system:node:node-1", admission.Update, pod, "status", vapPod(planned, rec), vapPod(planned, rec), ""},
		{"status update adds a record", "alice", admission.Update, pod, "status", vapPod(planned, rec), vapPod(), planned},
		{"status update changes a record", "alice", admission.Update, pod, "status", vapPod(claimed, low), vapPod(claimed, rec), claimed},
		{"pods/binding with a plan", "alice", admission.Create, pod, "binding", vapBindingObj(planned, rec), nil, planned},
		{"pods/binding without annotations", "alice", admission.Create, pod, "binding", vapBindingObj(), nil, ""},
		{"legacy bindings with a claimed record", "alice", admission.Create, binding, "", vapBindingObj(claimed, rec), nil, claimed},
		{"default scheduler binds without annotations", "system:kube-scheduler", admission.Create, pod, "binding", vapBindingObj(), nil, ""},
		{"extender binds with its plan", schedSA, admission.Create, pod, "binding", vapBindingObj(planned, rec), nil, ""},
		{"device plugin writes its claim", dpSA, admission.Update, pod, "", vapPod(planned, rec, claimed, rec), vapPod(planned, rec), ""},
		{"device plugin rewrites a claim", dpSA, admission.Update, pod, "", vapPod(claimed, rec), vapPod(claimed, low), ""},
		{"another SA of the release namespace", "system:serviceaccount:hami-go-system:hami-go-webhook", admission.Update, pod, "", vapPod(claimed, low), vapPod(claimed, rec), claimed},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			var old runtime.Object
			if c.old != nil {
				old = c.old
			}
			denied := denials(t, v, schema.GroupVersionResource{Version: "v1", Resource: c.resource}, c.sub, c.op, c.obj, old, nil, c.user)
			switch {
			case c.deny == "" && len(denied) > 0:
				t.Fatalf("denied: %v", denied)
			case c.deny != "" && len(denied) == 0:
				t.Fatal("admitted")
			case c.deny != "" && !(strings.Contains(denied[0], c.deny) && strings.Contains(denied[0], "may not set, change or remove hami-go.io/allocation-*") && strings.Contains(denied[0], c.user)):
				t.Fatalf("message %q does not name %s and %s", denied[0], c.deny, c.user)
			}
		})
	}

	// Off: nothing rendered.
	if _, ok := renderChart(t, map[string]any{"allocationPolicy": map[string]any{"enabled": false}}).objs[vapKey]; ok {
		t.Error("allocationPolicy.enabled=false still renders the policy")
	}
	// extraWriters are allowed too.
	p2 := typedAs[*admissionv1.ValidatingAdmissionPolicy](t, renderChart(t, map[string]any{"allocationPolicy": map[string]any{"extraWriters": []any{"ops"}}}), vapKey)
	if !strings.Contains(p2.Spec.MatchConditions[0].Expression, `"ops"`) {
		t.Errorf("extraWriters not in %q", p2.Spec.MatchConditions[0].Expression)
	}
}

// checkExtenderTLS: case C36, kube-scheduler gets only the client pair and the server CA, the
// extender only its serving pair and the client CA, all from one generated Secret whose server
// certificate names 127.0.0.1 and whose client certificate verifies against the client CA; with
// scheduler.extender.tls.enabled=false none of it is rendered.
func checkExtenderTLS(t *testing.T, r rendered, spec corev1.PodSpec, ks, ex corev1.Container) {
	t.Helper()
	items := map[string]string{}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			if v.Secret.SecretName != "hami-go-scheduler-extender-tls" {
				t.Errorf("volume %s from Secret %s", v.Name, v.Secret.SecretName)
			}
			var keys []string
			for _, it := range v.Secret.Items {
				keys = append(keys, it.Key)
			}
			items[v.Name] = strings.Join(keys, ",")
		}
	}
	if items["extender-client"] != "client.crt,client.key,ca.crt" || items["extender-tls"] != "tls.crt,tls.key,client-ca.crt" {
		t.Errorf("secret volumes %v", items)
	}
	if mounts(ks)["/etc/hami-go/extender-client"] != "extender-client" || mounts(ex)["/etc/hami-go/extender-tls"] != "extender-tls" || len(mounts(ex)) != 1 {
		t.Errorf("mounts kube-scheduler %v extender %v", mounts(ks), mounts(ex))
	}
	sec := typedAs[*corev1.Secret](t, r, "Secret/hami-go-scheduler-extender-tls")
	pool := func(k string) *x509.CertPool {
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(sec.Data[k]) {
			t.Fatalf("%s holds no certificate", k)
		}
		return p
	}
	cert := func(k string) *x509.Certificate {
		b, _ := pem.Decode(sec.Data[k])
		if b == nil {
			t.Fatalf("%s holds no PEM", k)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if _, err := cert("tls.crt").Verify(x509.VerifyOptions{Roots: pool("ca.crt"), DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("server certificate for 127.0.0.1: %v", err)
	}
	if _, err := cert("client.crt").Verify(x509.VerifyOptions{Roots: pool("client-ca.crt"), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if _, err := cert("client.crt").Verify(x509.VerifyOptions{Roots: pool("ca.crt"), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the client certificate verifies against the server CA: the two CAs must differ")
	}
	off := renderChart(t, sets(t, "scheduler.extender.tls.enabled=false"))
	if off.has("Secret/hami-go-scheduler-extender-tls") {
		t.Error("tls.enabled=false still renders the Secret")
	}
	exOff := container(t, deployment(t, off, schedDep).Spec.Template.Spec, "extender")
	if f := flags(exOff); f["--client-ca-file"] != "" || f["--tls-cert-file"] != "" || len(exOff.VolumeMounts) != 0 {
		t.Errorf("tls.enabled=false: extender flags %v mounts %v", f, exOff.VolumeMounts)
	}
}

// case C44: the chart's ValidatingAdmissionPolicy refuses a pod labelled hami-go.io/ignore=true
// (which never reaches the webhook) that sets hami-go.io/gpu-memory in any container, naming the
// containers; other pods (the webhook rewrites their value) and opted-out pods without the
// resource are admitted; nothing fails to evaluate; allocationPolicy.enabled=false renders none.
// Case C49: nor may such a pod ask for the per-GPU slice names (resourceNames), whose node totals
// the device plugin publishes.
func TestGPUMemoryPolicyC44(t *testing.T) {
	const key, bkey = "ValidatingAdmissionPolicy/hami-go-gpu-memory", "ValidatingAdmissionPolicyBinding/hami-go-gpu-memory"
	r := renderChart(t, nil)
	p := typedAs[*admissionv1.ValidatingAdmissionPolicy](t, r, key)
	b := typedAs[*admissionv1.ValidatingAdmissionPolicyBinding](t, r, bkey)
	if b.Spec.PolicyName != p.Name || len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionv1.Deny {
		t.Fatalf("binding = %+v", b.Spec)
	}
	v := compileVAP(t, p)
	pod := func(ignore bool, init, app corev1.ResourceList) *corev1.Pod {
		x := vapPod()
		if ignore {
			x.Labels = map[string]string{"hami-go.io/ignore": "true"}
		}
		x.Spec.Containers = []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: app}}}
		if init != nil {
			x.Spec.InitContainers = []corev1.Container{{Name: "warm", Resources: corev1.ResourceRequirements{Limits: init}}}
		}
		return x
	}
	mem := corev1.ResourceList{"hami-go.io/gpu-memory": resource.MustParse("80000")}
	cpu := corev1.ResourceList{"cpu": resource.MustParse("1")}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		deny string
	}{
		{"opted out, sets it in an app container's requests", pod(true, nil, mem), "containers main: resources hami-go.io/gpu-memory and hami-go.io/gpu-cores are written only by hami-go's webhook, which a pod labelled hami-go.io/ignore=true does not reach"},
		{"opted out, sets hami-go.io/gpu-cores (issue 37 item 4)", pod(true, nil, corev1.ResourceList{"hami-go.io/gpu-cores": resource.MustParse("100")}), "containers main: resources hami-go.io/gpu-memory and hami-go.io/gpu-cores are written only by hami-go"},
		{"opted out, sets it in an init container's limits", pod(true, mem, cpu), "containers warm: resources hami-go.io/gpu-memory"},
		{"opted out, without it", pod(true, cpu, cpu), ""},
		{"not opted out: the webhook rewrites it", pod(false, mem, mem), ""},
		{"opted out, no resources at all", pod(true, nil, nil), ""},
		// case C49: nodes publish the slice names' totals, so an opted-out pod asking one would
		// be placed without the extender and counted by the kubelet against its GPU pods
		{"opted out, asks nvidia.com/gpucores", pod(true, nil, corev1.ResourceList{"nvidia.com/gpucores": resource.MustParse("800")}),
			"containers main: resources nvidia.com/gpumem, nvidia.com/gpumem-percentage, nvidia.com/gpucores are GPU slices that only hami-go's scheduler places"},
		{"opted out, asks nvidia.com/gpumem in an init container", pod(true, corev1.ResourceList{"nvidia.com/gpumem": resource.MustParse("1000")}, cpu), "containers warm: resources nvidia.com/gpumem"},
		{"opted out, asks nvidia.com/gpumem-percentage", pod(true, nil, corev1.ResourceList{"nvidia.com/gpumem-percentage": resource.MustParse("50")}), "containers main: resources"},
		{"opted out, asks only nvidia.com/gpu (a whole GPU, DRA's extendedResourceName)", pod(true, nil, corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}), ""},
		{"not opted out: the webhook routes it to the extender", pod(false, nil, corev1.ResourceList{"nvidia.com/gpucores": resource.MustParse("30")}), ""},
		// issue 37 item 4: an opted-out pod naming hami-go's claims would hold a slice no quota counts
		{"opted out, names the webhook's claim template", withPodClaims(pod(true, nil, cpu), "hami-go-gpu-9f2c4e1a0b3d5e6f", ""),
			"resourceClaims g: name hami-go's GPU claims (templates hami-go-gpu-*), which only hami-go's webhook writes into a pod from its GPU limits"},
		{"opted out, names a claim generated from one", withPodClaims(pod(true, nil, cpu), "", "trainer-hami-go-gpu-0-x7k2p"), "resourceClaims g: name hami-go's GPU claims"},
		{"opted out, another driver's claim", withPodClaims(pod(true, nil, cpu), "fpga", ""), ""},
		{"not opted out: the webhook refuses it", withPodClaims(pod(false, nil, cpu), "hami-go-gpu-9f2c4e1a0b3d5e6f", ""), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			expectDenial(t, v, schema.GroupVersionResource{Version: "v1", Resource: "pods"}, c.pod, nil, "alice", c.deny)
		})
	}
	if _, ok := renderChart(t, map[string]any{"allocationPolicy": map[string]any{"enabled": false}}).objs[key]; ok {
		t.Error("allocationPolicy.enabled=false still renders the GPU-memory policy")
	}
}

// withPodClaims gives pod one resource claim "g" naming template tmpl or else claim.
func withPodClaims(p *corev1.Pod, tmpl, claim string) *corev1.Pod {
	c := corev1.PodResourceClaim{Name: "g"}
	if tmpl != "" {
		c.ResourceClaimTemplateName = &tmpl
	} else {
		c.ResourceClaimName = &claim
	}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{c}
	return p
}

// denials evaluates policy v for operation op on obj (old: the object before, for an update;
// resource gvr, subresource sub, namespace "team") by user, with params (nil: none), as
// kube-apiserver does, and returns the denial messages. An evaluation error fails the test
// (under failurePolicy Fail it would refuse the object).
func denials(t *testing.T, v validating.Validator, gvr schema.GroupVersionResource, sub string, op admission.Operation, obj, old, params runtime.Object, username string) []string {
	t.Helper()
	kind := obj.GetObjectKind().GroupVersionKind()
	attr := admission.NewAttributesRecord(obj, old, kind, "team", "x", gvr, sub, op, nil, false, &user.DefaultInfo{Name: username})
	va, err := admission.NewVersionedAttributes(attr, kind, admission.NewObjectInterfacesFromScheme(scheme.Scheme))
	if err != nil {
		t.Fatal(err)
	}
	res := v.Validate(context.Background(), gvr, va, params, nil, celconfig.RuntimeCELCostBudget, nil)
	var denied []string
	for _, d := range res.Decisions {
		if d.Evaluation == validating.EvalError {
			t.Fatalf("evaluation error: %s", d.Message)
		}
		if d.Action == validating.ActionDeny {
			denied = append(denied, d.Message)
		}
	}
	return denied
}

// expectDenial fails unless policy v's first denial of a CREATE of obj (denials) contains deny
// ("": no denial).
func expectDenial(t *testing.T, v validating.Validator, gvr schema.GroupVersionResource, obj, params runtime.Object, username, deny string) {
	t.Helper()
	denied := denials(t, v, gvr, "", admission.Create, obj, nil, params, username)
	switch {
	case deny == "" && len(denied) > 0:
		t.Fatalf("denied: %v", denied)
	case deny != "" && (len(denied) == 0 || !strings.Contains(denied[0], deny)):
		t.Fatalf("denials %q, want one containing %q", denied, deny)
	}
}

package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hami-go/hami-go/pkg/device"
)

// reqJSON is the one request of a template's claim, as JSON without the device class (the
// shape under test).
func reqJSON(t *testing.T, tmpl resourceapi.ResourceClaimTemplate) string {
	t.Helper()
	r := tmpl.Spec.Spec.Devices.Requests
	if len(r) != 1 || r[0].Name != "gpu" {
		t.Fatalf("requests %+v", r)
	}
	b, _ := json.Marshal(r[0])
	return strings.ReplaceAll(string(b), `"deviceClassName":"gpu.hami-go.io",`, "")
}

// The claim shape of each pod-API request (issue 14): N GPUs -> one request for N devices, each
// consuming the asked memory and cores; the GPU limits are removed, the scheduler left alone.
func TestDRAClaimShapes(t *testing.T) {
	memSel := func(mib string) string {
		return `{"cel":{"expression":"device.capacity[\"gpu.hami-go.io\"].memory.compareTo(quantity(\"` + mib + `\")) == 0"}}`
	}
	sharersSel := `{"cel":{"expression":"device.capacity[\"gpu.hami-go.io\"].sharers.compareTo(quantity(\"10\")) == 0"}}`
	for _, tc := range []struct {
		name string
		c    corev1.Container
		want string // the request's JSON
	}{
		{"one GPU 1000 MiB", ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1000"),
			`{"name":"gpu","exactly":{"allocationMode":"ExactCount","count":1,"capacity":{"requests":{"memory":"1000Mi"}}}}`},
		{"memory only: count 1", ctr("main", "nvidia.com/gpumem", "16Gi"),
			`{"name":"gpu","exactly":{"allocationMode":"ExactCount","count":1,"capacity":{"requests":{"memory":"16Gi"}}}}`},
		{"two GPUs 4000 MiB 25 % each", withRequests(ctr("main", "nvidia.com/gpu", "2", "nvidia.com/gpumem", "4000", "nvidia.com/gpucores", "25")),
			`{"name":"gpu","exactly":{"allocationMode":"ExactCount","count":2,"capacity":{"requests":{"cores":"25","memory":"4000Mi"}}}}`},
		{"whole GPU: the capacity defaults (all memory)", ctr("main", "nvidia.com/gpu", "1"),
			`{"name":"gpu","exactly":{"allocationMode":"ExactCount","count":1}}`},
		{"percentage 100 is the default", ctr("main", "nvidia.com/gpumem-percentage", "100"),
			`{"name":"gpu","exactly":{"allocationMode":"ExactCount","count":1}}`},
		{"cores 100: exclusive, every sharer", ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "2000", "nvidia.com/gpucores", "100"),
			`{"name":"gpu","exactly":{"selectors":[` + sharersSel + `],"allocationMode":"ExactCount","count":1,"capacity":{"requests":{"cores":"100","memory":"2000Mi","sharers":"10"}}}}`},
		{"percentage 25: one subrequest per GPU size, smallest first", ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem-percentage", "25"),
			`{"name":"gpu","firstAvailable":[` +
				`{"name":"v0","selectors":[` + memSel("40960Mi") + `],"allocationMode":"ExactCount","count":1,"capacity":{"requests":{"memory":"10Gi"}}},` +
				`{"name":"v1","selectors":[` + memSel("81559Mi") + `],"allocationMode":"ExactCount","count":1,"capacity":{"requests":{"memory":"20390Mi"}}}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newDRAEnv(t, defaultFleet()...)
			r := run(t, e.h, admissionv1.Create, "team-a", newPod(tc.c))
			if !r.resp.Allowed {
				t.Fatalf("denied: %s", r.resp.Result.Message)
			}
			p := r.pod(t)
			if p.Spec.SchedulerName != DefaultScheduler {
				t.Errorf("schedulerName %q, want the default scheduler's (no extender in DRA mode)", p.Spec.SchedulerName)
			}
			c := p.Spec.Containers[0]
			for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
				for n := range l {
					if strings.HasPrefix(string(n), "nvidia.com/") {
						t.Errorf("GPU resource %s left in the container: %v", n, l)
					}
				}
			}
			_, tmplName := claimOf(t, p, "main")
			tmpls := e.templates(t, "team-a")
			tmpl, ok := tmpls[tmplName]
			if !ok {
				t.Fatalf("template %s not created (have %v)", tmplName, tmpls)
			}
			if got := reqJSON(t, tmpl); got != tc.want {
				t.Errorf("request\n got %s\nwant %s", got, tc.want)
			}
			if tmpl.Labels[LabelClaimTemplate] != LabelClaimTemplateValue || !strings.HasPrefix(tmpl.Name, TemplatePrefix) {
				t.Errorf("template meta %+v", tmpl.ObjectMeta)
			}
		})
	}
}

// Bad quantities are refused by the one rule of pkg/device, naming field and value, and
// nothing is created.
func TestDRABadQuantities(t *testing.T) {
	for _, tc := range []struct {
		c    corev1.Container
		want string
	}{
		{ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "3000M"), `spec.containers[main].resources.limits[nvidia.com/gpumem]: 3G (Kubernetes' canonical form; = 3000M = 3000000000) is 3000000000 MiB`},
		{ctr("main", "nvidia.com/gpu", "1.5"), `spec.containers[main].resources.limits[nvidia.com/gpu]: 1500m`},
		{ctr("main", "nvidia.com/gpucores", "101"), `spec.containers[main].resources.limits[nvidia.com/gpucores]: 101 is outside 0..100`},
		{ctr("main", "nvidia.com/gpumem-percentage", "0"), `nvidia.com/gpumem-percentage]: 0 is outside 1..100`},
	} {
		e := newDRAEnv(t, defaultFleet()...)
		r := run(t, e.h, admissionv1.Create, "team-a", newPod(tc.c))
		if r.resp.Allowed || !strings.Contains(r.resp.Result.Message, tc.want) {
			t.Errorf("%v: allowed=%v %q, want %q", tc.c.Resources.Limits, r.resp.Allowed, r.resp.Result.Message, tc.want)
		}
		if n := len(e.templates(t, "team-a")); n != 0 {
			t.Errorf("%d templates created for a refused pod", n)
		}
	}
}

// A percentage that cannot be built is refused with the reason: no GPU published, or more GPU
// sizes than firstAvailable's 8 alternatives.
func TestDRAPercentageRefusals(t *testing.T) {
	pct := newPod(ctr("main", "nvidia.com/gpumem-percentage", "50"))
	other := slice("node-x", "other.example.com", h100) // another driver's devices do not count
	r := run(t, newDRAEnv(t, other).h, admissionv1.Create, "team-a", pct)
	if want := "spec.containers[main].resources.limits: no GPU of driver gpu.hami-go.io is published in the cluster (no ResourceSlices), so a percentage of GPU memory cannot be turned into a ResourceClaim"; r.resp.Allowed || !strings.Contains(r.resp.Result.Message, want) {
		t.Errorf("no slices: %v %q", r.resp.Allowed, r.resp.Result.Message)
	}
	var objs []runtime.Object
	for i := 0; i < 9; i++ {
		d := h100
		d.memMiB = int64(10000 + i*1000)
		objs = append(objs, slice("node-"+string(rune('a'+i)), "", d))
	}
	r = run(t, newDRAEnv(t, objs...).h, admissionv1.Create, "team-a", pct)
	if want := "the cluster has 9 kinds of GPU (memory size), more than the 8 alternatives a ResourceClaim's firstAvailable list takes"; r.resp.Allowed || !strings.Contains(r.resp.Result.Message, want) {
		t.Errorf("9 sizes: %v %q", r.resp.Allowed, r.resp.Result.Message)
	}
	// 8 sizes fit; a MiB request needs no sizes at all.
	r = run(t, newDRAEnv(t, objs[:8]...).h, admissionv1.Create, "team-a", pct)
	if !r.resp.Allowed {
		t.Errorf("8 sizes: %q", r.resp.Result.Message)
	}
	r = run(t, newDRAEnv(t).h, admissionv1.Create, "team-a", newPod(ctr("main", "nvidia.com/gpumem", "1000")))
	if !r.resp.Allowed {
		t.Errorf("MiB request without slices: %q", r.resp.Result.Message)
	}
}

// A new ResourceSlice with another GPU size is seen by the next admission (cached Shapes
// recomputed after the informer's event).
func TestDRAFleetFollowsSlices(t *testing.T) {
	e := newDRAEnv(t, slice("node-h", "", h100))
	if got := e.be.Shapes(); len(got) != 1 || got[0] != (DeviceShape{81559, 10}) {
		t.Fatalf("shapes %v", got)
	}
	if _, err := e.client.ResourceV1().ResourceSlices().Create(context.Background(), slice("node-a", "", a100), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the A100 slice in the fleet", func() bool { return len(e.be.Shapes()) == 2 })
	if got := e.be.Shapes(); got[0] != (DeviceShape{40960, 10}) {
		t.Errorf("shapes %v, want the A100 first", got)
	}
}

// numa-bind: a multi-GPU container's claim constrains its devices to one NUMA node; a
// one-GPU container's does not (nothing to bind, and a GPU without NUMA affinity still fits).
func TestDRANUMABind(t *testing.T) {
	e := newDRAEnv(t, defaultFleet()...)
	p := withAnno(newPod(ctr("two", "nvidia.com/gpu", "2", "nvidia.com/gpumem", "1000"), ctr("one", "nvidia.com/gpumem", "1000")), device.AnnoNUMABind, "true")
	r := run(t, e.h, admissionv1.Create, "team-a", p)
	if !r.resp.Allowed {
		t.Fatal(r.resp.Result.Message)
	}
	tmpls := e.templates(t, "team-a")
	_, two := claimOf(t, r.pod(t), "two")
	_, one := claimOf(t, r.pod(t), "one")
	c := tmpls[two].Spec.Spec.Devices.Constraints
	if len(c) != 1 || c[0].MatchAttribute == nil || *c[0].MatchAttribute != "resource.kubernetes.io/numaNode" || len(c[0].Requests) != 1 || c[0].Requests[0] != "gpu" {
		t.Errorf("two-GPU constraints %+v", c)
	}
	if c := tmpls[one].Spec.Spec.Devices.Constraints; len(c) != 0 {
		t.Errorf("one-GPU constraints %+v", c)
	}
}

// sideEffects NoneOnDryRun: a dry-run review patches the pod as a real one but creates nothing.
func TestDRADryRunCreatesNothing(t *testing.T) {
	e := newDRAEnv(t, defaultFleet()...)
	resp := runDry(t, e.h, newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1000")))
	if !resp.Allowed || len(resp.Patches) == 0 {
		t.Fatalf("dry run: %v %v", resp.Allowed, resp.Result)
	}
	if n := len(e.templates(t, "team-a")); n != 0 {
		t.Errorf("dry run created %d templates", n)
	}
	for _, a := range e.client.Actions() {
		if a.GetVerb() == "create" {
			t.Errorf("dry run made an API call: %v", a)
		}
	}
}

// Templates are made once per shape and namespace: pods of one shape share one; an existing
// template of the same spec (the webhook's, or anyone's) is fine; one of that name with
// another spec is refused, naming it.
func TestDRATemplatesIdempotent(t *testing.T) {
	e := newDRAEnv(t, defaultFleet()...)
	pod := func(name, mem string) *corev1.Pod {
		p := newPod(ctr("main", "nvidia.com/gpumem", mem))
		p.Name = name
		return p
	}
	a := run(t, e.h, admissionv1.Create, "team-a", pod("a", "1000"))
	b := run(t, e.h, admissionv1.Create, "team-a", pod("b", "1000"))
	c := run(t, e.h, admissionv1.Create, "team-a", pod("c", "2000"))
	_, ta := claimOf(t, a.pod(t), "main")
	_, tb := claimOf(t, b.pod(t), "main")
	_, tc := claimOf(t, c.pod(t), "main")
	if ta != tb || ta == tc {
		t.Errorf("templates a=%s b=%s c=%s: want a == b != c", ta, tb, tc)
	}
	if n := len(e.templates(t, "team-a")); n != 2 {
		t.Errorf("%d templates, want 2", n)
	}
	other := newPod(ctr("main", "nvidia.com/gpumem", "1000"))
	other.Namespace = "team-b"
	run(t, e.h, admissionv1.Create, "team-b", other)
	if _, ok := e.templates(t, "team-b")[ta]; !ok {
		t.Errorf("no template %s in team-b", ta)
	}

	// Someone else's template under the name: same spec (no label) is used, other spec refused.
	same := e.templates(t, "team-a")[ta]
	for _, tc := range []struct {
		name string
		mod  func(*resourceapi.ResourceClaimTemplate)
		deny string
	}{
		{"same spec, not labelled", func(t *resourceapi.ResourceClaimTemplate) { t.Labels = nil }, ""},
		{"other spec", func(t *resourceapi.ResourceClaimTemplate) {
			t.Labels = nil
			t.Spec.Spec.Devices.Requests[0].Exactly.Capacity = nil
		}, "ResourceClaimTemplate team-c/" + ta + " exists with a spec hami-go did not write"},
		{"other spec, labelled as ours", func(t *resourceapi.ResourceClaimTemplate) {
			t.Spec.Spec.Devices.Requests[0].Exactly.Count = 8
		}, "exists with a spec hami-go did not write"},
	} {
		pre := same.DeepCopy()
		pre.Namespace, pre.ResourceVersion, pre.UID = "team-c", "", ""
		tc.mod(pre)
		e := newDRAEnv(t, append(defaultFleet(), pre)...)
		p := pod("d", "1000")
		p.Namespace = "team-c"
		r := run(t, e.h, admissionv1.Create, "team-c", p)
		if tc.deny == "" && !r.resp.Allowed || tc.deny != "" && (r.resp.Allowed || !strings.Contains(r.resp.Result.Message, tc.deny)) {
			t.Errorf("%s: allowed=%v %q, want denial %q", tc.name, r.resp.Allowed, r.resp.Result.Message, tc.deny)
		}
	}
}

// case C03 in DRA mode: a classic init container shares the claim of an app container (or of
// an earlier init container) of the same shape; a different shape gets its own claim; a native
// sidecar runs beside the app containers and always gets its own.
func TestDRAInitContainers(t *testing.T) {
	e := newDRAEnv(t, defaultFleet()...)
	p := newPod(ctr("app", "nvidia.com/gpumem", "4000"), ctr("app2", "nvidia.com/gpumem", "4000"))
	p.Spec.InitContainers = []corev1.Container{
		ctr("init-same", "nvidia.com/gpumem", "4000"),
		ctr("init-other", "nvidia.com/gpumem", "8000"),
		ctr("init-other2", "nvidia.com/gpumem", "8000"),
		sidecar(ctr("side", "nvidia.com/gpumem", "4000")),
		ctr("no-gpu"),
	}
	r := run(t, e.h, admissionv1.Create, "team-a", p)
	if !r.resp.Allowed {
		t.Fatal(r.resp.Result.Message)
	}
	got := r.pod(t)
	claim := map[string]string{}
	for _, n := range []string{"app", "app2", "init-same", "init-other", "init-other2", "side"} {
		claim[n], _ = claimOf(t, got, n)
	}
	if claim["init-same"] != claim["app"] {
		t.Errorf("init-same %s, want app's %s", claim["init-same"], claim["app"])
	}
	if claim["init-other"] != claim["init-other2"] || claim["init-other"] == claim["app"] {
		t.Errorf("init-other %s init-other2 %s app %s", claim["init-other"], claim["init-other2"], claim["app"])
	}
	if claim["side"] == claim["app"] || claim["side"] == claim["app2"] || claim["app"] == claim["app2"] {
		t.Errorf("sidecar and app containers must have claims of their own: %v", claim)
	}
	if n := len(got.Spec.ResourceClaims); n != 4 { // app, app2, side, init-other
		t.Errorf("%d pod claims, want 4: %+v", n, got.Spec.ResourceClaims)
	}
	if len(got.Spec.InitContainers[4].Resources.Claims) != 0 {
		t.Errorf("no-gpu container got a claim")
	}
}

// A pod's own resourceClaims are kept; ours are added beside them under free names.
func TestDRAKeepsUserClaims(t *testing.T) {
	e := newDRAEnv(t, defaultFleet()...)
	p := newPod(ctr("main", "nvidia.com/gpumem", "1000"))
	tn := "mine"
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "hami-go-gpu-0", ResourceClaimTemplateName: &tn}}
	r := run(t, e.h, admissionv1.Create, "team-a", p)
	got := r.pod(t)
	if len(got.Spec.ResourceClaims) != 2 || got.Spec.ResourceClaims[0].Name != "hami-go-gpu-0" || *got.Spec.ResourceClaims[0].ResourceClaimTemplateName != "mine" {
		t.Fatalf("claims %+v", got.Spec.ResourceClaims)
	}
	if c, _ := claimOf(t, got, "main"); c != "hami-go-gpu-1" {
		t.Errorf("container claim %s, want hami-go-gpu-1", c)
	}
}

// DRA mode still refuses what device-plugin mode refuses, and a preset nodeName (claims need
// kube-scheduler).
func TestDRARefusals(t *testing.T) {
	e := newDRAEnv(t, defaultFleet()...)
	nn := newPod(ctr("main", "nvidia.com/gpumem", "1000"))
	nn.Spec.NodeName = "node-h"
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{nn, `spec.nodeName: preset to "node-h"; a pod that uses GPU slices gets them through ResourceClaims, which only kube-scheduler allocates`},
		{newPod(privileged(ctr("main", "nvidia.com/gpu", "1"))), "spec.containers[main].securityContext.privileged: true"},
		{withAnno(newPod(ctr("main", "nvidia.com/gpu", "1")), device.AnnoUseGPUUUID, `GPU-1") || true || ("`), `metadata.annotations[nvidia.com/use-gpuuuid]: "GPU-1\") || true || (\"" is not a GPU UUID`},
		{withAnno(newPod(ctr("main", "nvidia.com/gpu", "1")), device.AnnoUseGPUType, "--"), `metadata.annotations[nvidia.com/use-gputype]: "--" has no model token`},
	} {
		r := run(t, e.h, admissionv1.Create, "team-a", tc.pod)
		if r.resp.Allowed || !strings.Contains(r.resp.Result.Message, tc.want) {
			t.Errorf("allowed=%v %q, want %q", r.resp.Allowed, r.resp.Result.Message, tc.want)
		}
	}
	// Placement policies cannot be expressed: admitted with a warning naming the annotation.
	pol := run(t, e.h, admissionv1.Create, "team-a", withAnno(newPod(ctr("main", "nvidia.com/gpu", "1")), device.AnnoGPUPolicy, "spread"))
	if !pol.resp.Allowed || len(pol.resp.Warnings) != 1 || !strings.Contains(pol.resp.Warnings[0], `metadata.annotations[hami.io/gpu-scheduler-policy]: "spread" has no effect in DRA mode`) {
		t.Errorf("policy annotation: allowed=%v warnings %q", pol.resp.Allowed, pol.resp.Warnings)
	}
	// Non-GPU pods are untouched.
	if r := run(t, e.h, admissionv1.Create, "team-a", newPod(ctr("main", "cpu", "1"))); !r.resp.Allowed || len(r.resp.Patches) != 0 {
		t.Errorf("plain pod: %v %v", r.resp.Allowed, r.resp.Patches)
	}
}

// case C48, --dra-scheduler-name: a GPU pod of the default scheduler goes to the named profile
// (the packing profile of docs/dra.md); a pod naming another scheduler keeps it, and so does a pod
// without GPUs. Unset, every pod keeps its scheduler (TestDRAClaimShapes).
func TestDRASchedulerName(t *testing.T) {
	e := newDRAEnvWith(t, func(c *Config) { c.DRASchedulerName = "hami-go-packed" }, defaultFleet()...)
	gpu := func() *corev1.Pod { return newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "20000")) }
	r := run(t, e.h, admissionv1.Create, "team-a", gpu())
	if !r.resp.Allowed {
		t.Fatalf("denied: %s", r.resp.Result.Message)
	}
	if p := r.pod(t); p.Spec.SchedulerName != "hami-go-packed" || !strings.Contains(r.resp.Result.Message, "spec.schedulerName=hami-go-packed") {
		t.Errorf("default-scheduler GPU pod: schedulerName %q, message %q", p.Spec.SchedulerName, r.resp.Result.Message)
	}
	own := gpu()
	own.Spec.SchedulerName = "volcano"
	if p := run(t, e.h, admissionv1.Create, "team-a", own).pod(t); p.Spec.SchedulerName != "volcano" {
		t.Errorf("a pod's own scheduler became %q", p.Spec.SchedulerName)
	}
	if p := run(t, e.h, admissionv1.Create, "team-a", newPod(ctr("main"))).pod(t); p.Spec.SchedulerName != DefaultScheduler {
		t.Errorf("a pod without GPUs got schedulerName %q", p.Spec.SchedulerName)
	}
}

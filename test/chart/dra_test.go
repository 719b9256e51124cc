package chart_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

const (
	draDS  = "DaemonSet/hami-go-dra-driver"
	draDC  = "DeviceClass/gpu.hami-go.io"
	draSvc = "Service/hami-go-dra-driver"
	draCR  = "ClusterRole/hami-go-dra-driver"
)

// The default mode is deviceplugin: the device plugin and no DRA objects.
func TestModeDevicePluginIsTheDefault(t *testing.T) {
	r := renderChart(t, nil)
	if !r.has(dpDS) || !r.has("Service/hami-go-device-plugin") || !r.has("ClusterRole/hami-go-device-plugin") {
		t.Fatalf("device plugin missing: %v", r.keys())
	}
	for _, k := range []string{draDS, draDC, draSvc} {
		if r.has(k) {
			t.Errorf("%s rendered in deviceplugin mode", k)
		}
	}
	// Both agents' RBAC in both modes: after a chart mode change the leaving agent drains and
	// withdraws with it (issue 28).
	if !r.has(draCR) || !r.has("ServiceAccount/hami-go-dra-driver") {
		t.Errorf("the DRA driver's RBAC is missing in deviceplugin mode")
	}
}

// In mode dra stock kube-scheduler allocates the claims: no hami-go scheduler, extender, its
// RBAC, even with scheduler.enabled (its default) set.
func TestModeDRAInstallsNoExtender(t *testing.T) {
	r := renderChart(t, sets(t, "mode=dra", "scheduler.enabled=true", "scheduler.extender.tls.enabled=true"))
	for _, k := range r.keys() {
		if strings.Contains(k, "hami-go-scheduler") || strings.Contains(k, "extender") {
			t.Errorf("%s rendered in dra mode", k)
		}
	}
	if !r.has(draDS) || !r.has(webhookDep) {
		t.Errorf("dra mode lacks the driver or the webhook: %v", r.keys())
	}
	if d := renderChart(t, nil); !d.has(schedDep) || !d.has(schedCM) {
		t.Errorf("deviceplugin mode lacks the scheduler: %v", d.keys())
	}
}

// mode=dra installs the DRA driver INSTEAD of the device plugin, on the same nodes, with the
// shared node settings, its RBAC and the DeviceClass gpu.hami-go.io.
func TestModeDRA(t *testing.T) {
	r := renderChart(t, sets(t, "mode=dra", "devicePlugin.backend=fake", "devicePlugin.fake.profile=dgxa100", "devicePlugin.fake.faultInjection=true",
		"devicePlugin.splitCount=4", "devicePlugin.memoryScaling=1.5", "devicePlugin.reservedMemory=2048\\,GPU-a=4Gi\\,3=0",
		"draDriver.cdiDir=/etc/cdi", "devicePlugin.kubeletDir=/k", "devicePlugin.nodeSelector.gpu=yes",
		"draDriver.image.repository=example.com/dra", "draDriver.image.tag=t1", "devicePlugin.nriSocket=/run/nri/x.sock"))
	for _, k := range []string{dpDS, "Service/hami-go-device-plugin"} {
		if r.has(k) {
			t.Errorf("%s rendered in dra mode", k)
		}
	}
	if !r.has("ClusterRole/hami-go-device-plugin") || !r.has("ServiceAccount/hami-go-device-plugin") {
		t.Errorf("the device plugin's RBAC is missing in dra mode (a leaving agent needs it)")
	}
	ds := daemonSet(t, r, draDS)
	spec := ds.Spec.Template.Spec
	c := container(t, spec, "dra-driver")
	f := flags(c)
	want := map[string]string{
		"--node-name": "$(NODE_NAME)", "--backend": "fake", "--fake-profile": "dgxa100", "--fake-profile-label": "hami-go.io/fake-profile",
		"--split-count": "4", "--memory-scaling": "1.5", "--reserved-memory": "2048,GPU-a=4Gi,3=0", "--enforcement": "hami-core",
		"--cdi-dir": "/etc/cdi", "--plugin-data-dir": "/k/plugins/gpu.hami-go.io", "--registrar-dir": "/k/plugins_registry",
		"--metrics-address": ":9400", "--fake-fault-injection": "true",
		"--device-order": "index", "--republish-delay": "1s", "--nri-socket": "/run/nri/x.sock",
		"--nri-exempt-namespaces": "hami-go-system,kube-system",
	}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("flag %s = %q, want %q", k, f[k], v)
		}
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "metrics" {
		t.Errorf("readinessProbe = %+v, want GET /readyz on port metrics (ready once the kubelet registered the driver)", p)
	}
	if c.Image != "example.com/dra:t1" {
		t.Errorf("image = %q", c.Image)
	}
	if spec.NodeSelector["gpu"] != "yes" || spec.ServiceAccountName != "hami-go-dra-driver" {
		t.Errorf("nodeSelector %v serviceAccount %q", spec.NodeSelector, spec.ServiceAccountName)
	}
	hp := hostPaths(spec)
	if hp["plugins"] != "/k/plugins/gpu.hami-go.io" || hp["plugins-registry"] != "/k/plugins_registry" || hp["cdi"] != "/etc/cdi" || hp["nri"] != "/run/nri" {
		t.Errorf("host paths = %v", hp)
	}
	m := mounts(c)
	if m["/k/plugins/gpu.hami-go.io"] != "plugins" || m["/k/plugins_registry"] != "plugins-registry" || m["/etc/cdi"] != "cdi" || m["/run/nri"] != "nri" {
		t.Errorf("mounts = %v", m)
	}
	// Fake GPUs: no toolkit device, nothing of the host's CDI specs to read (case C55).
	if _, ok := f["--toolkit-cdi-kind"]; ok {
		t.Errorf("--toolkit-cdi-kind given to the fake backend")
	}
	if _, ok := hp["host-cdi"]; ok {
		t.Errorf("host-cdi mounted with the fake backend")
	}
	dc := typedAs[*resourcev1.DeviceClass](t, r, draDC)
	if sel := dc.Spec.Selectors; len(sel) != 1 || sel[0].CEL == nil || sel[0].CEL.Expression != `device.driver == "gpu.hami-go.io"` {
		t.Errorf("DeviceClass selectors = %+v", sel)
	}
	if n := dc.Spec.ExtendedResourceName; n == nil || *n != "nvidia.com/gpu" {
		t.Errorf("DeviceClass extendedResourceName = %v, want nvidia.com/gpu", n)
	}
	if !r.has(draSvc) {
		t.Error("no metrics Service for the DRA driver")
	}
}

// case C55: with the nvml backend the DRA driver names the toolkit's device of each GPU
// (--toolkit-cdi-kind, devicePlugin.toolkitCDIKind) and reads the host's CDI specs for the
// preflight (/var/run/cdi read-only at /host/var/run/cdi; /etc/cdi is under /host/etc) beside its
// own read-write claim spec directory.
func TestModeDRAToolkitCDIKindC55(t *testing.T) {
	spec := daemonSet(t, renderChart(t, sets(t, "mode=dra")), draDS).Spec.Template.Spec
	c := container(t, spec, "dra-driver")
	if k := flags(c)["--toolkit-cdi-kind"]; k != "nvidia.com/gpu" {
		t.Errorf("--toolkit-cdi-kind = %q, want nvidia.com/gpu", k)
	}
	if hostPaths(spec)["host-cdi"] != "/var/run/cdi" || mounts(c)["/host/var/run/cdi"] != "host-cdi" || readOnly(c, "host-cdi") != "true" ||
		mounts(c)["/var/run/cdi"] != "cdi" || readOnly(c, "cdi") != "false" {
		t.Errorf("hostPaths %v mounts %v: want /var/run/cdi read-only at /host/var/run/cdi beside the read-write claim spec directory", hostPaths(spec), mounts(c))
	}
	if _, ok := flags(c)["--driver-root"]; ok {
		t.Error("--driver-root given to the DRA driver (the toolkit's spec names the device nodes)")
	}
}

// draDriver.deviceOrder and republishDelay set the driver's flags; extendedResource=false drops
// the DeviceClass's extendedResourceName, which follows resourceNames.count.
func TestModeDRAPlacementAndExtendedResource(t *testing.T) {
	r := renderChart(t, sets(t, "mode=dra", "draDriver.deviceOrder=binpack", "draDriver.republishDelay=250ms", "resourceNames.count=example.com/gpu"))
	f := flags(container(t, daemonSet(t, r, draDS).Spec.Template.Spec, "dra-driver"))
	if f["--device-order"] != "binpack" || f["--republish-delay"] != "250ms" {
		t.Errorf("--device-order %q --republish-delay %q", f["--device-order"], f["--republish-delay"])
	}
	if n := typedAs[*resourcev1.DeviceClass](t, r, draDC).Spec.ExtendedResourceName; n == nil || *n != "example.com/gpu" {
		t.Errorf("extendedResourceName = %v, want example.com/gpu", n)
	}
	r = renderChart(t, sets(t, "mode=dra", "draDriver.extendedResource=false"))
	if n := typedAs[*resourcev1.DeviceClass](t, r, draDC).Spec.ExtendedResourceName; n != nil {
		t.Errorf("extendedResource=false: extendedResourceName = %q", *n)
	}
	if _, err := renderFiles(t, sets(t, "mode=dra", "draDriver.deviceOrder=first")); err == nil ||
		!strings.Contains(err.Error(), `draDriver.deviceOrder must be "index", "binpack" or "spread", got "first"`) {
		t.Errorf("deviceOrder=first: err = %v", err)
	}
}

// The DRA driver's RBAC is what the kubeletplugin helper, the preflight and the removal check
// need, and no more.
func TestModeDRARBAC(t *testing.T) {
	r := renderChart(t, sets(t, "mode=dra"))
	got := ruleSet(typedAs[*rbacv1.ClusterRole](t, r, draCR).Rules)
	want := []string{
		"resource.k8s.io|resourceslices|get", "resource.k8s.io|resourceslices|list", "resource.k8s.io|resourceslices|watch",
		"resource.k8s.io|resourceslices|create", "resource.k8s.io|resourceslices|update", "resource.k8s.io|resourceslices|patch",
		"resource.k8s.io|resourceslices|delete", "resource.k8s.io|resourceslices|deletecollection",
		"resource.k8s.io|resourceclaims|get", "|nodes|get", "|nodes|list", "|nodes|watch", "|nodes/status|patch",
		// At a stop: its own pod and DaemonSet, to tell a removal for good from a restart; the
		// node's pods watched, what they hold floors its synthetic resources.
		"|pods|get", "|pods|list", "|pods|watch", "apps|daemonsets|get",
	}
	if len(got) != len(want) {
		t.Errorf("rules = %v, want %v", got, want)
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("missing rule %s (have %v)", w, got)
		}
	}
}

// An unknown mode fails the install naming the value.
func TestModeInvalid(t *testing.T) {
	for set, want := range map[string]string{
		"mode=both": `mode must be "deviceplugin" or "dra", got "both"`,
	} {
		if _, err := renderFiles(t, sets(t, set)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", set, err, want)
		}
	}
}

// The webhook follows mode: --mode=<mode>; in both modes an API token and RBAC to list and
// watch ResourceQuotas (a GPU memory percentage is refused where a quota caps
// requests.hami-go.io/gpu-memory); in dra mode also RBAC to create and read
// ResourceClaimTemplates and read ResourceSlices, and sideEffects NoneOnDryRun on the pod
// webhook (it creates templates, never on a dry run).
func TestModeWebhook(t *testing.T) {
	const cr, crb = "ClusterRole/hami-go-webhook", "ClusterRoleBinding/hami-go-webhook"
	for _, mode := range []string{"deviceplugin", "dra"} {
		r := renderChart(t, sets(t, "mode="+mode))
		if got := flags(container(t, deployment(t, r, webhookDep).Spec.Template.Spec, "webhook"))["--mode"]; got != mode {
			t.Errorf("%s: --mode=%q", mode, got)
		}
		sa := typedAs[*corev1.ServiceAccount](t, r, "ServiceAccount/hami-go-webhook")
		if sa.AutomountServiceAccountToken == nil || !*sa.AutomountServiceAccountToken {
			t.Errorf("%s: automountServiceAccountToken %v", mode, sa.AutomountServiceAccountToken)
		}
		side := map[string]admissionv1.SideEffectClass{}
		for _, w := range mwc(t, r).Webhooks {
			side[w.Name] = *w.SideEffects
		}
		wantPods := admissionv1.SideEffectClassNone
		if mode == "dra" {
			wantPods = admissionv1.SideEffectClassNoneOnDryRun
		}
		if side["gpu-pods.hami-go.io"] != wantPods || side["gpu-rayclusters.hami-go.io"] != admissionv1.SideEffectClassNone {
			t.Errorf("%s: sideEffects %v", mode, side)
		}
		got := ruleSet(typedAs[*rbacv1.ClusterRole](t, r, cr).Rules)
		want := []string{"|resourcequotas|list", "|resourcequotas|watch", "|resourcequotas|create", "|resourcequotas|update", "|resourcequotas|patch",
			"|resourcequotas|delete", "|events|create", "|events|patch"}
		if mode == "dra" {
			want = append(want,
				"resource.k8s.io|resourceclaimtemplates|get", "resource.k8s.io|resourceclaimtemplates|list", "resource.k8s.io|resourceclaimtemplates|watch",
				"resource.k8s.io|resourceclaimtemplates|create",
				"resource.k8s.io|resourceslices|get", "resource.k8s.io|resourceslices|list", "resource.k8s.io|resourceslices|watch",
				// webhook.draPreemption (default true): dra_preemption_test.go
				"|pods|get", "|pods|list", "|pods|watch", "|pods/status|patch", "|pods/eviction|create",
				"resource.k8s.io|resourceclaims|get", "resource.k8s.io|resourceclaims|list", "resource.k8s.io|resourceclaims|watch",
				"policy|poddisruptionbudgets|get", "policy|poddisruptionbudgets|list", "policy|poddisruptionbudgets|watch",
				"|nodes|get", "|nodes|list", "|nodes|watch",
			)
		}
		if len(got) != len(want) {
			t.Errorf("%s: rules = %v, want %v", mode, got, want)
		}
		for _, w := range want {
			if !got[w] {
				t.Errorf("%s: missing rule %s", mode, w)
			}
		}
		b := typedAs[*rbacv1.ClusterRoleBinding](t, r, crb)
		if b.RoleRef.Name != "hami-go-webhook" || len(b.Subjects) != 1 || b.Subjects[0].Name != "hami-go-webhook" || b.Subjects[0].Namespace != "hami-go-system" {
			t.Errorf("binding %+v", b)
		}
	}
}

// One mode per node (issue 13): the device plugin runs only where hami-go.io/mode is not "dra",
// the DRA driver (and the MPS daemon of its mode) only where it is; the requirement joins every
// required term of devicePlugin.affinity, which it never replaces.
func TestNodeAgentOneModePerNode(t *testing.T) {
	modeReq := func(op corev1.NodeSelectorOperator) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: "hami-go.io/mode", Operator: op, Values: []string{"dra"}}
	}
	userAffinity := map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
		"nodeSelectorTerms": []any{
			map[string]any{"matchExpressions": []any{map[string]any{"key": "gpu", "operator": "Exists"}}},
			map[string]any{"matchFields": []any{map[string]any{"key": "metadata.name", "operator": "In", "values": []any{"n1"}}}},
		}}}}
	for _, tc := range []struct {
		name  string
		vals  map[string]any
		ds    string
		op    corev1.NodeSelectorOperator
		terms int    // required node-selector terms
		user  string // the user's first expression key, kept first in term 0
	}{
		{name: "deviceplugin", vals: nil, ds: dpDS, op: corev1.NodeSelectorOpNotIn, terms: 1},
		{name: "dra", vals: sets(t, "mode=dra"), ds: draDS, op: corev1.NodeSelectorOpIn, terms: 1},
		{name: "deviceplugin-user-affinity", vals: map[string]any{"devicePlugin": map[string]any{"affinity": userAffinity}},
			ds: dpDS, op: corev1.NodeSelectorOpNotIn, terms: 2, user: "gpu"},
		{name: "dra-user-affinity", vals: map[string]any{"mode": "dra", "devicePlugin": map[string]any{"affinity": userAffinity}},
			ds: draDS, op: corev1.NodeSelectorOpIn, terms: 2, user: "gpu"},
		{name: "local-values-dra", vals: func() map[string]any { v := valuesFile(t, "values-local.yaml"); v["mode"] = "dra"; return v }(),
			ds: draDS, op: corev1.NodeSelectorOpIn, terms: 1, user: "hami-go.io/fake-profile"},
		{name: "mps-dra", vals: sets(t, "mode=dra", "devicePlugin.backend=nvml", "devicePlugin.enforcement=mps"),
			ds: "DaemonSet/hami-go-mps-control-daemon", op: corev1.NodeSelectorOpIn, terms: 1},
		{name: "mps-deviceplugin", vals: sets(t, "devicePlugin.backend=nvml", "devicePlugin.enforcement=mps"),
			ds: "DaemonSet/hami-go-mps-control-daemon", op: corev1.NodeSelectorOpNotIn, terms: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := renderChart(t, tc.vals)
			spec := daemonSet(t, r, tc.ds).Spec.Template.Spec
			if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
				t.Fatalf("%s: no required node affinity: %+v", tc.ds, spec.Affinity)
			}
			terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			if len(terms) != tc.terms {
				t.Fatalf("%s: %d terms, want %d: %+v", tc.ds, len(terms), tc.terms, terms)
			}
			want := modeReq(tc.op)
			for i, term := range terms {
				exprs := term.MatchExpressions
				if n := len(exprs); n == 0 || exprs[n-1].Key != want.Key || exprs[n-1].Operator != want.Operator || strings.Join(exprs[n-1].Values, ",") != "dra" {
					t.Errorf("%s term %d: expressions %+v, want the last %+v", tc.ds, i, exprs, want)
				}
			}
			if tc.user != "" && terms[0].MatchExpressions[0].Key != tc.user {
				t.Errorf("%s: the user's expression %q is not kept first: %+v", tc.ds, tc.user, terms[0].MatchExpressions)
			}
			if tc.terms == 2 && len(terms[1].MatchFields) != 1 {
				t.Errorf("%s: the user's matchFields term lost: %+v", tc.ds, terms[1])
			}
		})
	}
}

// The kind values' DRA variant (values-kind.yaml, then values-kind-dra.yaml, as helm -f merges
// them) installs the fake-backend DRA driver on the workers kind-config-dra.yaml makes, and no
// scheduler; every GPU worker there carries hami-go.io/mode=dra, where the driver runs.
func TestValuesKindDRA(t *testing.T) {
	vals := chartutil.CoalesceTables(valuesFile(t, "values-kind-dra.yaml"), valuesFile(t, "values-kind.yaml"))
	r := renderChart(t, vals)
	if r.has(dpDS) || r.has(schedDep) || !r.has(draDS) || !r.has(draDC) {
		t.Fatalf("kind DRA values render %v, want the DRA driver and DeviceClass, no device plugin or scheduler", r.keys())
	}
	spec := daemonSet(t, r, draDS).Spec.Template.Spec
	if f := flags(container(t, spec, "dra-driver")); f["--backend"] != "fake" || f["--fake-profile-label"] != "hami-go.io/fake-profile" {
		t.Errorf("driver flags %v", f)
	}
	b, err := os.ReadFile(filepath.Join(chartDir(t), "kind-config-dra.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kind struct {
		Kind         string          `json:"kind"`
		APIVersion   string          `json:"apiVersion"`
		Name         string          `json:"name"`
		FeatureGates map[string]bool `json:"featureGates"`
		Nodes        []struct {
			Role   string            `json:"role"`
			Labels map[string]string `json:"labels"`
		} `json:"nodes"`
	}
	if err := yaml.UnmarshalStrict(b, &kind); err != nil {
		t.Fatalf("kind-config-dra.yaml: %v", err)
	}
	if !kind.FeatureGates["DRAConsumableCapacity"] {
		t.Error("kind-config-dra.yaml does not turn DRAConsumableCapacity on")
	}
	workers := 0
	for _, n := range kind.Nodes {
		if n.Role != "worker" {
			continue
		}
		workers++
		sel := labels.SelectorFromSet(spec.NodeSelector)
		if !sel.Matches(labels.Set(n.Labels)) || n.Labels["hami-go.io/mode"] != "dra" || n.Labels["hami-go.io/fake-profile"] == "" {
			t.Errorf("worker labels %v: want the driver's nodeSelector %v, hami-go.io/mode=dra and a fake profile", n.Labels, spec.NodeSelector)
		}
	}
	if workers == 0 {
		t.Error("kind-config-dra.yaml has no worker")
	}
}

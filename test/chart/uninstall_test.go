package chart_test

import (
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

const (
	uninstallJob  = "Job/hami-go-uninstall"
	uninstallRole = "Role/hami-go-system/hami-go-uninstall"
)

// uninstallHook is the hook Job's pod spec and its container's args.
func uninstallHook(t testing.TB, r rendered) (*batchv1.Job, corev1.PodSpec, []string) {
	t.Helper()
	j := typedAs[*batchv1.Job](t, r, uninstallJob)
	spec := j.Spec.Template.Spec
	return j, spec, container(t, spec, "uninstall").Args
}

// Issue 28: helm uninstall first runs a pre-delete Job (the node agent's image, command
// "uninstall") that deletes the agents' DaemonSet and the scheduler and waits for them, then
// the leader Lease; its RBAC is hook-scoped and limited to those names.
func TestUninstallHook(t *testing.T) {
	r := renderChart(t, nil)
	for _, k := range []string{uninstallJob, uninstallRole, "RoleBinding/hami-go-system/hami-go-uninstall", "ServiceAccount/hami-go-uninstall"} {
		a := r.get(t, k).raw.GetAnnotations()
		if a["helm.sh/hook"] != "pre-delete" || a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
			t.Errorf("%s: annotations %v, want a pre-delete hook deleted once it succeeded", k, a)
		}
	}
	if w := r.get(t, uninstallRole).raw.GetAnnotations()["helm.sh/hook-weight"]; w != "-10" {
		t.Errorf("Role hook weight %q: the RBAC must exist before the Job (weight 0)", w)
	}
	j, spec, args := uninstallHook(t, r)
	want := "uninstall --namespace=hami-go-system --daemonsets=hami-go-device-plugin --deployments=hami-go-scheduler --leases=hami-go-scheduler,hami-go-dra-preemption --timeout=120s"
	if got := strings.Join(args, " "); got != want {
		t.Errorf("args %q\nwant %q", got, want)
	}
	if img := container(t, spec, "uninstall").Image; img != "docker.io/hami-go/device-plugin:0.1.0" {
		t.Errorf("image %s, want the device plugin's", img)
	}
	if spec.ServiceAccountName != "hami-go-uninstall" || spec.RestartPolicy != corev1.RestartPolicyNever || *j.Spec.BackoffLimit != 0 || *j.Spec.ActiveDeadlineSeconds != 180 {
		t.Errorf("sa %s restart %s backoff %d deadline %d", spec.ServiceAccountName, spec.RestartPolicy, *j.Spec.BackoffLimit, *j.Spec.ActiveDeadlineSeconds)
	}
	sc := container(t, spec, "uninstall").SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.Privileged != nil && *sc.Privileged {
		t.Errorf("securityContext %+v, want the restricted one", sc)
	}
	role := typedAs[*rbacv1.Role](t, r, uninstallRole)
	got := ruleSet(role.Rules)
	wantRules := map[string]bool{
		"apps|daemonsets|get|hami-go-device-plugin": true, "apps|daemonsets|delete|hami-go-device-plugin": true,
		"apps|deployments|get|hami-go-scheduler": true, "apps|deployments|delete|hami-go-scheduler": true,
		// and the webhook's DRA preemption Lease, which a release switched back from dra keeps
		"coordination.k8s.io|leases|delete|hami-go-scheduler,hami-go-dra-preemption": true,
	}
	if len(got) != len(wantRules) {
		t.Errorf("rules %v, want %v", got, wantRules)
	}
	for k := range wantRules {
		if !got[k] {
			t.Errorf("rule %s missing from %v", k, got)
		}
	}
}

// Case C61: the webhook is stopped, then its DRA preemption Lease deleted.
func TestUninstallHookValues(t *testing.T) {
	// mode dra: the DRA driver's image and DaemonSet, and no scheduler (stock kube-scheduler);
	// kube-scheduler's leader Lease is still deleted, which a release switched from
	// deviceplugin keeps (case C45, a mode switch). The webhook runs the DRA preemption under a
	// Lease: it is stopped first, then its Lease deleted.
	r := renderChart(t, sets(t, "mode=dra"))
	_, spec, args := uninstallHook(t, r)
	if got := strings.Join(args, " "); got != "uninstall --namespace=hami-go-system --daemonsets=hami-go-dra-driver --deployments=hami-go-webhook --leases=hami-go-scheduler,hami-go-dra-preemption --timeout=120s" {
		t.Errorf("mode dra: args %q", got)
	}
	if got := strings.Join(func() []string {
		_, _, a := uninstallHook(t, renderChart(t, sets(t, "mode=dra", "webhook.draPreemption=false")))
		return a
	}(), " "); strings.Contains(got, "--deployments") {
		t.Errorf("mode dra without the DRA preemption: args %q, want the webhook left to helm", got)
	}
	if img := container(t, spec, "uninstall").Image; img != "docker.io/hami-go/dra-driver:0.1.0" {
		t.Errorf("mode dra: image %s", img)
	}
	wantDRA := map[string]bool{
		"apps|daemonsets|get|hami-go-dra-driver": true, "apps|daemonsets|delete|hami-go-dra-driver": true,
		"apps|deployments|get|hami-go-webhook": true, "apps|deployments|delete|hami-go-webhook": true,
		"coordination.k8s.io|leases|delete|hami-go-scheduler,hami-go-dra-preemption": true,
	}
	if got := ruleSet(typedAs[*rbacv1.Role](t, r, uninstallRole).Rules); len(got) != len(wantDRA) {
		t.Errorf("mode dra: rules %v, want %v", got, wantDRA)
	} else {
		for k := range wantDRA {
			if !got[k] {
				t.Errorf("mode dra: rule %s missing from %v", k, got)
			}
		}
	}

	r = renderChart(t, sets(t, "uninstall.timeoutSeconds=30", "uninstall.nodeSelector.pool=system",
		"uninstall.tolerations[0].key=dedicated", "uninstall.tolerations[0].operator=Exists",
		"uninstall.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=zone",
		"uninstall.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
		"hostNetwork=true", "apiServer.host=10.9.8.7"))
	j, spec, args := uninstallHook(t, r)
	host, _ := envOf(container(t, spec, "uninstall"), "KUBERNETES_SERVICE_HOST")
	if args[len(args)-1] != "--timeout=30s" || *j.Spec.ActiveDeadlineSeconds != 90 || spec.NodeSelector["pool"] != "system" ||
		spec.Tolerations[0].Key != "dedicated" || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key != "zone" ||
		!spec.HostNetwork || host != "10.9.8.7" {
		t.Errorf("values not applied: args %v deadline %d spec %+v host %q", args, *j.Spec.ActiveDeadlineSeconds, spec, host)
	}

	r = renderChart(t, sets(t, "uninstall.hook=false"))
	for _, k := range []string{uninstallJob, uninstallRole, "ServiceAccount/hami-go-uninstall"} {
		if r.has(k) {
			t.Errorf("uninstall.hook=false renders %s", k)
		}
	}
	if _, err := renderFiles(t, sets(t, "uninstall.timeoutSeconds=0")); err == nil || !strings.Contains(err.Error(), "uninstall.timeoutSeconds must be >= 1, got 0") {
		t.Errorf("timeoutSeconds=0: error %v", err)
	}
}

// renderNotes renders NOTES.txt with vals, whitespace runs folded to one space.
func renderNotes(t testing.TB, vals map[string]any) string {
	t.Helper()
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: releaseName, Namespace: releaseNamespace, Revision: 1, IsInstall: true}, capabilitiesAt(t, kubeVersion))
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	for k, v := range out {
		if strings.HasSuffix(k, "NOTES.txt") {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	t.Fatal("no NOTES.txt")
	return ""
}

// NOTES.txt says what uninstall removes and keeps, for the release's values (issue 28; the
// day-two e2e test TestDayTwoUninstall checks it on the local cluster).
func TestNotesUninstall(t *testing.T) {
	for _, tc := range []struct {
		set       []string
		want, not []string
	}{
		{nil, []string{"pre-delete hook (Job hami-go-uninstall)", "DaemonSet and the scheduler", "at most 120 s", "kube-scheduler's hami-go-scheduler, the webhook's DRA preemption's hami-go-dra-preemption",
			"keeps nvidia.com/gpu in the nodes' capacity, none allocatable, for 5 minutes", "/usr/local/vgpu: HAMi-core", "--no-hooks"},
			[]string{"DeviceClass", "ResourceClaimTemplates", "EXCLUSIVE_PROCESS", "uninstall.hook is false"}},
		{[]string{"mode=dra"}, []string{"the DeviceClass", "ResourceSlices 30 s after", "ResourceClaimTemplates named hami-go-gpu-*",
			"/var/run/cdi/gpu.hami-go.io-claim_*.json", "/var/lib/kubelet/plugins/gpu.hami-go.io",
			"DaemonSet and the webhook (its DRA preemption holds a Lease)", "the webhook's DRA preemption's hami-go-dra-preemption"},
			[]string{"and the scheduler", "for 5 minutes"}},
		{[]string{"uninstall.hook=false"}, []string{"uninstall.hook is false", "cannot withdraw"}, []string{"pre-delete hook"}},
		{[]string{"uninstall.timeoutSeconds=45", "hamiCore.hostDir=/opt/vgpu", "leaseNamespace=gpu-leases"}, []string{"at most 45 s", "/opt/vgpu: HAMi-core", "its Lease in gpu-leases"}, nil},
		{[]string{"devicePlugin.enforcement=mps"}, []string{"compute mode EXCLUSIVE_PROCESS", "/tmp/nvidia-mps"}, nil},
	} {
		t.Run(strings.Join(tc.set, ","), func(t *testing.T) {
			notes := renderNotes(t, sets(t, tc.set...))
			for _, w := range tc.want {
				if !strings.Contains(notes, w) {
					t.Errorf("NOTES.txt lacks %q:\n%s", w, notes)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(notes, w) {
					t.Errorf("NOTES.txt says %q:\n%s", w, notes)
				}
			}
		})
	}
}

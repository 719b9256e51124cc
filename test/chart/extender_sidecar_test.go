package chart_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Issue 37 item 1: the extender runs as kube-scheduler's native sidecar (an init container with
// restartPolicy Always) whose startupProbe reads /readyz on the metrics port, so the kubelet
// starts kube-scheduler only once the extender rebuilt its cache from the API. Native sidecars
// are on by default since Kubernetes 1.29, below the chart's floor (1.30): every cluster version
// the chart supports renders the same, with or without the extender's TLS.
func TestSchedulerExtenderIsANativeSidecar(t *testing.T) {
	for _, tc := range []struct {
		kv  string
		set []string
	}{
		{kv: "1.30.0"},
		{kv: "1.33.4"},
		{kv: "1.35.0"},
		{kv: "1.37.2"},
		{kv: "1.30.0", set: []string{"scheduler.extender.tls.enabled=false"}},
		{kv: "1.37.2", set: []string{"scheduler.extender.tls.enabled=false", "scheduler.extender.metricsPort=9500"}},
	} {
		t.Run(tc.kv+" "+strings.Join(tc.set, ","), func(t *testing.T) {
			spec := deployment(t, renderAt(t, tc.kv, sets(t, tc.set...)), schedDep).Spec.Template.Spec
			if len(spec.Containers) != 1 || spec.Containers[0].Name != "kube-scheduler" {
				t.Fatalf("containers %v, want kube-scheduler alone", names(spec.Containers))
			}
			if len(spec.InitContainers) != 1 || spec.InitContainers[0].Name != "extender" {
				t.Fatalf("init containers %v, want the extender alone", names(spec.InitContainers))
			}
			ex := spec.InitContainers[0]
			if ex.RestartPolicy == nil || *ex.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Fatalf("extender restartPolicy %v, want Always (a native sidecar)", ex.RestartPolicy)
			}
			wantPort := int32(9395)
			if strings.Contains(strings.Join(tc.set, ","), "metricsPort=9500") {
				wantPort = 9500
			}
			if p := namedPort(ex, "metrics"); p != wantPort {
				t.Errorf("extender metrics port %d, want %d", p, wantPort)
			}
			sp := ex.StartupProbe
			if sp == nil || sp.HTTPGet == nil {
				t.Fatalf("extender startupProbe %+v, want an HTTP GET of /readyz", sp)
			}
			if sp.HTTPGet.Path != "/readyz" || sp.HTTPGet.Port.String() != "metrics" || sp.HTTPGet.Scheme != "" && sp.HTTPGet.Scheme != corev1.URISchemeHTTP {
				t.Errorf("extender startupProbe %s %s %s, want HTTP /readyz on port metrics", sp.HTTPGet.Scheme, sp.HTTPGet.Path, sp.HTTPGet.Port.String())
			}
			// kube-scheduler waits up to periodSeconds × failureThreshold: 2 s × 300 = 10 minutes
			// for the informers' first list, then the kubelet restarts the extender.
			if sp.PeriodSeconds != 2 || sp.FailureThreshold != 300 {
				t.Errorf("extender startupProbe every %d s × %d, want 2 s × 300", sp.PeriodSeconds, sp.FailureThreshold)
			}
			// Readiness and liveness stay: the pod is not Ready while the extender restarts alone.
			if rp := ex.ReadinessProbe; rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" || rp.HTTPGet.Port.String() != "metrics" {
				t.Errorf("extender readinessProbe %+v", rp)
			}
			if lp := ex.LivenessProbe; lp == nil || lp.HTTPGet == nil || lp.HTTPGet.Path != "/healthz" || lp.HTTPGet.Port.String() != "metrics" {
				t.Errorf("extender livenessProbe %+v", lp)
			}
			if f := flags(ex); f["--address"] != "127.0.0.1:8888" || f["--metrics-address"] != ":"+itoa(int(wantPort)) {
				t.Errorf("extender flags %v", f)
			}
			// kube-scheduler itself gets no extender probe: it runs once the sidecar started.
			if ks := spec.Containers[0]; ks.StartupProbe != nil {
				t.Errorf("kube-scheduler startupProbe %+v, want none", ks.StartupProbe)
			}
		})
	}
}

// names lists containers' names.
func names(cs []corev1.Container) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

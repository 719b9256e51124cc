//go:build e2e && daytwo

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// checkPluginMetrics: with placement plugin, kube-scheduler's /metrics on its secure port serves
// the HamiGo plugin's series beside its own, to a token allowed to get the non-resource URL
// /metrics, as the chart's ServiceMonitor scrapes it (Prometheus' ServiceAccount token, HTTPS,
// the self-signed certificate not verified). It has one hami_go_extender_pod_allocated_memory_mib
// series of mibEach MiB for each of the booked slices placed in ns, and kube-scheduler's own
// scheduler_schedule_attempts_total is served beside it; a token of a ServiceAccount without
// that rule gets 403 (kube-scheduler's delegated authorization).
func (c *Cluster) checkPluginMetrics(t *testing.T, ns string, booked int, mibEach float64) {
	t.Helper()
	ctx := context.Background()
	role := "hami-go-e2e-metrics-reader-" + ns
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.RbacV1().ClusterRoles().Delete(ctx, role, metav1.DeleteOptions{}) })
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.RbacV1().ClusterRoleBindings().Delete(ctx, role, metav1.DeleteOptions{}) })
	reader, stranger := c.saToken(t, ns, "prometheus"), c.saToken(t, ns, "stranger")

	url := c.pluginMetricsURL(t)
	var body, last string
	// kube-scheduler caches its authorization answers (10 s allowed and denied): poll.
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		code, b, err := scrapeHTTPS(url, reader)
		body, last = b, fmt.Sprintf("%d %v %.200s", code, err, b)
		return err == nil && code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("GET %s with the reader's token: %s", url, last)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("GET %s: parse: %v", url, err)
	}
	var slices int
	var mib []float64
	for _, m := range fams["hami_go_extender_pod_allocated_memory_mib"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "namespace" && l.GetValue() == ns {
				slices++
				mib = append(mib, m.GetGauge().GetValue())
			}
		}
	}
	t.Logf("kube-scheduler's /metrics: %d families, %d series hami_go_extender_pod_allocated_memory_mib{namespace=%q}", len(fams), slices, ns)
	if slices != booked || fams["hami_go_extender_gpu_sharers"] == nil {
		t.Errorf("%d series hami_go_extender_pod_allocated_memory_mib of namespace %s (MiB %v), want %d (the slices placed), and hami_go_extender_gpu_sharers served", slices, ns, mib, booked)
	}
	for _, v := range mib {
		if v != mibEach {
			t.Errorf("hami_go_extender_pod_allocated_memory_mib of namespace %s: %v, want %v for every slice", ns, mib, mibEach)
			break
		}
	}
	// The series the chart's HamiGoSchedulerPluginErrors and the dashboard's HamiGo panels read:
	// the profile's attempts (the slices placed were scheduled) and HamiGo's evaluations, which
	// the attempts panel joins on. scheduler_plugin_execution_duration_seconds is sampled in 10 %
	// of the cycles, so a short burst may leave it unserved: not checked.
	if n := seriesValue(fams["scheduler_schedule_attempts_total"], map[string]string{"profile": schedulerName, "result": "scheduled"}); n < float64(booked) {
		t.Errorf("kube-scheduler's own scheduler_schedule_attempts_total{profile=%q, result=\"scheduled\"} = %v beside the plugin's, want at least %d (the slices placed)", schedulerName, n, booked)
	}
	if n := seriesValue(fams["scheduler_plugin_evaluation_total"], map[string]string{"plugin": "HamiGo", "extension_point": "PreFilter", "profile": schedulerName}); n < float64(booked) {
		t.Errorf("scheduler_plugin_evaluation_total{plugin=\"HamiGo\", extension_point=\"PreFilter\", profile=%q} = %v, want at least %d (the slices placed)", schedulerName, n, booked)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		code, b, err := scrapeHTTPS(url, stranger)
		last = fmt.Sprintf("%d %v %.200s", code, err, b)
		return err == nil && code == http.StatusForbidden, nil
	})
	if err != nil {
		t.Errorf("GET %s with a token lacking get /metrics: %s, want 403", url, last)
	}
}

// seriesValue sums the counter values of mf's series that carry every label of match (0 when
// none does, or mf is nil).
func seriesValue(mf *dto.MetricFamily, match map[string]string) float64 {
	var sum float64
	for _, m := range mf.GetMetric() {
		n := 0
		for _, l := range m.GetLabel() {
			if v, ok := match[l.GetName()]; ok && v == l.GetValue() {
				n++
			}
		}
		if n == len(match) {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// saToken creates ServiceAccount name in ns and returns a 10-minute token of it.
func (c *Cluster) saToken(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := int64(600)
	tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}

// pluginMetricsURL is https://<pod IP>:<port https>/metrics of the one ready scheduler pod.
func (c *Cluster) pluginMetricsURL(t *testing.T) string {
	t.Helper()
	for _, p := range c.componentPods(t, "scheduler") {
		for _, ctr := range p.Spec.Containers {
			for _, port := range ctr.Ports {
				if port.Name == "https" && p.Status.PodIP != "" {
					return fmt.Sprintf("https://%s:%d/metrics", p.Status.PodIP, port.ContainerPort)
				}
			}
		}
	}
	t.Fatal("no scheduler pod with an IP and a port named https")
	return ""
}

// scrapeHTTPS GETs url with the bearer token, not verifying the server's certificate
// (kube-scheduler's is self-signed, as the ServiceMonitor's tlsConfig says), and returns the
// status and body.
func scrapeHTTPS(url, token string) (int, string, error) {
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the ServiceMonitor's insecureSkipVerify
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

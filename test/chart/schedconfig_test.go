package chart_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

// schedulerConfig decodes the rendered KubeSchedulerConfiguration strictly (unknown fields fail).
func schedulerConfig(t testing.TB, r rendered) configv1.KubeSchedulerConfiguration {
	t.Helper()
	cm := typedAs[*corev1.ConfigMap](t, r, schedCM)
	return decodeSchedulerConfig(t, []byte(cm.Data["config.yaml"]))
}

func decodeSchedulerConfig(t testing.TB, b []byte) configv1.KubeSchedulerConfiguration {
	t.Helper()
	var c configv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		t.Fatalf("KubeSchedulerConfiguration does not decode strictly: %v\n%s", err, b)
	}
	if c.APIVersion != "kubescheduler.config.k8s.io/v1" || c.Kind != "KubeSchedulerConfiguration" {
		t.Fatalf("apiVersion/kind %s/%s", c.APIVersion, c.Kind)
	}
	return c
}

func TestSchedulerConfiguration(t *testing.T) {
	c := schedulerConfig(t, renderChart(t, nil))
	le := c.LeaderElection
	if le.LeaderElect == nil || !*le.LeaderElect || le.ResourceLock != "leases" || le.ResourceName != "hami-go-scheduler" || le.ResourceNamespace != releaseNamespace {
		t.Errorf("leaderElection %+v, want a Lease hami-go-scheduler in %s", le, releaseNamespace)
	}
	if c.ClientConnection.QPS != 50 || c.ClientConnection.Burst != 100 {
		t.Errorf("clientConnection %+v", c.ClientConnection)
	}
	if c.PercentageOfNodesToScore == nil || *c.PercentageOfNodesToScore != 100 {
		t.Errorf("percentageOfNodesToScore %v, want 100", c.PercentageOfNodesToScore)
	}
	if len(c.Profiles) != 1 || c.Profiles[0].SchedulerName == nil || *c.Profiles[0].SchedulerName != "hami-go-scheduler" {
		t.Errorf("profiles %+v", c.Profiles)
	}
	if len(c.Extenders) != 1 {
		t.Fatalf("%d extenders", len(c.Extenders))
	}
	e := c.Extenders[0]
	if e.URLPrefix != "https://127.0.0.1:8888" || e.FilterVerb != "filter" || e.PrioritizeVerb != "prioritize" || e.BindVerb != "bind" || e.PreemptVerb != "preempt" {
		t.Errorf("extender endpoints %+v", e)
	}
	// case C36: kube-scheduler presents its client certificate and checks the extender's.
	if tc := e.TLSConfig; tc == nil || tc.CertFile != "/etc/hami-go/extender-client/client.crt" || tc.KeyFile != "/etc/hami-go/extender-client/client.key" ||
		tc.CAFile != "/etc/hami-go/extender-client/ca.crt" || tc.ServerName != "127.0.0.1" || tc.Insecure {
		t.Errorf("extender tlsConfig %+v", tc)
	}
	if off := schedulerConfig(t, renderChart(t, sets(t, "scheduler.extender.tls.enabled=false"))).Extenders[0]; off.URLPrefix != "http://127.0.0.1:8888" || off.EnableHTTPS || off.TLSConfig != nil {
		t.Errorf("tls.enabled=false: extender %+v", off)
	}
	if !e.NodeCacheCapable || e.Ignorable || !e.EnableHTTPS || e.Weight != 10 || e.HTTPTimeout.Duration != 30*time.Second {
		t.Errorf("extender nodeCacheCapable %v ignorable %v https %v weight %d httpTimeout %v", e.NodeCacheCapable, e.Ignorable, e.EnableHTTPS, e.Weight, e.HTTPTimeout)
	}
	want := []configv1.ExtenderManagedResource{
		{Name: "nvidia.com/gpu", IgnoredByScheduler: false},
		{Name: "nvidia.com/gpumem", IgnoredByScheduler: true},
		{Name: "nvidia.com/gpumem-percentage", IgnoredByScheduler: true},
		{Name: "nvidia.com/gpucores", IgnoredByScheduler: true},
	}
	if !reflect.DeepEqual(e.ManagedResources, want) {
		t.Errorf("managedResources %+v\nwant %+v", e.ManagedResources, want)
	}
	if le.LeaseDuration.Duration != 0 || le.RenewDeadline.Duration != 0 || le.RetryPeriod.Duration != 0 {
		t.Errorf("leader election timings set without values: %+v", le)
	}
	le2 := schedulerConfig(t, renderChart(t, sets(t, "scheduler.leaderElection.leaseDuration=30s", "scheduler.leaderElection.renewDeadline=20s", "scheduler.leaderElection.retryPeriod=4s"))).LeaderElection
	if le2.LeaseDuration.Duration != 30*time.Second || le2.RenewDeadline.Duration != 20*time.Second || le2.RetryPeriod.Duration != 4*time.Second {
		t.Errorf("leader election timings %+v", le2)
	}
}

// The chart's scheduler configuration equals config/scheduler/kube-scheduler-config.yaml (the
// configuration shipped for running kube-scheduler by hand) for the same namespace and client rate.
func TestSchedulerConfigurationMatchesConfigFile(t *testing.T) {
	path := filepath.Join(chartDir(t), "..", "..", "config", "scheduler", "kube-scheduler-config.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	shipped := decodeSchedulerConfig(t, b)
	files, err := renderFilesIn(t, shipped.LeaderElection.ResourceNamespace, sets(t,
		"scheduler.clientConnection.qps="+ftoa(float64(shipped.ClientConnection.QPS)),
		"scheduler.clientConnection.burst="+itoa(int(shipped.ClientConnection.Burst))))
	if err != nil {
		t.Fatal(err)
	}
	got := schedulerConfig(t, decodeAll(t, files))
	if !reflect.DeepEqual(got, shipped) {
		gy, _ := yaml.Marshal(got)
		sy, _ := yaml.Marshal(shipped)
		t.Errorf("chart:\n%s\nconfig/scheduler/kube-scheduler-config.yaml:\n%s", gy, sy)
	}
}

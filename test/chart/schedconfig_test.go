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
		t.Fatalf("profiles %+v", c.Profiles)
	}
	// No plugin configuration: the extender's managedResources (ignoredByScheduler) keep the
	// per-GPU names out of NodeResourcesFit's filter, and the device plugin publishes them on
	// the node for its queueing hint, which ignores no resource (issue 28).
	if pcs := c.Profiles[0].PluginConfig; len(pcs) != 0 {
		t.Errorf("pluginConfig %+v, want none", pcs)
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

// clusterAutoscaler.schedulerConfig (issue 25): a KubeSchedulerConfiguration for Cluster
// Autoscaler whose one profile's NodeResourcesFit ignores the per-GPU names (following
// resourceNames), as the extender's managedResources make kube-scheduler do; not rendered by
// default. make autoscaler-trial ran CA with this configuration (docs/autoscaler-trial.txt).
func TestClusterAutoscalerSchedulerConfig(t *testing.T) {
	if renderChart(t, nil).has(caCM) {
		t.Errorf("%s rendered by default", caCM)
	}
	for _, tc := range []struct {
		set  []string
		want []string
	}{
		{[]string{"clusterAutoscaler.schedulerConfig=true"}, []string{"nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"}},
		{[]string{"clusterAutoscaler.schedulerConfig=true", "resourceNames.memory=example.com/vmem", "resourceNames.memoryPercentage=example.com/vmem-pct", "resourceNames.cores=example.com/vcores"},
			[]string{"example.com/vmem", "example.com/vmem-pct", "example.com/vcores"}},
	} {
		cm := typedAs[*corev1.ConfigMap](t, renderChart(t, sets(t, tc.set...)), caCM)
		if cm.Namespace != releaseNamespace {
			t.Errorf("namespace %q, want the release's %q", cm.Namespace, releaseNamespace)
		}
		c := decodeSchedulerConfig(t, []byte(cm.Data["config.yaml"]))
		if len(c.Profiles) != 1 || c.Profiles[0].SchedulerName == nil || *c.Profiles[0].SchedulerName != "default-scheduler" || len(c.Profiles[0].PluginConfig) != 1 {
			t.Fatalf("profiles %+v, want one default-scheduler profile with one plugin config", c.Profiles)
		}
		pc := c.Profiles[0].PluginConfig[0]
		var args configv1.NodeResourcesFitArgs
		if err := yaml.UnmarshalStrict(pc.Args.Raw, &args); err != nil {
			t.Fatalf("NodeResourcesFit args do not decode: %v\n%s", err, pc.Args.Raw)
		}
		if pc.Name != "NodeResourcesFit" || !reflect.DeepEqual(args.IgnoredResources, tc.want) || len(args.IgnoredResourceGroups) != 0 {
			t.Errorf("%v: plugin %s ignoredResources %q groups %q, want %q (never the nvidia.com group: the GPU count must stay counted)", tc.set, pc.Name, args.IgnoredResources, args.IgnoredResourceGroups, tc.want)
		}
	}
}

// Package scheduler holds the kube-scheduler configuration hami-go runs with; this test decodes it
// strictly into the k8s.io/kube-scheduler/config/v1 types and checks every field issue 4 requires.
package scheduler

import (
	"os"
	"testing"
	"time"

	schedv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

func TestKubeSchedulerConfig(t *testing.T) {
	raw, err := os.ReadFile("kube-scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c schedv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(raw, &c); err != nil {
		t.Fatalf("strict decode: %v", err)
	}
	if c.APIVersion != "kubescheduler.config.k8s.io/v1" || c.Kind != "KubeSchedulerConfiguration" {
		t.Fatalf("apiVersion/kind %q %q", c.APIVersion, c.Kind)
	}
	if len(c.Profiles) != 1 || c.Profiles[0].SchedulerName == nil || *c.Profiles[0].SchedulerName != "hami-go-scheduler" {
		t.Fatalf("profiles %+v", c.Profiles)
	}
	if c.PercentageOfNodesToScore == nil || *c.PercentageOfNodesToScore != 100 {
		t.Fatalf("percentageOfNodesToScore %v", c.PercentageOfNodesToScore)
	}
	if c.ClientConnection.QPS != 1000 || c.ClientConnection.Burst != 2000 {
		t.Fatalf("clientConnection %+v", c.ClientConnection)
	}
	if c.LeaderElection.LeaderElect == nil || !*c.LeaderElection.LeaderElect || c.LeaderElection.ResourceName != "hami-go-scheduler" {
		t.Fatalf("leaderElection %+v", c.LeaderElection)
	}
	if len(c.Extenders) != 1 {
		t.Fatalf("%d extenders", len(c.Extenders))
	}
	x := c.Extenders[0]
	if x.URLPrefix != "https://127.0.0.1:8888" || x.FilterVerb != "filter" || x.PrioritizeVerb != "prioritize" ||
		x.BindVerb != "bind" || x.PreemptVerb != "preempt" || x.Weight != 10 || !x.NodeCacheCapable ||
		!x.EnableHTTPS || x.Ignorable || x.HTTPTimeout.Duration != 30*time.Second {
		t.Fatalf("extender %+v", x)
	}
	// case C36: only kube-scheduler's client certificate reaches the extender's verbs.
	if tc := x.TLSConfig; tc == nil || tc.CertFile == "" || tc.KeyFile == "" || tc.CAFile == "" || tc.Insecure {
		t.Fatalf("extender tlsConfig %+v, want a client certificate and the server CA", tc)
	}
	want := map[string]bool{"nvidia.com/gpu": false, "nvidia.com/gpumem": true, "nvidia.com/gpumem-percentage": true, "nvidia.com/gpucores": true}
	if len(x.ManagedResources) != len(want) {
		t.Fatalf("managedResources %+v", x.ManagedResources)
	}
	for _, m := range x.ManagedResources {
		ignored, ok := want[m.Name]
		if !ok || m.IgnoredByScheduler != ignored {
			t.Fatalf("managed resource %+v", m)
		}
	}
}

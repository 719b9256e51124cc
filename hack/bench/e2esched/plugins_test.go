package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/hami-go/hami-go/hack/bench/e2eresult"
)

// TestPluginsSchedulerConfig: the plugins profile enables HamiGo at every extension point it
// implements, gives it its profile as schedulerName, replaces NodeResourcesFit by the build's
// HamiGoNodeResourcesFit ignoring the HAMi resources, calls no extender and runs with the plugins kubeconfig.
func TestPluginsSchedulerConfig(t *testing.T) {
	s := schedulerConfig(Config{Kubeconfig: "/k", pluginsKubeconfig: "/pk", QPS: 1000, Burst: 1000}, PluginsScheduler, "")
	var c struct {
		ClientConnection struct{ Kubeconfig string } `json:"clientConnection"`
		Profiles         []struct {
			SchedulerName string `json:"schedulerName"`
			Plugins       map[string]struct {
				Enabled  []struct{ Name string } `json:"enabled"`
				Disabled []struct{ Name string } `json:"disabled"`
			} `json:"plugins"`
			PluginConfig []struct {
				Name string         `json:"name"`
				Args map[string]any `json:"args"`
			} `json:"pluginConfig"`
		} `json:"profiles"`
		Extenders []any `json:"extenders"`
	}
	if err := yaml.Unmarshal([]byte(s), &c); err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
	if c.ClientConnection.Kubeconfig != "/pk" || len(c.Extenders) != 0 || len(c.Profiles) != 1 || c.Profiles[0].SchedulerName != PluginsScheduler {
		t.Fatalf("config:\n%s", s)
	}
	p := c.Profiles[0]
	// HamiGo runs first at every point: at postFilter and bind, where a multiPoint default would
	// run before it, the default is disabled and enabled again after it (HamiGo's Bind writes the
	// plan; DefaultBinder first would bind every pod without one).
	after := map[string]string{"postFilter": "DefaultPreemption", "bind": "DefaultBinder"}
	for _, ep := range []string{"preFilter", "filter", "postFilter", "preScore", "score", "reserve", "bind"} {
		var got, off []string
		for _, e := range p.Plugins[ep].Enabled {
			got = append(got, e.Name)
		}
		for _, e := range p.Plugins[ep].Disabled {
			off = append(off, e.Name)
		}
		want, wantOff := []string{"HamiGo"}, []string(nil)
		if d := after[ep]; d != "" {
			want, wantOff = []string{"HamiGo", d}, []string{d}
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(off, wantOff) {
			t.Errorf("%s enabled %v, disabled %v; want enabled %v, disabled %v", ep, got, off, want, wantOff)
		}
	}
	if mp := p.Plugins["multiPoint"]; len(mp.Enabled) != 1 || mp.Enabled[0].Name != "HamiGoNodeResourcesFit" || len(mp.Disabled) != 1 || mp.Disabled[0].Name != "NodeResourcesFit" {
		t.Errorf("multiPoint %+v, want NodeResourcesFit replaced by HamiGoNodeResourcesFit", mp)
	}
	if len(p.Plugins) != 8 {
		t.Errorf("extension points %d, want 8 (7 and multiPoint)", len(p.Plugins))
	}
	args := map[string]map[string]any{}
	for _, pc := range p.PluginConfig {
		args[pc.Name] = pc.Args
	}
	if args["HamiGo"]["schedulerName"] != PluginsScheduler {
		t.Errorf("HamiGo args %v", args["HamiGo"])
	}
	want := []any{"nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"}
	if !reflect.DeepEqual(args["HamiGoNodeResourcesFit"]["ignoredResources"], want) || args["NodeResourcesFit"] != nil {
		t.Errorf("HamiGoNodeResourcesFit args %v, NodeResourcesFit args %v", args["HamiGoNodeResourcesFit"], args["NodeResourcesFit"])
	}
	if b := schedulerConfig(Config{Kubeconfig: "/k", pluginsKubeconfig: "/pk"}, BaselineScheduler, ""); strings.Contains(b, "HamiGo") || !strings.Contains(b, "kubeconfig: /k\n") {
		t.Errorf("the baseline profile names HamiGo:\n%s", b)
	}
}

// TestPluginsVariant: --plugins adds the variant after the baseline; its pods are the extender
// variant's pods under the plugins profile.
func TestPluginsVariant(t *testing.T) {
	cfg := Config{Namespace: "ns", GPUMemMiB: 4000, Plugins: true, DRA: true}
	if v := variants(cfg); !reflect.DeepEqual(v, []string{"extender", "baseline", "plugins", "dra-plain", "dra-slices"}) {
		t.Fatalf("variants %v", v)
	}
	p := benchPod(cfg, e2eresult.VariantPlugins, "1", 3)
	ext := benchPod(cfg, e2eresult.VariantExtender, "1", 3)
	if p.Spec.SchedulerName != PluginsScheduler || p.Name != "plugins-1-0003" || p.Labels["hami-go.io/bench-run"] != "plugins-1" {
		t.Fatalf("pod %s scheduler %s labels %v", p.Name, p.Spec.SchedulerName, p.Labels)
	}
	if !reflect.DeepEqual(p.Spec.Containers, ext.Spec.Containers) || !reflect.DeepEqual(p.Labels["hami-go.io/ignore"], ext.Labels["hami-go.io/ignore"]) {
		t.Fatalf("plugins pod differs from the extender's: %v vs %v", p.Spec.Containers, ext.Spec.Containers)
	}
}

// TestPluginsKubeconfig: without --extender-as the variant uses --kubeconfig; with it, a copy
// whose users impersonate that user.
func TestPluginsKubeconfig(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: admin, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: admin}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Kubeconfig: kc, WorkDir: filepath.Join(dir, "work")}
	if got, err := pluginsKubeconfig(&cfg); err != nil || got != kc {
		t.Fatalf("no --extender-as: %q %v", got, err)
	}
	cfg.ExtenderAs = "system:serviceaccount:hami-go-system:hami-go-scheduler"
	got, err := pluginsKubeconfig(&cfg)
	if err != nil || got == kc {
		t.Fatalf("--extender-as: %q %v", got, err)
	}
	c, err := clientcmd.LoadFromFile(got)
	if err != nil {
		t.Fatal(err)
	}
	if u := c.AuthInfos["admin"]; u == nil || u.Impersonate != cfg.ExtenderAs || u.Token != "t" || c.CurrentContext != "x" {
		t.Fatalf("users %+v", c.AuthInfos)
	}
}

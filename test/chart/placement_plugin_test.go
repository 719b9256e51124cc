package chart_test

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/extender"
	"github.com/hami-go/hami-go/pkg/schedplugin"
)

// scheduler.placement=plugin: kube-scheduler v1.37.2 built with hami-go's framework plugin
// HamiGo (cmd/kube-scheduler-hami-go) instead of stock kube-scheduler and the extender sidecar.

// pluginSets are the values of a plugin render, plus extra.
func pluginSets(t testing.TB, extra ...string) map[string]any {
	t.Helper()
	return sets(t, append([]string{"scheduler.placement=plugin"}, extra...)...)
}

// hamiGoExtensionPoints are the profile's plugin sets HamiGo must be enabled in: every extension
// point pkg/schedplugin implements (docs/components.md).
func hamiGoExtensionPoints(p configv1.Plugins) map[string]configv1.PluginSet {
	return map[string]configv1.PluginSet{
		"preFilter": p.PreFilter, "filter": p.Filter, "postFilter": p.PostFilter, "preScore": p.PreScore,
		"score": p.Score, "reserve": p.Reserve, "bind": p.Bind,
	}
}

// hamiGoOrder is each extension point's plugin set as pluginSetText writes it. kube-scheduler runs
// a plugin enabled only at a specific point after the defaults enabled through multiPoint
// (expandMultiPointPlugins): where HamiGo must run before a default (its Bind before
// DefaultBinder, which would bind GPU pods without the planned allocation; its PostFilter before
// DefaultPreemption), that default is disabled at the point and enabled again after HamiGo.
// Checked on the binary: its log "the scheduler starts to work with those plugins" lists
// PostFilter DynamicResources, HamiGo, DefaultPreemption and Bind HamiGo, DefaultBinder.
var hamiGoOrder = map[string]string{
	"preFilter": "HamiGo", "filter": "HamiGo", "preScore": "HamiGo", "score": "HamiGo", "reserve": "HamiGo",
	"postFilter": "HamiGo,DefaultPreemption -DefaultPreemption", "bind": "HamiGo,DefaultBinder -DefaultBinder",
}

// pluginSetText is a plugin set's enabled names in order, then " -" and its disabled ones.
func pluginSetText(s configv1.PluginSet) string {
	var en, dis []string
	for _, p := range s.Enabled {
		en = append(en, p.Name)
	}
	for _, p := range s.Disabled {
		dis = append(dis, p.Name)
	}
	out := strings.Join(en, ",")
	if len(dis) > 0 {
		out += " -" + strings.Join(dis, ",")
	}
	return out
}

// pluginArgs returns the profile's pluginConfig args by plugin name.
func pluginArgs(t testing.TB, pr configv1.KubeSchedulerProfile) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, pc := range pr.PluginConfig {
		if _, dup := out[pc.Name]; dup {
			t.Fatalf("pluginConfig names %s twice", pc.Name)
		}
		out[pc.Name] = pc.Args.Raw
	}
	return out
}

// hamiGoConfig decodes the HamiGo args as kube-scheduler hands them to the plugin
// (schedplugin.ConfigFromArgs: strict, validated).
func hamiGoConfig(t testing.TB, raw []byte) extender.Config {
	t.Helper()
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("HamiGo args: %v\n%s", err, raw)
	}
	cfg, err := schedplugin.ConfigFromArgs(&runtime.Unknown{Raw: js, ContentType: runtime.ContentTypeJSON})
	if err != nil {
		t.Fatalf("HamiGo args the plugin refuses: %v\n%s", err, js)
	}
	return cfg
}

// placementFields are the extender.Config fields the chart sets through the plugin's args.
func placementFields(c extender.Config) []any {
	return []any{c.SchedulerName, c.NodePolicy, c.GPUPolicy, c.Preemption, c.LeaseNamespace, c.StaleAfter, c.Resources, c.LeaderLease}
}

// The plugin's KubeSchedulerConfiguration: the extender render's client, leader election and
// node sampling, one profile with HamiGo at each of its extension points and no extender; the
// args carry the values the extender's flags come from, so switching placement re-states no
// policy; NodeResourcesFit, replaced by the build's HamiGoNodeResourcesFit, ignores the per-GPU names (the extender's ignoredByScheduler ones).
func TestPlacementPluginSchedulerConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want extender.Config
	}{
		{"defaults", nil, extender.DefaultConfig()},
		{"gpuPolicy", []string{"scheduler.extender.gpuPolicy=spread"}, func() extender.Config {
			c := extender.DefaultConfig()
			c.GPUPolicy = device.Spread
			return c
		}()},
		{"every placement value set", []string{
			"scheduler.name=gpu-sched", "scheduler.extender.nodePolicy=spread",
			"scheduler.extender.preemption=none", "scheduler.extender.inventoryStaleAfter=2m30s", "leaseNamespace=gpu-leases",
			"resourceNames.count=example.com/vgpu", "resourceNames.memory=example.com/vmem",
			"resourceNames.memoryPercentage=example.com/vmem-pct", "resourceNames.cores=example.com/vcores",
			"scheduler.clientConnection.qps=200", "scheduler.percentageOfNodesToScore=40", "scheduler.leaderElection.leaseDuration=30s",
		}, extender.Config{
			SchedulerName: "gpu-sched", NodePolicy: device.Spread, GPUPolicy: device.Binpack,
			Preemption: extender.PreemptionNone, LeaseNamespace: "gpu-leases", StaleAfter: 150 * time.Second,
			Resources: device.ResourceNames{Count: "example.com/vgpu", Memory: "example.com/vmem", MemoryPercent: "example.com/vmem-pct", Cores: "example.com/vcores"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ext := schedulerConfig(t, renderChart(t, sets(t, tc.set...)))
			c := schedulerConfig(t, renderChart(t, pluginSets(t, tc.set...)))
			if len(c.Extenders) != 0 {
				t.Errorf("extenders %+v, want none", c.Extenders)
			}
			if !reflect.DeepEqual(c.ClientConnection, ext.ClientConnection) || !reflect.DeepEqual(c.LeaderElection, ext.LeaderElection) ||
				!reflect.DeepEqual(c.PercentageOfNodesToScore, ext.PercentageOfNodesToScore) {
				t.Errorf("clientConnection %+v leaderElection %+v percentageOfNodesToScore %v, want the extender render's %+v %+v %v",
					c.ClientConnection, c.LeaderElection, *c.PercentageOfNodesToScore, ext.ClientConnection, ext.LeaderElection, *ext.PercentageOfNodesToScore)
			}
			if len(c.Profiles) != 1 || *c.Profiles[0].SchedulerName != tc.want.SchedulerName || c.Profiles[0].Plugins == nil {
				t.Fatalf("profiles %+v, want one %s profile with plugins", c.Profiles, tc.want.SchedulerName)
			}
			pr := c.Profiles[0]
			for ep, set := range hamiGoExtensionPoints(*pr.Plugins) {
				if got, want := pluginSetText(set), hamiGoOrder[ep]; got != want {
					t.Errorf("%s: %s, want %s", ep, got, want)
				}
			}
			p := *pr.Plugins
			// NodeResourcesFit is the build's HamiGoNodeResourcesFit (cmd/kube-scheduler-hami-go
			// nodefit), at upstream's default weight.
			if mp := p.MultiPoint; pluginSetText(mp) != "HamiGoNodeResourcesFit -NodeResourcesFit" || *mp.Enabled[0].Weight != 1 {
				t.Errorf("multiPoint %s, want NodeResourcesFit replaced by HamiGoNodeResourcesFit of weight 1", pluginSetText(mp))
			}
			for _, other := range []configv1.PluginSet{p.PreEnqueue, p.QueueSort, p.Permit, p.PreBind, p.PostBind} {
				if len(other.Enabled)+len(other.Disabled) != 0 {
					t.Errorf("plugins %+v: other extension points configured", p)
				}
			}
			args := pluginArgs(t, pr)
			// The plugin follows its own kube-scheduler's leader-election Lease (the hand-over
			// hold after a takeover, as the extender sidecar's --leader-election-lease).
			want := tc.want
			want.LeaderLease = releaseNamespace + "/" + want.SchedulerName
			if got := hamiGoConfig(t, args[schedplugin.Name]); !reflect.DeepEqual(placementFields(got), placementFields(want)) {
				t.Errorf("HamiGo config %v, want %v", placementFields(got), placementFields(want))
			}
			var fit configv1.NodeResourcesFitArgs
			if err := yaml.UnmarshalStrict(args["HamiGoNodeResourcesFit"], &fit); err != nil {
				t.Fatalf("HamiGoNodeResourcesFit args: %v\n%s", err, args["HamiGoNodeResourcesFit"])
			}
			r := tc.want.Resources
			if want := []string{r.Memory, r.MemoryPercent, r.Cores}; !reflect.DeepEqual(fit.IgnoredResources, want) || len(args) != 2 {
				t.Errorf("NodeResourcesFit ignoredResources %q (pluginConfig of %d plugins), want %q (the GPU count stays counted)", fit.IgnoredResources, len(args), want)
			}
		})
	}
}

// The plugin's Deployment: one container, kube-scheduler's (command, flags, probes, port,
// resources, security context, mounts) from the plugin image; no extender sidecar, no extender
// TLS volumes.
func TestPlacementPluginDeployment(t *testing.T) {
	set := []string{"scheduler.kubeScheduler.securePort=11259", "scheduler.kubeScheduler.logLevel=4", "scheduler.kubeScheduler.extraArgs[0]=--x=y", "scheduler.kubeScheduler.resources.limits.memory=1Gi"}
	extSpec := deployment(t, renderChart(t, sets(t, set...)), schedDep).Spec.Template.Spec
	spec := deployment(t, renderChart(t, pluginSets(t, set...)), schedDep).Spec.Template.Spec
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("containers %v init containers %v, want kube-scheduler alone", names(spec.Containers), names(spec.InitContainers))
	}
	ks, want := spec.Containers[0], container(t, extSpec, "kube-scheduler")
	if ks.Image != "docker.io/hami-go/kube-scheduler-hami-go:0.1.0" || ks.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %s %s, want docker.io/hami-go/kube-scheduler-hami-go:0.1.0 (the chart's appVersion) IfNotPresent", ks.Image, ks.ImagePullPolicy)
	}
	if ks.Command[0] != "kube-scheduler-hami-go" || !reflect.DeepEqual(ks.Command[1:], want.Command[1:]) {
		t.Errorf("command %q, want kube-scheduler-hami-go and kube-scheduler's flags %q", ks.Command, want.Command[1:])
	}
	if f := flags(ks); f["--secure-port"] != "11259" || f["-v"] != "4" || f["--x"] != "y" || f["--config"] != "/etc/hami-go/scheduler/config.yaml" {
		t.Errorf("flags %v", f)
	}
	ks.Name, ks.Image, ks.Command, want.Image, want.Command = "", "", nil, "", nil
	want.Name, want.VolumeMounts = "", slices.DeleteFunc(want.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "extender-client" })
	if !reflect.DeepEqual(ks, want) {
		a, _ := yaml.Marshal(ks)
		b, _ := yaml.Marshal(want)
		t.Errorf("the plugin's kube-scheduler container differs from kube-scheduler's beyond image and command:\n%s\nwant:\n%s", a, b)
	}
	var vols []string
	for _, v := range spec.Volumes {
		vols = append(vols, v.Name)
	}
	if sort.Strings(vols); !reflect.DeepEqual(vols, []string{"config", "tmp"}) {
		t.Errorf("volumes %v, want config and tmp (no extender TLS)", vols)
	}
}

// scheduler.plugin.image: repository, tag (empty: the chart's appVersion) and pull policy of the
// plugin's container; they change nothing with placement extender.
func TestPlacementPluginImage(t *testing.T) {
	img := func(r rendered) string {
		c := container(t, deployment(t, r, schedDep).Spec.Template.Spec, "kube-scheduler")
		return c.Image + " " + string(c.ImagePullPolicy)
	}
	set := []string{"scheduler.plugin.image.repository=reg.example.com/ks", "scheduler.plugin.image.tag=dev", "scheduler.plugin.image.pullPolicy=Always"}
	if got := img(renderChart(t, pluginSets(t, set...))); got != "reg.example.com/ks:dev Always" {
		t.Errorf("plugin image %q, want reg.example.com/ks:dev Always", got)
	}
	if got := img(renderChart(t, sets(t, set...))); got != "registry.k8s.io/kube-scheduler:v1.37.2 IfNotPresent" {
		t.Errorf("placement extender: image %q, want kube-scheduler's registry.k8s.io/kube-scheduler:v1.37.2 IfNotPresent", got)
	}
	// The local cluster imports the image (hack/images) and never pulls it.
	local := valuesFile(t, "values-local.yaml")
	mergeInto(local, pluginSets(t))
	if got := img(renderChart(t, local)); got != "docker.io/hami-go/kube-scheduler-hami-go:0.1.0 Never" {
		t.Errorf("values-local.yaml: plugin image %q, want docker.io/hami-go/kube-scheduler-hami-go:0.1.0 Never", got)
	}
}

// Everything that exists for the extender alone is left out with the plugin: its TLS Secret and
// its alerts on the per-verb series (HamiGoExtenderDown, HamiGoExtenderErrors). Every other
// object renders as with the extender; RBAC byte for byte, since the plugin runs the extender's
// code under the same ServiceAccount, which the allocation policy lets write
// hami-go.io/allocation-*. The scheduler's Service and ServiceMonitor stay, on kube-scheduler's
// secure port (checkPluginScrape), and so does HamiGoNodeInventoryStale, whose
// hami_go_extender_gpu_sharers kube-scheduler's /metrics now serves; the extender's alerts give
// way to kube-scheduler-hami-go's (HamiGoSchedulerPluginDown, HamiGoSchedulerPluginErrors).
func TestPlacementPluginObjects(t *testing.T) {
	set := []string{"serviceMonitor.enabled=true", "prometheusRule.enabled=true"}
	ext, plug := renderChart(t, sets(t, set...)), renderChart(t, pluginSets(t, set...))
	var gone []string
	for _, k := range ext.keys() {
		if !plug.has(k) {
			gone = append(gone, k)
		}
	}
	want := []string{"Secret/hami-go-scheduler-extender-tls"}
	if sort.Strings(gone); !reflect.DeepEqual(gone, want) || len(plug.keys()) != len(ext.keys())-len(want) {
		t.Errorf("objects left out %v (%d of %d rendered), want %v", gone, len(plug.keys()), len(ext.keys()), want)
	}
	for _, k := range ext.keys() {
		kind := strings.SplitN(k, "/", 2)[0]
		if !strings.Contains(kind, "Role") && kind != "ServiceAccount" && kind != "ValidatingAdmissionPolicy" {
			continue
		}
		if !reflect.DeepEqual(ext.get(t, k).raw, plug.get(t, k).raw) {
			t.Errorf("%s differs between the placements", k)
		}
	}
	if c := typedAs[*corev1.ConfigMap](t, plug, schedCM).Data["config.yaml"]; strings.Contains(c, "extender-client") {
		t.Error("the plugin's configuration names the extender's client certificate")
	}
	checkPluginScrape(t, plug)
	rules, extRules := alertRules(t, ruleGroups(t, pluginSets(t, set...))), alertRules(t, ruleGroups(t, sets(t, set...)))
	for a, where := range map[string]string{
		"HamiGoExtenderDown": "extender", "HamiGoExtenderErrors": "extender",
		"HamiGoSchedulerPluginDown": "plugin", "HamiGoSchedulerPluginErrors": "plugin",
		"HamiGoNodeInventoryStale": "both", "HamiGoNodeAgentDown": "both",
	} {
		if _, ok := rules[a]; ok != (where != "extender") {
			t.Errorf("alert %s rendered with the plugin: %v, want it in placement %s", a, ok, where)
		}
		if _, ok := extRules[a]; ok != (where != "plugin") {
			t.Errorf("alert %s rendered with the extender: %v, want it in placement %s", a, ok, where)
		}
	}
	if rules["HamiGoNodeInventoryStale"] != extRules["HamiGoNodeInventoryStale"] {
		t.Errorf("HamiGoNodeInventoryStale differs between the placements: %q, %q", rules["HamiGoNodeInventoryStale"], extRules["HamiGoNodeInventoryStale"])
	}
}

// checkPluginScrape: with the plugin, the scheduler's headless Service exposes kube-scheduler's
// secure port (port https, kubeScheduler.securePort 10259) and its ServiceMonitor scrapes it over
// HTTPS with Prometheus' ServiceAccount token, skipping the check of kube-scheduler's
// self-signed serving certificate, with honorLabels (the series carry node, namespace and pod).
func checkPluginScrape(t *testing.T, r rendered) {
	t.Helper()
	svc := typedAs[*corev1.Service](t, r, "Service/hami-go-scheduler")
	if ps := svc.Spec.Ports; len(ps) != 1 || ps[0].Name != "https" || ps[0].Port != 10259 || ps[0].TargetPort.String() != "https" || svc.Spec.ClusterIP != "None" {
		t.Errorf("scheduler Service %+v (ClusterIP %q), want headless, one port https 10259 -> https", svc.Spec.Ports, svc.Spec.ClusterIP)
	}
	eps := field(t, r.get(t, "ServiceMonitor/hami-go-scheduler").raw, "spec", "endpoints").([]any)
	ep := eps[0].(map[string]any)
	tls, _ := ep["tlsConfig"].(map[string]any)
	if len(eps) != 1 || ep["port"] != "https" || ep["scheme"] != "https" || ep["path"] != "/metrics" || ep["honorLabels"] != true ||
		ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" || tls["insecureSkipVerify"] != true {
		t.Errorf("scheduler ServiceMonitor endpoints %v", eps)
	}
}

// Setting placement extender explicitly renders what the defaults render (the extender's TLS
// certificates, generated at each render, aside).
func TestPlacementExtenderIsTheDefault(t *testing.T) {
	def, err := renderFiles(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	ext, err := renderFiles(t, sets(t, "scheduler.placement=extender"))
	if err != nil {
		t.Fatal(err)
	}
	if len(def) != len(ext) {
		t.Fatalf("%d files, want the defaults' %d", len(ext), len(def))
	}
	random := map[string]bool{"hami-go/templates/scheduler-extender-tls.yaml": true, "hami-go/templates/webhook-admission.yaml": true}
	for f, body := range def {
		if !random[f] && ext[f] != body {
			t.Errorf("%s differs from the default render", f)
		}
	}
	spec := deployment(t, decodeAll(t, ext), schedDep).Spec.Template.Spec
	if len(sidecars(spec)) != 1 || container(t, spec, "kube-scheduler").Image != "registry.k8s.io/kube-scheduler:v1.37.2" {
		t.Errorf("placement extender: sidecars %v, kube-scheduler image %s", names(sidecars(spec)), container(t, spec, "kube-scheduler").Image)
	}
}

// What the plugin cannot run is refused, naming the values; a bad placement names itself.
func TestPlacementRefusals(t *testing.T) {
	for _, tc := range []struct {
		kv   string
		set  []string
		want string // "" = renders
	}{
		{"1.37.2", []string{"scheduler.placement=webhook"}, `scheduler.placement must be "extender" or "plugin", got "webhook"`},
		{"1.36.4", []string{"scheduler.placement=plugin"}, "scheduler.placement=plugin runs kube-scheduler v1.37.2 (scheduler.plugin.image), which must not be newer than the API server (Kubernetes' version skew policy); the cluster is v1.36.4"},
		{"v1.36.9-eks-1", []string{"scheduler.placement=plugin"}, "the cluster is v1.36.9"},
		{"1.37.0", []string{"scheduler.placement=plugin"}, ""},
		{"1.36.4", []string{"scheduler.placement=extender"}, ""},
		// No scheduler installed (mode dra, or scheduler.enabled false): nothing runs the plugin.
		{"1.36.4", []string{"scheduler.placement=plugin", "mode=dra"}, ""},
		{"1.36.4", []string{"scheduler.placement=plugin", "scheduler.enabled=false"}, ""},
		// kube-scheduler's DefaultPreemption through the plugin's PreFilterExtensions (case C66).
		{"1.37.2", []string{"scheduler.placement=plugin", "scheduler.extender.preemption=verb"}, ""},
		{"1.37.2", []string{"scheduler.placement=extender", "scheduler.extender.preemption=verb"}, ""},
		{"1.37.2", []string{"scheduler.placement=plugin", "scheduler.extender.nodePolicy=pack"}, `scheduler.extender.nodePolicy must be "binpack" or "spread", got "pack"`},
	} {
		t.Run(tc.kv+" "+strings.Join(tc.set, ","), func(t *testing.T) {
			_, err := renderFilesAt(t, releaseNamespace, tc.kv, sets(t, tc.set...))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("rendered, want refused with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

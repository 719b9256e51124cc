package promstack

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// manifests is a rendered chart's monitoring objects beside an object that is not one.
const manifests = `apiVersion: v1
kind: Service
metadata: {name: hami-go-webhook, namespace: hami-go-system}
spec: {ports: [{name: metrics, port: 8080}]}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: hami-go-device-plugin, namespace: hami-go-system}
spec:
  selector: {matchLabels: {app.kubernetes.io/name: hami-go, app.kubernetes.io/component: device-plugin}}
  namespaceSelector: {matchNames: [hami-go-system]}
  endpoints:
    - {port: metrics, path: /metrics, interval: 1s, honorLabels: true}
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: hami-go, namespace: hami-go-system}
spec:
  groups:
    - name: g
      rules:
        - alert: A
          expr: up == 0
          for: 1m
`

func TestParseMonitoringAndRuleFile(t *testing.T) {
	m, err := ParseMonitoring([]byte(manifests))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.ServiceMonitors) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(m.ServiceMonitors))
	}
	sm := m.ServiceMonitors[0]
	if sm.Metadata.Name != "hami-go-device-plugin" || sm.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != "device-plugin" ||
		len(sm.Spec.Endpoints) != 1 || !sm.Spec.Endpoints[0].HonorLabels || sm.Spec.Endpoints[0].Interval != "1s" {
		t.Errorf("ServiceMonitor %+v", sm)
	}
	rules, err := m.RuleFile()
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string           `json:"name"`
			Rules []map[string]any `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(rules, &f); err != nil {
		t.Fatalf("rule file: %v\n%s", err, rules)
	}
	if len(f.Groups) != 1 || f.Groups[0].Name != "g" || len(f.Groups[0].Rules) != 1 || f.Groups[0].Rules[0]["alert"] != "A" {
		t.Errorf("rule file:\n%s", rules)
	}
}

// A ServiceMonitor field the conversion does not implement is refused, not ignored.
func TestParseMonitoringRefusesUnknownFields(t *testing.T) {
	bad := strings.Replace(manifests, "honorLabels: true}", "honorLabels: true, relabelings: [{action: drop}]}", 1)
	if _, err := ParseMonitoring([]byte(bad)); err == nil || !strings.Contains(err.Error(), "relabelings") {
		t.Errorf("error %v, want one naming relabelings", err)
	}
}

func TestConfig(t *testing.T) {
	m, err := ParseMonitoring([]byte(manifests))
	if err != nil {
		t.Fatal(err)
	}
	nets := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.200.0.0/16")}
	b, err := Config(m.ServiceMonitors, ConfigOptions{Kubeconfig: "/k", ScrapeInterval: "2s", EvaluationInterval: "2s", RuleFile: "/r.yaml", AllowedNets: nets})
	if err != nil {
		t.Fatal(err)
	}
	var c promConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.ScrapeConfigs) != 1 || len(c.RuleFiles) != 1 || c.RuleFiles[0] != "/r.yaml" {
		t.Fatalf("config:\n%s", b)
	}
	sc := c.ScrapeConfigs[0]
	if sc.JobName != "serviceMonitor/hami-go-system/hami-go-device-plugin/0" || !sc.HonorLabels || sc.ScrapeInterval != "1s" ||
		sc.KubernetesSDConfigs[0].Role != "endpointslice" || sc.KubernetesSDConfigs[0].KubeconfigFile != "/k" ||
		strings.Join(sc.KubernetesSDConfigs[0].Namespaces.Names, ",") != "hami-go-system" {
		t.Errorf("scrape config %+v", sc)
	}
	// The first rule keeps only the allowed networks' addresses.
	first := sc.RelabelConfigs[0]
	if first.Action != "keep" || first.SourceLabels[0] != "__address__" {
		t.Fatalf("first relabel rule %+v, want keep on __address__", first)
	}
	re := regexp.MustCompile("^(?:" + first.Regex + ")$")
	for addr, want := range map[string]bool{
		"127.0.0.1:9400": true, "10.200.0.2:9400": true, "10.200.7.9:1": true,
		"10.96.0.10:443": false, "10.2000.0.2:1": false, "192.168.1.1:9400": false, "8.8.8.8:53": false, "10.200.0.2": false,
	} {
		if re.MatchString(addr) != want {
			t.Errorf("address %s kept = %v, want %v (regex %s)", addr, !want, want, first.Regex)
		}
	}
	// The selector's labels, the port, and the Operator's target labels.
	text := string(b)
	for _, s := range []string{
		"__meta_kubernetes_service_label_app_kubernetes_io_component", "(device-plugin);true",
		"__meta_kubernetes_endpointslice_port_name", "target_label: job", "target_label: endpoint", "replacement: metrics",
	} {
		if !strings.Contains(text, s) {
			t.Errorf("config lacks %q:\n%s", s, text)
		}
	}
	// promtool (make test-unit passes HAMI_GO_PROMTOOL) accepts it.
	if promtool := os.Getenv("HAMI_GO_PROMTOOL"); promtool != "" {
		dir := t.TempDir()
		kc := filepath.Join(dir, "kubeconfig")
		if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := Config(m.ServiceMonitors, ConfigOptions{Kubeconfig: kc, ScrapeInterval: "2s", AllowedNets: nets})
		if err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(dir, "prometheus.yml")
		if err := os.WriteFile(cfg, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(promtool, "check", "config", cfg).CombinedOutput(); err != nil {
			t.Errorf("promtool check config: %v\n%s\n%s", err, out, b)
		}
	}
}

func TestConfigRefuses(t *testing.T) {
	m, _ := ParseMonitoring([]byte(manifests))
	for name, nets := range map[string][]netip.Prefix{
		"no networks":    nil,
		"not on octets":  {netip.MustParsePrefix("10.200.0.0/12")},
		"IPv6":           {netip.MustParsePrefix("::1/128")},
		"whole internet": {netip.MustParsePrefix("0.0.0.0/0")},
	} {
		if _, err := Config(m.ServiceMonitors, ConfigOptions{Kubeconfig: "/k", AllowedNets: nets}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	sm := m.ServiceMonitors[0]
	sm.Spec.NamespaceSelector.MatchNames = nil
	if _, err := Config([]ServiceMonitor{sm}, ConfigOptions{Kubeconfig: "/k", AllowedNets: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}); err == nil {
		t.Error("a ServiceMonitor without namespaces: no error")
	}
}

// An HTTPS endpoint with a token (the chart's scheduler ServiceMonitor with placement plugin:
// kube-scheduler's secure port) becomes scheme https, insecure_skip_verify and a Bearer
// authorization read from the token file; a scheme Prometheus does not know is refused, naming it.
func TestConfigHTTPSEndpoint(t *testing.T) {
	const sm = `apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: hami-go-scheduler, namespace: hami-go-system}
spec:
  selector: {matchLabels: {app.kubernetes.io/component: scheduler}}
  namespaceSelector: {matchNames: [hami-go-system]}
  endpoints:
    - {port: https, scheme: https, bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token, tlsConfig: {insecureSkipVerify: true}}
`
	m, err := ParseMonitoring([]byte(sm))
	if err != nil {
		t.Fatal(err)
	}
	nets := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	b, err := Config(m.ServiceMonitors, ConfigOptions{Kubeconfig: "/k", AllowedNets: nets})
	if err != nil {
		t.Fatal(err)
	}
	var c promConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	sc := c.ScrapeConfigs[0]
	if sc.Scheme != "https" || sc.TLSConfig == nil || !sc.TLSConfig.InsecureSkipVerify || sc.Authorization == nil ||
		sc.Authorization.Type != "Bearer" || sc.Authorization.CredentialsFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
		t.Errorf("scrape config:\n%s", b)
	}
	m.ServiceMonitors[0].Spec.Endpoints[0].Scheme = "ftp"
	if _, err := Config(m.ServiceMonitors, ConfigOptions{Kubeconfig: "/k", AllowedNets: nets}); err == nil || !strings.Contains(err.Error(), `"ftp"`) {
		t.Errorf("scheme ftp: error %v, want one naming it", err)
	}
}

func TestLoopbackAddress(t *testing.T) {
	if _, err := LoopbackAddress("0.0.0.0:9090"); err == nil {
		t.Error("0.0.0.0: no error")
	}
	if _, err := LoopbackAddress("10.200.0.1:9090"); err == nil {
		t.Error("10.200.0.1: no error")
	}
	a, err := LoopbackAddress("127.0.0.1:0")
	if err != nil || !strings.HasPrefix(a, "127.0.0.1:") || strings.HasSuffix(a, ":0") {
		t.Errorf("127.0.0.1:0 -> %q, %v; want a port", a, err)
	}
}

func TestArgs(t *testing.T) {
	const reload = "--scrape.discovery-reload-interval="
	flag := func(args []string) string {
		for _, a := range args {
			if strings.HasPrefix(a, reload) {
				return strings.TrimPrefix(a, reload)
			}
		}
		return ""
	}
	for d, want := range map[time.Duration]string{0: "", time.Second: "1000ms", 250 * time.Millisecond: "250ms", 2 * time.Minute: "120000ms"} {
		args, err := Args(ArgsOptions{Dir: "/p", Listen: "127.0.0.1:9090", DiscoveryReloadInterval: d})
		if err != nil || flag(args) != want || args[0] != "--config.file=/p/prometheus.yml" || args[2] != "--web.listen-address=127.0.0.1:9090" {
			t.Errorf("discovery reload interval %v: %v, %v; want %s%s (none for 0: Prometheus's 5 s)", d, args, err, reload, want)
		}
	}
	for _, d := range []time.Duration{-time.Second, 1500 * time.Microsecond} {
		if _, err := Args(ArgsOptions{Dir: "/p", Listen: "127.0.0.1:9090", DiscoveryReloadInterval: d}); err == nil {
			t.Errorf("discovery reload interval %v: no error", d)
		}
	}
}

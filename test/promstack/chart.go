package promstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"

	"sigs.k8s.io/yaml"
)

// RenderOptions say how to render the chart with `helm template`.
type RenderOptions struct {
	// Helm is the helm binary (the tool cache's, hack/cluster/build-tools.sh helm).
	Helm string
	// Chart is the chart's directory (charts/hami-go).
	Chart string
	// Release is the release name (hami-go on the local cluster).
	Release string
	// Namespace is the release namespace (hami-go-system on the local cluster).
	Namespace string
	// ValuesFiles are passed as -f, in order.
	ValuesFiles []string
	// Set are key=value pairs passed as --set, in order.
	Set []string
	// KubeVersion is the cluster's Kubernetes version (--kube-version, e.g. v1.37.2): the chart
	// requires one that helm template's default is older than.
	KubeVersion string
}

// Render runs `helm template` and returns the rendered manifests (a YAML stream).
func Render(ctx context.Context, o RenderOptions) ([]byte, error) {
	args := []string{"template", o.Release, o.Chart, "--namespace", o.Namespace}
	if o.KubeVersion != "" {
		args = append(args, "--kube-version", o.KubeVersion)
	}
	for _, f := range o.ValuesFiles {
		args = append(args, "-f", f)
	}
	for _, s := range o.Set {
		args = append(args, "--set", s)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, o.Helm, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %v: %w: %s", o.Helm, args, err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// ObjectMeta is the part of an object's metadata the conversion reads.
type ObjectMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// ServiceMonitor is a monitoring.coreos.com/v1 ServiceMonitor restricted to the fields the
// conversion implements; a ServiceMonitor with any other spec field is refused (ParseMonitoring),
// so the generated configuration never silently differs from what the Operator would scrape.
type ServiceMonitor struct {
	Metadata ObjectMeta         `json:"metadata"`
	Spec     ServiceMonitorSpec `json:"spec"`
}

// ServiceMonitorSpec is a ServiceMonitor's spec (see ServiceMonitor).
type ServiceMonitorSpec struct {
	// Selector selects the Services by label (matchLabels only).
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	// NamespaceSelector names the namespaces of the Services (matchNames only).
	NamespaceSelector struct {
		MatchNames []string `json:"matchNames"`
	} `json:"namespaceSelector"`
	// Endpoints are the Services' ports to scrape.
	Endpoints []Endpoint `json:"endpoints"`
}

// Endpoint is one scraped port of a ServiceMonitor.
type Endpoint struct {
	// Port is the Service port's name.
	Port string `json:"port"`
	// Path is the metrics path (default /metrics).
	Path string `json:"path,omitempty"`
	// Interval is the scrape interval, a Prometheus duration ("30s"); empty: the global one.
	Interval string `json:"interval,omitempty"`
	// HonorLabels keeps the scraped series' own labels where they clash with the target's.
	HonorLabels bool `json:"honorLabels,omitempty"`
	// Scheme is http (the default) or https.
	Scheme string `json:"scheme,omitempty"`
	// BearerTokenFile is a file whose token each scrape sends (Authorization: Bearer).
	BearerTokenFile string `json:"bearerTokenFile,omitempty"`
	// TLSConfig is the scrape's TLS client settings (insecureSkipVerify only).
	TLSConfig *struct {
		InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
	} `json:"tlsConfig,omitempty"`
}

// Monitoring is what a rendered chart says about monitoring.
type Monitoring struct {
	// ServiceMonitors in the order of the manifests.
	ServiceMonitors []ServiceMonitor
	// RuleGroups is the PrometheusRule's spec.groups as JSON (nil without a PrometheusRule).
	RuleGroups json.RawMessage
}

// documentSeparator splits a YAML stream into documents.
var documentSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// ParseMonitoring reads the ServiceMonitors and the (at most one) PrometheusRule of a rendered
// chart. It fails on a ServiceMonitor field the conversion does not implement.
func ParseMonitoring(manifests []byte) (Monitoring, error) {
	var m Monitoring
	for _, doc := range documentSeparator.Split(string(manifests), -1) {
		var head struct {
			APIVersion string          `json:"apiVersion"`
			Kind       string          `json:"kind"`
			Metadata   ObjectMeta      `json:"metadata"`
			Spec       json.RawMessage `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return m, fmt.Errorf("manifest: %w", err)
		}
		if head.APIVersion != "monitoring.coreos.com/v1" {
			continue
		}
		switch head.Kind {
		case "ServiceMonitor":
			sm := ServiceMonitor{Metadata: head.Metadata}
			dec := json.NewDecoder(bytes.NewReader(head.Spec))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&sm.Spec); err != nil {
				return m, fmt.Errorf("ServiceMonitor %s/%s: %w (promstack implements selector.matchLabels, namespaceSelector.matchNames and endpoints' port, path, interval, honorLabels)",
					head.Metadata.Namespace, head.Metadata.Name, err)
			}
			m.ServiceMonitors = append(m.ServiceMonitors, sm)
		case "PrometheusRule":
			if m.RuleGroups != nil {
				return m, fmt.Errorf("PrometheusRule %s/%s: more than one PrometheusRule", head.Metadata.Namespace, head.Metadata.Name)
			}
			var spec struct {
				Groups json.RawMessage `json:"groups"`
			}
			if err := json.Unmarshal(head.Spec, &spec); err != nil || spec.Groups == nil {
				return m, fmt.Errorf("PrometheusRule %s/%s: no spec.groups (%v)", head.Metadata.Namespace, head.Metadata.Name, err)
			}
			m.RuleGroups = spec.Groups
		}
	}
	return m, nil
}

// RuleFile is the rule file (YAML, `groups:`) of the PrometheusRule's groups, as Prometheus and
// `promtool test rules` read it; nil when the chart rendered no PrometheusRule.
func (m Monitoring) RuleFile() ([]byte, error) {
	if m.RuleGroups == nil {
		return nil, nil
	}
	return yaml.JSONToYAML(append(append([]byte(`{"groups":`), m.RuleGroups...), '}'))
}

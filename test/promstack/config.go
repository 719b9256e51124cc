package promstack

import (
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// ConfigOptions say how to build the Prometheus configuration.
type ConfigOptions struct {
	// Kubeconfig is the file Kubernetes service discovery reads (the local cluster's, whose
	// server is the API server's address on the run's veth).
	Kubeconfig string
	// ScrapeInterval is the global scrape interval, a Prometheus duration ("2s"); a
	// ServiceMonitor endpoint's interval overrides it.
	ScrapeInterval string
	// EvaluationInterval is how often rules are evaluated, a Prometheus duration ("1s").
	EvaluationInterval string
	// RuleFile is the path of the rule file (Monitoring.RuleFile); empty: no rules.
	RuleFile string
	// AllowedNets are the only networks targets may be in (loopback and the local cluster's own
	// network namespaces). Prefix lengths must be multiples of 8 (whole octets), at least 8.
	AllowedNets []netip.Prefix
}

// promConfig is the subset of Prometheus's configuration file that Config writes.
type promConfig struct {
	Global        globalConfig   `json:"global"`
	RuleFiles     []string       `json:"rule_files,omitempty"`
	ScrapeConfigs []scrapeConfig `json:"scrape_configs"`
}

type globalConfig struct {
	ScrapeInterval     string `json:"scrape_interval,omitempty"`
	EvaluationInterval string `json:"evaluation_interval,omitempty"`
}

type scrapeConfig struct {
	JobName             string         `json:"job_name"`
	HonorLabels         bool           `json:"honor_labels"`
	ScrapeInterval      string         `json:"scrape_interval,omitempty"`
	MetricsPath         string         `json:"metrics_path"`
	Scheme              string         `json:"scheme"`
	Authorization       *authorization `json:"authorization,omitempty"`
	TLSConfig           *tlsConfig     `json:"tls_config,omitempty"`
	KubernetesSDConfigs []kubernetesSD `json:"kubernetes_sd_configs"`
	RelabelConfigs      []relabel      `json:"relabel_configs"`
}

// authorization is a scrape's Authorization header: type Bearer, the token read from
// CredentialsFile at each scrape.
type authorization struct {
	Type            string `json:"type"`
	CredentialsFile string `json:"credentials_file"`
}

type tlsConfig struct {
	InsecureSkipVerify bool `json:"insecure_skip_verify"`
}

type kubernetesSD struct {
	Role           string `json:"role"`
	KubeconfigFile string `json:"kubeconfig_file"`
	Namespaces     struct {
		Names []string `json:"names"`
	} `json:"namespaces"`
}

type relabel struct {
	SourceLabels []string `json:"source_labels,omitempty"`
	Separator    string   `json:"separator,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	TargetLabel  string   `json:"target_label,omitempty"`
	Replacement  string   `json:"replacement,omitempty"`
	Action       string   `json:"action"`
}

// Config returns a Prometheus configuration (YAML) with one scrape configuration per
// ServiceMonitor endpoint, named serviceMonitor/<namespace>/<name>/<i> as the Prometheus Operator
// names them. Each discovers the endpoints of the Services in the ServiceMonitor's namespaces
// (role endpointslice) and relabels them as the Operator does: it keeps the Services whose labels
// match the selector and the port the endpoint names, and sets the target labels namespace,
// service, pod, container, job (the Service's name) and endpoint (the port's name). Before
// anything else it keeps only addresses in o.AllowedNets.
func Config(sms []ServiceMonitor, o ConfigOptions) ([]byte, error) {
	if o.Kubeconfig == "" {
		return nil, fmt.Errorf("no kubeconfig for the Kubernetes service discovery")
	}
	allowed, err := addressRegex(o.AllowedNets)
	if err != nil {
		return nil, err
	}
	c := promConfig{Global: globalConfig{ScrapeInterval: o.ScrapeInterval, EvaluationInterval: o.EvaluationInterval}}
	if o.RuleFile != "" {
		c.RuleFiles = []string{o.RuleFile}
	}
	for _, sm := range sms {
		if len(sm.Spec.NamespaceSelector.MatchNames) == 0 {
			return nil, fmt.Errorf("ServiceMonitor %s/%s: no namespaceSelector.matchNames (the discovery would watch every namespace)", sm.Metadata.Namespace, sm.Metadata.Name)
		}
		if len(sm.Spec.Selector.MatchLabels) == 0 {
			return nil, fmt.Errorf("ServiceMonitor %s/%s: no selector.matchLabels", sm.Metadata.Namespace, sm.Metadata.Name)
		}
		for i, ep := range sm.Spec.Endpoints {
			if ep.Port == "" {
				return nil, fmt.Errorf("ServiceMonitor %s/%s: endpoint %d names no port", sm.Metadata.Namespace, sm.Metadata.Name, i)
			}
			sd := kubernetesSD{Role: "endpointslice", KubeconfigFile: o.Kubeconfig}
			sd.Namespaces.Names = sm.Spec.NamespaceSelector.MatchNames
			path := ep.Path
			if path == "" {
				path = "/metrics"
			}
			sc := scrapeConfig{
				JobName:             fmt.Sprintf("serviceMonitor/%s/%s/%d", sm.Metadata.Namespace, sm.Metadata.Name, i),
				HonorLabels:         ep.HonorLabels,
				ScrapeInterval:      ep.Interval,
				MetricsPath:         path,
				Scheme:              "http",
				KubernetesSDConfigs: []kubernetesSD{sd},
				RelabelConfigs:      relabelling(sm.Spec.Selector.MatchLabels, ep.Port, allowed),
			}
			if err := scrapeAuth(&sc, ep); err != nil {
				return nil, fmt.Errorf("ServiceMonitor %s/%s: endpoint %d: %w", sm.Metadata.Namespace, sm.Metadata.Name, i, err)
			}
			c.ScrapeConfigs = append(c.ScrapeConfigs, sc)
		}
	}
	return yaml.Marshal(c)
}

// scrapeAuth sets sc's scheme, TLS and token as the Operator does from ep's scheme, tlsConfig
// and bearerTokenFile (whose path Prometheus reads at each scrape: a Prometheus outside the
// cluster, as the local cluster's, has no ServiceAccount token there and reports the target
// down). Error: a scheme other than http or https.
func scrapeAuth(sc *scrapeConfig, ep Endpoint) error {
	switch ep.Scheme {
	case "", "http":
	case "https":
		sc.Scheme = "https"
	default:
		return fmt.Errorf("scheme %q: want http or https", ep.Scheme)
	}
	if ep.TLSConfig != nil {
		sc.TLSConfig = &tlsConfig{InsecureSkipVerify: ep.TLSConfig.InsecureSkipVerify}
	}
	if ep.BearerTokenFile != "" {
		sc.Authorization = &authorization{Type: "Bearer", CredentialsFile: ep.BearerTokenFile}
	}
	return nil
}

// relabelling is the Operator's relabelling of one ServiceMonitor endpoint (role
// endpointslice), after a first rule that keeps only the allowed addresses.
func relabelling(selector map[string]string, port, allowedAddress string) []relabel {
	rs := []relabel{{SourceLabels: []string{"__address__"}, Regex: allowedAddress, Action: "keep"}}
	keys := make([]string, 0, len(selector))
	for k := range selector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		l := sanitizeLabelName(k)
		rs = append(rs, relabel{
			SourceLabels: []string{"__meta_kubernetes_service_label_" + l, "__meta_kubernetes_service_labelpresent_" + l},
			Regex:        "(" + regexp.QuoteMeta(selector[k]) + ");true",
			Action:       "keep",
		})
	}
	target := []string{"__meta_kubernetes_endpointslice_address_target_kind", "__meta_kubernetes_endpointslice_address_target_name"}
	return append(rs,
		relabel{SourceLabels: []string{"__meta_kubernetes_endpointslice_port_name"}, Regex: regexp.QuoteMeta(port), Action: "keep"},
		relabel{SourceLabels: target, Separator: ";", Regex: "Node;(.*)", TargetLabel: "node", Replacement: "${1}", Action: "replace"},
		relabel{SourceLabels: target, Separator: ";", Regex: "Pod;(.*)", TargetLabel: "pod", Replacement: "${1}", Action: "replace"},
		relabel{SourceLabels: []string{"__meta_kubernetes_namespace"}, TargetLabel: "namespace", Action: "replace"},
		relabel{SourceLabels: []string{"__meta_kubernetes_service_name"}, TargetLabel: "service", Action: "replace"},
		relabel{SourceLabels: []string{"__meta_kubernetes_pod_name"}, TargetLabel: "pod", Action: "replace"},
		relabel{SourceLabels: []string{"__meta_kubernetes_pod_container_name"}, TargetLabel: "container", Action: "replace"},
		relabel{SourceLabels: []string{"__meta_kubernetes_service_name"}, TargetLabel: "job", Action: "replace"},
		relabel{TargetLabel: "endpoint", Replacement: port, Action: "replace"},
	)
}

// invalidLabelChars are what Kubernetes service discovery replaces with "_" in the label
// names it derives from Kubernetes labels.
var invalidLabelChars = regexp.MustCompile(`[^a-zA-Z0-9_]`)

func sanitizeLabelName(s string) string { return invalidLabelChars.ReplaceAllString(s, "_") }

// addressRegex is a relabel regex (anchored, RE2) matching "<IPv4>:<port>" for the IPv4
// addresses in nets.
func addressRegex(nets []netip.Prefix) (string, error) {
	if len(nets) == 0 {
		return "", fmt.Errorf("no allowed networks for the targets")
	}
	alts := make([]string, 0, len(nets))
	for _, n := range nets {
		if !n.Addr().Is4() || n.Bits() < 8 || n.Bits()%8 != 0 {
			return "", fmt.Errorf("allowed network %s: want an IPv4 prefix of 8, 16 or 24 bits (or 32)", n)
		}
		n = n.Masked()
		octets := strings.Split(n.Addr().String(), ".")
		parts := make([]string, 4)
		for i := range parts {
			if i < n.Bits()/8 {
				parts[i] = octets[i]
			} else {
				parts[i] = "[0-9]{1,3}"
			}
		}
		alts = append(alts, strings.Join(parts, `\.`))
	}
	return "(" + strings.Join(alts, "|") + "):[0-9]+", nil
}

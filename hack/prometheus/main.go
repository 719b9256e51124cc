// Command prometheus writes the configuration of a Prometheus that scrapes the local cluster
// (hack/cluster) as the chart's ServiceMonitors describe it, with the chart's PrometheusRule
// loaded (test/promstack). It renders charts/hami-go with values-local.yaml, the cluster's mode
// and serviceMonitor/prometheusRule enabled, writes <out>/prometheus.yml and <out>/rules.yaml,
// and prints Prometheus's command-line arguments, one a line, on stdout.
// hack/cluster/prometheus.sh (make prometheus-up) runs it and starts Prometheus with them.
//
//	go run ./hack/prometheus --out "$HAMI_GO_STATE/prometheus" --helm ~/.cache/hami-go/tools/bin/helm
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/test/promstack"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	state := envOr("HAMI_GO_STATE", "/var/lib/hami-go-cluster")
	out := flag.String("out", filepath.Join(state, "prometheus"), "directory for prometheus.yml, rules.yaml and the TSDB (data/)")
	kubeconfig := flag.String("kubeconfig", filepath.Join(state, "kubeconfig"), "kubeconfig Kubernetes service discovery uses (the local cluster's)")
	helm := flag.String("helm", "helm", "helm binary (hack/cluster/build-tools.sh helm)")
	chart := flag.String("chart", "charts/hami-go", "the chart's directory")
	values := flag.String("values", "charts/hami-go/values-local.yaml", "values file of the local cluster")
	kubeVersion := flag.String("kube-version", "v1.37.2", "the cluster's Kubernetes version, for helm template")
	mode := flag.String("mode", envOr("HAMI_GO_MODE", "deviceplugin"), "the cluster's mode (the chart's mode value): deviceplugin or dra")
	interval := flag.String("interval", "2s", "scrape and rule evaluation interval (the ServiceMonitors' interval value), a Prometheus duration")
	listen := flag.String("listen", "127.0.0.1:9090", "address of Prometheus's HTTP API: a loopback address")
	var sets, nets stringList
	flag.Var(&sets, "set", "more chart values, key=value (repeatable), e.g. prometheusRule.nodeAgentDown.for=30s")
	flag.Var(&nets, "allow-net", "a network targets may be in, IPv4 CIDR with whole octets (repeatable; default 127.0.0.0/8)")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(*out, *kubeconfig, *helm, *chart, *values, *kubeVersion, *mode, *interval, *listen, sets, nets); err != nil {
		klog.ErrorS(err, "Writing the Prometheus configuration failed")
		os.Exit(1)
	}
}

func run(out, kubeconfig, helm, chart, values, kubeVersion, mode, interval, listen string, sets, nets []string) error {
	if len(nets) == 0 {
		nets = []string{"127.0.0.0/8"}
	}
	allowed := make([]netip.Prefix, 0, len(nets))
	for _, n := range nets {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			return fmt.Errorf("--allow-net %q: %w", n, err)
		}
		allowed = append(allowed, p)
	}
	if _, err := promstack.LoopbackAddress(listen); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	manifests, err := promstack.Render(ctx, promstack.RenderOptions{
		Helm: helm, Chart: chart, Release: "hami-go", Namespace: "hami-go-system",
		ValuesFiles: []string{values}, KubeVersion: kubeVersion,
		Set: append([]string{"mode=" + mode, "serviceMonitor.enabled=true", "prometheusRule.enabled=true",
			"serviceMonitor.interval=" + interval}, sets...),
	})
	if err != nil {
		return err
	}
	mon, err := promstack.ParseMonitoring(manifests)
	if err != nil {
		return err
	}
	rules, err := mon.RuleFile()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	cfg, err := promstack.Config(mon.ServiceMonitors, promstack.ConfigOptions{
		Kubeconfig: kubeconfig, ScrapeInterval: interval, EvaluationInterval: interval,
		RuleFile: promstack.RulesPath(abs), AllowedNets: allowed,
	})
	if err != nil {
		return err
	}
	if err := promstack.WriteFiles(abs, cfg, rules); err != nil {
		return err
	}
	klog.InfoS("Wrote the Prometheus configuration", "dir", abs, "serviceMonitors", len(mon.ServiceMonitors), "mode", mode)
	args, err := promstack.Args(promstack.ArgsOptions{Dir: abs, Listen: listen})
	if err != nil {
		return err
	}
	for _, a := range args {
		fmt.Println(a)
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

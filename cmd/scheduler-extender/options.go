package main

import (
	"fmt"
	"net"
	"os"

	"github.com/spf13/pflag"

	"github.com/hami-go/hami-go/pkg/cliflags"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/extender"
)

// options are the binary's flags (docs/components.md, "scheduler-extender").
type options struct {
	// Address is where the scheduler API (/filter, /prioritize, /bind, /preempt) listens
	// (--address, host:port); keep it on loopback, where only kube-scheduler reaches it.
	Address string
	// MetricsAddress is where /metrics, /healthz and /readyz listen (--metrics-address,
	// host:port); "" serves them on Address instead.
	MetricsAddress string
	// Kubeconfig is an explicit kubeconfig path; "" = in-cluster config (--kubeconfig).
	Kubeconfig string
	// Extender is the extender's configuration.
	Extender extender.Config
	// TLS makes the API serve HTTPS and serve the scheduler verbs only to clients with a
	// certificate of the client CA (--tls-cert-file, --tls-private-key-file, --client-ca-file;
	// case C36). Empty: plain HTTP, every local process may call /bind.
	TLS extender.TLSFiles
}

// parseOptions parses args into options and validates them. Errors name the flag and value.
func parseOptions(args []string) (options, error) {
	o := options{Address: ":8888", MetricsAddress: ":9395", Extender: extender.DefaultConfig()}
	fs := pflag.NewFlagSet("scheduler-extender", pflag.ContinueOnError)
	fs.StringVar(&o.Address, "address", o.Address, "HTTP address of /filter, /prioritize, /bind, /preempt (and of /healthz, /readyz, /metrics when --metrics-address is empty)")
	fs.StringVar(&o.MetricsAddress, "metrics-address", o.MetricsAddress, "HTTP address of /metrics, /healthz, /readyz only (for Prometheus and probes); empty = serve them on --address")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "path of a kubeconfig; empty = in-cluster configuration")
	fs.StringVar(&o.Extender.SchedulerName, "scheduler-name", o.Extender.SchedulerName, "kube-scheduler profile whose pods are the extender's")
	node := fs.String("node-policy", string(o.Extender.NodePolicy), "default node policy (binpack or spread); a pod's hami.io/node-scheduler-policy annotation overrides it")
	gpu := fs.String("gpu-policy", string(o.Extender.GPUPolicy), "default GPU policy (binpack or spread); a pod's hami.io/gpu-scheduler-policy annotation overrides it")
	fs.DurationVar(&o.Extender.StaleAfter, "inventory-stale-after", o.Extender.StaleAfter, "a node whose device-plugin Lease is older than this takes no GPU pods")
	fs.StringVar(&o.Extender.LeaseNamespace, "lease-namespace", o.Extender.LeaseNamespace, "namespace of the device plugins' Leases hami-go-<node>")
	fs.StringVar(&o.Extender.LeaderLease, "leader-election-lease", "", "<namespace>/<name> of its kube-scheduler's leader-election Lease: the verbs and own preemption serve only while the kube-scheduler of this host (identity <hostname>_<uuid>) holds it, and after taking it over only once the previous leader's binds are over (bind API timeout); empty = serve whenever ready")
	fs.StringVar(&o.Extender.Identity, "leader-identity", "", "hostname of its kube-scheduler's leader identity (<hostname>_<uuid>); empty = this host's name (the sidecar shares the pod's hostname)")
	preemption := fs.String("preemption", string(o.Extender.Preemption), "which preemption runs for GPU pods: own (kube-scheduler's through the preempt verb, and hami-go's own for nodes with fragmented GPUs), verb (kube-scheduler's only) or none")
	fs.StringVar(&o.TLS.CertFile, "tls-cert-file", "", "PEM server certificate of the API (HTTPS); with --tls-private-key-file and --client-ca-file")
	fs.StringVar(&o.TLS.KeyFile, "tls-private-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&o.TLS.ClientCAFile, "client-ca-file", "", "PEM CA certificates: /filter, /prioritize, /bind and /preempt are served only to clients presenting a certificate they signed (kube-scheduler's extender tlsConfig)")
	cliflags.AddResourceNames(fs, &o.Extender.Resources)
	if err := cliflags.Parse(fs, args); err != nil {
		return o, err
	}
	var err error
	if o.Extender.NodePolicy, err = device.ParsePolicy("--node-policy", *node, ""); err != nil || *node == "" {
		return o, fmt.Errorf("--node-policy: %q is not binpack or spread", *node)
	}
	if o.Extender.GPUPolicy, err = device.ParsePolicy("--gpu-policy", *gpu, ""); err != nil || *gpu == "" {
		return o, fmt.Errorf("--gpu-policy: %q is not binpack or spread", *gpu)
	}
	o.Extender.Preemption = extender.PreemptionMode(*preemption)
	if o.Extender.LeaderLease != "" && o.Extender.Identity == "" {
		h, err := os.Hostname()
		if err != nil {
			return o, fmt.Errorf("--leader-identity is empty and the hostname is unknown: %w", err)
		}
		o.Extender.Identity = h
	}
	if o.Address == "" {
		return o, fmt.Errorf("--address is empty")
	}
	if err := o.TLS.Validate(); err != nil {
		return o, err
	}
	// Port 0 (any free port, in tests) is the only way both can be the same string.
	if _, port, _ := net.SplitHostPort(o.Address); o.MetricsAddress != "" && o.MetricsAddress == o.Address && port != "0" {
		return o, fmt.Errorf("--metrics-address %q is --address too; give it another port or leave it empty to serve /metrics on --address", o.MetricsAddress)
	}
	if err := o.Extender.Validate(); err != nil {
		return o, fmt.Errorf("invalid flags: %w", err)
	}
	return o, nil
}

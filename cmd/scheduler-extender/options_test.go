package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/extender"
)

func TestDefaults(t *testing.T) {
	o, err := parseOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	x := o.Extender
	if o.Address != ":8888" || o.MetricsAddress != ":9395" || o.Kubeconfig != "" || x.SchedulerName != "hami-go-scheduler" || x.NodePolicy != device.Binpack ||
		x.GPUPolicy != device.Binpack || x.StaleAfter != 60*time.Second || x.LeaseNamespace != "kube-node-lease" ||
		x.Resources != device.DefaultResourceNames() || x.Preemption != extender.PreemptionOwn {
		t.Fatalf("defaults %+v", o)
	}
}

// Every flag of docs/components.md lands in the config field whose effect pkg/extender tests.
func TestEveryFlag(t *testing.T) {
	o, err := parseOptions([]string{
		"--address=127.0.0.1:9999", "--metrics-address=:9001", "--kubeconfig=/tmp/kc", "--scheduler-name=gpu-sched", "--node-policy=spread",
		"--gpu-policy=spread", "--inventory-stale-after=30s", "--lease-namespace=hami", "--preemption=verb",
		"--resource-count=example.com/gpu", "--resource-memory=example.com/mem", "--resource-memory-percentage=example.com/pct",
		"--resource-cores=example.com/cores", "-v=4",
	})
	if err != nil {
		t.Fatal(err)
	}
	x := o.Extender
	if o.Address != "127.0.0.1:9999" || o.MetricsAddress != ":9001" || o.Kubeconfig != "/tmp/kc" || x.SchedulerName != "gpu-sched" || x.NodePolicy != device.Spread ||
		x.GPUPolicy != device.Spread || x.StaleAfter != 30*time.Second || x.LeaseNamespace != "hami" || x.Preemption != extender.PreemptionVerb ||
		x.Resources != (device.ResourceNames{Count: "example.com/gpu", Memory: "example.com/mem", MemoryPercent: "example.com/pct", Cores: "example.com/cores"}) {
		t.Fatalf("parsed %+v", o)
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct{ arg, want string }{
		{"--node-policy=tight", `--node-policy: "tight" is not binpack or spread`},
		{"--gpu-policy=", `--gpu-policy: "" is not binpack or spread`},
		{"--inventory-stale-after=0s", "inventory-stale-after: 0s is not positive"},
		{"--lease-namespace=", "lease-namespace is empty"},
		{"--preemption=always", `preemption: "always" is not none, verb or own`},
		{"--scheduler-name=", "scheduler-name is empty"},
		{"--resource-cores=nvidia.com/gpu", `resource names count and cores are both "nvidia.com/gpu"`},
		{"--address=", "--address is empty"},
		{"--metrics-address=:8888", `--metrics-address ":8888" is --address too`},
		{"--inventory-stale-after=soon", `invalid argument "soon"`},
		{"stray", `unexpected arguments: ["stray"]`},
	} {
		_, err := parseOptions([]string{tc.arg})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.arg, err, tc.want)
		}
	}
}

// case C36: the TLS flags land in TLSFiles, and go all together or not at all.
func TestTLSFlagsC36(t *testing.T) {
	o, err := parseOptions([]string{"--tls-cert-file=/c/tls.crt", "--tls-private-key-file=/c/tls.key", "--client-ca-file=/c/ca.crt"})
	if err != nil {
		t.Fatal(err)
	}
	if o.TLS.CertFile != "/c/tls.crt" || o.TLS.KeyFile != "/c/tls.key" || o.TLS.ClientCAFile != "/c/ca.crt" || !o.TLS.Enabled() {
		t.Fatalf("TLS = %+v", o.TLS)
	}
	if _, err := parseOptions([]string{"--tls-cert-file=/c/tls.crt", "--tls-private-key-file=/c/tls.key"}); err == nil || !strings.Contains(err.Error(), "--client-ca-file is empty") {
		t.Fatalf("TLS without client CA: %v", err)
	}
	if o, _ := parseOptions(nil); o.TLS.Enabled() {
		t.Fatalf("TLS on by default: %+v", o.TLS)
	}
}

// Issue 37 item 6: --leader-election-lease names kube-scheduler's Lease; the identity defaults
// to this host's name (the sidecar shares the pod's hostname, kube-scheduler's identity is
// <hostname>_<uuid>); a malformed Lease is refused.
func TestLeaderElectionFlags(t *testing.T) {
	o, err := parseOptions([]string{"--leader-election-lease=hami/hami-go-scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := os.Hostname()
	if o.Extender.LeaderLease != "hami/hami-go-scheduler" || o.Extender.Identity != h || h == "" {
		t.Fatalf("LeaderLease %q Identity %q; want hami/hami-go-scheduler and the hostname %q", o.Extender.LeaderLease, o.Extender.Identity, h)
	}
	if o, err = parseOptions([]string{"--leader-election-lease=hami/s", "--leader-identity=pod-a"}); err != nil || o.Extender.Identity != "pod-a" {
		t.Fatalf("--leader-identity: %+v, %v", o.Extender, err)
	}
	if o, _ = parseOptions(nil); o.Extender.LeaderLease != "" || o.Extender.Identity != "" {
		t.Fatalf("leader election on by default: %+v", o.Extender)
	}
	if _, err := parseOptions([]string{"--leader-election-lease=hami-go-scheduler"}); err == nil || !strings.Contains(err.Error(), `"hami-go-scheduler" is not <namespace>/<name>`) {
		t.Fatalf("malformed Lease: %v", err)
	}
}

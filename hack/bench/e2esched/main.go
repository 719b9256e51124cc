// Command e2esched measures end-to-end scheduling throughput on the local cluster
// (hack/cluster/up.sh) with the real kube-scheduler against simulated nodes: Node objects created
// through the API with a hami-go inventory annotation, status Ready, capacity nvidia.com/gpu 80
// and fresh Leases (the kubelet's and the device plugin's, renewed every --lease-renew), no
// kubelet. It compares, side by side and interleaved run by run:
//
//   - extender: kube-scheduler (profile hami-go-bench-scheduler, binary --kube-scheduler) calling
//     hami-go's extender (pkg/extender, in this process on 127.0.0.1) for pods asking 1 GPU with
//     --gpumem MiB (HAMi resources);
//   - baseline: the same kube-scheduler configuration without the extender (profile
//     hami-go-bench-baseline) for the same pods asking nvidia.com/gpu: 1 only (whole GPUs the
//     nodes advertise), labelled hami-go.io/ignore=true so the webhook leaves them alone;
//   - plugins (--plugins, off by default): kube-scheduler built with hami-go's framework plugin HamiGo
//     (cmd/kube-scheduler-hami-go, binary --kube-scheduler-plugins or built by the bench; profile
//     hami-go-bench-plugins, no extender) for the extender variant's pods: the same placement
//     in-process, without the extender's HTTP protocol (plugins.go). Where the binary cannot be
//     built the variant is skipped, saying why;
//   - dra-plain (--dra, --dra-pods pods per run): the baseline's configuration (profile
//     hami-go-bench-dra) for pods with one ResourceClaim (from a ResourceClaimTemplate) for one
//     whole device of DeviceClass hami-go-bench-plain: plain devices (no allowMultipleAllocations,
//     no capacities) of driver bench-plain.hami-go.io;
//   - dra-slices: the same for claims of one device of DeviceClass hami-go-bench-slices with
//     capacity memory --gpumem MiB and cores --dra-cores, from ResourceSlices of driver
//     gpu.hami-go.io built by hami-go's DRA driver's own builder (pkg/dra Devices).
//
// Each DRA variant runs with only its own driver's ResourceSlice on every simulated node (the
// other driver's deleted before; see dra.go for why). A DRA run starts its kube-scheduler only
// once kube-controller-manager has made every pod's claim, and the next run starts once those
// claims are gone again.
// No kubelet calls Allocate, so the extender's pods stay in flight: every pod is an identical
// replica (same request), so none waits for another (docs/design.md; docs/cases.md C20).
// The bench does not depend on what the cluster has installed: its pods live in a namespace of
// their own that hami-go's webhook must not serve, its extender can write as the chart's
// scheduler (--extender-as), and a dry-run check (admission.go) fails the run at once, saying
// why, where admission would rewrite or refuse its pods.
// Everything lives in namespace --namespace, on nodes bench-node-NNNN labelled
// hami-go.io/bench-node=true (as are the ResourceSlices and DeviceClasses) and tainted hami-go.io/bench=true:NoSchedule (other tests' pods never
// land there); all of it is deleted at the end, also after an error or SIGINT. The result is JSON
// (--out) read by hack/bench/report. With --cpu-profile-dir it also writes, per measured run, CPU
// profiles of this process and of kube-scheduler (Config.CPUProfileDir, profile.go).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// Config is the whole configuration of a run (flags).
type Config struct {
	// Kubeconfig is the cluster's admin kubeconfig ($HAMI_GO_STATE/kubeconfig).
	Kubeconfig string
	// KubeScheduler is the kube-scheduler binary (v1.37.2 from hack/cluster's tools).
	KubeScheduler string
	// Plugins runs the plugins variant too; KubeSchedulerPlugins is its kube-scheduler binary
	// ("": built from cmd/kube-scheduler-hami-go into WorkDir by Run).
	Plugins              bool
	KubeSchedulerPlugins string
	// pluginsKubeconfig is the kubeconfig of the plugins variant's kube-scheduler (set by Run:
	// Kubeconfig, impersonating ExtenderAs where given).
	pluginsKubeconfig string
	// Nodes is the number of simulated nodes (bench-node-0000 ...).
	Nodes int
	// Pods is the number of pods per run.
	Pods int
	// Runs is the number of runs of each variant (interleaved).
	Runs int
	// GPUMemMiB is the nvidia.com/gpumem of each extender pod, MiB, and the memory capacity
	// each dra-slices claim asks.
	GPUMemMiB int64
	// DRA runs the DRA variants (dra-plain, dra-slices) too.
	DRA bool
	// DRAPods is the number of pods per run of each DRA variant.
	DRAPods int
	// DRACores is the cores capacity (percent of a GPU) each dra-slices claim asks.
	DRACores int64
	// QPS and Burst are kube-scheduler's clientConnection (both variants), as values-local.yaml.
	QPS, Burst int
	// Namespace holds the pods: a namespace of the bench's own, which hami-go's webhook must not
	// serve (checkAdmission).
	Namespace string
	// ExtenderAs is the user the in-process extender's API client impersonates ("": the
	// kubeconfig's own): on a cluster with hami-go's chart, its scheduler ServiceAccount, the one
	// user besides the device plugin that may write hami-go.io/allocation-* (checkAdmission).
	ExtenderAs string
	// LeaseRenew is the renewal period of the simulated nodes' Leases.
	LeaseRenew time.Duration
	// RunTimeout bounds one run (all pods bound).
	RunTimeout time.Duration
	// Out is the JSON result file; WorkDir holds the schedulers' configs and logs.
	Out, WorkDir string
	// CPUProfileDir, where not "", gets two CPU profiles (pprof's gzipped protobuf, for `go tool
	// pprof`) of each measured run N ≥ 1 of each variant (warm-up runs have none):
	// <variant>-run<N>-bench.pprof of this process (the in-process extender, the bench's
	// informers and Lease renewer) and <variant>-run<N>-kube-scheduler.pprof of that run's
	// kube-scheduler. Both cover the window of the run's selfCPUSeconds and schedulerCPUSeconds:
	// from just before kube-scheduler starts (its own profile: from when its HTTPS server first
	// answers, some 0.2 s later) until all pods are bound or RunTimeout, not the pods' creation.
	// kube-scheduler then serves HTTPS on a free 127.0.0.1 port with /debug/pprof/* open to
	// anonymous requests (profile.go); that and profiling itself cost CPU, so profiled runs'
	// CPU seconds are not comparable with unprofiled ones. A profile that cannot be made is
	// logged and left out. "" (the default): no profiles, kube-scheduler with --secure-port=0.
	CPUProfileDir string
}

func main() {
	state := os.Getenv("HAMI_GO_STATE")
	if state == "" {
		state = "/var/lib/hami-go-cluster"
	}
	home, _ := os.UserHomeDir()
	cfg := Config{}
	fs := pflag.NewFlagSet("e2esched", pflag.ExitOnError)
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", filepath.Join(state, "kubeconfig"), "admin kubeconfig of the local cluster")
	fs.StringVar(&cfg.KubeScheduler, "kube-scheduler", filepath.Join(home, ".cache/hami-go/tools/bin/kube-scheduler"), "kube-scheduler binary")
	fs.BoolVar(&cfg.Plugins, "plugins", false, "also run the plugins variant: kube-scheduler built with hami-go's framework plugin HamiGo (--kube-scheduler-plugins), no extender")
	fs.StringVar(&cfg.KubeSchedulerPlugins, "kube-scheduler-plugins", "", "the plugins variant's kube-scheduler binary; empty: go build -C <repo>/cmd/kube-scheduler-hami-go into --work-dir (the variant is skipped, saying why, where that fails)")
	fs.IntVar(&cfg.Nodes, "nodes", 1000, "simulated nodes")
	fs.IntVar(&cfg.Pods, "pods", 2000, "pods per run")
	fs.IntVar(&cfg.Runs, "runs", 5, "runs of each variant")
	fs.Int64Var(&cfg.GPUMemMiB, "gpumem", 4000, "nvidia.com/gpumem of each extender pod and memory of each dra-slices claim (MiB)")
	fs.BoolVar(&cfg.DRA, "dra", true, "also run the DRA variants (dra-plain, dra-slices)")
	fs.IntVar(&cfg.DRAPods, "dra-pods", 500, "pods per run of each DRA variant")
	fs.Int64Var(&cfg.DRACores, "dra-cores", 10, "cores capacity (% of a GPU) of each dra-slices claim")
	fs.IntVar(&cfg.QPS, "qps", 1000, "kube-scheduler clientConnection.qps")
	fs.IntVar(&cfg.Burst, "burst", 1000, "kube-scheduler clientConnection.burst")
	fs.StringVar(&cfg.Namespace, "namespace", "hami-go-bench", "namespace of the pods (its own; hami-go's webhook must not serve it: the chart's webhook.excludeNamespaces)")
	fs.StringVar(&cfg.ExtenderAs, "extender-as", "", "user the in-process extender impersonates, e.g. system:serviceaccount:hami-go-system:hami-go-scheduler where hami-go's chart is installed (allocationPolicy); empty: the kubeconfig's")
	fs.DurationVar(&cfg.LeaseRenew, "lease-renew", 15*time.Second, "Lease renewal period of the simulated nodes")
	fs.DurationVar(&cfg.RunTimeout, "run-timeout", 5*time.Minute, "longest run")
	fs.StringVar(&cfg.Out, "out", "_output/bench/e2esched.json", "JSON result")
	fs.StringVar(&cfg.WorkDir, "work-dir", "_output/bench/e2esched", "schedulers' configs and logs")
	fs.StringVar(&cfg.CPUProfileDir, "cpu-profile-dir", "", "folder for CPU profiles of each measured run: <variant>-run<N>-bench.pprof (this process, in-process extender) and <variant>-run<N>-kube-scheduler.pprof, over the run's CPU-seconds window; empty: none")
	klog.InitFlags(nil)
	fs.AddGoFlagSet(flag.CommandLine)
	_ = fs.Parse(os.Args[1:])
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "e2esched:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := Run(ctx, cfg)
	if res != nil {
		if werr := writeJSON(cfg.Out, res); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		klog.ErrorS(err, "e2esched failed")
		os.Exit(1)
	}
}

// Validate reports the first bad field by flag name and value.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 9999:
		return fmt.Errorf("--nodes: %d is not in 1..9999", c.Nodes)
	case c.Pods < 10:
		return fmt.Errorf("--pods: %d is below 10", c.Pods)
	case c.Pods > c.Nodes*80:
		return fmt.Errorf("--pods: %d do not fit on %d nodes of 80 slices", c.Pods, c.Nodes)
	case c.Runs < 1:
		return fmt.Errorf("--runs: %d is below 1", c.Runs)
	case c.GPUMemMiB < 1 || c.GPUMemMiB > 81920:
		return fmt.Errorf("--gpumem: %d is not in 1..81920 MiB", c.GPUMemMiB)
	case c.QPS < 1 || c.Burst < 1:
		return fmt.Errorf("--qps/--burst: %d/%d must be positive", c.QPS, c.Burst)
	case c.LeaseRenew <= 0 || c.LeaseRenew > 30*time.Second:
		return fmt.Errorf("--lease-renew: %v is not in (0, 30s] (node leases expire after 40s)", c.LeaseRenew)
	case c.Namespace == "":
		return fmt.Errorf("--namespace is empty")
	case !c.DRA:
		return nil
	case c.DRAPods < 10:
		return fmt.Errorf("--dra-pods: %d is below 10", c.DRAPods)
	case c.DRAPods > c.Nodes*gpusPerNode:
		return fmt.Errorf("--dra-pods: %d do not fit on %d nodes of %d whole devices", c.DRAPods, c.Nodes, gpusPerNode)
	case c.DRACores < 0 || c.DRACores > 100:
		return fmt.Errorf("--dra-cores: %d is not in 0..100", c.DRACores)
	}
	return nil
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/extender"
)

const (
	// ExtenderScheduler is the profile of the kube-scheduler that calls the extender.
	ExtenderScheduler = "hami-go-bench-scheduler"
	// BaselineScheduler is the profile of the kube-scheduler without the extender.
	BaselineScheduler = "hami-go-bench-baseline"
	// DRAScheduler is the profile of the DRA variants' kube-scheduler: the baseline's
	// configuration (no extender) under a name of its own, with a log of its own.
	DRAScheduler = "hami-go-bench-dra"
	// draFeatureGates are the local cluster's feature gates (hack/cluster/lib.sh), named for the
	// DRA variants' kube-scheduler too (consumable capacity is on by default since 1.36).
	draFeatureGates = "DRAConsumableCapacity=true"
)

// startExtender runs pkg/extender on 127.0.0.1 (a free port) for profile ExtenderScheduler and
// returns its URL once its cache was rebuilt from the API.
func startExtender(ctx context.Context, cs kubernetes.Interface) (string, error) {
	cfg := extender.DefaultConfig()
	cfg.SchedulerName = ExtenderScheduler
	ext, err := extender.New(cfg, cs, nil, clock.RealClock{}, prometheus.NewRegistry())
	if err != nil {
		return "", err
	}
	go func() {
		if err := ext.Run(ctx); err != nil {
			klog.ErrorS(err, "Extender stopped")
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: ext.Handler(nil), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	for !ext.Ready() {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return "http://" + ln.Addr().String(), nil
}

// schedulerConfig is the KubeSchedulerConfiguration of every variant: the chart's settings
// (charts/hami-go/templates/scheduler-configmap.yaml: percentageOfNodesToScore 100, the
// extender's verbs and managed resources) with values-local.yaml's qps/burst; the baseline and
// the DRA variants have no extender, the plugins variant's profile enables HamiGo instead
// (pluginsProfile) and runs with cfg.pluginsKubeconfig. Leader election is off (each runs once).
func schedulerConfig(cfg Config, profile, extenderURL string) string {
	kubeconfig := cfg.Kubeconfig
	if profile == PluginsScheduler && cfg.pluginsKubeconfig != "" {
		kubeconfig = cfg.pluginsKubeconfig
	}
	s := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
percentageOfNodesToScore: 100
profiles:
  - schedulerName: %s
`, kubeconfig, cfg.QPS, cfg.Burst, profile)
	if profile == PluginsScheduler {
		s += pluginsProfile()
	}
	if extenderURL != "" {
		s += fmt.Sprintf(`extenders:
  - urlPrefix: %s
    filterVerb: filter
    prioritizeVerb: prioritize
    bindVerb: bind
    preemptVerb: preempt
    weight: 1
    enableHTTPS: false
    httpTimeout: 30s
    nodeCacheCapable: true
    ignorable: false
    managedResources:
      - name: nvidia.com/gpu
        ignoredByScheduler: false
      - name: nvidia.com/gpumem
        ignoredByScheduler: true
      - name: nvidia.com/gpumem-percentage
        ignoredByScheduler: true
      - name: nvidia.com/gpucores
        ignoredByScheduler: true
`, extenderURL)
	}
	return s
}

// startScheduler starts kube-scheduler with the given profile (config and log, appended, in
// cfg.WorkDir), serving pprof over HTTPS on 127.0.0.1:pprofPort (0: no HTTPS; schedulerArgs);
// it is interrupted when ctx ends. The returned channel delivers, once the process has exited,
// the CPU time it used (user + system, from its rusage).
func startScheduler(ctx context.Context, cfg Config, profile, extenderURL string, pprofPort int) (<-chan time.Duration, error) {
	bin := cfg.KubeScheduler
	if profile == PluginsScheduler {
		bin = cfg.KubeSchedulerPlugins
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("kube-scheduler of profile %s: %w (hack/cluster/up.sh builds --kube-scheduler; --kube-scheduler-plugins: make build-kube-scheduler)", profile, err)
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(cfg.WorkDir, profile+".yaml")
	if err := os.WriteFile(conf, []byte(schedulerConfig(cfg, profile, extenderURL)), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(cfg.WorkDir, profile+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, schedulerArgs(conf, profile, pprofPort)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start kube-scheduler %s: %w", profile, err)
	}
	cpu := make(chan time.Duration, 1)
	go func() {
		err := cmd.Wait()
		logf.Close()
		if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			klog.ErrorS(err, "kube-scheduler exited early", "profile", profile, "log", logf.Name())
		}
		var used time.Duration
		if st := cmd.ProcessState; st != nil {
			used = st.UserTime() + st.SystemTime()
		}
		cpu <- used
	}()
	return cpu, nil
}

// selfCPU is this process's CPU time so far (user + system, getrusage RUSAGE_SELF).
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

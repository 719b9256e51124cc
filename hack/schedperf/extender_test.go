package schedperf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/deviceplugin"
	"github.com/hami-go/hami-go/pkg/extender"
	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// extenderConfigFile is the scheduler config of the extender test cases; the extender listens
// on the host:port of its extenders[0].urlPrefix.
const extenderConfigFile = "config/scheduler-extender.yaml"

// extenderAddr returns the host:port the scheduler config's first extender's urlPrefix names.
func extenderAddr(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var cfg schedconfigv1.KubeSchedulerConfiguration
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	if len(cfg.Extenders) == 0 {
		return "", fmt.Errorf("%s: extenders: none configured", file)
	}
	u, err := url.Parse(cfg.Extenders[0].URLPrefix)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%s: extenders[0].urlPrefix: %q is not a URL with host:port", file, cfg.Extenders[0].URLPrefix)
	}
	return u.Host, nil
}

// startNodeAgents does what each node's device plugin does for the extender: it writes every
// node's inventory annotation and Lease hami-go-<node> with the device plugin's writers
// (deviceplugin.PublishNode, deviceplugin.RenewLease; 8 GPUs, split count 10) and renews the
// Leases every deviceplugin.LeaseRenewInterval until the workload's cleanup.
func startNodeAgents(tCtx ktesting.TContext, nodes []v1.Node) error {
	cs := tCtx.Client()
	publish := func(ctx context.Context, i int) error {
		n := nodes[i].Name
		if err := deviceplugin.RenewLease(ctx, cs, leaseNS, n, n, clock.RealClock{}, true); err != nil {
			return fmt.Errorf("lease of node %s: %w", n, err)
		}
		inv := device.Inventory{Node: n, SplitCount: splitCount, MemoryScaling: 1, GPUs: nodeGPUs(i)}
		if _, err := deviceplugin.PublishNode(ctx, cs, inv, gpuenv.EnforceHAMiCore); err != nil {
			return fmt.Errorf("inventory of node %s: %w", n, err)
		}
		return nil
	}
	if err := parallel(tCtx, len(nodes), publish); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		renewLeases(ctx, cs, leaseNS, nodes)
	}()
	tCtx.Cleanup(func() {
		cancel()
		<-done
	})
	return nil
}

// leaseNS is the namespace of the node Leases (the chart's leaseNamespace default, and
// extender.DefaultConfig's).
const leaseNS = "kube-node-lease"

// startExtenderMode runs startNodeAgents and hami-go's extender (pkg/extender, default config:
// profile hami-go-scheduler) on the port the scheduler config names. It returns once the
// extender's cache holds every node's inventory. With claims, it also runs claimAsAllocated
// (the stand-in for Allocate and the device plugin's claim writer). The workload's cleanup
// writes the extender's request durations to outDir (when set) and stops it all.
func startExtenderMode(tCtx ktesting.TContext, name string, nodes []v1.Node, outDir string, claims bool) error {
	cs := tCtx.Client()
	if err := startNodeAgents(tCtx, nodes); err != nil {
		return err
	}
	addr, err := extenderAddr(extenderConfigFile)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	ext, err := extender.New(extender.DefaultConfig(), cs, nil, clock.RealClock{}, reg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s (%s extenders[0].urlPrefix): %w", addr, extenderConfigFile, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &http.Server{Handler: ext.Handler(nil), ReadHeaderTimeout: 10 * time.Second}
	runDone, serveDone, claimsDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(claimsDone)
		if claims {
			claimAsAllocated(ctx, cs)
		}
	}()
	go func() {
		defer close(runDone)
		if err := ext.Run(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Extender stopped")
		}
	}()
	go func() {
		defer close(serveDone)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Extender server stopped")
		}
	}()
	tCtx.Cleanup(func() {
		if outDir != "" {
			if err := writeExtenderFigures(outDir, name, reg); err != nil {
				tCtx.Errorf("extender figures: %v", err)
			}
		}
		_ = srv.Close()
		cancel()
		<-serveDone
		<-runDone
		<-claimsDone
	})
	return waitInventories(tCtx, ext, nodes)
}

// renewLeases renews every node's Lease every deviceplugin.LeaseRenewInterval until ctx ends,
// as each node's device plugin does.
func renewLeases(ctx context.Context, cs kubernetes.Interface, ns string, nodes []v1.Node) {
	t := time.NewTicker(deviceplugin.LeaseRenewInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_ = parallel(ctx, len(nodes), func(ctx context.Context, i int) error {
			if err := deviceplugin.RenewLease(ctx, cs, ns, nodes[i].Name, nodes[i].Name, clock.RealClock{}, true); err != nil && ctx.Err() == nil {
				klog.V(2).InfoS("Renewing Lease", "node", nodes[i].Name, "err", err)
			}
			return nil
		})
	}
}

// waitInventories waits (up to 2 minutes) until the extender is ready and its cache holds the
// inventory of every node, so the first measured pods are not refused for a cache still filling.
// The Leases were written before the annotations.
func waitInventories(ctx context.Context, ext *extender.Extender, nodes []v1.Node) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		missing := ""
		if !ext.Ready() {
			missing = "extender not ready"
		} else {
			for _, n := range nodes {
				if len(ext.Cache().NodeGPUUsage(n.Name)) != gpusPerNode {
					missing = "no inventory of node " + n.Name
					break
				}
			}
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("extender cache after 2 minutes: %s", missing)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// VerbFigures summarises the extender's own histogram hami_go_extender_request_duration_seconds
// for one verb over a workload: calls, mean and quantiles in milliseconds (quantiles
// interpolated linearly within the histogram's buckets, as PromQL's histogram_quantile does).
type VerbFigures struct {
	Calls  uint64  `json:"calls"`
	MeanMs float64 `json:"meanMs"`
	P50Ms  float64 `json:"p50Ms"`
	P99Ms  float64 `json:"p99Ms"`
	// TotalMs is the time summed over all calls.
	TotalMs float64 `json:"totalMs"`
}

// ExtenderFigures is the file hami-go-extender_<test case>_<workload>.json.
type ExtenderFigures struct {
	// Name is "<test case>/<workload>".
	Name string `json:"name"`
	// Verbs: filter, prioritize, bind, preempt.
	Verbs map[string]VerbFigures `json:"verbs"`
	// Outcomes counts calls by "<verb>/<outcome>" (ok, refused, error, bad_request).
	Outcomes map[string]float64 `json:"outcomes"`
}

func writeExtenderFigures(dir, testName string, g prometheus.Gatherer) error {
	mfs, err := g.Gather()
	if err != nil {
		return err
	}
	parts := strings.SplitN(testName, "/", 2)
	name := parts[len(parts)-1]
	out := ExtenderFigures{Name: name, Verbs: map[string]VerbFigures{}, Outcomes: map[string]float64{}}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "hami_go_extender_request_duration_seconds":
			for _, m := range mf.GetMetric() {
				out.Verbs[label(m, "verb")] = verbFigures(m.GetHistogram())
			}
		case "hami_go_extender_requests_total":
			for _, m := range mf.GetMetric() {
				out.Outcomes[label(m, "verb")+"/"+label(m, "outcome")] = m.GetCounter().GetValue()
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	file := filepath.Join(dir, "hami-go-extender_"+strings.ReplaceAll(name, "/", "_")+".json")
	return os.WriteFile(file, b, 0o644)
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func verbFigures(h *dto.Histogram) VerbFigures {
	n := h.GetSampleCount()
	f := VerbFigures{Calls: n, TotalMs: h.GetSampleSum() * 1000}
	if n == 0 {
		return f
	}
	f.MeanMs = f.TotalMs / float64(n)
	f.P50Ms = bucketQuantile(0.5, h) * 1000
	f.P99Ms = bucketQuantile(0.99, h) * 1000
	return f
}

// bucketQuantile is the q-quantile (seconds) of a cumulative histogram, interpolated linearly
// within the bucket it falls in (lower bound 0 for the first); the last finite bound when it
// falls above it (JSON has no +Inf; the buckets reach 5 s).
func bucketQuantile(q float64, h *dto.Histogram) float64 {
	rank := q * float64(h.GetSampleCount())
	lo, prev := 0.0, uint64(0)
	for _, b := range h.GetBucket() {
		c := b.GetCumulativeCount()
		if float64(c) >= rank {
			if c == prev {
				return b.GetUpperBound()
			}
			return lo + (b.GetUpperBound()-lo)*(rank-float64(prev))/float64(c-prev)
		}
		lo, prev = b.GetUpperBound(), c
	}
	return lo
}

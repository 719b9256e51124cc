// Package schedperf runs hami-go on kube-scheduler's own benchmark harness, scheduler_perf
// (k8s.io/kubernetes v1.37.2 test/integration/scheduler_perf; issue 16): an in-process
// kube-apiserver over etcd and an in-process kube-scheduler, Node objects without kubelets, the
// workloads of config/performance-config.yaml, and scheduler_perf's metrics
// (SchedulingThroughput, attempt and algorithm durations, extension points).
//
// It is a module of its own (go.mod with the staging replace lines k8s.io/kubernetes needs), so
// the library's go.mod does not depend on k8s.io/kubernetes. hami-go's parts run against the
// test's API server from the node-update hook (hooks_test.go): the device plugin's inventory
// annotation and Leases, the extender on the port config/scheduler-extender.yaml names, and the
// DRA driver's ResourceSlices. The plugin test case (config/scheduler-plugin.yaml) runs the
// scheduler with hami-go's plugins from scheduler_perf's out-of-tree registry
// (harness.registry), as cmd/kube-scheduler-hami-go builds it.
//
// Run: hack/schedperf/run.sh (make bench-schedperf); by hand, from this directory, with etcd on
// PATH: go test -run '^$' -bench BenchmarkPerfScheduling -perf-scheduling-label-filter=performance,500Nodes -data-items-dir /tmp/out
package schedperf

import (
	"flag"
	"fmt"
	"os"
	"testing"

	perf "k8s.io/kubernetes/test/integration/scheduler_perf"
)

// configFile is the workload config, scheduler_perf's YAML format; its paths are relative to
// this directory (go test runs here).
const configFile = "config/performance-config.yaml"

// topic names the results file: BenchmarkPerfScheduling_benchmark_<topic>_<time>.json.
const topic = "hami-go"

func TestMain(m *testing.M) {
	if err := perf.InitTests(); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// dataItemsDir is scheduler_perf's -data-items-dir, where the extender's figures go too.
func dataItemsDir() string {
	if f := flag.Lookup("data-items-dir"); f != nil {
		return f.Value.String()
	}
	return ""
}

// BenchmarkPerfScheduling runs the "performance" workloads (scheduler_perf's label filter picks
// the scale: -perf-scheduling-label-filter=performance,500Nodes).
func BenchmarkPerfScheduling(b *testing.B) {
	h := newHarness(dataItemsDir())
	perf.RunBenchmarkPerfScheduling(b, configFile, topic, h.registry(), perf.WithNodeUpdateFn(h.nodesCreated))
}

// TestSchedPerf runs every test case's smallest workload (label integration-test: 4 nodes, 10
// pods) as scheduler_perf's integration test: it fails when a pod stays unscheduled, so it
// checks that the extender, its inventory and Leases, and the DRA driver's slices and claims
// place pods at all.
func TestSchedPerf(t *testing.T) {
	h := newHarness("")
	perf.RunIntegrationPerfScheduling(t, configFile, perf.WithNodeUpdateFn(h.nodesCreated))
	if got := h.extendersStarted(); got < 2 {
		t.Errorf("the extender was started for %d test cases, want 2 (HamiExtenderSlice, HamiExtenderMixedChurn)", got)
	}
	if got := h.slicesPublished(); got < 3 {
		t.Errorf("ResourceSlices were published for %d test cases, want 3 (DRAWholeGPU, HamiDRAWholeGPU, HamiDRASlice)", got)
	}
}

#!/usr/bin/env bash
# make bench-schedperf (and a step of make bench): hami-go on kube-scheduler's scheduler_perf
# (issue 16). Builds this module's test binary, runs BenchmarkPerfScheduling over
# config/performance-config.yaml at one scale, HAMI_GO_SCHEDPERF_RUNS times (every workload
# once per run, in the config's order), and leaves in $OUT:
#   BenchmarkPerfScheduling_benchmark_hami-go_<time>.json  scheduler_perf's data items, one per run
#   hami-go-extender_<test case>_<workload>.json           the extender's own request durations (last run)
#   times.json                                              build and run seconds, scale, start
#   bench.log                                               the benchmark's output (klog included)
# etcd comes from the local cluster's tool cache (hack/cluster/build-tools.sh builds it there
# when missing; scheduler_perf looks it up on PATH).
# Environment: HAMI_GO_SCHEDPERF_OUT (_output/bench/schedperf), HAMI_GO_SCHEDPERF_SCALE
# (500Nodes; also 100Nodes, 1000Nodes: the workload labels), HAMI_GO_SCHEDPERF_CASES (a
# go test -bench pattern for the test cases, default all), HAMI_GO_SCHEDPERF_RUNS (3; the report
# gives medians and each ratio's range over the runs), HAMI_GO_CACHE.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/hack/schedperf
OUT=${HAMI_GO_SCHEDPERF_OUT:-$root/_output/bench/schedperf}
SCALE=${HAMI_GO_SCHEDPERF_SCALE:-500Nodes}
CASES=${HAMI_GO_SCHEDPERF_CASES:-.}
RUNS=${HAMI_GO_SCHEDPERF_RUNS:-3}
tools=${HAMI_GO_CACHE:-$HOME/.cache/hami-go}/tools/bin
log() { printf '%s schedperf: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

case $SCALE in
  100Nodes | 500Nodes | 1000Nodes) ;;
  *) log "HAMI_GO_SCHEDPERF_SCALE: \"$SCALE\" is not 100Nodes, 500Nodes or 1000Nodes"; exit 2 ;;
esac
if ! [[ $RUNS =~ ^[1-9][0-9]*$ ]]; then
  log "HAMI_GO_SCHEDPERF_RUNS: \"$RUNS\" is not a whole number of runs, 1 or more"; exit 2
fi
if ! [[ -x $tools/etcd ]]; then
  log "no etcd in $tools; building the local cluster's tools (hack/cluster/build-tools.sh)"
  "$root/hack/cluster/build-tools.sh" >&2
fi
export PATH=$tools:$PATH
export CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations} GOFLAGS=${GOFLAGS:--mod=mod}
mkdir -p "$OUT"
rm -f "$OUT"/BenchmarkPerfScheduling_*.json "$OUT"/hami-go-extender_*.json "$OUT"/times.json
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)

log "building the scheduler_perf test binary (go test -c; a cold cache compiles k8s.io/kubernetes: many minutes)"
t0=$SECONDS
(cd "$here" && go test -c -o "$OUT/schedperf.test" .)
build_s=$((SECONDS - t0))
log "built in ${build_s}s; running test cases '$CASES' at $SCALE, $RUNS run(s) (log: $OUT/bench.log)"

t0=$SECONDS
status=0
# -benchtime=1ns: each workload once (scheduler_perf's own advice). One test-binary run per
# run: go test's -count would repeat each workload back to back within one run and
# scheduler_perf would write one data-items file for all of them. Config paths are relative to
# $here.
: >"$OUT/bench.log"
for ((run = 1; run <= RUNS; run++)); do
  log "run $run of $RUNS"
  # Not while the build, a previous step's or run's cleanup still takes the CPUs: the first
  # test case is every ratio's base.
  "$root/hack/bench/settle.sh"
  (cd "$here" && "$OUT/schedperf.test" -test.run '^$' -test.bench "^BenchmarkPerfScheduling\$/$CASES/$SCALE" \
    -test.benchtime 1ns -test.timeout 150m -perf-scheduling-label-filter "performance,$SCALE" \
    -data-items-dir "$OUT") >>"$OUT/bench.log" 2>&1 || { status=$?; break; }
  sleep 1 # data-items files are named to the second
done
run_s=$((SECONDS - t0))
grep -E '^(Benchmark|--- FAIL|FAIL|PASS|ok)' "$OUT/bench.log" | cut -c1-200 >&2 || true
printf '{"started": "%s", "scale": "%s", "runs": %d, "buildSeconds": %d, "runSeconds": %d, "exit": %d, "commit": "%s", "cpus": %d}\n' \
  "$STARTED" "$SCALE" "$RUNS" "$build_s" "$run_s" "$status" "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  "$(nproc)" >"$OUT/times.json"
log "ran in ${run_s}s (exit $status)"
exit "$status"

#!/usr/bin/env bash
# make bench: hami-go's benchmarks and performance report (issue 8). Writes docs/bench/report.md,
# its PNG plots and the raw outputs (docs/bench/go-bench.txt, docs/bench/e2esched.json).
#   1. Go benchmarks, each repeated $HAMI_GO_BENCH_COUNT times (default 5): pkg/allocator
#      (BenchmarkFilter, BenchmarkPick and BenchmarkFitSearch on one core, BenchmarkFilterScale, BenchmarkChooseVictims:
#      preemption's victim choice on one core), pkg/deviceplugin
#      BenchmarkAllocate (Allocate and the NRI plugin's decision), pkg/nri BenchmarkCreateContainerThroughNRI
#      (the NRI call through containerd's NRI adaptation), pkg/webhook BenchmarkAdmissionLatency
#      and BenchmarkPodReviewDRA (DRA mode), pkg/dra BenchmarkPrepareResourceClaims and
#      BenchmarkNodePrepareResourcesGRPC, pkg/extender BenchmarkExtenderScale (100..10,000
#      nodes; repetitions share each fleet).
#   2. End-to-end scheduling (hack/bench/e2esched) on the local cluster: 1,000 simulated nodes,
#      extender vs kube-scheduler alone, kube-scheduler built with hami-go's framework plugin
#      (cmd/kube-scheduler-hami-go; HAMI_GO_BENCH_PLUGINS=0 leaves it out), and the DRA variants (whole-device claims on plain devices,
#      claims of 4000 MiB / 10 cores on hami-go's ResourceSlices; HAMI_GO_BENCH_DRA_PODS pods per
#      run, default 500; HAMI_GO_BENCH_DRA=0 leaves them out). Independent of what the cluster has
#      installed: its pods live in namespace hami-go-bench, which values-local.yaml excludes from
#      hami-go's webhook, and its extender writes as the chart's scheduler ServiceAccount where the
#      chart runs one (e2esched checks admission first). Uses the running cluster; when none
#      answers, brings one up with hack/cluster/up.sh (HAMI_GO_SKIP_CHART=1: the chart is not
#      needed) and tears it down afterwards. On a machine without the tool cache that first builds
#      Kubernetes (20–30 min). HAMI_GO_BENCH_E2E=0 skips this part.
#   3. kube-scheduler's own benchmark harness, scheduler_perf (hack/schedperf/run.sh, issue 16):
#      in-process API server and scheduler, 500 nodes x 8 GPUs (HAMI_GO_SCHEDPERF_SCALE), the
#      extender and DRA workloads beside kube-scheduler alone. No cluster needed; the first run
#      compiles k8s.io/kubernetes' test harness (long on 2 cores). HAMI_GO_BENCH_SCHEDPERF=0 skips it.
#   4. hack/bench/report turns the outputs into the report.
#   5. hack/bench/placement (no cluster): GPU fragmentation of a seeded mixed workload, kube-scheduler's
#      DRA allocator over the driver's ResourceSlices vs the extender's binpack; appended to the
#      report as "Placement in DRA mode (fragmentation)" (docs/dra.md; raw: docs/bench/placement.md).
#   6. hack/bench/drapack on a private control plane (hack/dra-repro/controlplane.sh: its own
#      kube-apiserver, kube-scheduler with the profiles of drapack/scheduler-profiles.yaml, and
#      kube-controller-manager on 127.0.0.1:36443, state in a temporary directory; never the local
#      cluster): bursts of sliced pods created at once, GPUs touched against the fewest they fit on,
#      per device order and scheduler profile; appended as "DRA packing under concurrency"
#      (docs/dra.md "Packing under concurrency"; raw: docs/bench/drapack.md, docs/bench/drapack.json).
#      About 25 minutes on 2 cores at the default 20 bursts per row (720 bursts).
#      HAMI_GO_BENCH_DRAPACK=0 skips it; HAMI_GO_BENCH_DRAPACK_BURSTS bursts per row (default 20);
#      HAMI_GO_BENCH_DRAPACK_PORT the control plane's API port (default 36943; etcd port-4064, -4063).
# A part that fails is logged and the run goes on to the report (which shows what was measured);
# the exit status is then 1. A named Go benchmark that matches nothing counts as failed.
# hack/bench is a Go module of its own (gonum/plot and x/perf stay out of the library's go.mod;
# it uses this checkout's library through a replace): its programs are built from there into
# $OUT/bin and run from the repository root.
# Environment: HAMI_GO_BENCH_COUNT, HAMI_GO_BENCH_E2E, HAMI_GO_BENCH_SCHEDPERF, HAMI_GO_BENCH_DRAPACK(_BURSTS), HAMI_GO_BENCH_NODES
# (1000), HAMI_GO_BENCH_PODS (2000), HAMI_GO_BENCH_PLUGINS (1), HAMI_GO_BENCH_DRA (1), HAMI_GO_BENCH_DRA_PODS (500),
# HAMI_GO_BENCH_OUT (_output/bench), HAMI_GO_STATE, HAMI_GO_SCHEDPERF_* (hack/schedperf/run.sh), HAMI_GO_SETTLE_IDLE and
# HAMI_GO_SETTLE_MAX (hack/bench/settle.sh: how idle the CPUs must be before a timed part, and how long to wait).
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
COUNT=${HAMI_GO_BENCH_COUNT:-5}
OUT=${HAMI_GO_BENCH_OUT:-_output/bench}
E2E=${HAMI_GO_BENCH_E2E:-1}
SCHEDPERF=${HAMI_GO_BENCH_SCHEDPERF:-1}
STATE=${HAMI_GO_STATE:-/var/lib/hami-go-cluster}
export CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations} CGO_ENABLED=${CGO_ENABLED:-1}
START=$SECONDS
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LOAD=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
log() { printf '%s bench: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

[[ $COUNT =~ ^[1-9][0-9]*$ ]] || { log "HAMI_GO_BENCH_COUNT: \"$COUNT\" is not a positive integer"; exit 2; }
mkdir -p "$OUT" docs/bench
rm -f "$OUT/go-bench.txt" "$OUT/e2esched.json" "$OUT/placement.md" "$OUT/drapack.md" "$OUT/drapack.json" "$OUT/schedperf/times.json"

# failed: the parts that failed; the run goes on to the report (which shows what was measured)
# and exits 1 at the end when any did.
failed=()
bench() { # bench <package> <go test args...>
  local pkg=$1 part=$OUT/go-bench.part
  shift
  log "go test -bench $* $pkg"
  if ! "$GO" test -run '^$' -benchmem -timeout 60m "$@" "$pkg" | tee "$part"; then
    log "go test -bench $* $pkg failed; the report shows what was measured"
    failed+=("go test -bench $* $pkg")
  elif ! grep -q '^Benchmark' "$part"; then # a renamed benchmark matches nothing and passes
    log "go test -bench $* $pkg ran no benchmark"
    failed+=("go test -bench $* $pkg: no benchmark ran")
  fi
  cat "$part" >>"$OUT/go-bench.txt"
  rm -f "$part"
}
bench ./pkg/allocator -bench '^Benchmark(Filter|Pick|FitSearch)$' -cpu 1 -count "$COUNT"
bench ./pkg/allocator -bench '^BenchmarkFilterScale$' -count "$COUNT"
bench ./pkg/allocator -bench '^BenchmarkChooseVictims$' -cpu 1 -count "$COUNT"
bench ./pkg/deviceplugin -bench '^BenchmarkAllocate$' -count "$COUNT"
bench ./pkg/nri -bench '^BenchmarkCreateContainerThroughNRI$' -benchtime 3000x -count "$COUNT"
bench ./pkg/webhook -bench '^Benchmark(AdmissionLatency|PodReviewDRA)$' -count "$COUNT"
bench ./pkg/dra -bench '^Benchmark(PrepareResourceClaims|NodePrepareResourcesGRPC)$' -benchtime 3000x -count "$COUNT"
HAMI_GO_BENCH_REPEAT=$COUNT bench ./pkg/extender -bench '^BenchmarkExtenderScale$'
log "benchmarks done in $((SECONDS - START))s"
TOOLS=$(realpath -m "$OUT/bin")
"$GO" build -C hack/bench -o "$TOOLS/" ./e2esched ./report ./placement ./drapack
log "placement (DRA placement vs binpack)"
"$TOOLS/placement" --seeds 10 --nodes 1,4,8 --out "$OUT/placement.md" >/dev/null

if [[ ${HAMI_GO_BENCH_DRAPACK:-1} != 0 ]]; then
  log "drapack (DRA packing under concurrency, private control plane; log: $OUT/drapack.log)"
  cp_dir=$(mktemp -d /tmp/hami-go-drapack.XXXXXX)
  export DRA_REPRO_DIR=$cp_dir DRA_REPRO_SCHED_PROFILES=$PWD/hack/bench/drapack/scheduler-profiles.yaml \
    DRA_REPRO_PORT=${HAMI_GO_BENCH_DRAPACK_PORT:-36943}
  if kubeconfig=$(hack/dra-repro/controlplane.sh up 2>>"$OUT/drapack.log"); then
    "$TOOLS/drapack" --kubeconfig "$kubeconfig" --nodes 1,4 --pods 4,8,16 --bursts "${HAMI_GO_BENCH_DRAPACK_BURSTS:-20}" \
      --orders index,binpack,spread --schedulers default-scheduler,hami-go-packed \
      --out "$OUT/drapack.json" --md "$OUT/drapack.md" --work-dir "$OUT/drapack" >/dev/null 2>>"$OUT/drapack.log" ||
      log "drapack failed (see $OUT/drapack.log); the report shows what was measured"
  else
    log "the private control plane did not come up (see $OUT/drapack.log and $cp_dir)"
  fi
  hack/dra-repro/controlplane.sh down 2>>"$OUT/drapack.log" || true
  unset DRA_REPRO_DIR DRA_REPRO_SCHED_PROFILES DRA_REPRO_PORT
fi

if [[ $E2E != 0 ]]; then
  KUBECTL=${HAMI_GO_CACHE:-$HOME/.cache/hami-go}/tools/bin/kubectl
  brought_up=0
  if ! [[ -x $KUBECTL && -f $STATE/kubeconfig ]] ||
    ! "$KUBECTL" --kubeconfig "$STATE/kubeconfig" --request-timeout=10s get --raw /readyz >/dev/null 2>&1; then
    log "no local cluster answers; bringing one up (hack/cluster/up.sh, without the chart)"
    HAMI_GO_SKIP_CHART=1 hack/cluster/up.sh
    brought_up=1
  fi
  status=0
  # Where hami-go's chart runs its scheduler, the bench's extender writes as that scheduler's
  # ServiceAccount (the chart's allocation-records policy lets no other user write
  # hami-go.io/allocation-*); e2esched checks before it starts that admission leaves its pods as
  # written (its namespace hami-go-bench is excluded from the webhook by values-local.yaml).
  extender_as=
  if "$KUBECTL" --kubeconfig "$STATE/kubeconfig" -n hami-go-system get serviceaccount hami-go-scheduler >/dev/null 2>&1; then
    extender_as=system:serviceaccount:hami-go-system:hami-go-scheduler
  fi
  hack/bench/settle.sh
  "$TOOLS/e2esched" --kubeconfig "$STATE/kubeconfig" --extender-as "$extender_as" --nodes "${HAMI_GO_BENCH_NODES:-1000}" \
    --pods "${HAMI_GO_BENCH_PODS:-2000}" --dra="$([[ ${HAMI_GO_BENCH_DRA:-1} == 0 ]] && echo false || echo true)" \
    --dra-pods "${HAMI_GO_BENCH_DRA_PODS:-500}" --plugins="$([[ ${HAMI_GO_BENCH_PLUGINS:-1} == 0 ]] && echo false || echo true)" \
    --runs "$COUNT" --out "$OUT/e2esched.json" --work-dir "$OUT/e2esched" || status=$?
  if [[ $brought_up == 1 ]]; then
    hack/cluster/down.sh || true
  fi
  if [[ $status != 0 ]]; then
    log "end-to-end scheduling failed (exit $status); scheduler logs in $OUT/e2esched/; the report shows what was measured"
    failed+=("e2esched (exit $status)")
  fi
  log "end-to-end done at $((SECONDS - START))s"
fi

if [[ $SCHEDPERF != 0 ]]; then
  # hack/schedperf/run.sh waits for the machine to settle (hack/bench/settle.sh) after its build.
  HAMI_GO_SCHEDPERF_OUT=$PWD/$OUT/schedperf hack/schedperf/run.sh || {
    status=$?
    log "scheduler_perf failed (exit $status); its log: $OUT/schedperf/bench.log; the report shows what was measured"
    failed+=("scheduler_perf (exit $status)")
  }
  log "scheduler_perf done at $((SECONDS - START))s"
fi

cp "$OUT/go-bench.txt" docs/bench/go-bench.txt
rm -rf docs/bench/schedperf
if [[ -f $OUT/schedperf/times.json ]]; then
  mkdir -p docs/bench/schedperf
  cp "$OUT"/schedperf/times.json "$OUT"/schedperf/BenchmarkPerfScheduling_*.json "$OUT"/schedperf/hami-go-extender_*.json docs/bench/schedperf/ 2>/dev/null || true
fi
if [[ -f $OUT/e2esched.json ]]; then cp "$OUT/e2esched.json" docs/bench/e2esched.json; else rm -f docs/bench/e2esched.json; fi
took=$((SECONDS - START))
printf '{"started": "%s", "took": "%s", "commit": "%s", "load": "%s", "machine": "%s CPUs (%s), %s, %s"}\n' "$STARTED" \
  "$((took / 60)) min $((took % 60)) s" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$LOAD" "$(nproc)" \
  "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" "$("$GO" env GOOS)/$("$GO" env GOARCH)" "$("$GO" env GOVERSION)" >docs/bench/run.json
cp "$OUT/placement.md" docs/bench/placement.md
for f in drapack.md drapack.json; do
  if [[ -f $OUT/$f ]]; then cp "$OUT/$f" "docs/bench/$f"; fi
done
"$TOOLS/report" --in "$OUT" --out docs/bench --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  --load "$LOAD" --started "$STARTED" --took "$((took / 60)) min $((took % 60)) s"
log "report: docs/bench/report.md (took $((SECONDS - START))s)"
if ((${#failed[@]} > 0)); then
  log "failed: $(printf '%s; ' "${failed[@]}")"
  exit 1
fi
exit "${status:-0}"

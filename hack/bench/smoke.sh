#!/usr/bin/env bash
# make bench-smoke (issue 38): every Go benchmark of the main module and of the tool modules
# (test/chart, hack/images, hack/bench; $HAMI_GO_BENCH_SMOKE_MODULES) once, -benchtime 1x, so that
# a benchmark whose build, fixture or assertions broke fails make test instead of make bench, which
# no CI step ran. Once is a check, not a measurement (make bench measures).
#
# Only the packages with a benchmark are built and run (a `func Benchmark` in a _test.go file of
# the module, not of a module nested in it), so the tool modules' test-only packages cost nothing;
# a new benchmark anywhere is picked up without a change here. hack/schedperf (kube-scheduler's
# scheduler_perf: a module of its own, etcd and a long build of k8s.io/kubernetes' harness) is
# make bench's and make bench-schedperf's. Prints each module's time; exits 1 when any failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
export CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations} CGO_ENABLED=${CGO_ENABLED:-1}
MODULES=${HAMI_GO_BENCH_SMOKE_MODULES:-. test/chart hack/images hack/bench}
log() { printf '%s bench-smoke: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# bench_packages <module dir>: ./-relative packages of the module that hold a benchmark.
bench_packages() {
  (cd "$1" && git grep --untracked -l -E '^func Benchmark[A-Z_]' -- '*_test.go') | while read -r f; do
    d=$(dirname "$f") p=$(dirname "$f") nested=
    while [[ $p != . ]]; do
      if [[ -f $1/$p/go.mod ]]; then nested=1; fi
      p=$(dirname "$p")
    done
    if [[ -z $nested ]]; then echo "./$d"; fi
  done | sort -u
}

start=$SECONDS
status=0
for m in $MODULES; do
  t=$SECONDS
  mapfile -t pkgs < <(bench_packages "$m")
  if ((${#pkgs[@]} == 0)); then
    log "$m: no benchmark"
    continue
  fi
  log "$m: go test -run '^\$' -bench . -benchtime 1x ${pkgs[*]}"
  if ! (cd "$m" && "$GO" test -run '^$' -bench . -benchtime 1x -timeout 20m "${pkgs[@]}"); then
    log "$m: FAILED"
    status=1
  fi
  log "$m: $((SECONDS - t))s"
done
log "$((SECONDS - start))s in all$([[ $status == 0 ]] || echo '; some benchmark FAILED')"
exit "$status"

#!/usr/bin/env bash
# Runs hack/bench's BenchmarkDRAFilter (kube-scheduler's DRA Filter for one pod over 500 idle
# nodes, plain devices against hami-go's consumable-capacity devices, with 0, 1000 and 8000
# claims allocated elsewhere) against k8s.io/dynamic-resource-allocation v0.37.2 as released and
# against a copy with allocator-fix.patch (the proposal in README.md), and prints benchstat's
# comparison. With RUN_TEST=1 it first runs the patched module's own tests (./structured/...,
# among them every allocator's TestAllocator). With SCHEDPERF=N it then runs kube-scheduler's
# scheduler_perf (hack/schedperf) on its DRA workloads at 500 nodes, 3a (whole-GPU claims on
# plain devices) and 3c (hami-go's consumable-capacity claims), N times against each allocator,
# alternating (released, patched, released, ...; hack/bench/settle.sh before each), and prints
# each run's pods/s and the ratio 3c / 3a (minutes per run). Needs Go and the module proxy (or a
# module cache that holds hack/bench's and hack/schedperf's requirements and the module's test
# requirements).
# Environment: OUT (default /tmp/hami-go-capacity-scan), COUNT (benchmark runs per side, default
# 6), BENCHTIME (default 10x), SCHEDPERF (default 0: not run).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
OUT=${OUT:-/tmp/hami-go-capacity-scan}
COUNT=${COUNT:-6}
BENCHTIME=${BENCHTIME:-10x}
bench=$root/hack/bench
mkdir -p "$OUT"
src=$(cd "$bench" && go mod download -json k8s.io/dynamic-resource-allocation@v0.37.2 | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[[ -d $src ]] || { echo "k8s.io/dynamic-resource-allocation v0.37.2 not found in the module cache" >&2; exit 1; }
rm -rf "$OUT/dynamic-resource-allocation"
cp -r "$src" "$OUT/dynamic-resource-allocation"
chmod -R u+w "$OUT/dynamic-resource-allocation"
(cd "$OUT/dynamic-resource-allocation" && patch -p1 --quiet <"$here/allocator-fix.patch")
if [[ ${RUN_TEST:-} == 1 ]]; then
  (cd "$OUT/dynamic-resource-allocation" && GOFLAGS=-mod=mod go test -count=1 ./structured/...)
fi
# hack/bench's module with the patched copy in place of the release (-modfile: hack/bench's own
# go.mod and go.sum stay as they are; its relative replace of hami-go resolves from hack/bench).
cp "$bench/go.mod" "$OUT/go.mod"
cp "$bench/go.sum" "$OUT/go.sum"
printf '\nreplace k8s.io/dynamic-resource-allocation => %s\n' "$OUT/dynamic-resource-allocation" >>"$OUT/go.mod"
run() { # run <label> [go test flags]: the benchmark's output, each line prefixed for benchstat
  (cd "$bench" && go test "${@:2}" -run '^$' -bench '^BenchmarkDRAFilter$' -benchtime "$BENCHTIME" -count "$COUNT" ./placement/) >"$OUT/$1.txt"
}
run v0.37.2
run patched -modfile "$OUT/go.mod"
(cd "$bench" && go run golang.org/x/perf/cmd/benchstat "$OUT/v0.37.2.txt" "$OUT/patched.txt")

((${SCHEDPERF:-0} > 0)) || exit 0
# hack/schedperf's module with the patched copy: its replace of the release is rewritten.
sp=$root/hack/schedperf
sed "s#^\tk8s.io/dynamic-resource-allocation => k8s.io/dynamic-resource-allocation v0.37.2\$#\tk8s.io/dynamic-resource-allocation => $OUT/dynamic-resource-allocation#" \
  "$sp/go.mod" >"$OUT/schedperf.mod"
grep -q "dynamic-resource-allocation => $OUT/" "$OUT/schedperf.mod" || { echo "hack/schedperf/go.mod: no replace of k8s.io/dynamic-resource-allocation v0.37.2 to rewrite" >&2; exit 1; }
cp "$sp/go.sum" "$OUT/schedperf.sum"
export CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations}
(cd "$sp" && GOFLAGS=-mod=mod go test -c -o "$OUT/schedperf-v0.37.2.test" .)
(cd "$sp" && GOFLAGS="-mod=mod -modfile=$OUT/schedperf.mod" go test -c -o "$OUT/schedperf-patched.test" .)
PATH=${HAMI_GO_CACHE:-$HOME/.cache/hami-go}/tools/bin:$PATH # scheduler_perf's etcd
for ((run = 1; run <= SCHEDPERF; run++)); do
  for side in v0.37.2 patched; do
    "$root/hack/bench/settle.sh"
    mkdir -p "$OUT/schedperf-$side"
    (cd "$sp" && "$OUT/schedperf-$side.test" -test.run '^$' -test.bench '^BenchmarkPerfScheduling$/(DRAWholeGPU|HamiDRASlice)/500Nodes' \
      -test.benchtime 1ns -test.timeout 60m -perf-scheduling-label-filter performance,500Nodes -data-items-dir "$OUT/schedperf-$side") >"$OUT/schedperf-$side-$run.log" 2>&1
    awk -v side="$side" -v run="$run" '/^BenchmarkPerfScheduling\/(DRAWholeGPU|HamiDRASlice)\// {
        for (i = 1; i < NF; i++) if ($(i + 1) == "SchedulingThroughput/Average") v[$1 ~ /DRAWholeGPU/ ? "3a" : "3c"] = $i }
      END { if (v["3a"] > 0) printf "run %d %-8s 3a %6.1f pods/s  3c %6.1f pods/s  3c/3a %.2f\n", run, side, v["3a"], v["3c"], v["3c"] / v["3a"]
            else { printf "run %d %s: no result (%s)\n", run, side, FILENAME; exit 1 } }' "$OUT/schedperf-$side-$run.log"
  done
done

#!/usr/bin/env bash
# settle.sh: waits until this machine's CPUs are at least $HAMI_GO_SETTLE_IDLE percent idle
# (default 70) over a 5-second window, for at most $HAMI_GO_SETTLE_MAX seconds (default 120),
# then returns 0 either way, logging what it saw on stderr. hack/bench/run.sh calls it before
# each timed part and hack/schedperf/run.sh after its build, so that a measurement does not
# start while the previous step's cleanup still runs: on 2026-12-07 scheduler_perf's first test
# case (kube-scheduler alone) placed 81 pods/s right after e2esched, whose local cluster was
# still deleting its 1,000 simulated nodes, against 217 on a quiet machine, and every ratio to
# it was inflated 2.7x.
set -euo pipefail
want=${HAMI_GO_SETTLE_IDLE:-70}
max=${HAMI_GO_SETTLE_MAX:-120}
window=5
# idle_pct prints the percentage of CPU time spent idle or in iowait over $window seconds
# (/proc/stat's first line: user nice system idle iowait irq softirq steal ...).
idle_pct() {
  local a b
  read -r _ a1 a2 a3 a4 a5 a6 a7 a8 _ </proc/stat
  sleep "$window"
  read -r _ b1 b2 b3 b4 b5 b6 b7 b8 _ </proc/stat
  a=$((a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8))
  b=$((b1 + b2 + b3 + b4 + b5 + b6 + b7 + b8))
  if ((b == a)); then echo 100; return; fi
  echo $((100 * (b4 + b5 - a4 - a5) / (b - a)))
}
start=$SECONDS
while :; do
  idle=$(idle_pct)
  if ((idle >= want)); then
    printf '%s settle: CPUs %d%% idle over %ds (waited %ds)\n' "$(date +%H:%M:%S)" "$idle" "$window" "$((SECONDS - start))" >&2
    exit 0
  fi
  if ((SECONDS - start + window > max)); then
    printf '%s settle: CPUs still only %d%% idle after %ds (want %d%%); measuring anyway\n' "$(date +%H:%M:%S)" "$idle" "$((SECONDS - start))" "$want" >&2
    exit 0
  fi
done

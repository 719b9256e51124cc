#!/usr/bin/env bash
# cputable.sh DIR VARIANT BOUND: the CPU milliseconds per bound pod, by cause, of one e2esched
# variant from the CPU profiles `e2esched --cpu-profile-dir DIR` wrote
# (DIR/VARIANT-run<N>-{bench,kube-scheduler}.pprof, every measured run merged); BOUND is the pods
# those runs bound (e2esched's JSON, the runs' "bound" summed). Prints a Markdown table: per
# process, each cause's CPU ms per bound pod. Causes are pprof stack regexes, taken in order and
# exclusive (a sample counts for the first cause any frame of its stack matches); "other" is the
# rest. Needs `go tool pprof` (the Go toolchain). Issue 38 item 2; docs/bench/cpu.md.
set -euo pipefail
[[ $# == 3 ]] || { echo "usage: $0 DIR VARIANT BOUND" >&2; exit 2; }
dir=$1 variant=$2 bound=$3

# ms FOCUS IGNORE FILE...: the CPU ms of the samples with a frame matching FOCUS ("" = all) and
# none matching IGNORE ("" = none).
ms() {
  local focus=$1 ignore=$2 args=(-top -nodecount=1000000 -nodefraction=0 -edgefraction=0 -unit=ms)
  shift 2
  [[ -z $focus ]] || args+=("-focus=$focus")
  [[ -z $ignore ]] || args+=("-ignore=$ignore")
  go tool pprof "${args[@]}" "$@" 2>/dev/null | sed -n 's/^Showing nodes accounting for \([0-9.]*\)ms.*/\1/p' | head -1
}

# table WHO CAUSE=REGEX...: one row per cause, then other and total. A cause written
# "+NAME=REGEX" is a part of the cause before it (its samples with a frame matching REGEX too),
# shown as "of which" and not counted again.
table() {
  local who=$1 files seen="" prev_seen="" prev_re="" total sum=0 name re v
  shift
  files=("$dir/$variant"-run*-"$who".pprof)
  [[ -f ${files[0]} ]] || { echo "| $who | (no profile) | |"; return; }
  total=$(ms "" "" "${files[@]}")
  for c in "$@"; do
    name=${c%%=*} re=${c#*=}
    if [[ $name == +* ]]; then
      local all rest
      all=$(ms "$prev_re" "$prev_seen" "${files[@]}")
      rest=$(ms "$prev_re" "${prev_seen:+$prev_seen|}$re" "${files[@]}")
      awk -v w="$who" -v n="${name#+}" -v a="${all:-0}" -v r="${rest:-0}" -v b="$bound" 'BEGIN{printf "| %s | &nbsp;&nbsp;of which %s | %.2f |\n", w, n, (a-r)/b}'
      continue
    fi
    v=$(ms "$re" "$seen" "${files[@]}")
    v=${v:-0}
    sum=$(awk -v a="$sum" -v b="$v" 'BEGIN{print a+b}')
    awk -v w="$who" -v n="$name" -v v="$v" -v b="$bound" 'BEGIN{printf "| %s | %s | %.2f |\n", w, n, v/b}'
    prev_seen=$seen prev_re=$re
    seen=${seen:+$seen|}$re
  done
  awk -v w="$who" -v t="${total:-0}" -v s="$sum" -v b="$bound" 'BEGIN{printf "| %s | other | %.2f |\n| %s | **total** | **%.2f** |\n", w, (t-s)/b, w, t/b}'
}

echo "CPU ms per bound pod, $variant ($bound pods bound; profiles in $dir)"
echo
echo "| process | cause | ms/pod |"
echo "| --- | --- | ---: |"
table kube-scheduler \
  'calls to the extender (HTTPExtender)=scheduler\.\(\*HTTPExtender\)' \
  '+JSON encoding and decoding=encoding/json' \
  'garbage collection=^runtime\.(gcBgMarkWorker|bgsweep|bgscavenge)$' \
  'API requests (bind, status, events)=client-go/rest\.\(\*Request\)' \
  'informers and watch decoding=client-go/tools/cache|apimachinery/pkg/watch|client-go/rest/watch' \
  'scheduling framework and queue=k8s\.io/kubernetes/pkg/scheduler' \
  'HTTP, TLS and HTTP/2 transport=net/http|crypto/tls|golang\.org/x/net/http2'
table bench \
  'extender handlers (Filter, Prioritize, Bind)=hami-go/pkg/extender' \
  '+JSON encoding and decoding=encoding/json' \
  '+placement (pkg/allocator)=hami-go/pkg/allocator' \
  '+API writes (bind, annotations)=client-go/rest\.\(\*Request\)' \
  'garbage collection=^runtime\.(gcBgMarkWorker|bgsweep|bgscavenge)$' \
  'API requests (bind, annotations, bench writes)=client-go/rest\.\(\*Request\)' \
  'informers and watch decoding=client-go/tools/cache|apimachinery/pkg/watch|client-go/rest/watch' \
  'HTTP server and TLS=net/http|crypto/tls|golang\.org/x/net/http2'

#!/usr/bin/env bash
# Builds kube-scheduler v1.37.2 with kube-scheduler-fix.patch (the proposal in README.md) into
# $OUT/kube-scheduler, and links the unpatched kube-apiserver, kube-controller-manager and
# kubectl beside it, so that `DRA_REPRO_BIN=$OUT ./run.sh` runs the reproducer against it.
# Needs Go and the k8s.io/kubernetes v1.37.2 module (go mod download fetches it; hack/schedperf
# has it in the module cache already). With RUN_TEST=1 it also runs the plugin's
# TestGatherAllocatedState, whose new case fails without the patch.
# Environment: OUT (default /tmp/hami-go-patched-scheduler), DRA_REPRO_BIN (the unpatched
# binaries, default hack/cluster's tool cache).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
OUT=${OUT:-/tmp/hami-go-patched-scheduler}
BIN=${DRA_REPRO_BIN:-$HOME/.cache/hami-go/tools/kubernetes-v1.37.2}
mkdir -p "$OUT"
src=$(cd "$root/hack/schedperf" && go mod download -json k8s.io/kubernetes@v1.37.2 | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[[ -d $src ]] || { echo "k8s.io/kubernetes v1.37.2 not found in the module cache" >&2; exit 1; }
rm -rf "$OUT/kubernetes" "$OUT/sched"
cp -r "$src" "$OUT/kubernetes"
chmod -R u+w "$OUT/kubernetes"
(cd "$OUT/kubernetes" && patch -p1 <"$here/kube-scheduler-fix.patch")
mkdir -p "$OUT/sched"
# hack/schedperf's requirements and replacements (the staging modules at v0.37.2), k8s.io/kubernetes
# from the patched copy.
{
  echo 'module patchedsched'
  echo
  sed -n '/^go /,$p' "$root/hack/schedperf/go.mod" | grep -v 'hami-go/hami-go' |
    sed 's#^replace (#replace (\n\tk8s.io/kubernetes => ../kubernetes#'
} >"$OUT/sched/go.mod"
cp "$root/hack/schedperf/go.sum" "$OUT/sched/go.sum"
cat >"$OUT/sched/main.go" <<'GO'
// Command kube-scheduler is kube-scheduler v1.37.2 from a patched copy of k8s.io/kubernetes.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() { os.Exit(cli.Run(app.NewSchedulerCommand())) }
GO
(cd "$OUT/sched" && GOFLAGS=-mod=mod go build -o "$OUT/kube-scheduler" .)
if [[ ${RUN_TEST:-} == 1 ]]; then
  (cd "$OUT/sched" && GOFLAGS=-mod=mod go test k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources -run TestGatherAllocatedState -count=1)
fi
for b in kube-apiserver kube-controller-manager kubectl; do ln -sf "$BIN/$b" "$OUT/$b"; done
echo "$OUT"

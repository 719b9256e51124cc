#!/usr/bin/env bash
# Builds the autoscalers of the trial (trial.sh) into $HAMI_GO_CACHE/tools (default
# ~/.cache/hami-go/tools), as build-tools.sh does for the cluster's tools; a cached binary is reused.
#
#   build.sh [ca] [karpenter]   (none: both)
#
# Cluster Autoscaler (hack/tools/cluster-autoscaler): its KWOK build, the main package
# sigs.k8s.io/cluster-autoscaler/kwok (CA's core moved to kubernetes-sigs/cluster-autoscaler in
# 2026; kubernetes/autoscaler keeps the cloud providers), at the commit in CA_VERSION, with the
# Kubernetes libraries replaced by v0.37.2 like hack/tools/k8s. The Go module proxy refuses
# sigs.k8s.io/cluster-autoscaler, k8s.io/autoscaler/cluster-autoscaler and
# k8s.io/autoscaler/cluster-autoscaler/apis (403 "This module version is not available", every
# version), so the two source trees come from git: HAMI_GO_CA_GIT, a clone of
# kubernetes-sigs/cluster-autoscaler holding commit 33c3f97bf274, and HAMI_GO_AUTOSCALER_GIT, a
# clone of kubernetes/autoscaler holding eec9bc4dc1d2 (the apis module CA's go.mod pins); they
# are exported into hack/tools/cluster-autoscaler/src/ (ignored by git), which the tool module's
# replace directives name (default: the snapshots under /work/.mirror a development session may
# hold, as hack/gpu-check/build.sh). Without them CA is skipped with that reason.
# Karpenter (hack/tools/karpenter): sigs.k8s.io/karpenter/kwok v1.15.0 from the proxy; its go.mod
# names go 1.26.9, so it builds with GOTOOLCHAIN=go1.27.3 (the go command fetches that toolchain
# from the proxy once).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tools=$(cd "$here/../tools" && pwd)
cache=${HAMI_GO_CACHE:-$HOME/.cache/hami-go}/tools
CA_VERSION=$(cat "$here/CA_VERSION")
KARPENTER_VERSION=$(cat "$here/KARPENTER_VERSION")
CA_COMMIT=${CA_VERSION##*-}
APIS_COMMIT=eec9bc4dc1d2
export CGO_ENABLED=0 GOFLAGS=-mod=mod
what=("$@")
((${#what[@]})) || what=(ca karpenter)
blog() { printf '>> autoscaler build: %s\n' "$*" >&2; }

build_ca() {
  local out=$cache/cluster-autoscaler-$CA_VERSION/cluster-autoscaler src=$tools/cluster-autoscaler/src t0
  if [[ -x $out ]]; then blog "cluster-autoscaler cached ($out)"; return 0; fi
  if [[ ! -f $src/cluster-autoscaler/go.mod || ! -f $src/apis/go.mod ]]; then
    # Defaults: the snapshots a development session may hold (as hack/gpu-check/build.sh's).
    local m=/work/.mirror
    [[ -n ${HAMI_GO_CA_GIT:-} || ! -d $m/kubernetes-sigs+cluster-autoscaler/repo ]] || HAMI_GO_CA_GIT=$m/kubernetes-sigs+cluster-autoscaler/repo
    [[ -n ${HAMI_GO_AUTOSCALER_GIT:-} || ! -d $m/kubernetes+autoscaler/repo ]] || HAMI_GO_AUTOSCALER_GIT=$m/kubernetes+autoscaler/repo
    if [[ -z ${HAMI_GO_CA_GIT:-} || -z ${HAMI_GO_AUTOSCALER_GIT:-} ]]; then
      blog "cluster-autoscaler SKIPPED: the Go module proxy refuses sigs.k8s.io/cluster-autoscaler and k8s.io/autoscaler/cluster-autoscaler{,/apis} (403); set HAMI_GO_CA_GIT (kubernetes-sigs/cluster-autoscaler, commit $CA_COMMIT) and HAMI_GO_AUTOSCALER_GIT (kubernetes/autoscaler, commit $APIS_COMMIT) to git clones"
      return 0
    fi
    rm -rf "$src" && mkdir -p "$src"
    git -C "$HAMI_GO_CA_GIT" archive --prefix=cluster-autoscaler/ "$CA_COMMIT" | tar -x -C "$src"
    git -C "$HAMI_GO_AUTOSCALER_GIT" archive "$APIS_COMMIT" cluster-autoscaler/apis | tar -x -C "$src" --strip-components=1
  fi
  mkdir -p "$(dirname "$out")"
  blog "building cluster-autoscaler $CA_VERSION (kwok) - many minutes on a cold cache"
  t0=$SECONDS
  (cd "$tools/cluster-autoscaler" && go build -trimpath -ldflags "-s -w" -o "$out.tmp" sigs.k8s.io/cluster-autoscaler/kwok)
  mv "$out.tmp" "$out"
  blog "cluster-autoscaler built in $((SECONDS - t0))s: $out"
}

build_karpenter() {
  local out=$cache/karpenter-$KARPENTER_VERSION/karpenter-kwok t0
  if [[ -x $out ]]; then blog "karpenter-kwok cached ($out)"; return 0; fi
  mkdir -p "$(dirname "$out")"
  blog "building karpenter $KARPENTER_VERSION (kwok) with GOTOOLCHAIN=go1.27.3 - many minutes on a cold cache"
  t0=$SECONDS
  (cd "$tools/karpenter" && GOTOOLCHAIN=go1.27.3 go build -trimpath -ldflags "-s -w" -o "$out.tmp" sigs.k8s.io/karpenter/kwok)
  mv "$out.tmp" "$out"
  blog "karpenter-kwok built in $((SECONDS - t0))s: $out"
}

for w in "${what[@]}"; do
  case $w in
    ca) build_ca ;;
    karpenter) build_karpenter ;;
    *) echo "build.sh: unknown tool $w (ca, karpenter)" >&2; exit 2 ;;
  esac
done

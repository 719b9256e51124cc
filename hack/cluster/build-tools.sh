#!/usr/bin/env bash
# Builds the third-party programs of the local cluster from the Go module proxy and caches them
# by version outside the checkout: $HAMI_GO_CACHE (default ~/.cache/hami-go)/tools/<name>-<version>/.
# Idempotent: a cached binary is reused. Prints the bin directory on stdout's last line.
# Arguments: names of tools (programs) to build, e.g. `build-tools.sh promtool` (make test-unit's
# rule tests); none: all of them.
# Concurrent runs (CI and a developer, or up.sh while a first build runs) wait on one lock.
# Progress on stderr, one ">> " line per tool as it starts and ends ("[i/16] kubelet: built in
# 412s" or "cached") and a heartbeat every $HAMI_GO_HEARTBEAT_S seconds (default 60) while one
# builds or while another run holds the lock (progress.sh); go's own output follows on stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")/../tools" && pwd)
source "$(dirname "$0")/progress.sh"
progress_traps
cache=${HAMI_GO_CACHE:-$HOME/.cache/hami-go}/tools
K8S_VERSION=v1.37.2 ETCD_VERSION=v3.6.16 KUBERAY_VERSION=v1.5.0 HELM_VERSION=v3.22.0
CONTAINERD_VERSION=v2.4.2
# NVIDIA's Container Toolkit for the simulated GPU node (hack/simgpu, docs/simgpu.md).
TOOLKIT_VERSION=v1.20.2
# Prometheus v3 is tagged v0.3xx.y in its Go module: v0.316.0 is Prometheus 3.16.0.
PROMETHEUS_VERSION=v0.316.0 PROMETHEUS_RELEASE=3.16.0
export CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
if ! flock -n 9; then
  STEP_START="another build-tools.sh holds $cache/.build.lock; waiting" STEP_DONE="lock free" \
    step 0 16 "lock" flock 9
fi

only=("$@")
N=16 I=0   # the build lines below: 5 Kubernetes, etcd, helm, KubeRay, 3 containerd, 2 Prometheus, 3 toolkit
((${#only[@]} == 0)) || N=${#only[@]}
wanted() { ((${#only[@]} == 0)) || [[ " ${only[*]} " == *" $1 "* ]]; }
# build <dir-under-tools> <output-file> <ldflags> <package>; $TAGS: go build tags, if any.
build() {
  local mod=$1 out=$2 ldflags=$3 pkg=$4 name
  name=$(basename "$out")
  wanted "$name" || return 0
  I=$((I + 1))
  if [[ -x $out ]]; then
    step_skip "$I" "$N" "$name" "cached ($out)"
    return 0
  fi
  mkdir -p "$(dirname "$out")"
  STEP_START="building $pkg (minutes on a cold cache)" STEP_DONE=built step "$I" "$N" "$name" \
    go_build "$mod" "$out.tmp" "$ldflags" "$pkg"
  mv "$out.tmp" "$out"
}
go_build() { (cd "$here/$1" && go build -trimpath ${TAGS:+-tags "$TAGS"} -ldflags "-s -w $3" -o "$2" "$4"); }

k8s_ld="-X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"
for c in kube-apiserver kube-scheduler kubelet kube-controller-manager kubectl; do
  build k8s "$cache/kubernetes-$K8S_VERSION/$c" "$k8s_ld" "k8s.io/kubernetes/cmd/$c"
done
build etcd "$cache/etcd-$ETCD_VERSION/etcd" "" go.etcd.io/etcd/server/v3
build helm "$cache/helm-$HELM_VERSION/helm" "" helm.sh/helm/v3/cmd/helm
build kuberay "$cache/kuberay-$KUBERAY_VERSION/kuberay-operator" "" github.com/ray-project/kuberay/ray-operator
# containerd 2.x for the node (CDI and NRI; Debian's 1.6 has neither): containerd and ctr with cgo
# as upstream builds them, the runc shim static without cgo (upstream's SHIM_CGO_ENABLED=0).
ctrd_ld="-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
for c in containerd ctr; do
  CGO_ENABLED=1 build containerd "$cache/containerd-$CONTAINERD_VERSION/$c" "$ctrd_ld" "github.com/containerd/containerd/v2/cmd/$c"
done
build containerd "$cache/containerd-$CONTAINERD_VERSION/containerd-shim-runc-v2" "$ctrd_ld" github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
# Prometheus and promtool (hack/tools/prometheus): only the Kubernetes service discovery (the
# others' cloud SDKs stay out) and no web UI assets (the HTTP API works without them).
prom_ld="-X github.com/prometheus/common/version.Version=$PROMETHEUS_RELEASE"
for c in prometheus promtool; do
  TAGS=remove_all_sd,enable_kubernetes_sd build prometheus "$cache/prometheus-$PROMETHEUS_VERSION/$c" "$prom_ld" "github.com/prometheus/prometheus/cmd/$c"
done
# NVIDIA Container Toolkit: nvidia-ctk (cdi generate; go-nvml dlopens libnvidia-ml.so.1, so cgo),
# nvidia-cdi-hook (the hooks of a generated spec) and nvidia-container-runtime (mode cdi: rewrites
# the OCI spec from the CDI specs and execs runc; no libnvidia-container).
tk_ld="-X github.com/NVIDIA/nvidia-container-toolkit/internal/info.version=${TOOLKIT_VERSION#v}"
for c in nvidia-ctk nvidia-cdi-hook nvidia-container-runtime; do
  CGO_ENABLED=1 build nvidia-container-toolkit "$cache/nvidia-container-toolkit-$TOOLKIT_VERSION/$c" "$tk_ld" "github.com/NVIDIA/nvidia-container-toolkit/cmd/$c"
done
if ((I != N)); then
  echo "build-tools.sh: unknown tool among: ${only[*]}" >&2
  exit 2
fi

bin=$cache/bin
mkdir -p "$bin"
for f in "$cache"/kubernetes-$K8S_VERSION/* "$cache"/etcd-$ETCD_VERSION/etcd "$cache"/helm-$HELM_VERSION/helm "$cache"/kuberay-$KUBERAY_VERSION/kuberay-operator "$cache"/containerd-$CONTAINERD_VERSION/* "$cache"/prometheus-$PROMETHEUS_VERSION/* "$cache"/nvidia-container-toolkit-$TOOLKIT_VERSION/*; do
  [[ -x $f && $f != *.tmp ]] || continue   # not built (a run for some tools only) or unfinished
  ln -sf "$f" "$bin/$(basename "$f")"
done
echo "$bin"

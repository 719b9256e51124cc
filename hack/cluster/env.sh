#!/usr/bin/env bash
# Prints the shell lines that point a shell at the local cluster (hack/cluster/up.sh):
#
#   eval "$(hack/cluster/env.sh)"
#
# sets KUBECONFIG to $HAMI_GO_STATE/kubeconfig (root-only, like the cluster) and HAMI_GO_STATE,
# and puts the cached tools' bin (kubectl v1.37.2, helm, etcd ...; hack/cluster/build-tools.sh) and
# this checkout's bin/ (`make build`: the binaries and kubectl-hami_go) first on PATH. `make shell`
# opens a subshell with the same. Warnings (cluster not up, tools not built) go to stderr.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
tools=${HAMI_GO_CACHE:-$HOME/.cache/hami-go}/tools/bin
[[ -x $tools/kubectl ]] || log "WARNING: no kubectl in $tools yet (make cluster-up builds it)"
[[ -r $KUBECONFIG_FILE ]] || log "WARNING: cannot read $KUBECONFIG_FILE: is the cluster up (make cluster-up) and are you root?"
printf 'export KUBECONFIG=%q\n' "$KUBECONFIG_FILE"
printf 'export HAMI_GO_STATE=%q\n' "$STATE"
printf 'export PATH=%q:%q:"$PATH"\n' "$tools" "$REPO_ROOT/bin"

#!/usr/bin/env bash
# Brings up the local cluster (idempotent; re-run it freely): etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler as host processes; one real node (containerd +
# kubelet) in the network namespace hami-node1, joined to the host by a veth pair
# (10.200.0.1 host side, 10.200.0.2 node side, no default route); the KubeRay CRDs and
# operator; the images; and charts/hami-go with fake GPUs (skip with HAMI_GO_SKIP_CHART=1).
# Needs root on Debian 12. State, pids and logs: $HAMI_GO_STATE (default
# /var/lib/hami-go-cluster), logs in $HAMI_GO_STATE/logs/<component>.log. See
# docs/components.md ("Local cluster") for what each setting is for.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/components.sh"
START=$SECONDS
progress_traps   # no heartbeat outlives up.sh (progress.sh)

# recreate_in_other_mode: a cluster brought up in the other mode ($STATE/mode) is torn down and
# brought up again in $MODE, saying so first: switching in place would move the node's agents
# under running pods (issue 28), and a silent re-install left the node's inventory of the old
# mode behind, on which the demo waited for minutes.
recreate_in_other_mode() {
  local running
  running=$(cat "$STATE/mode" 2>/dev/null || true)
  [[ -n $running && $running != "$MODE" ]] || return 0
  log "the cluster in $STATE runs in mode $running and HAMI_GO_MODE=$MODE: recreating it in mode $MODE (hack/cluster/down.sh, then up; its pods are gone)"
  "$(dirname "$0")/down.sh"
}

main() {
  recreate_in_other_mode
  require_root
  echo "$MODE" >"$STATE/mode"   # the cluster's mode, for later restart.sh and up.sh runs (lib.sh)
  install_packages
  build_tools
  make_pki
  make_netns
  start_etcd
  start_apiserver
  start_controller_manager
  start_scheduler
  install_gpu_node
  start_containerd
  import_images
  start_kubelet
  start_kuberay
  install_chart
  log "cluster up in $((SECONDS - START))s; state and logs: $STATE"
  echo "KUBECONFIG=$KUBECONFIG_FILE"
}

main "$@"

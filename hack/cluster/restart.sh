#!/usr/bin/env bash
# Stops, starts or restarts one component of the running local cluster (for tests such as
# "kubelet restart: the device plugin registers again"):
#
#   hack/cluster/restart.sh stop|start|restart <component>
#
# <component>: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd,
# kubelet, kuberay-operator. stop sends SIGTERM to the recorded pid (SIGKILL after 15 s); the
# containers keep running, as when a real kubelet or containerd restarts. start waits for the
# component to be ready (the kubelet: Node Ready). Needs root and a cluster from up.sh.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/components.sh"

usage() { die "usage: $0 stop|start|restart etcd|kube-apiserver|kube-controller-manager|kube-scheduler|containerd|kubelet|kuberay-operator"; }

start_component() {
  case $1 in
    etcd) start_etcd ;;
    kube-apiserver) start_apiserver ;;
    kube-controller-manager) start_controller_manager ;;
    kube-scheduler) start_scheduler ;;
    containerd) start_containerd ;;
    kubelet) start_kubelet ;;
    kuberay-operator) start_kuberay ;;
    *) usage ;;
  esac
}

main() {
  (($# == 2)) || usage
  local action=$1 comp=$2
  [[ $(id -u) == 0 ]] || die "run as root"
  [[ -f $KUBECONFIG_FILE ]] || die "no cluster in $STATE (run hack/cluster/up.sh)"
  [[ -f $PIDS/$comp.match ]] || [[ $action != stop ]] || die "$comp was not started by up.sh in $STATE"
  use_tools
  export KUBECONFIG=$KUBECONFIG_FILE
  case $action in
    stop) stop "$comp" ;;
    start) start_component "$comp" ;;
    restart) stop "$comp"; start_component "$comp" ;;
    *) usage ;;
  esac
}

main "$@"

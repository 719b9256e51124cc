#!/usr/bin/env bash
# Tears down what up.sh started: its processes by the pids it recorded (never by name), the
# containers the kubelet ran (their tasks through our containerd, then any shim of our
# containerd that is left), the mounts under its folders, the network namespace and veth, and
# its folders ($HAMI_GO_STATE and, if up.sh created it, /var/lib/kubelet). Safe to run twice.
# Leaves the tool cache (~/.cache/hami-go) alone.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/progress.sh"
source "$(dirname "$0")/gpunode.sh"

# kill_tree <pid>: SIGKILL a process and all its descendants (children first).
kill_tree() {
  local pid=$1 child
  for child in $(ps -o pid= --ppid "$pid" 2>/dev/null); do
    kill_tree "$child"
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# stop_containers: kill every task of our containerd, then any shim still serving it.
stop_containers() {
  local ctr_bin=${HAMI_GO_CACHE:-$HOME/.cache/hami-go}/tools/bin/ctr ns id pid
  [[ -x $ctr_bin ]] || ctr_bin=ctr   # the ctr of the containerd build-tools.sh made, else any
  local ctr_cmd=("$ctr_bin" --address "$CONTAINERD_SOCK")
  if [[ -S $CONTAINERD_SOCK ]] && pid_of containerd >/dev/null; then
    for ns in $("${ctr_cmd[@]}" namespaces ls -q 2>/dev/null); do
      for id in $("${ctr_cmd[@]}" -n "$ns" tasks ls -q 2>/dev/null); do
        "${ctr_cmd[@]}" -n "$ns" tasks kill -a -s SIGKILL "$id" >/dev/null 2>&1 || true
      done
      for id in $("${ctr_cmd[@]}" -n "$ns" tasks ls -q 2>/dev/null); do
        "${ctr_cmd[@]}" -n "$ns" tasks delete -f "$id" >/dev/null 2>&1 || true
      done
    done
  fi
  # Shims of our containerd name its socket on their command line; nothing else is touched.
  for pid in $(pgrep -f -- "containerd-shim.*-address $CONTAINERD_SOCK" || true); do
    log "killing leftover shim $pid and its containers"
    kill_tree "$pid"
  done
}

# unmount_under <dir>: unmount every mount point below dir, deepest first.
unmount_under() {
  local dir=$1 m
  [[ -d $dir ]] || return 0
  awk -v d="$dir/" '{ if (index($5, d) == 1 || $5 == substr(d, 1, length(d)-1)) print $5 }' /proc/self/mountinfo |
    sort -r | while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
    done
}

# remove_cgroups: containerd puts containers under /sys/fs/cgroup/<controller>/k8s.io/<id>
# (the kubelet runs with cgroupsPerQOS false); runc removes the per-container groups, and this
# removes the parent when it is empty (rmdir fails on a cgroup still in use, which is kept).
remove_cgroups() {
  local d
  for d in /sys/fs/cgroup/*/k8s.io; do
    [[ -d $d ]] && rmdir "$d" 2>/dev/null || true
  done
}

delete_netns() {
  if [[ -e $NETNS_PATH ]]; then
    log "deleting network namespace $NETNS"
    ip netns delete "$NETNS" || log "ip netns delete $NETNS failed"
  fi
  ip link show "$HOST_VETH" >/dev/null 2>&1 && ip link delete "$HOST_VETH" || true
}

remove_dirs() {
  if [[ -f $STATE/kubelet/created-root-dir ]]; then
    log "removing $KUBELET_ROOT"
    rm -rf "$KUBELET_ROOT"
  fi
  log "removing $STATE"
  rm -rf "$STATE"
}

main() {
  [[ $(id -u) == 0 ]] || die "run as root"
  if [[ ! -d $STATE ]] && [[ ! -e $NETNS_PATH ]]; then
    log "nothing to tear down ($STATE does not exist)"
    return 0
  fi
  stop prometheus   # hack/cluster/prometheus.sh (make prometheus-up), when started
  stop kuberay-operator
  stop kube-scheduler
  stop kube-controller-manager
  stop kubelet
  stop_containers
  stop containerd
  stop_gpu_node
  # containerd 2 leaves its NRI socket behind even on SIGTERM (the next one would replace it).
  [[ -S $NRI_SOCKET ]] && rm -f "$NRI_SOCKET"
  stop kube-apiserver
  stop etcd
  unmount_under "$KUBELET_ROOT"
  unmount_under "$STATE"
  remove_cgroups
  # The DRA driver's claim CDI specs (mode dra): only its own files, named by its CDI kind.
  rm -f /var/run/cdi/gpu.hami-go.io-claim_*.json
  delete_netns
  remove_dirs
  log "local cluster down"
}

main "$@"

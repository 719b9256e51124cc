#!/usr/bin/env bash
# Stops, starts again, or restarts one host process of the local cluster that up.sh started
# (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, kubelet,
# kuberay-operator), by the pid up.sh recorded in $HAMI_GO_STATE/pids/<component>.pid.
#
#   hack/cluster/restart.sh [restart|stop|start] <component>
#
# stop saves the process's command line, executable, environment, working directory and network
# namespace in $HAMI_GO_STATE/pids/<component>.saved/, sends SIGTERM (SIGKILL after 30 s) and
# waits for it to exit. start runs the saved command again the way up.sh does (setsid, same log,
# inside the node's netns when it ran there) and records the new pid. restart does both.
# The end-to-end tests use it (kubelet restart, a kubelet that calls back late).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

usage() { echo "usage: $0 [restart|stop|start] <component>" >&2; exit 2; }

action=restart
case $# in
  1) comp=$1 ;;
  2) action=$1 comp=$2 ;;
  *) usage ;;
esac
[[ $comp =~ ^[a-z0-9-]+$ ]] || usage
saved=$PIDS/$comp.saved

stop() {
  local pid
  pid=$(pid_of "$comp") || die "$comp is not running (no live pid in $PIDS/$comp.pid)"
  rm -rf "$saved.tmp"
  mkdir -p "$saved.tmp"
  cp "/proc/$pid/cmdline" "$saved.tmp/cmdline"
  cp "/proc/$pid/environ" "$saved.tmp/environ"
  readlink "/proc/$pid/exe" >"$saved.tmp/exe"
  readlink "/proc/$pid/cwd" >"$saved.tmp/cwd"
  if [[ -e $NETNS_PATH && $(stat -L -c %i "/proc/$pid/ns/net") == $(stat -L -c %i "$NETNS_PATH") ]]; then
    echo "$NETNS_PATH" >"$saved.tmp/netns"
  fi
  rm -rf "$saved"
  mv "$saved.tmp" "$saved"
  log "stopping $comp (pid $pid)"
  kill -TERM "$pid"
  local i
  for ((i = 0; i < 300; i++)); do
    [[ -e /proc/$pid ]] || break
    sleep 0.1
  done
  if [[ -e /proc/$pid ]]; then
    log "$comp (pid $pid) still runs after 30s; sending SIGKILL"
    kill -KILL "$pid"
    while [[ -e /proc/$pid ]]; do sleep 0.1; done
  fi
}

start_saved() {
  local pid argv=() envs=() wrap=() exe cwd
  if pid=$(pid_of "$comp"); then
    log "$comp already running (pid $pid)"
    echo "$pid"
    return 0
  fi
  [[ -f $saved/cmdline ]] || die "nothing saved for $comp in $saved (stop it with $0 stop $comp first)"
  mapfile -d '' argv <"$saved/cmdline"
  mapfile -d '' envs <"$saved/environ"
  exe=$(<"$saved/exe")
  cwd=$(<"$saved/cwd")
  [[ -f $saved/netns ]] && wrap=(nsenter --net="$(<"$saved/netns")" --)
  log "starting $comp again (log: $LOGS/$comp.log)"
  (cd "$cwd" && setsid "${wrap[@]}" env -i "${envs[@]}" "$exe" "${argv[@]:1}" >>"$LOGS/$comp.log" 2>&1 </dev/null &
    echo $! >"$PIDS/$comp.pid")
  sleep 0.2
  pid=$(pid_of "$comp") || die "$comp did not start (see $LOGS/$comp.log)"
  echo "$pid"
}

case $action in
  stop) stop ;;
  start) start_saved ;;
  restart) stop; start_saved ;;
  *) usage ;;
esac

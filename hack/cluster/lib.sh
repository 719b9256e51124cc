# Shared settings and helpers of up.sh and down.sh (sourced, not run).
# Every name the local cluster uses is here; docs/components.md ("Local cluster") lists them.

HAMI_GO_STATE=${HAMI_GO_STATE:-/var/lib/hami-go-cluster}
STATE=$HAMI_GO_STATE
LOGS=$STATE/logs
PIDS=$STATE/pids
PKI=$STATE/pki
KUBECONFIG_FILE=$STATE/kubeconfig
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

NODE_NAME=hami-node1                   # Node name and network namespace
NETNS=hami-node1
NETNS_PATH=/var/run/netns/$NETNS
HOST_VETH=hami-veth0                   # root-namespace side of the veth pair
HOST_IP=10.200.0.1                     # kube-apiserver binds here
NODE_IP=10.200.0.2                     # the kubelet's node IP (eth0 in the netns)
CLUSTER_NET=10.200.0.0/16                # blackholed on the host: never routed off the machine
POD_SUBNET=10.244.0.0/24               # bridge + host-local inside the netns
SERVICE_CIDR=10.96.0.0/16
API_URL=https://$HOST_IP:6443
KUBELET_ROOT=/var/lib/kubelet          # device plugins find /var/lib/kubelet/device-plugins
CONTAINERD_DIR=$STATE/containerd
CONTAINERD_SOCK=$CONTAINERD_DIR/containerd.sock
CONTAINERD_VERSION=v2.4.2             # built by build-tools.sh (CDI and NRI; Debian's 1.6 has neither)
RUNC=/usr/sbin/runc                    # Debian's runc 1.1.5 (checked with containerd 2.4.2)
NRI_SOCKET=/var/run/nri/nri.sock       # containerd's NRI socket (its default path)
CDI_SPEC_DIRS="'/etc/cdi', '/var/run/cdi'"   # containerd's default CDI spec directories
SANDBOX_IMAGE=registry.k8s.io/pause:3.10
FAKE_PROFILE=${HAMI_GO_FAKE_PROFILE:-dgxh100}   # pkg/fake profile name, a valid label value
K8S_VERSION=v1.37.2
# DRA (GA, resource.k8s.io/v1 served by default) with consumable capacity (KEP-5075, beta and on
# by default since 1.36): named on every component anyway, so both modes run the same cluster.
FEATURE_GATES=DRAConsumableCapacity=true
# MODE: deviceplugin | dra, the chart's mode value (nothing else differs): HAMI_GO_MODE, else the
# mode the running cluster was brought up in ($STATE/mode, written by up.sh), else deviceplugin.
# So restart.sh (restart kubelet relabels the node with hami-go.io/mode) keeps a DRA-mode
# cluster in DRA mode: relabelling it deviceplugin would move the node's agents under running
# pods (issue 28).
MODE=${HAMI_GO_MODE:-$(cat "$STATE/mode" 2>/dev/null || echo deviceplugin)}
KUBERAY_VERSION=v1.5.0
VERSION=${VERSION:-0.1.0}

log() { printf '%s hami-go cluster: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# pid_of <name>: the recorded pid of a component, if that process still runs it.
pid_of() {
  local f=$PIDS/$1.pid pid
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  [[ -n $pid && -r /proc/$pid/cmdline ]] || return 1
  # The process must still be ours: its command line names the component's marker.
  [[ -f $PIDS/$1.match && $(tr '\0' ' ' <"/proc/$pid/cmdline") == *"$(<"$PIDS/$1.match")"* ]] || return 1
  echo "$pid"
}

# start <name> <marker> <command...>: runs the command detached, logging to $LOGS/<name>.log,
# unless the recorded process still runs. <marker> is a string of its command line (down.sh
# and re-runs check it before trusting a pid).
start() {
  local name=$1 marker=$2 pid
  shift 2
  if pid=$(pid_of "$name"); then
    log "$name already running (pid $pid)"
    return 0
  fi
  log "starting $name (log: $LOGS/$name.log)"
  printf '%s\n' "$marker" >"$PIDS/$name.match"
  # The daemon keeps only stdin, stdout and stderr: `flock <lock> up.sh` hands its locked file
  # to the script, and a daemon that inherited it would hold the cluster's lock until it exits.
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      ((fd > 2)) && eval "exec $fd>&-"
    done
    exec setsid "$@"
  ) >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
}

# stop <name>: SIGTERM the recorded process, SIGKILL after 15 s.
stop() {
  local name=$1 pid i
  if pid=$(pid_of "$name"); then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDS/$name.pid" "$PIDS/$name.match"
}

# use_tools: put the cached tools (hack/cluster/build-tools.sh) first on PATH.
use_tools() {
  BIN=${HAMI_GO_CACHE:-$HOME/.cache/hami-go}/tools/bin
  [[ -x $BIN/kube-apiserver && -x $BIN/kubectl ]] || die "no tools in $BIN (run hack/cluster/build-tools.sh or up.sh)"
  export PATH=$BIN:$PATH
}

# wait_for <description> <seconds> <command...>: polls the command every second.
wait_for() {
  local what=$1 secs=$2 i
  shift 2
  for ((i = 0; i < secs; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  die "timed out after ${secs}s waiting for $what (logs: $LOGS)"
}

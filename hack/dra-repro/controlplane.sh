#!/usr/bin/env bash
# A private, throw-away Kubernetes control plane for the DRA reproducers and hack/bench/drapack:
# etcd, kube-apiserver, kube-scheduler and kube-controller-manager (only its resourceclaim,
# garbage-collector and serviceaccount controllers), all on 127.0.0.1, no kubelet and no node agent. Pods are
# scheduled (kube-scheduler writes the claims' allocations and binds them) but never run;
# Nodes and ResourceSlices are API objects the caller creates.
#
#   hack/dra-repro/controlplane.sh up     start (idempotent), print the kubeconfig's path
#   hack/dra-repro/controlplane.sh down   stop what up started (by recorded pid) and remove the dir
#
# Environment:
#   DRA_REPRO_DIR        state, logs, PKI, kubeconfig (default /tmp/hami-go-dra-repro)
#   DRA_REPRO_PORT       kube-apiserver's port (default 36443); etcd uses PORT-4064 and PORT-4063
#                        (32379/32380 by default)
#   DRA_REPRO_BIN        directory with kube-apiserver, kube-scheduler, kube-controller-manager
#                        (default ~/.cache/hami-go/tools/kubernetes-v1.37.2, hack/cluster/build-tools.sh)
#   DRA_REPRO_ETCD       etcd binary (default ~/.cache/hami-go/tools/etcd-v3.6.16/etcd)
#   DRA_REPRO_SCHED_V    kube-scheduler's --v (default 2; 5 logs the in-flight claims)
#   DRA_REPRO_SCHED_PROFILES  a file of kube-scheduler profiles (KubeSchedulerConfiguration
#                        `profiles` list items) run beside default-scheduler (kube-scheduler's defaults)
#
# Any Kubernetes >= 1.36 works; the feature gate DRAConsumableCapacity is named on every component.
# Nothing listens outside loopback. It never touches the local cluster (hack/cluster).
set -euo pipefail
DIR=${DRA_REPRO_DIR:-/tmp/hami-go-dra-repro}
PORT=${DRA_REPRO_PORT:-36443}
ETCD_CLIENT=$((PORT - 4064))
ETCD_PEER=$((PORT - 4063))
BIN=${DRA_REPRO_BIN:-$HOME/.cache/hami-go/tools/kubernetes-v1.37.2}
ETCD=${DRA_REPRO_ETCD:-$HOME/.cache/hami-go/tools/etcd-v3.6.16/etcd}
GATES=DRAConsumableCapacity=true
KUBECONFIG_FILE=$DIR/kubeconfig
log() { printf '%s dra-repro control plane: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# start <name> <command...>: detached, logging to $DIR/<name>.log, pid in $DIR/<name>.pid; a
# recorded pid whose process still runs <name> is kept.
start() {
  local name=$1 pid
  shift
  if pid=$(pid_of "$name"); then return 0; fi
  "$@" >"$DIR/$name.log" 2>&1 &
  echo $! >"$DIR/$name.pid"
}

# pid_of <name>: the recorded pid when that process is still the one started (its command
# line names $DIR: never another cluster's process).
pid_of() {
  local f=$DIR/$1.pid pid
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  [[ -n $pid && -r /proc/$pid/cmdline && $(tr '\0' ' ' <"/proc/$pid/cmdline") == *"$DIR"* ]] || return 1
  echo "$pid"
}

wait_for() { # wait_for <what> <seconds> <command...>
  local what=$1 secs=$2
  shift 2
  for ((i = 0; i < secs * 4; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.25
  done
  die "$what did not come up in ${secs}s (logs in $DIR)"
}

pki() {
  [[ -f $DIR/pki/tokens.csv ]] && return 0
  mkdir -p "$DIR/pki"
  (
    cd "$DIR/pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -keyout ca.key -out ca.crt -subj /CN=dra-repro-ca
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -extfile apiserver.ext -out apiserver.crt
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
    printf '%s,admin,admin,"system:masters"\n' "$(openssl rand -hex 32)" >tokens.csv
    chmod 600 tokens.csv ca.key apiserver.key sa.key
  ) 2>"$DIR/pki.log"
  cat >"$KUBECONFIG_FILE" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: dra-repro
  cluster: {server: "https://127.0.0.1:$PORT", certificate-authority: "$DIR/pki/ca.crt"}
users:
- name: admin
  user: {token: "$(cut -d, -f1 "$DIR/pki/tokens.csv")"}
contexts:
- name: dra-repro
  context: {cluster: dra-repro, user: admin}
current-context: dra-repro
EOF
  chmod 600 "$KUBECONFIG_FILE"
}

up() {
  for b in "$BIN/kube-apiserver" "$BIN/kube-scheduler" "$BIN/kube-controller-manager" "$ETCD"; do
    [[ -x $b ]] || die "$b is missing (hack/cluster/build-tools.sh builds it, or set DRA_REPRO_BIN / DRA_REPRO_ETCD)"
  done
  mkdir -p "$DIR"
  pki
  start etcd "$ETCD" --name=dra-repro --data-dir="$DIR/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_CLIENT" --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER" \
    --initial-cluster="dra-repro=http://127.0.0.1:$ETCD_PEER" --listen-metrics-urls= --unsafe-no-fsync
  wait_for etcd 60 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ETCD_CLIENT"
  start kube-apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_CLIENT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$PORT" --endpoint-reconciler-type=none \
    --tls-cert-file="$DIR/pki/apiserver.crt" --tls-private-key-file="$DIR/pki/apiserver.key" \
    --client-ca-file="$DIR/pki/ca.crt" --token-auth-file="$DIR/pki/tokens.csv" \
    --service-account-key-file="$DIR/pki/sa.pub" --service-account-signing-key-file="$DIR/pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range=10.254.0.0/16 --authorization-mode=RBAC --feature-gates="$GATES" --v=1
  wait_for kube-apiserver 120 "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" get --raw /readyz
  # kube-scheduler's defaults, plus the profiles of $DRA_REPRO_SCHED_PROFILES (YAML list items).
  {
    printf 'apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n'
    printf 'clientConnection: {kubeconfig: "%s"}\nleaderElection: {leaderElect: false}\n' "$KUBECONFIG_FILE"
    printf 'profiles:\n- schedulerName: default-scheduler\n'
    if [[ -n ${DRA_REPRO_SCHED_PROFILES:-} ]]; then cat "$DRA_REPRO_SCHED_PROFILES"; fi
  } >"$DIR/scheduler.yaml"
  # The marker $DIR must be on the command line (pid_of): the config's path carries it.
  start kube-scheduler "$BIN/kube-scheduler" --config="$DIR/scheduler.yaml" --secure-port=0 \
    --feature-gates="$GATES" --v="${DRA_REPRO_SCHED_V:-2}"
  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG_FILE" --secure-port=0 \
    --leader-elect=false --controllers=resourceclaim-controller,garbage-collector-controller,serviceaccount-controller \
    --kube-api-qps=100 --kube-api-burst=200 --feature-gates="$GATES" --v=1
  sleep 1
  for c in kube-scheduler kube-controller-manager; do
    pid_of "$c" >/dev/null || die "$c exited (see $DIR/$c.log)"
  done
  log "up: kubeconfig $KUBECONFIG_FILE (API https://127.0.0.1:$PORT, logs in $DIR)"
  echo "$KUBECONFIG_FILE"
}

down() {
  local c pid
  for c in kube-controller-manager kube-scheduler kube-apiserver etcd; do
    if pid=$(pid_of "$c"); then
      kill "$pid" 2>/dev/null || true
      for ((i = 0; i < 40; i++)); do [[ -r /proc/$pid/cmdline ]] || break; sleep 0.25; done
      [[ -r /proc/$pid/cmdline ]] && kill -9 "$pid" 2>/dev/null || true
    fi
  done
  [[ $DIR == /tmp/* || ${DRA_REPRO_KEEP:-} != "" ]] || { log "not removing $DIR (outside /tmp)"; return 0; }
  rm -rf "$DIR"
  log "down: $DIR removed"
}

case ${1:-} in
up) up ;;
down) down ;;
*) die "usage: $0 up|down" ;;
esac

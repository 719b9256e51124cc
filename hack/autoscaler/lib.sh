# A private control plane for the autoscaler trial (sourced by trial.sh, not run): etcd,
# kube-apiserver and kube-scheduler from the local cluster's tool cache, on loopback ports and in
# a state folder of their own, so the shared local cluster (/var/lib/hami-go-cluster, etcd on
# 2379, kube-apiserver on 10.200.0.1:6443, kube-scheduler on 10259) is never touched.
# No kubelet and no node: Cluster Autoscaler's and Karpenter's KWOK providers create plain Node
# objects, which is all their simulations and kube-scheduler read. No kube-controller-manager:
# lift_not_ready does what its node lifecycle controller does for a Ready node.

TRIAL_DIR=${HAMI_GO_TRIAL_DIR:-/tmp/hami-go-autoscaler-trial}
TRIAL_LOGS=$TRIAL_DIR/logs
TRIAL_PIDS=$TRIAL_DIR/pids
TRIAL_PKI=$TRIAL_DIR/pki
TRIAL_KUBECONFIG=$TRIAL_DIR/kubeconfig
TRIAL_ETCD_PORT=23790      # client; peer 23800, metrics 23810
TRIAL_API_PORT=16443       # kube-apiserver, 127.0.0.1 only
TRIAL_SCHED_PORT=20259     # kube-scheduler's secure port (the local cluster's is 10259)
TRIAL_CA_PORT=18085        # Cluster Autoscaler's metrics
TRIAL_KARPENTER_PORT=18090 # Karpenter's metrics; health probes on the next port
TRIAL_SERVICE_CIDR=10.97.0.0/16   # allocated by the API server only: no traffic uses it
TOOLS_CACHE=${HAMI_GO_CACHE:-$HOME/.cache/hami-go}/tools
K8S_BIN=$TOOLS_CACHE/kubernetes-v1.37.2
ETCD_BIN=$TOOLS_CACHE/etcd-v3.6.16/etcd

tlog() { printf '[trial %s] %s\n' "$(date +%T)" "$*" >&2; }
tdie() { tlog "ERROR: $*"; exit 1; }
kc() { "$K8S_BIN/kubectl" --kubeconfig="$TRIAL_KUBECONFIG" "$@"; }

# port_free <port>: nothing listens on 127.0.0.1:<port>.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# tstart <name> <command...>: runs it in the background, its own process group, logs to
# $TRIAL_LOGS/<name>.log, pid in $TRIAL_PIDS/<name>.
tstart() {
  local name=$1
  shift
  setsid "$@" >"$TRIAL_LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$TRIAL_PIDS/$name"
}

# tstop <name>: SIGTERM to the process the pid file names (and only it), then waits up to 20 s.
tstop() {
  local f=$TRIAL_PIDS/$1 pid i
  [[ -f $f ]] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 40; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$f"
}

# twait <what> <seconds> <command...>: polls the command every 0.5 s.
twait() {
  local what=$1 secs=$2 i
  shift 2
  for ((i = 0; i < secs * 2; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  tdie "$what not ready after ${secs}s"
}

trial_pki() {
  mkdir -p "$TRIAL_PKI"
  (
    cd "$TRIAL_PKI"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -keyout ca.key -out ca.crt \
      -subj "/CN=hami-go-trial-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
      -subj "/CN=kube-apiserver" 2>/dev/null
    printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" "extendedKeyUsage=serverAuth" \
      "keyUsage=critical,digitalSignature,keyEncipherment" >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    printf '%s,admin,admin,"system:masters"\n' "$(openssl rand -hex 32)" >tokens.csv
    chmod 600 tokens.csv
  )
  cat >"$TRIAL_KUBECONFIG" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: trial
  cluster:
    server: https://127.0.0.1:$TRIAL_API_PORT
    certificate-authority: $TRIAL_PKI/ca.crt
users:
- name: admin
  user:
    token: $(cut -d, -f1 "$TRIAL_PKI/tokens.csv")
contexts:
- name: trial
  context: {cluster: trial, user: admin}
current-context: trial
EOF
  chmod 600 "$TRIAL_KUBECONFIG"
}

# trial_up: etcd, kube-apiserver, kube-scheduler (profiles default-scheduler and
# hami-go-scheduler, the name hami-go's webhook writes on GPU pods).
trial_up() {
  [[ -x $ETCD_BIN && -x $K8S_BIN/kube-apiserver && -x $K8S_BIN/kube-scheduler ]] ||
    tdie "no etcd/kube-apiserver/kube-scheduler in $TOOLS_CACHE (run hack/cluster/build-tools.sh etcd kube-apiserver kube-scheduler kubectl)"
  local p
  for p in $TRIAL_ETCD_PORT 23800 23810 $TRIAL_API_PORT $TRIAL_SCHED_PORT $TRIAL_CA_PORT $TRIAL_KARPENTER_PORT $((TRIAL_KARPENTER_PORT + 1)); do
    port_free "$p" || tdie "127.0.0.1:$p is in use (another trial? run: $0 down)"
  done
  rm -rf "$TRIAL_DIR"
  mkdir -p "$TRIAL_LOGS" "$TRIAL_PIDS"
  trial_pki
  tlog "etcd on 127.0.0.1:$TRIAL_ETCD_PORT, data $TRIAL_DIR/etcd"
  tstart etcd "$ETCD_BIN" --name=trial --data-dir="$TRIAL_DIR/etcd" \
    --listen-client-urls=http://127.0.0.1:$TRIAL_ETCD_PORT --advertise-client-urls=http://127.0.0.1:$TRIAL_ETCD_PORT \
    --listen-peer-urls=http://127.0.0.1:23800 --initial-advertise-peer-urls=http://127.0.0.1:23800 \
    --initial-cluster=trial=http://127.0.0.1:23800 --listen-metrics-urls=http://127.0.0.1:23810 \
    --unsafe-no-fsync   # throwaway data; a busy disk otherwise stalls etcd for seconds
  twait etcd 60 bash -c "exec 3<>/dev/tcp/127.0.0.1/$TRIAL_ETCD_PORT"
  tlog "kube-apiserver on 127.0.0.1:$TRIAL_API_PORT"
  tstart kube-apiserver "$K8S_BIN/kube-apiserver" \
    --etcd-servers=http://127.0.0.1:$TRIAL_ETCD_PORT \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$TRIAL_API_PORT \
    --endpoint-reconciler-type=none \
    --tls-cert-file="$TRIAL_PKI/apiserver.crt" --tls-private-key-file="$TRIAL_PKI/apiserver.key" \
    --client-ca-file="$TRIAL_PKI/ca.crt" --token-auth-file="$TRIAL_PKI/tokens.csv" \
    --service-account-key-file="$TRIAL_PKI/sa.pub" --service-account-signing-key-file="$TRIAL_PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range=$TRIAL_SERVICE_CIDR --authorization-mode=RBAC \
    --disable-admission-plugins=ServiceAccount --v=1
  twait kube-apiserver 120 kc get --raw /readyz
  cat >"$TRIAL_DIR/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: $TRIAL_KUBECONFIG}
leaderElection: {leaderElect: false}
profiles:
- schedulerName: default-scheduler
- schedulerName: hami-go-scheduler
  pluginConfig:
  - name: NodeResourcesFit
    args:
      # What hami-go's extender config (managedResources ignoredByScheduler) does in the chart.
      ignoredResources: [nvidia.com/gpumem, nvidia.com/gpumem-percentage, nvidia.com/gpucores]
EOF
  tlog "kube-scheduler (secure port 127.0.0.1:$TRIAL_SCHED_PORT)"
  tstart kube-scheduler "$K8S_BIN/kube-scheduler" --config="$TRIAL_DIR/kube-scheduler.yaml" \
    --authentication-kubeconfig="$TRIAL_KUBECONFIG" --authorization-kubeconfig="$TRIAL_KUBECONFIG" \
    --bind-address=127.0.0.1 --secure-port=$TRIAL_SCHED_PORT --v=1
  twait "kube-scheduler" 60 bash -c "exec 3<>/dev/tcp/127.0.0.1/$TRIAL_SCHED_PORT"
  twait "namespace kube-system" 60 kc get namespace kube-system
}

# lift_not_ready: removes the node.kubernetes.io/not-ready taint (the API server puts it on every new
# Node) from the Nodes whose Ready condition is True, as the node lifecycle controller would.
lift_not_ready() {
  local n
  for n in $(kc get nodes -o jsonpath='{range .items[?(@.status.conditions[0].status=="True")]}{.metadata.name}{" "}{end}' 2>/dev/null); do
    kc taint node "$n" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
  done
}

trial_down() {
  local n
  for n in cluster-autoscaler karpenter kube-scheduler kube-apiserver etcd; do tstop "$n"; done
  [[ ${HAMI_GO_TRIAL_KEEP:-} == 1 ]] || rm -rf "$TRIAL_DIR/etcd" "$TRIAL_PKI" "$TRIAL_KUBECONFIG"
}

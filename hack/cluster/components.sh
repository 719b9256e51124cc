# The steps of up.sh, one function each (sourced after lib.sh; restart.sh uses the start_*
# functions to start one component again).
source "$(dirname "${BASH_SOURCE[0]}")/progress.sh"
source "$(dirname "${BASH_SOURCE[0]}")/gpunode.sh"

require_root() {
  [[ $(id -u) == 0 ]] || die "run as root (it starts containerd, a kubelet and a network namespace)"
  [[ $MODE == deviceplugin || $MODE == dra ]] || die "HAMI_GO_MODE=$MODE: want deviceplugin or dra"
  mkdir -p "$LOGS" "$PIDS" "$PKI"
}

# install_packages: Debian packages the node needs, installed only when missing (containerd
# itself comes from build-tools.sh; runc and the CNI plugins from Debian).
install_packages() {
  local missing=()
  [[ -x $RUNC ]] || missing+=(runc)
  [[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v openssl >/dev/null || missing+=(openssl)
  command -v nsenter >/dev/null || missing+=(util-linux)
  [[ -x /bin/busybox ]] || missing+=(busybox-static)
  [[ -x /bin/bash-static ]] || missing+=(bash-static)
  command -v iptables >/dev/null || missing+=(iptables)   # the bridge plugin's ipMasq
  command -v conntrack >/dev/null || missing+=(conntrack)
  ((${#missing[@]} == 0)) && return 0
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends "${missing[@]}" >>"$LOGS/apt.log" 2>&1 ||
    { apt-get update >>"$LOGS/apt.log" 2>&1 && apt-get install -y --no-install-recommends "${missing[@]}" >>"$LOGS/apt.log" 2>&1; } ||
    die "apt-get install ${missing[*]} failed (see $LOGS/apt.log)"
}

# build_tools: the Kubernetes binaries, etcd, helm, kubectl, the KubeRay operator, containerd,
# Prometheus and promtool (cached).
build_tools() {
  log "building or reusing the cached tools (20-40 minutes the first time; go's output: $LOGS/build-tools.log)"
  # build-tools.sh's stderr goes to the log; its ">> " progress lines to the terminal as well.
  "$REPO_ROOT/hack/cluster/build-tools.sh" 2>&1 >/dev/null | progress_tee "$LOGS/build-tools.log" ||
    die "build-tools.sh failed (see $LOGS/build-tools.log)"
  use_tools
}

# make_pki: CA, API server serving cert, service-account key pair, admin token, kubeconfig.
make_pki() {
  cd "$PKI"
  if [[ ! -f ca.crt ]]; then
    log "making certificates in $PKI"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout ca.key -out ca.crt \
      -subj "/CN=hami-go-local-ca" 2>>"$LOGS/pki.log"
  fi
  if [[ ! -f apiserver.crt ]]; then
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
      -subj "/CN=kube-apiserver" 2>>"$LOGS/pki.log"
    printf '%s\n' \
      "subjectAltName=IP:$HOST_IP,IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
      "extendedKeyUsage=serverAuth" "keyUsage=critical,digitalSignature,keyEncipherment" >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile apiserver.ext -out apiserver.crt 2>>"$LOGS/pki.log"
  fi
  if [[ ! -f sa.key ]]; then
    openssl genrsa -out sa.key 2048 2>>"$LOGS/pki.log"
    openssl rsa -in sa.key -pubout -out sa.pub 2>>"$LOGS/pki.log"
  fi
  if [[ ! -f tokens.csv ]]; then
    printf '%s,admin,admin,"system:masters"\n' "$(openssl rand -hex 32)" >tokens.csv
    chmod 600 tokens.csv
  fi
  local token
  token=$(cut -d, -f1 tokens.csv)
  cat >"$KUBECONFIG_FILE" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: hami-go-local
  cluster:
    server: $API_URL
    certificate-authority: $PKI/ca.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: hami-go-local
  context: {cluster: hami-go-local, user: admin}
current-context: hami-go-local
EOF
  chmod 600 "$KUBECONFIG_FILE"
  export KUBECONFIG=$KUBECONFIG_FILE
  cd "$REPO_ROOT"
}

# make_netns: the node's network namespace, veth pair, addresses; no default route inside.
make_netns() {
  [[ -e $NETNS_PATH ]] || { log "creating network namespace $NETNS"; ip netns add "$NETNS"; }
  if ! ip link show "$HOST_VETH" >/dev/null 2>&1; then
    ip link add "$HOST_VETH" type veth peer name eth0 netns "$NETNS"
  fi
  [[ $(ip addr show dev "$HOST_VETH") == *"inet $HOST_IP/"* ]] || ip addr add "$HOST_IP/24" dev "$HOST_VETH"
  ip link set "$HOST_VETH" up
  [[ $(ip -n "$NETNS" addr show dev eth0) == *"inet $NODE_IP/"* ]] || ip -n "$NETNS" addr add "$NODE_IP/24" dev eth0
  ip -n "$NETNS" link set eth0 up
  ip -n "$NETNS" link set lo up
  if [[ -n $(ip -n "$NETNS" route show default) ]]; then
    die "network namespace $NETNS has a default route; it must not (run down.sh)"
  fi
  # The cluster's addresses (node, pods, services) must never leave this machine: while the veth
  # is up its /24 route wins; otherwise (down.sh, a crash, a pod or service IP the host cannot
  # reach) these blackholes refuse them instead of the host's default route sending them out.
  # Kept by down.sh on purpose.
  local net
  for net in "$CLUSTER_NET" "$SERVICE_CIDR"; do ip route replace blackhole "$net"; done
  # The pod network is routed to the node (its bridge forwards to the pods), so the API server
  # reaches a webhook Service's pods by their IPs (--enable-aggregator-routing); the blackhole,
  # at a lower priority, takes over when the veth (and with it this route) is gone.
  # The route replaces the blackhole of metric 0 that clusters brought up before had, in one step.
  ip route replace blackhole "$POD_SUBNET" metric 4000
  ip route replace "$POD_SUBNET" via "$NODE_IP" dev "$HOST_VETH" metric 0
}

start_etcd() {
  start etcd "$STATE/etcd-data" etcd --name=default --data-dir="$STATE/etcd-data" \
    --listen-client-urls=http://127.0.0.1:2379 --advertise-client-urls=http://127.0.0.1:2379 \
    --listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380 \
    --initial-cluster=default=http://127.0.0.1:2380 --listen-metrics-urls=http://127.0.0.1:2381
  wait_for "etcd" 60 bash -c 'exec 3<>/dev/tcp/127.0.0.1/2379'
}

# --enable-aggregator-routing: the API server calls a webhook given as a Service (webhook.url
# empty, as the day-two tests install it with two replicas) at its endpoints' pod IPs, which the
# host routes to the node (make_netns); nothing routes ClusterIPs here.
start_apiserver() {
  start kube-apiserver "$PKI/tokens.csv" kube-apiserver \
    --etcd-servers=http://127.0.0.1:2379 \
    --bind-address="$HOST_IP" --advertise-address="$HOST_IP" --secure-port=6443 \
    --endpoint-reconciler-type=none \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" --token-auth-file="$PKI/tokens.csv" \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range="$SERVICE_CIDR" --authorization-mode=RBAC \
    --allow-privileged=true --kubelet-preferred-address-types=InternalIP \
    --enable-aggregator-routing=true \
    --feature-gates="$FEATURE_GATES" --v=1
  wait_for "kube-apiserver /readyz" 120 kubectl get --raw /readyz
}

# kube-controller-manager creates the claims of ResourceClaimTemplates (dra mode): client QPS
# 100 (default 20) so a burst of 50 claim pods is not throttled there.
start_controller_manager() {
  start kube-controller-manager "$PKI/sa.key" kube-controller-manager \
    --kubeconfig="$KUBECONFIG_FILE" --authentication-kubeconfig="$KUBECONFIG_FILE" \
    --authorization-kubeconfig="$KUBECONFIG_FILE" --bind-address=127.0.0.1 \
    --root-ca-file="$PKI/ca.crt" --service-account-private-key-file="$PKI/sa.key" \
    --use-service-account-credentials=true --leader-elect=false \
    --kube-api-qps=100 --kube-api-burst=200 \
    --service-cluster-ip-range="$SERVICE_CIDR" --feature-gates="$FEATURE_GATES" --v=1
}

start_scheduler() {
  start kube-scheduler "$KUBECONFIG_FILE" kube-scheduler \
    --kubeconfig="$KUBECONFIG_FILE" --authentication-kubeconfig="$KUBECONFIG_FILE" \
    --authorization-kubeconfig="$KUBECONFIG_FILE" --bind-address=127.0.0.1 \
    --leader-elect=false --feature-gates="$FEATURE_GATES" --v=1
}

# start_containerd: containerd 2.x (build-tools.sh) with its own root, state and socket, inside
# the node's netns. Its config is format version 4, written whole (a 1.6 config does not carry
# over); CDI (spec dirs $CDI_SPEC_DIRS) and NRI ($NRI_SOCKET) are on, as containerd 2 defaults.
# The runc shim is found on containerd's PATH (the tools' bin folder); runc is Debian's.
start_containerd() {
  mkdir -p "$CONTAINERD_DIR" "$STATE/cni/net.d" "$STATE/cni/networks"
  command -v containerd-shim-runc-v2 >/dev/null || die "containerd-shim-runc-v2 is not on PATH (run build-tools.sh)"
  cat >"$CONTAINERD_DIR/config.toml" <<EOF
version = 4
root = "$CONTAINERD_DIR/root"
state = "$CONTAINERD_DIR/state"

[plugins]
  # Format 4 serves its sockets from plugins; the ttrpc one is not derived from the gRPC one.
  [plugins.'io.containerd.server.v1.grpc']
    address = '$CONTAINERD_SOCK'
  [plugins.'io.containerd.server.v1.ttrpc']
    address = '$CONTAINERD_SOCK.ttrpc'

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '$SANDBOX_IMAGE'

  [plugins.'io.containerd.cri.v1.runtime']
    # This VM does not allow a negative oom_score_adj: without this every sandbox fails
    # ("can't get final child's PID from pipe").
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    cdi_spec_dirs = [$CDI_SPEC_DIRS]
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = '$(default_runtime)'
$(containerd_nvidia_runtime)
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '$RUNC'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['/usr/lib/cni']
      conf_dir = '$STATE/cni/net.d'

  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    socket_path = '$NRI_SOCKET'

  [plugins.'io.containerd.internal.v1.opt']
    path = '$CONTAINERD_DIR/opt'
EOF
  cat >"$STATE/cni/net.d/10-hami-go.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "hami-go",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_SUBNET"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$STATE/cni/networks"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  start containerd "$CONTAINERD_DIR/config.toml" nsenter --net="$NETNS_PATH" -- \
    containerd --config "$CONTAINERD_DIR/config.toml"
  wait_for "containerd socket" 60 ctr --address "$CONTAINERD_SOCK" version
}

# import_images: pause and workload (also as rayproject/ray) from hack/images/mkimage into
# $STATE/images, then kube-scheduler and hami-go's own images from hack/images into
# _output/images (both build with hack/images/imagebuild); imports every tar of both folders.
# hami-go's own include kube-scheduler-hami-go (kube-scheduler with the HamiGo plugin, for
# helm upgrade ... --set scheduler.placement=plugin; values-local.yaml never pulls it): its
# first build compiles k8s.io/kubernetes' scheduler (minutes on 2 cores), later ones take seconds
# (go's build cache), and an unchanged image tar reports "unchanged".
# hack/images is a Go module of its own (go-containerregistry stays out of the library's go.mod):
# both run from there, with absolute paths, and hack/images builds ./cmd/<binary> in --repo-root.
import_images() {
  local out=$STATE/images tars=() CUDAPROBE=
  mkdir -p "$out"
  [[ -x $out/cudaprobe ]] && CUDAPROBE=$out/cudaprobe   # built by install_gpu_node (gpunode.sh)
  local HAMICORE_LIB= HAMICORE_TAG=
  # shellcheck source=/dev/null
  [[ -f $HAMICORE_ENV ]] && source "$HAMICORE_ENV"
  log "building images into $out (progress below; output: $LOGS/images.log)"
  IMG_DIR=$out
  step_image 1 "workload binaries (go build ./hack/workload, gcc -static hack/getenv)" build_workload "$out"
  step_image 2 "pause and workload images (hack/images/mkimage)" \
    go_logged images "$REPO_ROOT/hack/images" run ./mkimage --out "$out" --workload-bin "$out/workload" --getenv-bin "$out/getenv" --version "$VERSION" \
    ${CUDAPROBE:+--cudaprobe-bin "$CUDAPROBE"} ${HAMICORE_LIB:+--hamicore-lib "$HAMICORE_LIB" --hamicore-tag "$HAMICORE_TAG"}
  rm -f "$out/kube-scheduler.tar"   # an older mkimage's; hack/images makes it now
  tars=("$out"/*.tar)
  IMG_DIR=$REPO_ROOT/_output/images
  if step_image 3 "kube-scheduler and hami-go images, kube-scheduler-hami-go too (hack/images into _output/images)" \
    go_logged images "$REPO_ROOT/hack/images" run . --repo-root "$REPO_ROOT" --version "$VERSION" --out "$REPO_ROOT/_output/images" \
    --kube-scheduler-bin "$BIN/kube-scheduler" --kube-version "$K8S_VERSION"; then
    tars+=("$REPO_ROOT"/_output/images/*.tar)
  elif [[ ${HAMI_GO_SKIP_CHART:-0} == 1 ]]; then
    log "WARNING: hack/images failed (see $LOGS/images.log); going on without hami-go images (HAMI_GO_SKIP_CHART=1)"
  else
    die "hack/images failed (see $LOGS/images.log)"
  fi
  step 4 4 "importing ${#tars[@]} image tars into containerd" import_tars "${tars[@]}"
}

# step_image <i> <name> <command...>: step i of 4 of import_images; ends "built" when the image
# tars in $IMG_DIR changed, "unchanged" when their checksums are those of before. Dies on failure
# of steps 1 and 2; returns the status of step 3 (the caller decides).
step_image() {
  local i=$1 name=$2
  shift 2
  IMG_BEFORE=$(image_sums)
  if ! STEP_RESULT=image_result step "$i" 4 "$name" "$@"; then
    ((i == 3)) && return 1
    die "$name failed (see $LOGS/images.log)"
  fi
}
image_sums() { (cd "$IMG_DIR" 2>/dev/null && sha256sum ./*.tar ./workload 2>/dev/null) || true; }
image_result() { if [[ $(image_sums) == "$IMG_BEFORE" ]]; then echo "unchanged"; else echo "built"; fi; }

# build_workload <out>: the static binaries of the workload and pause images: the workload
# (Go) and getenv (C, glibc's getenv: what a C program reads, case C37).
build_workload() {
  (cd "$REPO_ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$1/workload" ./hack/workload) >>"$LOGS/images.log" 2>&1 &&
    gcc -static -O2 -o "$1/getenv" "$REPO_ROOT/hack/getenv/getenv.c" >>"$LOGS/images.log" 2>&1
}

# go_logged <log> <dir> <go args...>: go <args> in <dir>, output appended to $LOGS/<log>.log.
go_logged() {
  local log=$1 dir=$2
  shift 2
  (cd "$dir" && go "$@") >>"$LOGS/$log.log" 2>&1
}

# import_tars <tar...>: ctr images import of each tar into containerd's k8s.io namespace.
import_tars() {
  local t
  for t in "$@"; do
    ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$t" >>"$LOGS/images.log" 2>&1 ||
      die "ctr images import $t failed (see $LOGS/images.log)"
  done
}

# start_kubelet: the kubelet inside the netns, node IP 10.200.0.2, root dir /var/lib/kubelet.
start_kubelet() {
  mkdir -p "$STATE/kubelet"
  if [[ ! -d $KUBELET_ROOT ]]; then
    mkdir -p "$KUBELET_ROOT"
    touch "$STATE/kubelet/created-root-dir"   # down.sh removes the root dir only then
  fi
  cat >"$STATE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
evictionHard: {}
localStorageCapacityIsolation: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 250
serializeImagePulls: false
featureGates:
$(tr ',' '\n' <<<"$FEATURE_GATES" | sed 's/^\(.*\)=\(.*\)$/  \1: \2/')
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
  x509: {}
authorization:
  mode: AlwaysAllow
EOF
  start kubelet "$STATE/kubelet/config.yaml" nsenter --net="$NETNS_PATH" -- \
    kubelet --config="$STATE/kubelet/config.yaml" --kubeconfig="$KUBECONFIG_FILE" \
    --root-dir="$KUBELET_ROOT" --node-ip="$NODE_IP" --hostname-override="$NODE_NAME" \
    --node-labels="hami-go.io/fake-profile=$FAKE_PROFILE,hami-go.io/mode=$MODE" --v=2
  wait_for "kubelet /healthz" 120 nsenter --net="$NETNS_PATH" -- curl -sf http://127.0.0.1:10248/healthz
  wait_for "node $NODE_NAME Ready" 180 node_ready
  # hami-go.io/mode: the chart runs the DRA driver only on nodes labelled dra, the device plugin
  # only on the others (one mode per node).
  kubectl label node "$NODE_NAME" --overwrite "hami-go.io/fake-profile=$FAKE_PROFILE" "hami-go.io/mode=$MODE" >/dev/null
  wait_for "ServiceAccount default/default" 60 kubectl -n default get serviceaccount default
}

node_ready() {
  [[ $(kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

# start_kuberay: the KubeRay CRDs (applied once per KubeRay version: the label
# hami-go.io/kuberay-version records it), then the operator as a host process.
start_kuberay() {
  local crds=$(go env GOMODCACHE)/github.com/ray-project/kuberay/ray-operator@$KUBERAY_VERSION/config/crd/bases
  local names=(crd/rayclusters.ray.io crd/rayjobs.ray.io crd/rayservices.ray.io) have
  have=$(kubectl get "${names[@]}" -o jsonpath='{range .items[*]}{.metadata.labels.hami-go\.io/kuberay-version}{" "}{end}' 2>/dev/null || true)
  if [[ $have != "$KUBERAY_VERSION $KUBERAY_VERSION $KUBERAY_VERSION " ]]; then
    [[ -d $crds ]] || die "KubeRay CRDs not found in $crds (hack/cluster/build-tools.sh downloads the module)"
    log "installing the KubeRay $KUBERAY_VERSION CRDs"
    kubectl apply --server-side --force-conflicts -f "$crds" >>"$LOGS/kuberay-crds.log" 2>&1 ||
      die "installing the KubeRay CRDs failed (see $LOGS/kuberay-crds.log)"
    kubectl label --overwrite "${names[@]}" "hami-go.io/kuberay-version=$KUBERAY_VERSION" >/dev/null
  fi
  kubectl wait --for=condition=Established --timeout=60s "${names[@]}" >/dev/null
  start kuberay-operator "kuberay-operator" kuberay-operator --kubeconfig="$KUBECONFIG_FILE" \
    --enable-leader-election=false --metrics-addr=127.0.0.1:18080 \
    --health-probe-bind-address=127.0.0.1:18082
  wait_for "kuberay-operator /readyz" 60 curl -sf http://127.0.0.1:18082/readyz
}

# install_chart: hami-go with fake GPUs (charts/hami-go/values-local.yaml), in $MODE
# (HAMI_GO_MODE: the device plugin or the DRA driver on the node).
install_chart() {
  if [[ ${HAMI_GO_SKIP_CHART:-0} == 1 ]]; then
    log "HAMI_GO_SKIP_CHART=1: not installing charts/hami-go"
    return 0
  fi
  [[ -f $REPO_ROOT/charts/hami-go/values-local.yaml ]] ||
    die "charts/hami-go/values-local.yaml does not exist (set HAMI_GO_SKIP_CHART=1 to bring the cluster up without the chart)"
  clear_undeployed_release
  log "installing charts/hami-go in mode $MODE (log: $LOGS/helm.log)"
  helm upgrade --install hami-go "$REPO_ROOT/charts/hami-go" -f "$REPO_ROOT/charts/hami-go/values-local.yaml" \
    --set mode="$MODE" --set hamiCore.hostDir="$STATE/vgpu" $(gpu_node_chart_args) \
    -n hami-go-system --create-namespace --wait --timeout 5m \
    --kubeconfig "$KUBECONFIG_FILE" >>"$LOGS/helm.log" 2>&1 || die "helm upgrade --install failed (see $LOGS/helm.log)"
  restart_if_images_changed
  # A GPU pod created before the node offers GPUs is refused ("Insufficient nvidia.com/gpu"), so
  # the cluster is up only once they are offered: the device plugin's count resource on the Node,
  # or the DRA driver's ResourceSlice.
  if [[ $MODE == dra ]]; then
    wait_for "the DRA driver's ResourceSlice of $NODE_NAME" 120 gpus_published_dra
  else
    wait_for "nvidia.com/gpu allocatable on $NODE_NAME" 120 gpus_allocatable
  fi
}

# clear_undeployed_release: a release hami-go with no deployed revision (a first install that
# failed, an uninstall cut short: status "uninstalling") cannot be upgraded ("has no deployed
# releases"), so up.sh would fail on it for good: uninstall it first (its pre-delete hook again).
clear_undeployed_release() {
  local k=(-n hami-go-system --kubeconfig "$KUBECONFIG_FILE") history
  history=$(helm history hami-go "${k[@]}" -o json 2>/dev/null) || return 0   # no release
  [[ $history == *'"status":"deployed"'* ]] && return 0
  log "release hami-go has no deployed revision: uninstalling it before the install"
  helm uninstall hami-go "${k[@]}" --wait --timeout 5m >>"$LOGS/helm.log" 2>&1 ||
    die "helm uninstall of the undeployed release hami-go failed (see $LOGS/helm.log)"
}

# gpus_allocatable: the node advertises at least one nvidia.com/gpu device (the device plugin
# registered and ListAndWatch sent its devices).
gpus_allocatable() {
  local n
  n=$(kubectl get node "$NODE_NAME" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')
  [[ -n $n && $n != 0 ]]
}

# gpus_published_dra: a ResourceSlice of driver gpu.hami-go.io for the node lists a device.
gpus_published_dra() {
  kubectl get resourceslices -o jsonpath='{range .items[?(@.spec.driver=="gpu.hami-go.io")]}{.spec.nodeName}{" "}{.spec.devices[0].name}{"\n"}{end}' |
    grep -q "^$NODE_NAME [^ ]"
}

# restart_if_images_changed: the images keep their tag (VERSION) when the code changes, so a
# re-run of up.sh after a rebuild would leave the old binaries running. Restart the chart's
# workloads when the image tars' checksums differ from the ones recorded at the last install.
restart_if_images_changed() {
  local sums=$STATE/images/hami-go.sha256 now
  now=$(cd "$REPO_ROOT/_output/images" 2>/dev/null && sha256sum ./*.tar 2>/dev/null || true)
  if [[ -f $sums && $now != "$(cat "$sums")" ]]; then
    log "hami-go images changed since the last install: restarting the chart's workloads"
    local w
    for w in $(kubectl -n hami-go-system get daemonset,deployment -o name); do
      kubectl -n hami-go-system rollout restart "$w" >/dev/null
      kubectl -n hami-go-system rollout status "$w" --timeout=5m >>"$LOGS/helm.log" 2>&1 ||
        die "$w did not roll out (see $LOGS/helm.log)"
    done
  fi
  printf '%s' "$now" >"$sums"
}


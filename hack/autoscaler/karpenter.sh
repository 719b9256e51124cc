# Karpenter's part of the autoscaler trial (sourced by trial.sh, not run).
# Karpenter's KWOK cloud provider sells the instance types of a JSON file and creates a plain Node
# for each NodeClaim. Two types, as a cloud lists them (no hami-go.io/gpu-memory: the cloud does
# not know it, kubernetes-sigs/karpenter #751): p4d.24xlarge (8 x A100 40 GB) and p4de.24xlarge
# (8 x A100 80 GB), nvidia.com/gpu 80 as hami-go's device plugin (split 10) publishes. One
# NodePool per GPU model, whose template labels carry the GFD labels hami-go's device plugin writes
# (nvidia.com/gpu.memory, nvidia.com/gpu.product), so Karpenter knows them before the node exists;
# the 40 GB pool has the higher weight (the cheaper cards first), so Karpenter tries it first.
# Then NodeOverlays (feature gate NodeOverlay) add the extended resources to the instance types.

KARPENTER_CRDS_DIR=${HAMI_GO_KARPENTER_CRDS:-}

karpenter_instance_types() {
  cat <<'EOF'
[
  {"name": "p4d.24xlarge", "architecture": "amd64", "operatingSystems": ["linux"],
   "offerings": [{"capacityType": "on-demand", "zone": "zone-a", "price": 32.77}],
   "resources": {"cpu": "96", "memory": "1152Gi", "ephemeral-storage": "8000Gi", "pods": "110", "nvidia.com/gpu": "80"}},
  {"name": "p4de.24xlarge", "architecture": "amd64", "operatingSystems": ["linux"],
   "offerings": [{"capacityType": "on-demand", "zone": "zone-a", "price": 40.97}],
   "resources": {"cpu": "96", "memory": "1152Gi", "ephemeral-storage": "8000Gi", "pods": "110", "nvidia.com/gpu": "80"}}
]
EOF
}

karpenter_objects() {
  cat <<'EOF'
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: default}
EOF
  local np
  for np in "gpu-40g p4d.24xlarge 40960 NVIDIA-A100-SXM4-40GB 20" "gpu-80g p4de.24xlarge 81920 NVIDIA-A100-SXM4-80GB 10"; do
    set -- $np
    cat <<EOF
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: $1}
spec:
  weight: $5
  template:
    metadata:
      labels: {nvidia.com/gpu.memory: "$3", nvidia.com/gpu.product: $4, nvidia.com/gpu.count: "8"}
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [$2]}
  disruption: {consolidateAfter: 1h}
EOF
  done
}

# karpenter_overlays ($with_pergpu: yes|no): NodeOverlays giving each instance type its
# hami-go.io/gpu-memory (8 x MiB per card), hami-go.io/gpu-cores (8 x 100) and, with "yes", the per-GPU limit names of hami-go's
# pods (nvidia.com/gpumem, -percentage, gpucores) a capacity that never binds: their sum over a
# node's pods is at most its total (MiB, 100 % x 8 GPUs).
karpenter_overlays() {
  local t extra
  for t in "p4d-gpu-memory p4d.24xlarge 327680" "p4de-gpu-memory p4de.24xlarge 655360"; do
    set -- $t
    extra=""
    [[ ${with_pergpu:-no} == yes ]] && extra=", nvidia.com/gpumem: \"$3\", nvidia.com/gpumem-percentage: \"800\", nvidia.com/gpucores: \"800\""
    cat <<EOF
---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: $1}
spec:
  requirements:
  - {key: node.kubernetes.io/instance-type, operator: In, values: [$2]}
  capacity: {hami-go.io/gpu-memory: "$3", hami-go.io/gpu-cores: "800"$extra}
EOF
  done
}

# karpenter_scenario <title> <pod> <gpus> <MiB> [extra] [anno]: one Pending pod; Karpenter's
# decision (Nominated / its FailedScheduling) and the NodeClaim's instance type; then the pod,
# NodeClaims and Nodes are deleted.
karpenter_scenario() {
  local title=$1 pod=$2 gpus=$3 mib=$4 extra=${5:-} anno=${6:-} decision nc i
  record ""
  record "== Karpenter: $title (pod $pod: $gpus GPU x $mib MiB = $((gpus * mib)) hami-go.io/gpu-memory)"
  gpu_pod "$pod" "$gpus" "$mib" "$extra" "$anno"
  decision=$(WAIT_SOURCE=karpenter wait_event "$pod" 90 Nominated FailedScheduling)
  record "decision: $decision"
  if [[ $decision == Nominated ]]; then
    for ((i = 0; i < 30; i++)); do
      nc=$(kc get nodeclaims -o jsonpath='{range .items[*]}{.metadata.name} nodepool={.metadata.labels.karpenter\.sh/nodepool} type={.metadata.labels.node\.kubernetes\.io/instance-type} gpu.memory={.metadata.labels.nvidia\.com/gpu\.memory}{"\n"}{end}' 2>/dev/null)
      [[ $nc == *type=p4* ]] && break
      sleep 1
    done
    printf '%s\n' "$nc" | sed '/^$/d; s/^/  nodeclaim: /' | tee -a "$RESULTS.part" >&2
  fi
  kc get events -n $NS --field-selector "involvedObject.name=$pod,source=karpenter" \
    -o custom-columns=REASON:.reason,MSG:.message --no-headers 2>/dev/null | sort -u | cut -c1-900 |
    sed 's/^/  event: /' | tee -a "$RESULTS.part" >&2
  kc delete pod -n $NS "$pod" --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
  kc delete nodeclaims --all --wait=false >/dev/null 2>&1 || true
  sleep 3
  for nc in $(kc get nodeclaims,nodes -o name 2>/dev/null); do
    kc patch "$nc" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  done
  kc delete nodes --all --wait=false >/dev/null 2>&1 || true
  kc delete events -n $NS --all >/dev/null 2>&1 || true
  twait "cleanup" 60 bash -c "[[ -z \$('$K8S_BIN/kubectl' --kubeconfig='$TRIAL_KUBECONFIG' get nodeclaims,nodes,pods -n $NS -o name) ]]"
}

karpenter_trial() {
  local crds=$KARPENTER_CRDS_DIR
  if [[ -z $crds ]]; then
    crds=$(cd "$here/../tools/karpenter" && GOTOOLCHAIN=go1.27.3 GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)
  fi
  kc apply --server-side -f "$crds/kwok/charts/crds" -f "$crds/kwok/apis/crds" >/dev/null
  twait "Karpenter CRDs" 60 kc get nodepools,nodeclaims,nodeoverlays,kwoknodeclasses
  karpenter_instance_types >"$TRIAL_DIR/instance-types.json"
  kc apply -f - >/dev/null < <(karpenter_objects)
  record ""
  record "== Karpenter $(basename "$(dirname "$KARPENTER_BIN")") (kwok provider): instance types p4d.24xlarge (8 x A100 40 GB, \$32.77/h) and p4de.24xlarge (8 x A100 80 GB, \$40.97/h), cpu 96, memory 1152Gi, nvidia.com/gpu 80, no hami-go.io/gpu-memory; NodePools gpu-40g (weight 20) and gpu-80g (weight 10), template labels nvidia.com/gpu.memory 40960 / 81920"
  KUBECONFIG=$TRIAL_KUBECONFIG DISABLE_LEADER_ELECTION=true METRICS_PORT=$TRIAL_KARPENTER_PORT \
    HEALTH_PROBE_PORT=$((TRIAL_KARPENTER_PORT + 1)) SYSTEM_NAMESPACE=kube-system \
    INSTANCE_TYPES_FILE_PATH=$TRIAL_DIR/instance-types.json FEATURE_GATES=NodeOverlay=true \
    BATCH_IDLE_DURATION=1s BATCH_MAX_DURATION=3s LOG_LEVEL=debug \
    tstart karpenter "$KARPENTER_BIN"
  twait "Karpenter health" 120 bash -c "exec 3<>/dev/tcp/127.0.0.1/$((TRIAL_KARPENTER_PORT + 1))"
  sleep 5
  local gt60k='  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: nvidia.com/gpu.memory, operator: Gt, values: ["59999"]}'
  karpenter_scenario "instance types without hami-go.io/gpu-memory (#751)" k60k-none 1 60000
  with_pergpu=no karpenter_overlays | kc apply -f - >/dev/null
  sleep 5
  karpenter_scenario "NodeOverlays add hami-go.io/gpu-memory only" k60k-overlay 1 60000
  NO_PERGPU=1 karpenter_scenario "same, the pod without nvidia.com/gpumem" k60k-overlay-nopergpu 1 60000
  with_pergpu=yes karpenter_overlays | kc apply -f - >/dev/null
  sleep 5
  karpenter_scenario "NodeOverlays add hami-go.io/gpu-memory and the per-GPU names; no model constraint" k60k 1 60000
  karpenter_scenario "same, node affinity nvidia.com/gpu.memory Gt 59999" k60k-affinity 1 60000 "$gt60k"
  karpenter_scenario "5 GPUs x 80000 MiB = 400000 MiB" k400k 5 80000
  karpenter_scenario "8 GPUs x 100000 MiB = 800000 MiB (more than any type)" k800k 8 100000
  tstop karpenter
}

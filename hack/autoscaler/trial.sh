#!/usr/bin/env bash
# Autoscaler trial (issue 25 item 3): Cluster Autoscaler's and Karpenter's KWOK providers on a
# private control plane (lib.sh: etcd, kube-apiserver, kube-scheduler on other loopback ports),
# with GPU node groups of 8 x 40 GiB and 8 x 80 GiB cards that carry hami-go.io/gpu-memory, and
# Pending pods as hami-go's webhook leaves them. Prints each scenario's decision and writes the
# full record to $HAMI_GO_TRIAL_DIR/results.txt (default /tmp/hami-go-autoscaler-trial).
#
#   trial.sh [ca] [karpenter]   run those trials (none: both), then tear everything down
#   trial.sh down               stop a trial left running (its processes by pid file only)
#
# Binaries: hack/autoscaler/build.sh (make autoscaler-trial runs it first). A trial whose binary
# is missing is skipped with the reason. HAMI_GO_TRIAL_KEEP=1 keeps the state folder.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
CA_BIN=${HAMI_GO_CA_BIN:-$TOOLS_CACHE/cluster-autoscaler-$(cat "$here/CA_VERSION")/cluster-autoscaler}
KARPENTER_BIN=${HAMI_GO_KARPENTER_BIN:-$TOOLS_CACHE/karpenter-$(cat "$here/KARPENTER_VERSION")/karpenter-kwok}
RESULTS=$TRIAL_DIR/results.txt
NS=trial

if [[ ${1:-} == down ]]; then
  trial_down
  exit 0
fi
what=("$@")
((${#what[@]})) || what=(ca karpenter)

record() { printf '%s\n' "$*" | tee -a "$RESULTS.part" >&2; }

# gpu_pod <name> <gpus> <MiB per GPU> [extra pod spec YAML, indented 2] [annotations YAML, indented 4]:
# one container as hami-go's webhook leaves it in device-plugin mode: limits nvidia.com/gpu (count),
# nvidia.com/gpumem (MiB per GPU) and hami-go.io/gpu-memory (GPUs x MiB per GPU; requests ==
# limits for extended resources), schedulerName hami-go-scheduler. $NO_PERGPU=1 leaves
# nvidia.com/gpumem out (to tell which resource an autoscaler refuses).
gpu_pod() {
  local name=$1 gpus=$2 mib=$3 extra=${4:-} anno=${5:-}
  kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $name
  namespace: $NS
  annotations:
    trial: "$gpus GPUs x $mib MiB"
$anno
spec:
  schedulerName: hami-go-scheduler
  automountServiceAccountToken: false
$extra
  containers:
  - name: main
    image: registry.k8s.io/pause:3.10
    resources:
      requests: {cpu: "4", memory: 16Gi}
      limits:
        cpu: "4"
        memory: 16Gi
        nvidia.com/gpu: "$gpus"
$([[ ${NO_PERGPU:-} == 1 ]] || echo "        nvidia.com/gpumem: \"$mib\"")
        hami-go.io/gpu-memory: "$((gpus * mib))"
EOF
}

# pod_events <pod>: its events, oldest first, "reason: message" (from any component).
pod_events() {
  kc get events -n $NS --field-selector "involvedObject.name=$1" --sort-by=.lastTimestamp \
    -o custom-columns=SRC:.source.component,REASON:.reason,MSG:.message --no-headers 2>/dev/null || true
}

# wait_event <pod> <seconds> <reason...>: the first of those reasons the pod gets, or "timeout";
# $WAIT_SOURCE: only events of that source component.
wait_event() {
  local pod=$1 secs=$2 i r
  shift 2
  for ((i = 0; i < secs; i++)); do
    for r in "$@"; do
      if kc get events -n $NS --field-selector "involvedObject.name=$pod,reason=$r${WAIT_SOURCE:+,source=$WAIT_SOURCE}" -o name 2>/dev/null | grep -q .; then
        echo "$r"
        return 0
      fi
    done
    sleep 1
  done
  echo timeout
}

# ---------------------------------------------------------------- Cluster Autoscaler (kwok)
# Node groups: CA's kwok provider reads template Nodes from a ConfigMap; the group is the value of
# label hami-go.io/trial-nodegroup. The 40 GiB group has fewer CPUs and less memory, so the
# least-waste expander (CA's default) prefers it whenever both fit.
ca_templates() {
  local g
  for g in "a100-40g 40960 48 576Gi NVIDIA-A100-SXM4-40GB" "a100-80g 81920 96 1152Gi NVIDIA-A100-SXM4-80GB"; do
    set -- $g
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $1
  annotations:
    cluster-autoscaler.kwok.nodegroup/min-count: "0"
    cluster-autoscaler.kwok.nodegroup/max-count: "3"
  labels:
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    kubernetes.io/hostname: $1
    hami-go.io/trial-nodegroup: $1
    nvidia.com/gpu.product: $5
    nvidia.com/gpu.count: "8"
    nvidia.com/gpu.memory: "$2"
status:
  capacity: &res {cpu: "$3", memory: $4, pods: "110", nvidia.com/gpu: "80", hami-go.io/gpu-memory: "$((8 * $2))", hami-go.io/gpu-cores: "800"}
  allocatable: *res
  conditions:
  - {type: Ready, status: "True", reason: KubeletReady, message: kwok template, lastHeartbeatTime: "2026-01-01T00:00:00Z", lastTransitionTime: "2026-01-01T00:00:00Z"}
EOF
  done
}

ca_config() {
  kc create configmap kwok-provider-templates -n kube-system --from-file=templates=<(ca_templates) \
    --dry-run=client -o yaml | kc apply -f - >/dev/null
  kc create configmap kwok-provider-config -n kube-system --from-literal=config="$(
    cat <<'EOF'
apiVersion: v1alpha1
readNodesFrom: configmap
nodegroups:
  fromNodeLabelKey: hami-go.io/trial-nodegroup
nodes:
  skipTaint: true
  gpuConfig:
    gpuLabelKey: nvidia.com/gpu.product
    availableGPUTypes:
      NVIDIA-A100-SXM4-40GB: {}
      NVIDIA-A100-SXM4-80GB: {}
configmap:
  name: kwok-provider-templates
EOF
  )" --dry-run=client -o yaml | kc apply -f - >/dev/null
  # CA's in-tree scheduler framework (--scheduler-config-file): "chart" is the chart's
  # kube-scheduler configuration (extender with managedResources ignoredByScheduler), "ignored"
  # gives NodeResourcesFit the same names as ignoredResources.
  cat >"$TRIAL_DIR/ca-sched-chart.yaml" <<'EOF'
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: hami-go-scheduler
extenders:
- urlPrefix: http://127.0.0.1:1
  filterVerb: filter
  nodeCacheCapable: true
  ignorable: false
  managedResources:
  - {name: nvidia.com/gpu, ignoredByScheduler: false}
  - {name: nvidia.com/gpumem, ignoredByScheduler: true}
  - {name: nvidia.com/gpumem-percentage, ignoredByScheduler: true}
  - {name: nvidia.com/gpucores, ignoredByScheduler: true}
EOF
  cat >"$TRIAL_DIR/ca-sched-ignored.yaml" <<'EOF'
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - name: NodeResourcesFit
    args:
      ignoredResources: [nvidia.com/gpumem, nvidia.com/gpumem-percentage, nvidia.com/gpucores]
EOF
}

# ca_scenario <title> <sched config: none|chart|ignored> <pod> <gpus> <MiB> [extra] [anno]:
# a fresh CA, one Pending pod, CA's decision, the node it made and where kube-scheduler bound the
# pod; then CA stops (its kwok Cleanup deletes its nodes), the pod and any node are deleted.
ca_scenario() {
  local title=$1 sc=$2 pod=$3 gpus=$4 mib=$5 extra=${6:-} anno=${7:-} args=() decision node="" i log
  log=$TRIAL_LOGS/ca-$pod-$sc.log
  [[ $sc == none ]] || args=(--scheduler-config-file="$TRIAL_DIR/ca-sched-$sc.yaml")
  record ""
  record "== CA: $title (pod $pod: $gpus GPU x $mib MiB = $((gpus * mib)) hami-go.io/gpu-memory; CA scheduler config: $sc)"
  gpu_pod "$pod" "$gpus" "$mib" "$extra" "$anno"
  twait "pod $pod Unschedulable" 60 bash -c "[[ \$('$K8S_BIN/kubectl' --kubeconfig='$TRIAL_KUBECONFIG' get pod -n $NS $pod -o jsonpath='{.status.conditions[?(@.type==\"PodScheduled\")].reason}') == Unschedulable ]]"
  POD_NAMESPACE=kube-system KWOK_PROVIDER_MODE=local KUBECONFIG=$TRIAL_KUBECONFIG \
    tstart cluster-autoscaler "$CA_BIN" --cloud-provider=kwok --kubeconfig="$TRIAL_KUBECONFIG" \
    --leader-elect=false --address=127.0.0.1:$TRIAL_CA_PORT --scan-interval=5s \
    --expander=least-waste --scale-down-enabled=false --max-node-provision-time=5m --v=4 "${args[@]}"
  decision=$(wait_event "$pod" 120 TriggeredScaleUp NotTriggerScaleUp)
  if [[ $decision == TriggeredScaleUp ]]; then
    for ((i = 0; i < 60; i++)); do
      lift_not_ready
      node=$(kc get pod -n $NS "$pod" -o jsonpath='{.spec.nodeName}')
      [[ -n $node ]] && break
      sleep 1
    done
  fi
  sleep 2
  record "decision: $decision"
  pod_events "$pod" | sed 's/^/  event: /' | tee -a "$RESULTS.part" >&2
  kc get nodes -L hami-go.io/trial-nodegroup,nvidia.com/gpu.memory --no-headers 2>/dev/null |
    awk '{print "  node: " $1 " group=" $(NF-1) " gpu.memory=" $NF}' | tee -a "$RESULTS.part" >&2
  [[ -z $node ]] || record "  kube-scheduler bound $pod to $node ($(kc get node "$node" -o jsonpath='{.metadata.labels.nvidia\.com/gpu\.memory}') MiB per GPU)"
  # CA's own words: its plan, or why no group helps (v4 names each group's failing predicate).
  grep -hE "Final scale-up plan|Scale-up: setting group|No expansion options|didn't trigger scale-up|Pod $NS/$pod can't be scheduled on|Insufficient|no node group" "$TRIAL_LOGS/cluster-autoscaler.log" |
    sed -E 's/^[IWE][0-9]{4} [0-9:.]+ +[0-9]+ //' | sort -u | head -12 | sed 's/^/  CA log: /' | tee -a "$RESULTS.part" >&2
  tstop cluster-autoscaler
  cp "$TRIAL_LOGS/cluster-autoscaler.log" "$log"
  kc delete pod -n $NS "$pod" --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
  kc delete nodes --all --wait=false >/dev/null 2>&1 || true
  kc delete events -n $NS --all >/dev/null 2>&1 || true
  twait "cleanup" 30 bash -c "[[ -z \$('$K8S_BIN/kubectl' --kubeconfig='$TRIAL_KUBECONFIG' get nodes,pods -n $NS -o name) ]]"
}

trial_ca() {
  if [[ ! -x $CA_BIN ]]; then
    record "== CA: skipped: no $CA_BIN (hack/autoscaler/build.sh ca says why)"
    return 0
  fi
  record "== Cluster Autoscaler sigs.k8s.io/cluster-autoscaler $(cat "$here/CA_VERSION") (kwok build, Kubernetes libraries v0.37.2), node groups: a100-40g = 8 x 40960 MiB (hami-go.io/gpu-memory 327680, nvidia.com/gpu 80, 48 CPU, 576Gi), a100-80g = 8 x 81920 MiB (655360, nvidia.com/gpu 80, 96 CPU, 1152Gi); expander least-waste"
  ca_config
  local gt60k='  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: nvidia.com/gpu.memory, operator: Gt, values: ["59999"]}'
  ca_scenario "hami-go's pod, CA without a scheduler config" none p60k-plain 1 60000
  ca_scenario "hami-go's pod, CA given the chart's scheduler config (extender managedResources)" chart p60k-chart 1 60000
  ca_scenario "1 GPU x 60000 MiB, no model constraint" ignored p60k 1 60000
  ca_scenario "1 GPU x 60000 MiB with nvidia.com/use-gputype: A100-SXM4-80GB" ignored p60k-gputype 1 60000 "" '    nvidia.com/use-gputype: A100-SXM4-80GB'
  ca_scenario "1 GPU x 60000 MiB with node affinity nvidia.com/gpu.memory Gt 59999" ignored p60k-affinity 1 60000 "$gt60k"
  ca_scenario "5 GPUs x 80000 MiB = 400000 MiB" ignored p400k 5 80000
  ca_scenario "8 GPUs x 100000 MiB = 800000 MiB (more than any template)" ignored p800k 8 100000
}

# ---------------------------------------------------------------- Karpenter (kwok)
trial_karpenter() {
  if [[ ! -x $KARPENTER_BIN ]]; then
    record "== Karpenter: skipped: no $KARPENTER_BIN (hack/autoscaler/build.sh karpenter says why)"
    return 0
  fi
  source "$here/karpenter.sh"
  karpenter_trial
}

cleanup() {
  local rc=$?
  trial_down
  [[ ! -f $RESULTS.part ]] || mv "$RESULTS.part" "$RESULTS"
  [[ $rc == 0 ]] || tlog "failed (exit $rc); logs were in $TRIAL_LOGS (kept: HAMI_GO_TRIAL_KEEP=1)"
  exit $rc
}

trial_up
trap cleanup EXIT
kc create namespace $NS >/dev/null
for w in "${what[@]}"; do
  case $w in
    ca) trial_ca ;;
    karpenter) trial_karpenter ;;
    *) tdie "unknown trial $w (ca, karpenter)" ;;
  esac
done
tlog "results: $RESULTS"

# Shared by the reproducers' run.sh (sourced). KUBECONFIG: the cluster to use; unset, a private
# control plane is brought up with ./controlplane.sh and torn down at exit (DRA_REPRO_KEEP=1 keeps it).
# KUBECTL: the kubectl binary (default: the local cluster's tool cache, else kubectl on PATH).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KUBECTL=${KUBECTL:-$HOME/.cache/hami-go/tools/kubernetes-v1.37.2/kubectl}
[[ -x $KUBECTL ]] || KUBECTL=kubectl
# at_exit <command>: run at exit, last registered first.
_cleanups=()
at_exit() { _cleanups+=("$1"); }
_run_cleanups() { local i; for ((i = ${#_cleanups[@]} - 1; i >= 0; i--)); do eval "${_cleanups[i]}" || true; done; }
trap _run_cleanups EXIT
if [[ -z ${KUBECONFIG:-} ]]; then
  KUBECONFIG=$("$here/controlplane.sh" up)
  [[ -n ${DRA_REPRO_KEEP:-} ]] || at_exit '"$here/controlplane.sh" down'
fi
export KUBECONFIG
k() { "$KUBECTL" "$@"; }
say() { printf '[%s] %s\n' "$(date +%H:%M:%S.%3N)" "$*"; }

# node <name> <cpu>: a Node object with no kubelet: allocatable cpu, 512Gi memory, 110 pods, Ready,
# without the not-ready taint the API server puts on new nodes.
node() {
  k apply -f - >/dev/null <<Y
apiVersion: v1
kind: Node
metadata: {name: $1, labels: {kubernetes.io/hostname: $1}}
Y
  k patch node "$1" --subresource=status --type=merge -p "{\"status\":{\"capacity\":{\"cpu\":\"$2\",\"memory\":\"512Gi\",\"pods\":\"110\"},\"allocatable\":{\"cpu\":\"$2\",\"memory\":\"512Gi\",\"pods\":\"110\"},\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"NoKubelet\",\"message\":\"reproducer\",\"lastHeartbeatTime\":\"$(date -u +%FT%TZ)\",\"lastTransitionTime\":\"$(date -u +%FT%TZ)\"}]}}" >/dev/null
  k taint node "$1" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
}

# gpus <node> <device>...: DeviceClass gpu.example.com and a ResourceSlice of <node> with the
# given devices, each shareable (allowMultipleAllocations) with an 80Gi consumable memory capacity
# and an attribute index (0, 1, ... in the order given; CEL cannot read a device's name).
gpus() {
  local n=$1 d
  shift
  {
    cat <<Y
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors:
  - cel: {expression: 'device.driver == "gpu.example.com"'}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: $n-gpu.example.com}
spec:
  driver: gpu.example.com
  nodeName: $n
  pool: {name: $n, generation: 1, resourceSliceCount: 1}
  devices:
Y
    local i=0
    for d in "$@"; do
      cat <<Y
  - name: $d
    allowMultipleAllocations: true
    attributes: {index: {int: $i}}
    capacity:
      memory: {value: 80Gi, requestPolicy: {default: 80Gi, validRange: {min: 1Mi, max: 80Gi, step: 1Mi}}}
Y
      i=$((i + 1))
    done
  } | k apply -f - >/dev/null
}

# wait_bound <pod> <seconds>: until the pod has a node (0) or the time is up (1).
wait_bound() {
  local i
  for ((i = 0; i < $2 * 4; i++)); do
    [[ -n $(k get pod "$1" -o jsonpath='{.spec.nodeName}' 2>/dev/null) ]] && return 0
    sleep 0.25
  done
  return 1
}

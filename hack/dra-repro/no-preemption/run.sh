#!/usr/bin/env bash
# No preemption for ResourceClaims in kube-scheduler 1.37: a high-priority pod whose claim fits
# only once a low-priority pod's claim is gone stays Pending; the same pair asking CPU instead
# preempts. README.md has the observed output.
set -euo pipefail
source "$(dirname "$0")/../common.sh"
node node-1 64
gpus node-1 gpu-0
k apply -f - >/dev/null <<'Y'
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 0
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000000
Y

# pod <name> <priority class> [claim template | cpu:<n>]
pod() {
  local res
  if [[ $3 == cpu:* ]]; then
    res="resources: {requests: {cpu: \"${3#cpu:}\"}}"
    k apply -f - >/dev/null <<Y
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  priorityClassName: $2
  terminationGracePeriodSeconds: 0
  containers: [{name: c, image: registry.k8s.io/pause:3.10, $res}]
Y
  else
    k apply -f - >/dev/null <<Y
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  priorityClassName: $2
  terminationGracePeriodSeconds: 0
  resourceClaims: [{name: gpu, resourceClaimTemplateName: $3}]
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {claims: [{name: gpu}]}}]
Y
  fi
}
k apply -f - >/dev/null <<'Y'
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: gpu-60gi}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.example.com
          capacity: {requests: {memory: 60Gi}}
Y

say "1. claims: low-priority pod 'low-gpu' takes 60Gi of gpu-0 (80Gi)"
pod low-gpu low gpu-60gi
wait_bound low-gpu 30 || { say "low-gpu not bound"; exit 1; }
say "   low-gpu bound to $(k get pod low-gpu -o jsonpath='{.spec.nodeName}'), claim $(k get resourceclaims -o jsonpath='{.items[0].metadata.name} on {.items[0].status.allocation.devices.results[0].device}')"
say "   high-priority pod 'high-gpu' asks 60Gi: fits only if low-gpu is preempted"
pod high-gpu high gpu-60gi
sleep 20
say "   after 20 s: high-gpu nodeName='$(k get pod high-gpu -o jsonpath='{.spec.nodeName}')' nominatedNodeName='$(k get pod high-gpu -o jsonpath='{.status.nominatedNodeName}')'; low-gpu $(k get pod low-gpu -o jsonpath='{.metadata.deletionTimestamp}' | grep -q . && echo deleted || echo 'still there')"
k get events --field-selector involvedObject.name=high-gpu -o jsonpath='{range .items[*]}   event {.reason}: {.message}{"\n"}{end}'
say "   kube-scheduler's log for high-gpu:"
grep -h 'pod="default/high-gpu"' "${DRA_REPRO_DIR:-/tmp/hami-go-dra-repro}/kube-scheduler.log" 2>/dev/null | tail -2 | sed 's/^/   /' || true
say "   deleting low-gpu by hand (what preemption would do)"
k delete pod low-gpu --wait=false >/dev/null
if wait_bound high-gpu 60; then
  say "   high-gpu bound, claim on $(k get resourceclaims -o jsonpath='{range .items[?(@.status.allocation)]}{.status.allocation.devices.results[0].device}{end}')"
else
  say "   high-gpu still not bound 60 s after low-gpu's deletion"
fi
k delete pod high-gpu --wait=false >/dev/null

say "2. the same with CPU: low-priority pod 'low-cpu' requests 60 of the node's 64 CPUs"
pod low-cpu low cpu:60
wait_bound low-cpu 30 || { say "low-cpu not bound"; exit 1; }
say "   low-cpu bound; high-priority pod 'high-cpu' requests 60 CPUs"
pod high-cpu high cpu:60
if wait_bound high-cpu 30; then
  say "   high-cpu bound to $(k get pod high-cpu -o jsonpath='{.spec.nodeName}'); low-cpu: $(k get pod low-cpu -o name 2>/dev/null || echo 'deleted (preempted)')"
else
  say "   high-cpu not bound in 30 s"
fi
k get events --field-selector involvedObject.name=low-cpu,reason=Preempted -o jsonpath='{range .items[*]}   event on low-cpu {.reason}: {.message}{"\n"}{end}'

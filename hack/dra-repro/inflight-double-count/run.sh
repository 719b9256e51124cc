#!/usr/bin/env bash
# kube-scheduler counts a claim twice between its allocation write and the end of its PreBind
# (DynamicResources, GatherAllocatedState: the assume cache's copy and the in-flight copy).
# Part 1 holds that window open with a webhook that delays one claim's allocation write, and shows
# a pod that fits the rest of a device refused, and another put on a second device. Part 2 is the
# same race without any help: bursts of 4 pods whose claims fit one device. README.md has the
# observed output.
# Environment: ROUNDS (part 2's bursts, default 20), DELAY (part 1's hold, default 8s),
# FLUSH=1 (part 1 waits for kube-scheduler's 5-minute flush instead of nudging the queue).
set -euo pipefail
source "$(dirname "$0")/../common.sh"
ROUNDS=${ROUNDS:-20}
DELAY=${DELAY:-8s}
WEBHOOK_PORT=${WEBHOOK_PORT:-36445}
work=$(mktemp -d)
at_exit 'rm -rf "$work"'

node node-1 64
gpus node-1 gpu-0 gpu-1

# claim <name> <memory> <cel selector or ""> [slow]
claim() {
  local sel="" lab=""
  [[ -n $3 ]] && sel="selectors: [{cel: {expression: '$3'}}]"
  [[ ${4:-} == slow ]] && lab="labels: {repro.example.com/slow: \"true\"}"
  k apply -f - >/dev/null <<Y
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: $1, $lab}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com, capacity: {requests: {memory: $2}}, $sel}
Y
}
# pod <name> <claim>...: a pod using the claims in that order (PreBind writes them in that order).
pod() {
  local name=$1 c claims="" refs=""
  shift
  for c in "$@"; do
    claims+="{name: $c, resourceClaimName: $c}, "
    refs+="{name: $c}, "
  done
  k apply -f - >/dev/null <<Y
apiVersion: v1
kind: Pod
metadata: {name: $name}
spec:
  terminationGracePeriodSeconds: 0
  resourceClaims: [${claims%, }]
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {claims: [${refs%, }]}}]
Y
}
device_of() { k get resourceclaim "$1" -o jsonpath='{.status.allocation.devices.results[0].device}'; }
gpu0=' device.attributes["gpu.example.com"].index == 0'
gpu1=' device.attributes["gpu.example.com"].index == 1'

say "part 1: the window held open (a webhook delays one allocation write by $DELAY)"
(cd "$here/../.." && go build -o "$work/slowwebhook" ./hack/dra-repro/inflight-double-count/slowwebhook)
"$work/slowwebhook" --listen "127.0.0.1:$WEBHOOK_PORT" --delay "$DELAY" --ca-out "$work/ca.pem" >"$work/webhook.log" 2>&1 &
webhook_pid=$!
at_exit 'kill $webhook_pid 2>/dev/null'
for _ in $(seq 40); do [[ -s $work/ca.pem ]] && break; sleep 0.25; done
k apply -f - >/dev/null <<Y
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: repro-slow-claim-status}
webhooks:
- name: slow.repro.example.com
  clientConfig: {url: "https://127.0.0.1:$WEBHOOK_PORT/validate", caBundle: $(base64 -w0 "$work/ca.pem")}
  rules: [{apiGroups: [resource.k8s.io], apiVersions: [v1], operations: [UPDATE], resources: [resourceclaims/status]}]
  objectSelector: {matchLabels: {repro.example.com/slow: "true"}}
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 20
  failurePolicy: Fail
Y
sleep 2

# used <device>: GiB of claims allocated on <device> now
used() {
  k get resourceclaims -o jsonpath='{range .items[*]}{.status.allocation.devices.results[0].device} {.status.allocation.devices.results[0].consumedCapacity.memory}{"\n"}{end}' |
    awk -v d="$1" '$1 == d { v = $2; if (v ~ /Gi$/) { sub(/Gi$/, "", v); s += v } else if (v ~ /Mi$/) { sub(/Mi$/, "", v); s += v / 1024 } } END { printf "%g", s }'
}
clear_all() {
  k delete pod --all --wait=false >/dev/null
  k delete resourceclaim --all --wait=false >/dev/null
  for _ in $(seq 120); do [[ -z $(k get resourceclaims,pods -o name) ]] && break; sleep 0.25; done
}

# window <late pod> <its selector>: pod 'holder' opens the window, then <late pod> asks 40Gi.
window() {
  local late=$1 sel=$2
  say "pod 'holder' uses claim 'holder-a' (40Gi on gpu-0) and then 'holder-b' (1Gi on gpu-1, its write delayed)"
  claim holder-a 40Gi "$gpu0"
  claim holder-b 1Gi "$gpu1" slow
  pod holder holder-a holder-b
  for _ in $(seq 80); do [[ -n $(device_of holder-a) ]] && break; sleep 0.25; done
  say "holder-a allocated on $(device_of holder-a) and written; holder-b's write is held, so holder's PreBind is not over"
  sleep 1
  say "pod '$late' asks 40Gi ${sel:+on gpu-0 }(gpu-0 has $(awk -v u="$(used gpu-0)" 'BEGIN { printf "%g", 80 - u }')Gi left)"
  claim "$late" 40Gi "$sel"
  pod "$late" "$late"
  sleep 3
  local node dev
  node=$(k get pod "$late" -o jsonpath='{.spec.nodeName}')
  dev=$(device_of "$late")
  if [[ -n $node ]]; then
    say "$late: bound, claim on ${dev:-?}; holder bound: $([[ -n $(k get pod holder -o jsonpath='{.spec.nodeName}') ]] && echo yes || echo no)"
  else
    say "$late: Pending"
    k get events --field-selector "involvedObject.name=$late,reason=FailedScheduling" -o jsonpath='{range .items[*]}  event FailedScheduling: {.message}{"\n"}{end}'
  fi
  wait_bound holder 30 && say "holder bound (its PreBind is over): gpu-0 holds $(used gpu-0)Gi, gpu-1 $(used gpu-1)Gi"
  if [[ -z $node ]]; then
    sleep 30
    say "30 s later: $late $([[ -n $(k get pod "$late" -o jsonpath='{.spec.nodeName}') ]] && echo bound || echo 'still Pending (nothing requeues it)')"
    if [[ ${FLUSH:-} == 1 ]]; then
      local t0=$SECONDS
      wait_bound "$late" 330 && say "$late bound $((SECONDS - t0 + 30)) s after the holder, by kube-scheduler's flush of unschedulable pods"
    else
      say "an unrelated ResourceSlice update requeues it (FLUSH=1 waits for the 5-minute flush instead)"
      k label resourceslice node-1-gpu.example.com --overwrite "repro.example.com/nudge=$RANDOM" >/dev/null
      wait_bound "$late" 30 && say "$late bound, claim on $(device_of "$late"): it fitted all along"
    fi
  fi
  clear_all
}

say "part 1a: a pod that may go anywhere"
window late-any ""
say "part 1b: a pod that fits only gpu-0"
window late-pinned "$gpu0"
say "webhook log:"
sed 's/^/  /' "$work/webhook.log"
k delete validatingwebhookconfiguration repro-slow-claim-status >/dev/null

say "part 2: no help, $ROUNDS bursts of 4 pods, each claim 20000Mi (4 x 20000Mi = 80000Mi fit one 80Gi device)"
k apply -f - >/dev/null <<'Y'
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: slice-20000mi}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.example.com, capacity: {requests: {memory: 20000Mi}}}
Y
spread=0
for r in $(seq "$ROUNDS"); do
  for i in 1 2 3 4; do
    cat <<Y
---
apiVersion: v1
kind: Pod
metadata: {name: w$i}
spec:
  terminationGracePeriodSeconds: 0
  resourceClaims: [{name: gpu, resourceClaimTemplateName: slice-20000mi}]
  containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {claims: [{name: gpu}]}}]
Y
  done | k apply -f - >/dev/null
  for i in 1 2 3 4; do wait_bound "w$i" 60 || say "w$i not bound in 60 s"; done
  got=$(k get resourceclaims -o jsonpath='{range .items[*]}{.status.allocation.devices.results[0].device}{"\n"}{end}' | sort | uniq -c | awk '{printf "%s x%s ", $2, $1}')
  [[ $got == *gpu-1* ]] && spread=$((spread + 1))
  say "burst $r: $got"
  k delete pod --all --wait=false >/dev/null
  for _ in $(seq 120); do [[ -z $(k get resourceclaims,pods -o name) ]] && break; sleep 0.25; done
done
say "part 2: $spread of $ROUNDS bursts used a second device"

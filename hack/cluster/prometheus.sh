#!/usr/bin/env bash
# A Prometheus for the local cluster: `prometheus.sh up` (make prometheus-up) renders the chart's
# ServiceMonitors and PrometheusRule for the cluster's mode (hack/prometheus), and starts
# Prometheus (built by build-tools.sh) on 127.0.0.1:${HAMI_GO_PROMETHEUS_PORT:-9090} with its
# configuration and TSDB in $HAMI_GO_STATE/prometheus and its log in logs/prometheus.log.
# Kubernetes service discovery reads the cluster's kubeconfig; targets are kept to loopback and
# the cluster's own networks ($CLUSTER_NET, $POD_SUBNET). `prometheus.sh down` (make
# prometheus-down) stops it; down.sh stops it too. HAMI_GO_PROMETHEUS_INTERVAL: scrape and rule
# evaluation interval (default 2s). Extra arguments of `up` are passed to hack/prometheus (e.g.
# --set prometheusRule.nodeAgentDown.for=30s).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

up() {
  [[ -f $KUBECONFIG_FILE ]] || die "no cluster ($KUBECONFIG_FILE missing): run hack/cluster/up.sh first"
  local bin dir=$STATE/prometheus listen=127.0.0.1:${HAMI_GO_PROMETHEUS_PORT:-9090} args=()
  bin=$("$(dirname "$0")/build-tools.sh" prometheus helm | tail -n1)
  mkdir -p "$LOGS" "$PIDS"
  if pid=$(pid_of prometheus); then
    log "prometheus already running (pid $pid): http://$listen (prometheus.sh down first to reconfigure)"
    return 0
  fi
  mapfile -t args < <(cd "$REPO_ROOT" && go run ./hack/prometheus --out "$dir" --kubeconfig "$KUBECONFIG_FILE" \
    --helm "$bin/helm" --mode "$MODE" --interval "${HAMI_GO_PROMETHEUS_INTERVAL:-2s}" --listen "$listen" \
    --allow-net 127.0.0.0/8 --allow-net "$CLUSTER_NET" --allow-net "$POD_SUBNET" "$@" 2>>"$LOGS/prometheus.log")
  ((${#args[@]} > 0)) || die "hack/prometheus wrote no configuration (see $LOGS/prometheus.log)"
  start prometheus "--config.file=$dir/prometheus.yml" "$bin/prometheus" "${args[@]}"
  wait_for "prometheus /-/ready on $listen" 60 curl -sf "http://$listen/-/ready"
  log "prometheus ready: http://$listen (targets: http://$listen/api/v1/targets)"
}

case ${1:-} in
up) shift; up "$@" ;;
down) stop prometheus ;;
*) echo "usage: $0 up [hack/prometheus flags...] | down" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# The previous release of hami-go, for the upgrade tests (make test-upgrade, test/e2e
# upgrade_e2e_test.go): its source, its images and its chart, and the helm upgrade from it to this
# checkout's chart.
#
#   hack/cluster/previous-release.sh build     source and images of PREVIOUS_RELEASE (cached)
#   hack/cluster/previous-release.sh import    build, then import its images into the cluster's containerd
#   hack/cluster/previous-release.sh install   import, then install its chart (no hami-go release may be installed)
#   hack/cluster/previous-release.sh upgrade   helm upgrade to this checkout's chart and images, as up.sh installs them
#
# There is no published release yet: the previous release is a build of an earlier commit of this
# repository. Its tree is exported with `git archive` (the commit must be in this clone's history;
# a shallow clone lacks it: git fetch --unshallow) into
# $HAMI_GO_CACHE/previous-release/<commit>/src, and its own hack/images builds its images with the
# tag prev-<commit> into .../images, so they sit beside this checkout's (VERSION) in containerd.
# Both are cached by commit: a second build is a no-op. Output: lines "key=value" (commit, tag,
# chart, images) on stdout; progress on stderr.
#
# install runs the previous chart with the arguments this checkout's up.sh gives its own
# (values-local.yaml, mode, hamiCore.hostDir) and the image tags prev-<commit>; when the pin moves
# past a change of those arguments, give the old ones here (previous_chart_args).
# upgrade calls up.sh's own install_chart (components.sh): `helm upgrade --install` of
# charts/hami-go with the tags of this checkout's images (built and imported by up.sh), then the
# wait for the node's GPUs. Needs root and, except for build, the cluster of up.sh.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/components.sh"
progress_traps

# PREVIOUS_RELEASE: the commit the upgrade tests start from. Move it to the commit of the last
# release (or, until there is one, a recent commit of main) with `git rev-parse --short=7 <ref>`;
# the next `make test-upgrade` builds and caches its images. HAMI_GO_PREVIOUS_RELEASE overrides
# it for one run (e.g. to try an upgrade from an older commit).
PREVIOUS_RELEASE=${HAMI_GO_PREVIOUS_RELEASE:-a9543e4}

CACHE=${HAMI_GO_CACHE:-$HOME/.cache/hami-go}/previous-release

# resolve: COMMIT (the full hash), TAG, DIR from PREVIOUS_RELEASE, or a clear death.
resolve() {
  COMMIT=$(git -C "$REPO_ROOT" rev-parse --verify --quiet "$PREVIOUS_RELEASE^{commit}") ||
    die "the previous release $PREVIOUS_RELEASE is not a commit of this clone ($REPO_ROOT): a shallow clone lacks it (git fetch --unshallow), or the pin in $0 (PREVIOUS_RELEASE) names a commit of another history"
  TAG=prev-${COMMIT:0:7}
  DIR=$CACHE/$COMMIT
}

# build: the previous release's tree and images into $DIR, unless $DIR/done says they are there.
build() {
  resolve
  if [[ -f $DIR/done ]]; then
    progress "previous release ${COMMIT:0:7}: cached in $DIR"
    return 0
  fi
  local t0=$SECONDS
  mkdir -p "$LOGS"
  rm -rf "$DIR"
  mkdir -p "$DIR/src" "$DIR/images"
  git -C "$REPO_ROOT" archive --format=tar "$COMMIT" | tar -x -C "$DIR/src" ||
    die "git archive $COMMIT failed"
  STEP_DONE=built step 1 1 "previous release ${COMMIT:0:7}: images $TAG (its hack/images; output: $LOGS/previous-release.log)" \
    go_logged previous-release "$DIR/src/hack/images" run . --repo-root "$DIR/src" --version "$TAG" --out "$DIR/images" ||
    die "building the images of ${COMMIT:0:7} failed (see $LOGS/previous-release.log)"
  printf '%s\n' "$COMMIT" >"$DIR/done"
  progress "previous release ${COMMIT:0:7}: built in $((SECONDS - t0))s"
}

# import: the previous release's image tars into the node's containerd.
import() {
  build
  use_tools
  [[ -S $CONTAINERD_SOCK ]] || die "no containerd at $CONTAINERD_SOCK (bring the cluster up: hack/cluster/up.sh)"
  import_tars "$DIR"/images/*.tar
}

# previous_chart_args: how the previous release's chart is installed on the local cluster: what
# up.sh gave its chart at that commit, and its images' tags.
previous_chart_args() {
  local src=$DIR/src/charts/hami-go
  PREV_ARGS=(-f "$src/values-local.yaml" --set mode="$MODE" --set hamiCore.hostDir="$STATE/vgpu"
    --set devicePlugin.image.tag="$TAG" --set draDriver.image.tag="$TAG"
    --set scheduler.extender.image.tag="$TAG" --set webhook.image.tag="$TAG")
}

# install: the previous release's chart, on a cluster without hami-go.
install() {
  import
  export KUBECONFIG=$KUBECONFIG_FILE
  if helm status hami-go -n hami-go-system >/dev/null 2>&1; then
    die "a hami-go release is installed already (helm -n hami-go-system list); the upgrade test starts from a cluster without it: HAMI_GO_SKIP_CHART=1 hack/cluster/up.sh on a new cluster, or helm -n hami-go-system uninstall hami-go --wait"
  fi
  # up.sh's record of the images it last installed (restart_if_images_changed) is of a release
  # no longer installed: without it, the upgrade's install_chart does not restart what it rolled.
  rm -f "$STATE/images/hami-go.sha256"
  previous_chart_args
  log "installing the previous release's chart (${COMMIT:0:7}, images $TAG) in mode $MODE (log: $LOGS/helm.log)"
  helm upgrade --install hami-go "$DIR/src/charts/hami-go" "${PREV_ARGS[@]}" \
    -n hami-go-system --create-namespace --wait --timeout 5m \
    --kubeconfig "$KUBECONFIG_FILE" >>"$LOGS/helm.log" 2>&1 || die "helm install of the previous release failed (see $LOGS/helm.log)"
  if [[ $MODE == dra ]]; then
    wait_for "the DRA driver's ResourceSlice of $NODE_NAME" 120 gpus_published_dra
  else
    wait_for "nvidia.com/gpu allocatable on $NODE_NAME" 120 gpus_allocatable
  fi
}

# upgrade: this checkout's chart over the installed release, as up.sh installs it.
upgrade() {
  use_tools
  export KUBECONFIG=$KUBECONFIG_FILE
  helm status hami-go -n hami-go-system >/dev/null 2>&1 || die "no hami-go release to upgrade (previous-release.sh install first)"
  log "helm upgrade to this checkout's chart ($REPO_ROOT/charts/hami-go, images $VERSION) in mode $MODE"
  install_chart
}

main() {
  local cmd=${1:-}
  case $cmd in
    build) build ;;
    import | install) require_root; "$cmd" ;;
    upgrade) require_root; upgrade ;;
    *) die "usage: $0 build|import|install|upgrade" ;;
  esac
  if [[ $cmd != upgrade ]]; then
    printf 'commit=%s\ntag=%s\nchart=%s\nimages=%s\n' "$COMMIT" "$TAG" "$DIR/src/charts/hami-go" "$DIR/images"
  fi
}

main "$@"

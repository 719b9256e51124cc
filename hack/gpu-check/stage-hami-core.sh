#!/usr/bin/env bash
# Stages the HAMi-core that hack/gpu-check's isolation checks test into STAGE (build.sh calls it;
# run from the repository root): prints BUILD.txt's hami-core lines (the shipped version, what
# was staged) and writes STAGE/hami-core.env (gpucheck hami-core-build reads it).
#   hack/gpu-check/stage-hami-core.sh STAGE
set -euo pipefail
STAGE=$1
# The HAMi-core the chart ships: charts/hami-go/values.yaml hamiCore.image is HAMi's
# docker.io/projecthami/hamicore:v2.10.0, whose libvgpu.so HAMi builds from its libvgpu submodule,
# pinned at v2.10.0 to b216ba1 (`git ls-tree v2.10.0 libvgpu` in Project-HAMi/HAMi; built on
# nvidia/cuda:13.3.0-cudnn-devel-ubi8). Change both with the chart's tag (hack/gpu-check's
# TestShippedHAMiCoreIsTheChartsImage compares the image with values.yaml).
HAMI_CORE_SHIPPED_IMAGE=docker.io/projecthami/hamicore:v2.10.0
HAMI_GO_HAMI_CORE_COMMIT=${HAMI_GO_HAMI_CORE_COMMIT:-b216ba1be1b8e21488d1c7370ed3357b3049aad1}
# What the isolation checks test: HAMI_GO_HAMI_CORE_LIB, a prebuilt libvgpu.so (e.g. taken out of
# that image elsewhere), staged as is and preferred; else HAMi-core's source, built on the GPU
# machine: a git directory (bare or not) or a plain source folder in HAMI_GO_HAMI_CORE_SRC, else the
# first default that exists, at HAMI_GO_HAMI_CORE_COMMIT when it has that commit, else at its HEAD,
# recorded as NOT the shipped version (BUILD.txt, hami-core.env, the isolation results). Only the
# stage (git-ignored) ever holds it; without one, the isolation checks skip, saying so.
hc_staged="" hc_from="" hc_sha=""
if [[ -n ${HAMI_GO_HAMI_CORE_LIB:-} ]]; then
  [[ -f $HAMI_GO_HAMI_CORE_LIB ]] || { echo "gpu-check: HAMI_GO_HAMI_CORE_LIB=$HAMI_GO_HAMI_CORE_LIB is not a file" >&2; exit 1; }
  mkdir -p "$STAGE/hami-core-lib"
  cp "$HAMI_GO_HAMI_CORE_LIB" "$STAGE/hami-core-lib/libvgpu.so"
  hc_sha=$(sha256sum "$STAGE/hami-core-lib/libvgpu.so" | cut -d' ' -f1)
  hc_from=$HAMI_GO_HAMI_CORE_LIB
  hc_line="hami-core staged: prebuilt libvgpu.so from $hc_from, sha256 $hc_sha, taken as the shipped library (its commit is not verified); no source staged"
else
  hc=""
  for c in "${HAMI_GO_HAMI_CORE_SRC:-}" _output/hami-core.git _output/hami-core /work/.mirror/Project-HAMi+HAMi-core/repo; do
    if [[ -n $c && -e $c ]]; then hc=$c; break; fi
  done
  if [[ -n ${HAMI_GO_HAMI_CORE_SRC:-} && $hc != "$HAMI_GO_HAMI_CORE_SRC" ]]; then
    echo "gpu-check: HAMI_GO_HAMI_CORE_SRC=$HAMI_GO_HAMI_CORE_SRC does not exist" >&2
    exit 1
  fi
  hc_line="hami-core staged: none (set HAMI_GO_HAMI_CORE_SRC or HAMI_GO_HAMI_CORE_LIB); the isolation checks will skip"
  if [[ -n $hc ]]; then
    dst="$STAGE/hami-core-src"
    mkdir -p "$dst"
    gitc=()
    if git --git-dir="$hc" rev-parse HEAD >/dev/null 2>&1; then
      gitc=(git --git-dir="$hc")
    elif git -C "$hc" rev-parse HEAD >/dev/null 2>&1; then
      gitc=(git -C "$hc")
    fi
    if ((${#gitc[@]})); then
      rev=HEAD
      if "${gitc[@]}" cat-file -e "$HAMI_GO_HAMI_CORE_COMMIT^{commit}" 2>/dev/null; then rev=$HAMI_GO_HAMI_CORE_COMMIT; fi
      hc_staged=$("${gitc[@]}" rev-parse "$rev^{commit}")
      "${gitc[@]}" archive "$hc_staged" | tar -x -C "$dst"
    else
      tar -c -C "$hc" --exclude=.git --exclude=build . | tar -x -C "$dst"
    fi
    [[ -f $dst/CMakeLists.txt ]] || { echo "gpu-check: $hc holds no HAMi-core source (no CMakeLists.txt)" >&2; exit 1; }
    # Only libvgpu.so is built: no docs (images), CI files or tests travel.
    rm -rf "$dst/docs" "$dst/.github" "$dst/.vscode" "$dst/dockerfiles" "$dst/test"
    echo "${hc_staged:-unknown (a plain folder)}" >"$dst/.hami-core-commit"
    hc_from=$hc
    if [[ -n $hc_staged && $hc_staged == "$HAMI_GO_HAMI_CORE_COMMIT"* ]]; then
      hc_line="hami-core staged: source of $hc_staged from $hc, the shipped version"
    else
      hc_line="hami-core staged: source of ${hc_staged:-an unknown commit (a plain folder)} from $hc: NOT the shipped version ($hc lacks $HAMI_GO_HAMI_CORE_COMMIT): isolation results hold for that build, not for the shipped library"
      echo "gpu-check: WARNING: $hc_line" >&2
    fi
  fi
fi
echo "hami-core shipped: $HAMI_GO_HAMI_CORE_COMMIT ($HAMI_CORE_SHIPPED_IMAGE, the chart's hamiCore.image)"
echo "$hc_line"
{
  echo "HAMI_CORE_SHIPPED_COMMIT=$HAMI_GO_HAMI_CORE_COMMIT"
  echo "HAMI_CORE_SHIPPED_IMAGE=$HAMI_CORE_SHIPPED_IMAGE"
  echo "HAMI_CORE_STAGED_COMMIT=$hc_staged"
  echo "HAMI_CORE_STAGED_FROM=$hc_from"
  echo "HAMI_CORE_PREBUILT_SHA256=$hc_sha"
} >"$STAGE/hami-core.env"

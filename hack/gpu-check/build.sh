#!/usr/bin/env bash
# Builds hami-go's real-GPU check and stages it in one folder (default _output/gpu-check,
# git-ignored) that the device tool can carry to a GPU machine without Go; prints the command to
# run there. See hack/gpu-check/README.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
STAGE=${1:-_output/gpu-check}
GO=${GO:-go}
MAX_MIB=60 # the device tool carries at most 64 MiB in all

if [[ $($GO env GOOS)/$($GO env GOARCH) != linux/amd64 ]]; then
  echo "gpu-check: the GPU machine is linux/amd64; cgo binaries must be built on linux/amd64" >&2
  exit 1
fi
rm -rf "$STAGE"
mkdir -p "$STAGE/bin"
export CGO_CFLAGS=${CGO_CFLAGS:--Wno-deprecated-declarations}
# Static: the comparing and summarizing program.
CGO_ENABLED=0 $GO build -ldflags "-s -w" -o "$STAGE/bin/gpucheck" ./hack/gpu-check
# cgo (go-nvml dlopens libnvidia-ml.so.1), dynamically linked against this machine's glibc.
CGO_ENABLED=1 $GO build -ldflags "-s -w" -o "$STAGE/bin/nvml-probe" ./hack/nvml-probe
CGO_ENABLED=1 $GO test -c -ldflags "-s -w" -o "$STAGE/bin/deviceplugin.test" ./pkg/deviceplugin
CGO_ENABLED=1 $GO test -c -ldflags "-s -w" -o "$STAGE/bin/dra.test" ./pkg/dra
# The test binaries are ~70 MiB each stripped (client-go and its fakes): compress the cgo
# binaries; run.sh unpacks them on the GPU machine.
gzip -9 -f "$STAGE/bin/nvml-probe" "$STAGE/bin/deviceplugin.test" "$STAGE/bin/dra.test"
cp hack/gpu-check/run.sh hack/gpu-check/mps_check.py hack/gpu-check/isolation_probe.py hack/gpu-check/README.md "$STAGE/"
# HAMi-core's source, built on the GPU machine for the isolation checks: a git directory (bare or
# not) or a plain source folder in HAMI_GO_HAMI_CORE_SRC, else the first default that exists.
# Only the stage (git-ignored) ever holds it; without one, the isolation checks skip, saying so.
hc=""
for c in "${HAMI_GO_HAMI_CORE_SRC:-}" _output/hami-core.git _output/hami-core /work/.mirror/Project-HAMi+HAMi-core/repo; do
  if [[ -n $c && -e $c ]]; then hc=$c; break; fi
done
if [[ -n ${HAMI_GO_HAMI_CORE_SRC:-} && $hc != "$HAMI_GO_HAMI_CORE_SRC" ]]; then
  echo "gpu-check: HAMI_GO_HAMI_CORE_SRC=$HAMI_GO_HAMI_CORE_SRC does not exist" >&2
  exit 1
fi
hc_line="hami-core: no source (set HAMI_GO_HAMI_CORE_SRC); the isolation checks will skip"
if [[ -n $hc ]]; then
  dst="$STAGE/hami-core-src"
  mkdir -p "$dst"
  if hc_commit=$(git --git-dir="$hc" rev-parse HEAD 2>/dev/null); then
    git --git-dir="$hc" archive HEAD | tar -x -C "$dst"
  elif hc_commit=$(git -C "$hc" rev-parse HEAD 2>/dev/null); then
    git -C "$hc" archive HEAD | tar -x -C "$dst"
  else
    hc_commit="unknown (a plain folder)"
    tar -c -C "$hc" --exclude=.git --exclude=build . | tar -x -C "$dst"
  fi
  [[ -f $dst/CMakeLists.txt ]] || { echo "gpu-check: $hc holds no HAMi-core source (no CMakeLists.txt)" >&2; exit 1; }
  # Only libvgpu.so is built: no docs (images), CI files or tests travel.
  rm -rf "$dst/docs" "$dst/.github" "$dst/.vscode" "$dst/dockerfiles" "$dst/test"
  echo "$hc_commit" >"$dst/.hami-core-commit"
  hc_line="hami-core $hc_commit from $hc"
fi
chmod +x "$STAGE/run.sh"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit+="+dirty"
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null || echo "glibc unknown")
{
  echo "commit $commit"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) with $($GO env GOVERSION) on $glibc"
  echo "gpucheck static; nvml-probe, deviceplugin.test and dra.test cgo, dynamically linked, gzip-compressed"
  echo "$hc_line"
} >"$STAGE/BUILD.txt"
mib=$(du -sm "$STAGE" | cut -f1)
if ((mib > MAX_MIB)); then
  echo "gpu-check: the stage is ${mib} MiB, over ${MAX_MIB} MiB (the device tool carries 64 MiB)" >&2
  exit 1
fi
echo "gpu-check: staged $STAGE (${mib} MiB; $(cut -d' ' -f2 "$STAGE/BUILD.txt" | head -1))"
ls -l "$STAGE" "$STAGE/bin" | sed 's/^/  /'
echo "gpu-check: on the GPU machine (device tool: carry [\"$STAGE\"]; results in \$OUT), run:"
echo "  bash $STAGE/run.sh"

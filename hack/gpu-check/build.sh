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
# HAMi-core: the shipped version's commit, and what is staged for the isolation checks
# (stage-hami-core.sh prints BUILD.txt's hami-core lines and writes the stage's hami-core.env).
hc_lines=$(hack/gpu-check/stage-hami-core.sh "$STAGE")
chmod +x "$STAGE/run.sh"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit+="+dirty"
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null || echo "glibc unknown")
{
  echo "commit $commit"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) with $($GO env GOVERSION) on $glibc"
  echo "gpucheck static; nvml-probe, deviceplugin.test and dra.test cgo, dynamically linked, gzip-compressed"
  echo "$hc_lines"
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

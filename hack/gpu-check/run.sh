#!/usr/bin/env bash
# hami-go's real-GPU check (hack/gpu-check/README.md). Run on the GPU machine from the stage
# folder `make gpu-check` builds:   bash _output/gpu-check/run.sh
# Results go to $OUT (default: <stage>/out): summary.json, summary.txt, results/, raw/.
# The whole run is bounded (HAMI_GO_GPU_CHECK_SECONDS, default 265 s, plus at most ~35 s for the
# MPS quit and the summary: 5 minutes in all); the summary is always written. Exit 0 unless a
# check failed.
# Never changes the GPU's settings (compute mode, reset): the MPS daemon it starts uses private
# pipe and log folders and is quit at the end.
set -u
STAGE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GC=$STAGE/bin/gpucheck
: "${OUT:=$STAGE/out}"
: "${HAMI_GO_GPU_CHECK_SECONDS:=265}"
: "${NVIDIA_SMI:=nvidia-smi}"
: "${MPS_CONTROL:=nvidia-cuda-mps-control}"
: "${NVCC:=nvcc}"
: "${CMAKE:=cmake}"
export OUT NVIDIA_SMI MPS_CONTROL NVCC CMAKE

# Each check is one function; adding a check is adding a function, a line in checks() and its
# name in gpucheck's checkNames.
check_preflight() { "$GC" preflight --out "$OUT" --nvidia-smi "$NVIDIA_SMI" "${CGO_BINS[@]}"; }
check_discovery() { "$GC" discovery --out "$OUT" --nvidia-smi "$NVIDIA_SMI" "${CGO_BINS[@]}"; }
check_device_plugin() { "$GC" device-plugin --out "$OUT" --mps-pipe-dir "$MPS_PIPE" "${CGO_BINS[@]}"; }
check_dra_driver() { "$GC" dra-driver --out "$OUT" --nvidia-smi "$NVIDIA_SMI" "${CGO_BINS[@]}"; }
check_hami_core_glibc() { "$GC" hami-core-glibc --out "$OUT"; }
# The HAMi-core clients run as root in private mount namespaces whose /etc/ld.so.preload names the
# library (the host's /etc is not changed); elsewhere with LD_PRELOAD, which the results say.
check_isolation() { "$GC" isolation --out "$OUT" --work-dir "$WORK" --nvidia-smi "$NVIDIA_SMI"; }
check_isolation_2gpu() { "$GC" isolation-2gpu --out "$OUT" --work-dir "$WORK" --nvidia-smi "$NVIDIA_SMI"; }
check_isolation_mps() { "$GC" isolation-mps --out "$OUT" --work-dir "$WORK" --mps-pipe-dir "$MPS_PIPE" --nvidia-smi "$NVIDIA_SMI" --mps-control "$MPS_CONTROL"; }
# HAMi-core's libvgpu.so for the isolation checks: the staged prebuilt one (HAMI_GO_HAMI_CORE_LIB
# at build.sh), else built from the staged source (at most 120 s); hami-core.env says which
# version the chart ships and which was staged.
build_hami_core() { "$GC" hami-core-build --out "$OUT" --hami-core-src "$STAGE/hami-core-src" --hami-core-info "$STAGE/hami-core.env" \
  --hami-core-lib "$STAGE/hami-core-lib/libvgpu.so" --work-dir "$WORK/hami-core" --nvcc "$NVCC" --cmake "$CMAKE"; }
check_mps() { "$GC" mps --out "$OUT" --mps-pipe-dir "$MPS_PIPE" --nvidia-smi "$NVIDIA_SMI" --mps-control "$MPS_CONTROL"; }

checks() {
  check_preflight
  local pre=$?
  case $pre in
    0) ;;
    11) ;;       # cgo binaries unusable (glibc): the NVML checks were skipped, isolation still runs
    *) return 0 ;; # no GPU (10) or a usage error: nothing more can run
  esac
  # The build runs beside the NVML checks (it needs CPUs, they need the GPU little).
  build_hami_core &
  local build=$!
  if [[ $pre == 0 ]]; then
    check_discovery
    check_device_plugin
    check_dra_driver
  fi
  wait "$build"
  check_hami_core_glibc
  check_isolation
  check_isolation_2gpu
  [[ $pre == 0 ]] && check_mps
  check_isolation_mps
}

if [[ ${1:-} == --inner ]]; then
  trap 'exit 143' TERM
  CGO_BINS=(--nvml-probe "$BIN_DIR/nvml-probe" --test-binary "$BIN_DIR/deviceplugin.test" --dra-test-binary "$BIN_DIR/dra.test")
  checks
  exit 0
fi

mkdir -p "$OUT/raw"
rm -rf "$OUT/results"
# The pipe folder holds sockets: keep it out of $OUT (only plain files come back) and short.
MPS_PIPE=$(mktemp -d /tmp/hami-go-mps.XXXXXX)
# The cgo binaries travel gzip-compressed (the device tool carries 64 MiB): unpack them outside
# $OUT so they do not travel back.
BIN_DIR=$(mktemp -d /tmp/hami-go-gpucheck.XXXXXX)
# HAMi-core's build and the isolation checks' cache files: private, outside $OUT.
WORK=$(mktemp -d /tmp/hami-go-isolation.XXXXXX)
export MPS_PIPE BIN_DIR WORK
cleanup() {
  # Only when a daemon made its pipes there: a client without a daemon must not be started.
  if command -v "$MPS_CONTROL" >/dev/null 2>&1 && [[ -n $(ls -A "$MPS_PIPE" 2>/dev/null) ]]; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$MPS_PIPE timeout 20 "$MPS_CONTROL" >>"$OUT/raw/mps-quit.txt" 2>&1
    echo "mps quit: exit $?" >>"$OUT/raw/mps-quit.txt"
  fi
  rm -rf "$MPS_PIPE" "$BIN_DIR" "$WORK"
}
trap cleanup EXIT
for n in nvml-probe deviceplugin.test dra.test; do
  [[ -f $STAGE/bin/$n.gz ]] || continue
  gzip -dc "$STAGE/bin/$n.gz" >"$BIN_DIR/$n" 2>/dev/null ||
    python3 -c 'import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$STAGE/bin/$n.gz" "$BIN_DIR/$n"
  chmod +x "$BIN_DIR/$n"
done
echo "hami-go GPU check: stage $STAGE, output $OUT, bound ${HAMI_GO_GPU_CHECK_SECONDS}s"
"$GC" >/dev/null 2>&1
if [[ $? != 2 ]]; then # 2 = usage: it ran
  # gpucheck is static x86-64; if it cannot run, nothing can: say so in plain files.
  msg="gpucheck cannot run here ($(uname -m), $GC): the stage is built for linux/amd64"
  echo "$msg" | tee "$OUT/summary.txt"
  printf '{"overall":"fail","reason":"%s"}\n' "$msg" >"$OUT/summary.json"
  exit 1
fi
timeout -k 10 "$HAMI_GO_GPU_CHECK_SECONDS" bash "$STAGE/run.sh" --inner 2>&1 | tee "$OUT/raw/run.log"
echo "checks: exit ${PIPESTATUS[0]} (124 = the time bound ended them)" | tee -a "$OUT/raw/run.log"
cleanup
trap - EXIT
"$GC" summary --out "$OUT"
rc=$?
# The device tool brings back at most 8 files, at most 2 folders down: results/ and raw/ (with
# raw/mps-log/) travel as one archive beside the two summary files. HAMI_GO_GPU_CHECK_PACK=0 keeps
# the folders as they are.
if [[ ${HAMI_GO_GPU_CHECK_PACK:-1} != 0 ]]; then
  tar -czf "$OUT/outputs.tar.gz" -C "$OUT" raw $( [[ -d $OUT/results ]] && echo results ) &&
    rm -rf "$OUT/raw" "$OUT/results" &&
    echo "raw outputs and per-check results: $OUT/outputs.tar.gz (tar -xzf to read)"
fi
exit $rc

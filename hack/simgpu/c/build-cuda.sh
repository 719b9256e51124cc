#!/bin/sh
# build-cuda.sh OUTDIR: builds the CUDA half of simgpu's simulated driver into OUTDIR:
#   libcuda.so.$SIMGPU_DRIVER_VERSION (soname libcuda.so.1) + symlinks libcuda.so.1, libcuda.so,
#   cudaprobe (dynamically linked, dlopens libcuda.so.1) and cudatest (API edge cases).
# Needs gcc. SIMGPU_DRIVER_VERSION defaults to 580.95.05; CC is honoured, CFLAGS is not (build.sh
# sets it for its shared libraries). build.sh runs this script; it also works on its own.
set -eu
out=${1:?usage: build-cuda.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
ver=${SIMGPU_DRIVER_VERSION:-580.95.05}
cc=${CC:-gcc}
cflags="-O2 -g"
mkdir -p "$out"
$cc $cflags -Wall -Wextra -Wno-unused-parameter -std=gnu11 -fPIC -shared -fvisibility=hidden \
	-Wl,-soname,libcuda.so.1 -Wl,--no-undefined \
	-o "$out/libcuda.so.$ver" \
	"$here/cuda_init.c" "$here/cuda_ctx.c" "$here/cuda_mem.c" "$here/cuda_exec.c" \
	"$here/cuda_procaddr.c" "$here/simgpu_client.c" -lpthread
ln -sf "libcuda.so.$ver" "$out/libcuda.so.1"
ln -sf libcuda.so.1 "$out/libcuda.so"
$cc $cflags -Wall -Wextra -std=gnu11 -D_GNU_SOURCE -o "$out/cudaprobe" "$here/cudaprobe.c" -ldl
$cc $cflags -Wall -Wextra -std=gnu11 -D_GNU_SOURCE -I"$here" -o "$out/cudatest" "$here/cudatest.c" \
	-L"$out" -lcuda -lpthread -ldl

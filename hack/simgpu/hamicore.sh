#!/bin/sh
# hamicore.sh LIBDIR - builds HAMi-core's libvgpu.so from source against simgpu's simulated
# driver and prints its path.
#
#   LIBDIR       the output directory of c/build.sh (libcuda.so and libnvidia-ml.so to link with)
#   HAMI_CORE_SRC  HAMi-core source tree (default ~/.cache/hami-go/src/HAMi-core)
#   CUDA_HOME      a directory with include/cuda.h and include/nvml.h, as in a CUDA toolkit
#                  (default ~/.cache/hami-go/src/cuda)
#   HAMI_GO_CACHE  the cache root (default ~/.cache/hami-go)
#
# Output: $HAMI_GO_CACHE/hamicore/<HAMi-core commit>/libvgpu.so (reused when the HAMi-core
# commit, the headers' commit and this script are unchanged). The commit is `git rev-parse HEAD`
# of HAMI_CORE_SRC, else the content of HAMI_CORE_SRC/.hami-go-commit (hamicore-src.sh writes it),
# else "unknown".
#
# When HAMI_CORE_SRC, CUDA_HOME/include/cuda.h or CUDA_HOME/include/nvml.h is missing it prints ONE line "skip: <reason>"
# on stdout and exits 3 (CI has no network to fetch them; hamicore-src.sh unpacks them).
#
# The build is what HAMi-core's own build.sh + CMakeLists.txt do (HAMi's docker/Dockerfile runs
# `bash ./build.sh` to make the libvgpu.so in projecthami/hamicore), written out for gcc because
# cmake is not required here and test/CMakeLists.txt needs the CUDA toolkit (nvcc, cudart):
#   - build.sh's cmake options -DDLSYM_HOOK_ENABLE=1 -DMULTIPROCESS_LIMIT_ENABLE=1
#     -DHOOK_MEMINFO_ENABLE=1 -DHOOK_NVML_ENABLE=1 become #defines in config/static_config.h
#     (configure_file of src/static_config.h.in), with GIT_HASH/GIT_BRANCH as CMake fills them;
#   - build.sh sets CMAKE_BUILD_TYPE=Debug, so LIBRARY_COMPILE_FLAGS is
#     "-shared -fPIC -g -D_GNU_SOURCE -Wall" (no -fvisibility=hidden, no strip);
#   - include dirs ${CUDA_HOME}/include, src, <build>/config; the sources of src/CMakeLists.txt
#     and its cuda, nvml, multiprocess and allocator object libraries; link -lcuda -lnvidia-ml
#     (--no-as-needed: like the ubi8 toolchain of the image, libvgpu.so NEEDs both libraries).
set -eu
libdir=${1:?usage: hamicore.sh LIBDIR (the output directory of c/build.sh)}
libdir=$(cd "$libdir" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
cache=${HAMI_GO_CACHE:-$HOME/.cache/hami-go}
src=${HAMI_CORE_SRC:-$cache/src/HAMi-core}
cuda=${CUDA_HOME:-$cache/src/cuda}
CC=${CC:-gcc}

if [ ! -f "$src/src/libvgpu.c" ] || [ ! -f "$src/src/static_config.h.in" ]; then
	echo "skip: HAMi-core source not found at $src (put a checkout of github.com/Project-HAMi/HAMi-core there, e.g. with hack/simgpu/hamicore-src.sh, or set HAMI_CORE_SRC)"
	exit 3
fi
if [ ! -f "$cuda/include/cuda.h" ] || [ ! -f "$cuda/include/nvml.h" ]; then
	echo "skip: CUDA toolkit headers not found at $cuda/include/cuda.h and nvml.h (put a CUDA toolkit's include/cuda.h and include/nvml.h under $cuda, e.g. with hack/simgpu/hamicore-src.sh, or set CUDA_HOME)"
	exit 3
fi
for l in libcuda.so libnvidia-ml.so; do
	[ -e "$libdir/$l" ] || { echo "hamicore.sh: $libdir/$l missing (run c/build.sh $libdir)" >&2; exit 1; }
done

commit=unknown
if [ -e "$src/.git" ] && c=$(git -C "$src" rev-parse HEAD 2>/dev/null); then
	commit=$c
elif [ -s "$src/.hami-go-commit" ]; then
	commit=$(head -n1 "$src/.hami-go-commit")
fi
short=$(printf '%.7s' "$commit")
cudacommit=unknown
[ -s "$cuda/.hami-go-commit" ] && cudacommit=$(head -n1 "$cuda/.hami-go-commit")
stamp="hami-core=$commit cuda-headers=$cudacommit($(grep -m1 '#define CUDA_VERSION' "$cuda/include/cuda.h" | tr -s ' ')) script=$(cksum <"$0" | cut -d' ' -f1)"

dest=$cache/hamicore/$commit
if [ "$commit" != unknown ] && [ -f "$dest/libvgpu.so" ] && [ "$(cat "$dest/stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "$dest/libvgpu.so"
	exit 0
fi

mkdir -p "$cache/hamicore"
build=$(mktemp -d "$cache/hamicore/build.XXXXXX")
trap 'rm -rf "$build"' EXIT
mkdir -p "$build/config" "$build/obj"
# configure_file(src/static_config.h.in): "#cmakedefine X" -> "#define X" for the options build.sh
# sets, "/* #undef X */" for the others; @GIT_HASH@ is `git log -1 --pretty=format:%h`,
# @GIT_BRANCH@ "unknown" (a detached checkout, as in HAMi's image build).
sed -e 's/^#cmakedefine \(MULTIPROCESS_LIMIT_ENABLE\|DLSYM_HOOK_ENABLE\|HOOK_MEMINFO_ENABLE\|HOOK_NVML_ENABLE\)$/#define \1/' \
	-e 's/^#cmakedefine \([A-Z_]*\)$/\/* #undef \1 *\//' \
	-e "s|@GIT_HASH@|$short|g" -e 's|@GIT_BRANCH@|unknown|g' \
	"$src/src/static_config.h.in" >"$build/config/static_config.h"

flags="-shared -fPIC -g -D_GNU_SOURCE -Wall"
incs="-I$cuda/include -I$src/src -I$build/config"
n=0
for f in libvgpu.c utils.c log_utils.c \
	nvml/nvml_entry.c nvml/hook.c \
	cuda/context.c cuda/device.c cuda/hook.c cuda/event.c cuda/memory.c cuda/stream.c cuda/graph.c \
	allocator/allocator.c \
	multiprocess/multiprocess_memory_limit.c multiprocess/multiprocess_utilization_watcher.c; do
	n=$((n + 1))
	# shellcheck disable=SC2086
	$CC $flags $incs -c -o "$build/obj/$n.o" "$src/src/$f" 2>"$build/obj/$n.log" || {
		cat "$build/obj/$n.log" >&2
		echo "hamicore.sh: compiling $f failed" >&2
		exit 1
	}
done
# shellcheck disable=SC2086
$CC -fPIC -shared -Wl,-soname,libvgpu.so -o "$build/libvgpu.so" "$build"/obj/*.o \
	-L"$libdir" -Wl,--no-as-needed -lcuda -lnvidia-ml
mkdir -p "$dest"
mv "$build/libvgpu.so" "$dest/libvgpu.so.tmp"
mv "$dest/libvgpu.so.tmp" "$dest/libvgpu.so"
cp "$build/config/static_config.h" "$dest/static_config.h"
echo "$stamp" >"$dest/stamp"
echo "$dest/libvgpu.so"

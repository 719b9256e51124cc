#!/bin/sh
# hamicore-src.sh HAMI_CORE_GITDIR HAMI_CORE_COMMIT CUDA_GITDIR CUDA_COMMIT
#
# Unpacks the two inputs of hamicore.sh from local git repositories (bare or not) into
# ~/.cache/hami-go/src (override with HAMI_GO_CACHE=<dir>, the parent of src/):
#   src/HAMi-core  HAMi-core at HAMI_CORE_COMMIT (its commit id is written to .hami-go-commit,
#                  since an archive has no .git)
#   src/cuda       the CUDA toolkit headers at CUDA_COMMIT: only include/cuda.h,
#                  include/cuda_runtime_api.h (if present) and include/nvml.h are extracted,
#                  from a repository that vendors NVIDIA's toolkit include/ directory.
# Nothing of either is copied into this repository. What was used on the development machine:
#   sh hack/simgpu/hamicore-src.sh \
#     /work/.mirror/Project-HAMi+HAMi-core/repo 8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811 \
#     /work/.mirror/zspace+system.cuda-12.6/repo b3d92c837713411301ae5df45b0c7758df7d931e
# (git clone https://github.com/Project-HAMi/HAMi-core and https://github.com/zspace/system.cuda-12.6
# give the same repositories where GitHub is reachable.)
set -eu
core_git=${1:?usage: hamicore-src.sh HAMI_CORE_GITDIR COMMIT CUDA_GITDIR COMMIT}
core_commit=${2:?missing HAMi-core commit}
cuda_git=${3:?missing CUDA headers git dir}
cuda_commit=${4:?missing CUDA headers commit}
cache=${HAMI_GO_CACHE:-$HOME/.cache/hami-go}
src=$cache/src

core_commit=$(git --git-dir="$core_git" rev-parse --verify "$core_commit^{commit}")
rm -rf "$src/HAMi-core.tmp"
mkdir -p "$src/HAMi-core.tmp"
git --git-dir="$core_git" archive "$core_commit" | tar -x -C "$src/HAMi-core.tmp"
echo "$core_commit" >"$src/HAMi-core.tmp/.hami-go-commit"
rm -rf "$src/HAMi-core"
mv "$src/HAMi-core.tmp" "$src/HAMi-core"

cuda_commit=$(git --git-dir="$cuda_git" rev-parse --verify "$cuda_commit^{commit}")
rm -rf "$src/cuda.tmp"
mkdir -p "$src/cuda.tmp/include"
for f in cuda.h cuda_runtime_api.h nvml.h; do
	if git --git-dir="$cuda_git" cat-file -e "$cuda_commit:include/$f" 2>/dev/null; then
		git --git-dir="$cuda_git" show "$cuda_commit:include/$f" >"$src/cuda.tmp/include/$f"
	fi
done
[ -s "$src/cuda.tmp/include/cuda.h" ] || { echo "hamicore-src.sh: no include/cuda.h at $cuda_commit" >&2; exit 1; }
echo "$cuda_commit" >"$src/cuda.tmp/.hami-go-commit"
rm -rf "$src/cuda"
mv "$src/cuda.tmp" "$src/cuda"
echo "$src/HAMi-core ($core_commit)"
echo "$src/cuda ($cuda_commit)"

# The local node as a GPU node without a GPU (sourced by up.sh, restart.sh and down.sh after
# lib.sh; docs/simgpu.md): hack/simgpu's simulated NVIDIA driver under a driver root laid out as
# the GPU Operator keeps one (/run/nvidia/driver), and NVIDIA's Container Toolkit over it as the
# GPU Operator sets it up (its files under a toolkit directory, containerd's `nvidia` runtime).
# Everything lives under $STATE and goes with down.sh: nothing lands in the host's library
# paths, its /dev or its /etc. HAMI_GO_GPU_NODE=none brings the node up without it.

GPU_NODE=${HAMI_GO_GPU_NODE:-sim}        # sim | none
DRIVER_ROOT=$STATE/driver                # the simulated driver's root (GPU Operator: /run/nvidia/driver)
DRIVER_LIBDIR=$DRIVER_ROOT/usr/lib/x86_64-linux-gnu
SIMGPU_SOCK=$DRIVER_ROOT/run/nvidia-persistenced/socket   # nvidia-ctk mounts it into GPU containers
SIMGPU_BIN=$STATE/bin/simgpu
TOOLKIT_DIR=$STATE/toolkit               # GPU Operator: /usr/local/nvidia/toolkit
TOOLKIT_CONFIG=$TOOLKIT_DIR/.config/nvidia-container-runtime/config.toml
TOOLKIT_CDI_SPEC=/var/run/cdi/nvidia.yaml   # nvidia-ctk's spec: nvidia.com/gpu=<index|UUID|all>
TOOLKIT_CDI_NONE=/var/run/cdi/nvidia-none.yaml   # and its nvidia.com/gpu=none (generate_toolkit_cdi)
HAMICORE_ENV=$STATE/hamicore.env         # HAMICORE_LIB, HAMICORE_TAG, HAMICORE_SKIP of build_hamicore

# gpu_node_on: whether the node gets the simulated driver and the toolkit.
gpu_node_on() { [[ $GPU_NODE == sim ]]; }

# install_gpu_node: builds the driver (C, gcc) and the simgpu program, lays out the driver root
# (libraries, device nodes), starts the driver's daemon, writes the toolkit's config, its runtime
# wrapper and the CDI spec nvidia-ctk generates over the driver root. Idempotent.
install_gpu_node() {
  gpu_node_on || { log "HAMI_GO_GPU_NODE=$GPU_NODE: no simulated GPU driver on the node"; return 0; }
  [[ $GPU_NODE == sim ]] || die "HAMI_GO_GPU_NODE=$GPU_NODE: want sim or none"
  mkdir -p "$DRIVER_LIBDIR" "$(dirname "$SIMGPU_SOCK")" "$STATE/bin" "$(dirname "$TOOLKIT_CONFIG")"
  step 1 5 "simulated driver libraries and cudaprobe (hack/simgpu/c/build.sh)" build_simgpu
  step 2 5 "simulated driver daemon and device nodes" start_simgpu
  step 3 5 "NVIDIA Container Toolkit config and runtime" write_toolkit
  step 4 5 "CDI spec (nvidia-ctk cdi generate over $DRIVER_ROOT)" generate_toolkit_cdi
  step 5 5 "HAMi-core from its source (hack/simgpu/hamicore.sh; optional)" build_hamicore
  # shellcheck source=/dev/null
  source "$HAMICORE_ENV"
  [[ -z $HAMICORE_SKIP ]] || log "HAMi-core: $HAMICORE_SKIP; the node agents run the fake backend over the simulated GPUs (the nvml backend's hami-core enforcement would refuse every GPU container without the library), and the checks that need HAMi-core or the nvml backend skip"
}

# build_hamicore: libvgpu.so from HAMi-core's source against the simulated driver, where the
# source and a cuda.h are on the machine (hack/simgpu/hamicore-src.sh puts them in the cache);
# its outcome in $HAMICORE_ENV for import_images and install_chart.
build_hamicore() {
  local out rc=0
  out=$("$REPO_ROOT/hack/simgpu/hamicore.sh" "$DRIVER_LIBDIR" 2>>"$LOGS/simgpu-build.log") || rc=$?
  case $rc in
  0) printf 'HAMICORE_LIB=%q\nHAMICORE_TAG=%q\nHAMICORE_SKIP=\n' "$out" "$(basename "$(dirname "$out")" | cut -c1-12)" >"$HAMICORE_ENV" ;;
  3) printf 'HAMICORE_LIB=\nHAMICORE_TAG=\nHAMICORE_SKIP=%q\n' "${out#skip: }" >"$HAMICORE_ENV" ;;
  *) return 1 ;;
  esac
}

build_simgpu() {
  "$REPO_ROOT/hack/simgpu/c/build.sh" "$DRIVER_LIBDIR" >>"$LOGS/simgpu-build.log" 2>&1 || return 1
  mkdir -p "$STATE/images"
  cp "$DRIVER_LIBDIR/cudaprobe" "$STATE/images/cudaprobe" && rm -f "$DRIVER_LIBDIR/cudaprobe"
  (cd "$REPO_ROOT" && go build -o "$SIMGPU_BIN" ./hack/simgpu) >>"$LOGS/simgpu-build.log" 2>&1
}

start_simgpu() {
  "$SIMGPU_BIN" mknod --dev-root "$DRIVER_ROOT" --node "$NODE_NAME" --profile "$FAKE_PROFILE" >>"$LOGS/simgpu.log" 2>&1 || return 1
  start simgpu "$SIMGPU_SOCK" "$SIMGPU_BIN" serve --socket "$SIMGPU_SOCK" --node "$NODE_NAME" --profile "$FAKE_PROFILE"
  local i
  for ((i = 0; i < 50; i++)); do
    [[ -S $SIMGPU_SOCK ]] && return 0
    sleep 0.1
  done
  log "the simulated driver's daemon did not create $SIMGPU_SOCK (log: $LOGS/simgpu.log)"
  return 1
}

# write_toolkit: the toolkit's config (its defaults, mode cdi, the driver root), and the runtime
# wrapper containerd runs, which points the runtime at that config (XDG_CONFIG_HOME, as the GPU
# Operator's wrapper does) and finds runc and nvidia-cdi-hook on PATH.
# HAMI_GO_TOOLKIT_ENVVAR_UNPRIVILEGED=false: the variant that closes the fail-open window
# (accept-nvidia-visible-devices-envvar-when-unprivileged = false).
write_toolkit() {
  local envvar=${HAMI_GO_TOOLKIT_ENVVAR_UNPRIVILEGED:-true}
  cat >"$TOOLKIT_CONFIG" <<EOF
# NVIDIA Container Toolkit config of the local cluster's simulated GPU node (hack/cluster/gpunode.sh).
accept-nvidia-visible-devices-envvar-when-unprivileged = $envvar
accept-nvidia-visible-devices-as-volume-mounts = false

[nvidia-container-cli]
root = "$DRIVER_ROOT"
ldconfig = "@/sbin/ldconfig"

[nvidia-container-runtime]
log-level = "info"
mode = "cdi"
runtimes = ["$RUNC"]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-ctk]
path = "$BIN/nvidia-ctk"
EOF
  cat >"$TOOLKIT_DIR/nvidia-container-runtime" <<EOF
#!/bin/sh
# containerd's nvidia runtime (BinaryName): NVIDIA's runtime with this node's toolkit config.
XDG_CONFIG_HOME=$TOOLKIT_DIR/.config PATH=$BIN:$(dirname "$RUNC"):\$PATH exec $BIN/nvidia-container-runtime "\$@"
EOF
  chmod 0755 "$TOOLKIT_DIR/nvidia-container-runtime"
}

# generate_toolkit_cdi: nvidia-ctk's spec of every GPU (by index and UUID, and "all"), and a
# second file with its "none" device. NVIDIA's runtime in cdi mode reads a container's
# NVIDIA_VISIBLE_DEVICES=none (the runtime's way to ask for the driver and no GPU; CPU-only
# variants of GPU images set it) as the CDI device nvidia.com/gpu=none, and without that device
# the container fails to start ("unresolvable CDI devices nvidia.com/gpu=none"), with or without
# hami-go. nvidia-ctk makes it only when asked for alone (--device none; v1.20.2 drops both
# "all" and "none" from a run given --device all --device none); CDI merges two files of one kind.
generate_toolkit_cdi() {
  mkdir -p "$(dirname "$TOOLKIT_CDI_SPEC")"
  local args=(cdi generate --driver-root "$DRIVER_ROOT" --dev-root "$DRIVER_ROOT"
    --nvidia-cdi-hook-path "$BIN/nvidia-cdi-hook" --ldconfig-path /sbin/ldconfig)
  SIMGPU_SOCKET=$SIMGPU_SOCK SIMGPU_DEV_ROOT=$DRIVER_ROOT XDG_CONFIG_HOME=$TOOLKIT_DIR/.config \
    "$BIN/nvidia-ctk" "${args[@]}" --device-name-strategy index --device-name-strategy uuid \
    --output "$TOOLKIT_CDI_SPEC" >>"$LOGS/simgpu.log" 2>&1 || return 1
  SIMGPU_SOCKET=$SIMGPU_SOCK SIMGPU_DEV_ROOT=$DRIVER_ROOT XDG_CONFIG_HOME=$TOOLKIT_DIR/.config \
    "$BIN/nvidia-ctk" "${args[@]}" --device none --output "$TOOLKIT_CDI_NONE" >>"$LOGS/simgpu.log" 2>&1
}

# containerd_nvidia_runtime: the containerd config lines of the `nvidia` runtime (the node's
# default runtime, as the GPU Operator's toolkit sets it), or nothing without the GPU node. It
# passes pod annotations cdi.k8s.io/* on to the runtime, as the chart's
# devicePlugin.nvidiaDevices=cdi-annotation needs (docs/runtimes.md), so that the e2e tests see
# what that opens and the chart's cdi-annotations policy closes (case C63).
containerd_nvidia_runtime() {
  gpu_node_on || return 0
  cat <<EOF
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
        runtime_type = 'io.containerd.runc.v2'
        pod_annotations = ['cdi.k8s.io/*']
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
          BinaryName = '$TOOLKIT_DIR/nvidia-container-runtime'
          SystemdCgroup = false
EOF
}

# NODE_VALUES: the chart values of the node's GPUs, written by gpu_node_chart_args and given to
# every install and upgrade of the chart on this cluster (up.sh, the day-two tests' mode switch).
NODE_VALUES=$STATE/values-node.yaml

# gpu_node_chart_args: writes $NODE_VALUES and prints the helm arguments that use it. On the
# simulated GPU node with HAMi-core built: the nvml backend over the simulated driver root, the
# preflight pointed at the node's real toolkit and containerd configs, HAMi-core from the local
# hamicore image. Without HAMi-core (its source or a cuda.h not on the machine: CI cannot fetch
# them) the nvml backend would fail every GPU container closed (hami-core enforcement missing),
# so the agents run the fake backend over the same GPUs (their UUIDs are the simulated driver's,
# and NVIDIA's runtime still gives each container its GPUs); the log says why. Without the GPU
# node: the fake backend.
gpu_node_chart_args() {
  if gpu_node_on; then
    # shellcheck source=/dev/null
    source "$HAMICORE_ENV"
  fi
  if ! gpu_node_on || [[ -z $HAMICORE_LIB ]]; then
    {
      echo "# hack/cluster/gpunode.sh: HAMI_GO_GPU_NODE=$GPU_NODE${HAMICORE_SKIP:+; no HAMi-core ($HAMICORE_SKIP)}: the fake backend"
      echo "devicePlugin:"
      echo "  backend: fake"
    } >"$NODE_VALUES"
    echo -f "$NODE_VALUES"
    return 0
  fi
  {
    echo "# hack/cluster/gpunode.sh: the simulated GPU node (docs/simgpu.md)"
    echo "devicePlugin:"
    echo "  backend: nvml"
    echo "  driverRoot: $DRIVER_ROOT"
    # The preflight reads the node's real configs: the toolkit's (as the GPU Operator lays it
    # out, beside its runtime wrapper) and this containerd's, each mounted read-only under /host.
    echo "  preflight:"
    echo "    toolkitConfig: [$TOOLKIT_CONFIG]"
    echo "    containerdConfig: [$CONTAINERD_DIR/config.toml]"
    echo "hamiCore:"
    echo "  image: {repository: docker.io/hami-go/hamicore-sim, tag: \"$HAMICORE_TAG\", pullPolicy: Never}"
  } >"$NODE_VALUES"
  echo -f "$NODE_VALUES"
}

# default_runtime: the node's default runtime name.
default_runtime() { if gpu_node_on; then echo nvidia; else echo runc; fi; }

# stop_gpu_node: the daemon and the toolkit's CDI spec (down.sh; the rest goes with $STATE).
stop_gpu_node() {
  stop simgpu
  rm -f "$TOOLKIT_CDI_SPEC" "$TOOLKIT_CDI_NONE"
}

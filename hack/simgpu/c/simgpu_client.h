/*
 * simgpu_client.h - client of the simgpu daemon (hack/simgpu, `simgpu serve`), the "kernel side"
 * of hami-go's simulated NVIDIA driver. Compiled into both libnvidia-ml.so and libcuda.so; every
 * symbol is hidden, so the two libraries do not clash when one process loads both (each keeps its
 * own connection, hence its own allocations; PROCS sums them per pid).
 *
 * PROTOCOL (fixed; the Go daemon is hack/simgpu/daemon/server.go)
 *
 * Unix SOCK_STREAM socket. Client sends one line per request, daemon answers one line.
 * Space-separated tokens, `\n` terminated, no line longer than 4096 bytes. Answers start with
 * `OK` or `ERR <code> <message...>` where code is one of `INVALID`, `NOT_FOUND`, `OOM`, `LOST`.
 * - `HELLO <client-name>` -> `OK <driver-version> <cuda-driver-version-int> <device-count>`
 * - `DEV <i>` (i = 0..count-1, host order = NVML order = PCI bus order) ->
 *   `OK <uuid> <minor> <total-bytes> <pci-bus-id> <numa> <sm-count> <pci-device-id-hex> <name...>`
 *   (name is the rest of the line, may contain spaces; pci-device-id-hex is "0x%08X",
 *   device id << 16 | vendor id 0x10DE)
 * - `TOPO <i>` -> `OK <nvlink-links>`: device i's NVLink link count (pkg/fake: A100 12, H100/H200/B200
 *   18 on the named DGX profiles), 0 = no NVLink (custom profiles). Devices with links > 0 reach
 *   each other all-to-all over NVLink. A verb of its own because DEV's name is the rest of its line.
 * - `MEM <i>` -> `OK <total-bytes> <used-bytes>`
 * - `ALLOC <i> <bytes>` -> `OK <handle>` (handle: unsigned 64-bit decimal, nonzero, unique per
 *   daemon, usable as a fake device pointer base: handle = 0x7f0000000000 + cumulative offset,
 *   each allocation rounded up to 2 MiB, so handles never overlap and are 2 MiB aligned)
 *   | `ERR OOM ...` when used+bytes > total | `ERR INVALID` for bytes 0 or device out of range
 * - `FREE <handle>` -> `OK <bytes-freed>` | `ERR NOT_FOUND` (double free / unknown / another
 *   connection's)
 * - `CTX <i>` -> `OK <contexts>`: this connection made a CUDA context on device i (the count of
 *   its live ones there after it). `CTXEND <i>` -> `OK <contexts>` ended one | `ERR NOT_FOUND`
 *   when it has none there. Contexts take no memory; they put the process in PROCS.
 * - `PROCS <i>` -> `OK <n> <pid>:<bytes> <pid>:<bytes> ...` - every process with a context or an
 *   allocation on device i (bytes 0 for a context alone), as the driver lists them; pid is the
 *   HOST pid of the connection's peer (SO_PEERCRED read by the daemon on accept), summed per pid,
 *   pids ascending.
 * - `EVENTS <since-seq>` -> `OK <last-seq> <seq>:<i>:<xid> ...` events with seq > since-seq (XIDs
 *   injected so far; seq starts at 1; a long list is cut short: ask again from the last seq seen)
 * - `XID <i> <xid>` -> `OK <seq>` (used by `simgpu xid`). As in pkg/fake, an XID that is not an
 *   application XID (13, 31, 43, 45, 68, 109) also BREAKS device i until RECOVER: then `MEM`,
 *   `ALLOC` and `PROCS` on it answer `ERR LOST ...` (NVML: NVML_ERROR_GPU_IS_LOST for memory info,
 *   processes and utilization; CUDA: cuMemGetInfo/cuMemAlloc answer CUDA_ERROR_UNKNOWN), while
 *   `HELLO`, `DEV`, `TOPO`, `EVENTS` and `FREE` still answer (identity stays readable, so cuInit,
 *   cuDeviceGet and nvmlDeviceGetHandleByUUID/GetName/GetUUID work on a lost GPU).
 * - `RECOVER <i>` -> `OK` repairs a broken device i (used by `simgpu recover`); OK when not broken.
 * - Allocations and contexts belong to the connection; when it closes they are freed. One connection per
 *   process: the client keeps one fd per process, reconnects after fork (checks getpid()),
 *   guards it with a pthread mutex. The fd is close-on-exec.
 *
 * This client says `HELLO <program name>` on every (re)connect. After an I/O error it closes the
 * connection (the daemon frees that connection's allocations) and reconnects on the next request.
 */
#ifndef SIMGPU_CLIENT_H
#define SIMGPU_CLIENT_H

#include <stddef.h>

#define SIMGPU_HIDDEN __attribute__((visibility("hidden")))

/* Longest request/answer line in bytes, "\n" included. */
#define SIMGPU_MAX_LINE 4096
/* Most devices a daemon serves (pkg/fake.MaxGPUs). */
#define SIMGPU_MAX_DEVICES 64
/* Default socket path. */
#define SIMGPU_DEFAULT_SOCKET "/run/nvidia-persistenced/socket"

/* Socket path: $SIMGPU_SOCKET, else <root>/run/nvidia-persistenced/socket, where <root> is the nearest
   ancestor of the library's own directory that holds one ("" = "/" when none does). In a GPU container
   the library is /usr/lib/<triple>/libnvidia-ml.so.1 and the socket /run/nvidia-persistenced/socket
   (the NVIDIA Container Toolkit's `nvidia-ctk cdi generate` mounts <driver-root>/run/nvidia-persistenced/socket
   into every GPU container, rw), so <root> is "/". A process that loads the library from a mounted driver
   root (/host/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1: the chart's
   devicePlugin.nvidiaDevices=driver-root) finds that root's socket and, without $SIMGPU_DEV_ROOT, its
   device nodes under <root>/dev: the simulated driver's kernel side lives in its root. */
SIMGPU_HIDDEN int simgpu_request(const char *req, char *resp, size_t resp_len); /* 0 = "OK ..." (resp holds the text after "OK "), 1 = "ERR ..." (resp holds "CODE message"), -1 = no daemon / I/O error */

typedef struct { char uuid[96]; unsigned minor; unsigned long long total; char bus_id[32]; int numa; int sms; unsigned pci_device_id; char name[96]; int nvlinks; /* TOPO */ } simgpu_dev;

/* Devices this process may use, in host order: those whose device node
   <dev root>/dev/nvidia<minor> exists and is a char device 195:<minor> (dev root: $SIMGPU_DEV_ROOT; unset, ""
   when $SIMGPU_SOCKET is set and the socket's <root> above when not).
   That is how a container sees only the GPUs its runtime gave it. Returns count (>= 0) or -1 (no daemon). Cached after first success. host_index[i] = the daemon's index. */
SIMGPU_HIDDEN int simgpu_devices(simgpu_dev *out, int *host_index, int max);

/* The driver version and CUDA driver version (1000*major + 10*minor) from HELLO, cached with the
   device list by simgpu_devices. Returns 0, or -1 when no daemon answered yet. ver_len >= 32. */
SIMGPU_HIDDEN int simgpu_versions(char *driver_version, size_t ver_len, int *cuda_version);

#endif

/*
 * cuda_internal.h: state shared by the simulated libcuda's files (cuda_init.c, cuda_ctx.c,
 * cuda_mem.c, cuda_exec.c, cuda_procaddr.c). The library is built with -fvisibility=hidden, so
 * everything here stays internal; the public entry points are marked CUAPI.
 */
#ifndef SIMGPU_CUDA_INTERNAL_H
#define SIMGPU_CUDA_INTERNAL_H

#include <pthread.h>

#include "cuda_sim.h"
#include "simgpu_client.h"

#define CUAPI __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))

#define SIM_MAX_DEVICES 64

/* One visible device (after CUDA_VISIBLE_DEVICES), as the daemon described it. */
typedef struct {
	simgpu_dev d;
	int daemon_index; /* index for MEM/ALLOC/... requests */
	int pci_domain, pci_bus, pci_dev, pci_fn;
	int cc_major, cc_minor;
	unsigned char uuid[16];
} sim_device;

#define CTX_MAGIC 0x53494d43u /* "SIMC" */

/* A context; never freed (a destroyed one stays marked so stale handles fail cleanly). */
struct CUctx_st {
	unsigned magic;
	int dev;
	unsigned flags;
	int primary;
	int destroyed;
	struct CUctx_st *next_live; /* registry of every context ever made */
};

HIDDEN extern int sim_ndev;
HIDDEN extern sim_device sim_devs[SIM_MAX_DEVICES];
HIDDEN extern int sim_cuda_version;

/* sim_initialized returns CUDA_SUCCESS once cuInit succeeded, else cuInit's error
 * (CUDA_ERROR_NOT_INITIALIZED before any cuInit). */
HIDDEN CUresult sim_initialized(void);
/* sim_check_dev validates an ordinal (init state first). */
HIDDEN CUresult sim_check_dev(CUdevice dev);
/* sim_current returns the calling thread's current context or NULL. */
HIDDEN struct CUctx_st *sim_current(void);
/* sim_ctx_valid: ctx is a live context made by this library. */
HIDDEN int sim_ctx_valid(struct CUctx_st *ctx);
/* sim_current_checked: init + a live current context, else the error to return. */
HIDDEN CUresult sim_current_checked(struct CUctx_st **out);
/* sim_daemon_error maps an ERR answer ("CODE message") or an I/O failure to a CUresult. */
HIDDEN CUresult sim_daemon_error(int rc, const char *resp);
/* sim_mem_release_ctx frees every allocation of ctx (context destroy / primary reset). */
HIDDEN void sim_mem_release_ctx(struct CUctx_st *ctx);
/* sim_export_lookup finds an exported implementation by exact symbol name (NULL if none). */
HIDDEN void *sim_export_lookup(const char *name);

#endif

/*
 * cuda_ctx.c: contexts of the simulated libcuda (CUDA Driver API reference, modules "Primary
 * Context Management" and "Context Management").
 *
 * Each thread has its own context stack (cuCtxPush/Pop/Set/GetCurrent as documented). A
 * context is a small struct that is never freed: a destroyed one stays marked so a stale
 * handle answers CUDA_ERROR_INVALID_CONTEXT instead of crashing. Unknown pointers are checked
 * against the registry of every context made here. Destroying a context (and releasing a
 * primary context's last reference, or resetting it) frees its allocations, as the driver
 * does. Primary contexts: one per device, made on first retain. Each context made and ended is
 * told to the daemon (CTX/CTXEND), which lists the process on that device in NVML's running
 * processes from its first context on, as the driver does (HAMi-core's set_task_pid finds its
 * host PID that way).
 *
 * Not modelled: context limits, cache configuration, green contexts, affinity, exec
 * affinity, MPS, CIG; cuCtxCreate_v3/_v4 ignore their extra parameters.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define STACK_MAX 128

static __thread struct CUctx_st *ctx_stack[STACK_MAX];
static __thread int ctx_depth;

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st *live_head;

/* primary contexts: made on first retain, refcount per device */
static struct CUctx_st *primary[SIM_MAX_DEVICES];
static int primary_refs[SIM_MAX_DEVICES];
static unsigned primary_flags[SIM_MAX_DEVICES];

struct CUctx_st *sim_current(void) { return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL; }

int sim_ctx_valid(struct CUctx_st *ctx)
{
	if (ctx == NULL)
		return 0;
	pthread_mutex_lock(&ctx_mu);
	int ok = 0;
	for (struct CUctx_st *c = live_head; c; c = c->next_live) {
		if (c == ctx) {
			ok = c->magic == CTX_MAGIC && !c->destroyed;
			break;
		}
	}
	pthread_mutex_unlock(&ctx_mu);
	return ok;
}

CUresult sim_current_checked(struct CUctx_st **out)
{
	CUresult r = sim_initialized();
	if (r != CUDA_SUCCESS)
		return r;
	struct CUctx_st *c = sim_current();
	if (c == NULL || !sim_ctx_valid(c))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (out)
		*out = c;
	return CUDA_SUCCESS;
}

/* daemon_ctx tells the daemon a context on dev was made (verb "CTX") or ended ("CTXEND"). A
   failed request is ignored: the context is this process's own state, and a lost connection
   ends its contexts in the daemon anyway. */
static void daemon_ctx(const char *verb, int dev)
{
	char req[64], resp[256];
	snprintf(req, sizeof req, "%s %d", verb, sim_devs[dev].daemon_index);
	(void)simgpu_request(req, resp, sizeof resp);
}

static struct CUctx_st *new_ctx(int dev, unsigned flags, int is_primary)
{
	struct CUctx_st *c = calloc(1, sizeof *c);
	if (c == NULL)
		return NULL;
	c->magic = CTX_MAGIC;
	c->dev = dev;
	c->flags = flags;
	c->primary = is_primary;
	pthread_mutex_lock(&ctx_mu);
	c->next_live = live_head;
	live_head = c;
	pthread_mutex_unlock(&ctx_mu);
	daemon_ctx("CTX", dev);
	return c;
}

/* drop_from_stack removes every occurrence of ctx from this thread's stack. */
static void drop_from_stack(struct CUctx_st *ctx)
{
	int j = 0;
	for (int i = 0; i < ctx_depth; i++)
		if (ctx_stack[i] != ctx)
			ctx_stack[j++] = ctx_stack[i];
	ctx_depth = j;
}

/* ---- primary contexts ---- */

CUAPI CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult r = sim_check_dev(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&ctx_mu);
	struct CUctx_st *c = primary[dev];
	pthread_mutex_unlock(&ctx_mu);
	if (c == NULL || c->destroyed) {
		c = new_ctx(dev, primary_flags[dev], 1);
		if (c == NULL)
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&ctx_mu);
	primary[dev] = c;
	primary_refs[dev]++;
	pthread_mutex_unlock(&ctx_mu);
	*pctx = c;
	return CUDA_SUCCESS;
}

/* destroy_primary marks dev's primary context destroyed and frees its memory. */
static void destroy_primary(CUdevice dev)
{
	pthread_mutex_lock(&ctx_mu);
	struct CUctx_st *c = primary[dev];
	primary[dev] = NULL;
	primary_refs[dev] = 0;
	if (c)
		c->destroyed = 1;
	pthread_mutex_unlock(&ctx_mu);
	if (c) {
		sim_mem_release_ctx(c);
		daemon_ctx("CTXEND", c->dev);
		drop_from_stack(c);
	}
}

CUAPI CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult r = sim_check_dev(dev);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&ctx_mu);
	int refs = primary_refs[dev];
	if (refs > 0)
		primary_refs[dev] = refs - 1;
	pthread_mutex_unlock(&ctx_mu);
	if (refs <= 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (refs == 1)
		destroy_primary(dev);
	return CUDA_SUCCESS;
}
CUAPI CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

CUAPI CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	CUresult r = sim_check_dev(dev);
	if (r != CUDA_SUCCESS)
		return r;
	destroy_primary(dev);
	return CUDA_SUCCESS;
}
CUAPI CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

CUAPI CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	CUresult r = sim_check_dev(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (flags == NULL || active == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&ctx_mu);
	*flags = primary_flags[dev];
	*active = primary_refs[dev] > 0;
	pthread_mutex_unlock(&ctx_mu);
	return CUDA_SUCCESS;
}

CUAPI CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
	CUresult r = sim_check_dev(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (flags & ~(unsigned)CU_CTX_FLAGS_MASK)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&ctx_mu);
	primary_flags[dev] = flags;
	if (primary[dev])
		primary[dev]->flags = flags;
	pthread_mutex_unlock(&ctx_mu);
	return CUDA_SUCCESS;
}
CUAPI CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
	return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

/* ---- context management ---- */

CUAPI CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sim_check_dev(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (flags & ~(unsigned)CU_CTX_FLAGS_MASK)
		return CUDA_ERROR_INVALID_VALUE;
	if (ctx_depth >= STACK_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct CUctx_st *c = new_ctx(dev, flags, 0);
	if (c == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_stack[ctx_depth++] = c;
	*pctx = c;
	return CUDA_SUCCESS;
}
CUAPI CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return cuCtxCreate_v2(pctx, flags, dev);
}
/* _v3 (CUexecAffinityParam array) and _v4 (CUctxCreateParams): extra parameters ignored. */
CUAPI CUresult cuCtxCreate_v3(CUcontext *pctx, void *paramsArray, int numParams,
			      unsigned int flags, CUdevice dev)
{
	(void)paramsArray;
	if (numParams < 0)
		return CUDA_ERROR_INVALID_VALUE;
	return cuCtxCreate_v2(pctx, flags, dev);
}
CUAPI CUresult cuCtxCreate_v4(CUcontext *pctx, void *ctxCreateParams, unsigned int flags,
			      CUdevice dev)
{
	(void)ctxCreateParams;
	return cuCtxCreate_v2(pctx, flags, dev);
}

CUAPI CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	CUresult r = sim_initialized();
	if (r != CUDA_SUCCESS)
		return r;
	if (ctx == NULL || !sim_ctx_valid(ctx) || ctx->primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&ctx_mu);
	ctx->destroyed = 1;
	pthread_mutex_unlock(&ctx_mu);
	sim_mem_release_ctx(ctx);
	daemon_ctx("CTXEND", ctx->dev);
	drop_from_stack(ctx);
	return CUDA_SUCCESS;
}
CUAPI CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }

CUAPI CUresult cuCtxSetCurrent(CUcontext ctx)
{
	CUresult r = sim_initialized();
	if (r != CUDA_SUCCESS)
		return r;
	if (ctx == NULL) {
		if (ctx_depth > 0)
			ctx_depth--;
		return CUDA_SUCCESS;
	}
	if (!sim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth == 0)
		ctx_depth = 1;
	ctx_stack[ctx_depth - 1] = ctx;
	return CUDA_SUCCESS;
}

CUAPI CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	CUresult r = sim_initialized();
	if (r != CUDA_SUCCESS)
		return r;
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUctx_st *c = sim_current();
	*pctx = (c && sim_ctx_valid(c)) ? c : NULL;
	return CUDA_SUCCESS;
}

CUAPI CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	CUresult r = sim_initialized();
	if (r != CUDA_SUCCESS)
		return r;
	if (ctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth >= STACK_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_stack[ctx_depth++] = ctx;
	return CUDA_SUCCESS;
}
CUAPI CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }

CUAPI CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	CUresult r = sim_initialized();
	if (r != CUDA_SUCCESS)
		return r;
	if (ctx_depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	struct CUctx_st *c = ctx_stack[--ctx_depth];
	if (pctx)
		*pctx = c;
	return CUDA_SUCCESS;
}
CUAPI CUresult cuCtxPopCurrent(CUcontext *pctx) { return cuCtxPopCurrent_v2(pctx); }

CUAPI CUresult cuCtxGetDevice(CUdevice *dev)
{
	if (dev == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUctx_st *c;
	CUresult r = sim_current_checked(&c);
	if (r != CUDA_SUCCESS)
		return r;
	*dev = c->dev;
	return CUDA_SUCCESS;
}

CUAPI CUresult cuCtxSynchronize(void) { return sim_current_checked(NULL); }

CUAPI CUresult cuCtxGetFlags(unsigned int *flags)
{
	if (flags == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUctx_st *c;
	CUresult r = sim_current_checked(&c);
	if (r == CUDA_SUCCESS)
		*flags = c->flags;
	return r;
}

CUAPI CUresult cuCtxSetFlags(unsigned int flags)
{
	struct CUctx_st *c;
	CUresult r = sim_current_checked(&c);
	if (r == CUDA_SUCCESS)
		c->flags = flags;
	return r;
}

/* cuCtxGetApiVersion: 3020, the API version of every context made by _v2-era entry points. */
CUAPI CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
	CUresult r = sim_initialized();
	if (r != CUDA_SUCCESS)
		return r;
	if (version == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (ctx == NULL)
		ctx = sim_current();
	if (ctx == NULL || !sim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	*version = 3020;
	return CUDA_SUCCESS;
}

CUAPI CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
	if (id == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (ctx == NULL)
		ctx = sim_current();
	if (ctx == NULL || !sim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	*id = (unsigned long long)(uintptr_t)ctx;
	return CUDA_SUCCESS;
}

/* Limits and cache config: accepted and not modelled. */
CUAPI CUresult cuCtxSetLimit(int limit, size_t value)
{
	(void)limit, (void)value;
	return sim_current_checked(NULL);
}
CUAPI CUresult cuCtxGetLimit(size_t *value, int limit)
{
	(void)limit;
	if (value == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*value = 0;
	return sim_current_checked(NULL);
}
CUAPI CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
	if (least)
		*least = 0;
	if (greatest)
		*greatest = -5;
	return sim_current_checked(NULL);
}

/*
 * cuda_mem.c: memory management of the simulated libcuda (CUDA Driver API reference, module
 * "Memory Management").
 *
 * Device memory is accounted by the simgpu daemon: cuMemAlloc sends ALLOC on the current
 * context's device and the returned handle is the device pointer; the daemon answers ERR OOM
 * when the physical device is full (-> CUDA_ERROR_OUT_OF_MEMORY). cuMemGetInfo answers the
 * physical device's view (MEM: free = total - used by every process), like the real driver.
 * Freeing an unknown pointer or freeing twice gives CUDA_ERROR_INVALID_VALUE, as the real
 * driver does.
 *
 * Memory CONTENTS are not modelled: copies and memsets are bounds-checked against this
 * process's allocations and then succeed without moving data; a device-to-host copy fills the
 * host buffer with zeros. Managed memory is device memory here (no UVM migration); pitch
 * allocations round the pitch up to 512 bytes. Host allocations (cuMemAllocHost,
 * cuMemHostAlloc) are plain malloc memory.
 */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "cuda_internal.h"

typedef struct {
	CUdeviceptr ptr;
	size_t size;
	struct CUctx_st *ctx;
} sim_alloc;

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static sim_alloc *allocs;
static size_t nallocs, capallocs;

static int add_alloc(CUdeviceptr p, size_t size, struct CUctx_st *ctx)
{
	pthread_mutex_lock(&mem_mu);
	if (nallocs == capallocs) {
		size_t nc = capallocs ? capallocs * 2 : 64;
		sim_alloc *na = realloc(allocs, nc * sizeof *na);
		if (na == NULL) {
			pthread_mutex_unlock(&mem_mu);
			return -1;
		}
		allocs = na;
		capallocs = nc;
	}
	allocs[nallocs++] = (sim_alloc){p, size, ctx};
	pthread_mutex_unlock(&mem_mu);
	return 0;
}

/* take_alloc removes the allocation starting exactly at p; 0 if found. */
static int take_alloc(CUdeviceptr p)
{
	int found = -1;
	pthread_mutex_lock(&mem_mu);
	for (size_t i = 0; i < nallocs; i++) {
		if (allocs[i].ptr == p) {
			allocs[i] = allocs[--nallocs];
			found = 0;
			break;
		}
	}
	pthread_mutex_unlock(&mem_mu);
	return found;
}

/* in_bounds: [p, p+n) lies inside one allocation of this process. */
static int in_bounds(CUdeviceptr p, size_t n)
{
	int ok = 0;
	pthread_mutex_lock(&mem_mu);
	for (size_t i = 0; i < nallocs; i++) {
		if (p >= allocs[i].ptr && p - allocs[i].ptr <= allocs[i].size &&
		    n <= allocs[i].size - (size_t)(p - allocs[i].ptr)) {
			ok = 1;
			break;
		}
	}
	pthread_mutex_unlock(&mem_mu);
	return ok;
}

static void daemon_free(CUdeviceptr p)
{
	char req[64], resp[256];
	snprintf(req, sizeof req, "FREE %llu", (unsigned long long)p);
	(void)simgpu_request(req, resp, sizeof resp);
}

void sim_mem_release_ctx(struct CUctx_st *ctx)
{
	for (;;) {
		CUdeviceptr p = 0;
		pthread_mutex_lock(&mem_mu);
		for (size_t i = 0; i < nallocs; i++) {
			if (allocs[i].ctx == ctx) {
				p = allocs[i].ptr;
				allocs[i] = allocs[--nallocs];
				break;
			}
		}
		pthread_mutex_unlock(&mem_mu);
		if (p == 0)
			return;
		daemon_free(p);
	}
}

static CUresult sim_alloc_bytes(CUdeviceptr *dptr, size_t bytes)
{
	if (dptr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUctx_st *c;
	CUresult r = sim_current_checked(&c);
	if (r != CUDA_SUCCESS)
		return r;
	if (bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	char req[96], resp[256];
	snprintf(req, sizeof req, "ALLOC %d %zu", sim_devs[c->dev].daemon_index, bytes);
	int rc = simgpu_request(req, resp, sizeof resp);
	if (rc != 0)
		return sim_daemon_error(rc, resp);
	unsigned long long h = strtoull(resp, NULL, 0);
	if (h == 0)
		return CUDA_ERROR_UNKNOWN;
	if (add_alloc(h, bytes, c) != 0) {
		daemon_free(h);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr = h;
	return CUDA_SUCCESS;
}

CUAPI CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) { return sim_alloc_bytes(dptr, bytesize); }

/* cuMemAlloc (API v1, 32-bit pointer): refused when the pointer does not fit. */
CUAPI CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
	CUdeviceptr p;
	if (dptr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sim_alloc_bytes(&p, bytesize);
	if (r != CUDA_SUCCESS)
		return r;
	if (p > 0xffffffffull) {
		take_alloc(p);
		daemon_free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr = (CUdeviceptr_v1)p;
	return CUDA_SUCCESS;
}

CUAPI CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	return sim_alloc_bytes(dptr, bytesize);
}

CUAPI CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
				  unsigned int elementSizeBytes)
{
	if (pitch == NULL || width == 0 || height == 0 ||
	    (elementSizeBytes != 4 && elementSizeBytes != 8 && elementSizeBytes != 16))
		return CUDA_ERROR_INVALID_VALUE;
	size_t p = (width + 511) & ~(size_t)511;
	if (height > (size_t)-1 / p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = sim_alloc_bytes(dptr, p * height);
	if (r == CUDA_SUCCESS)
		*pitch = p;
	return r;
}

CUAPI CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	CUresult r = sim_initialized();
	if (r != CUDA_SUCCESS)
		return r;
	if (dptr == 0)
		return CUDA_SUCCESS; /* freeing NULL is a no-op */
	if (take_alloc(dptr) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	char req[64], resp[256];
	snprintf(req, sizeof req, "FREE %llu", (unsigned long long)dptr);
	int rc = simgpu_request(req, resp, sizeof resp);
	return rc == 0 ? CUDA_SUCCESS : sim_daemon_error(rc, resp);
}
CUAPI CUresult cuMemFree(CUdeviceptr_v1 dptr) { return cuMemFree_v2(dptr); }

CUAPI CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
	(void)s;
	return cuMemFree_v2(dptr);
}
CUAPI CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
	(void)s;
	return sim_alloc_bytes(dptr, bytesize);
}

CUAPI CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
	if (free_b == NULL || total_b == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUctx_st *c;
	CUresult r = sim_current_checked(&c);
	if (r != CUDA_SUCCESS)
		return r;
	char req[64], resp[256];
	snprintf(req, sizeof req, "MEM %d", sim_devs[c->dev].daemon_index);
	int rc = simgpu_request(req, resp, sizeof resp);
	if (rc != 0)
		return sim_daemon_error(rc, resp);
	unsigned long long total, used;
	if (sscanf(resp, "%llu %llu", &total, &used) != 2)
		return CUDA_ERROR_UNKNOWN;
	*total_b = (size_t)total;
	*free_b = (size_t)(used >= total ? 0 : total - used);
	return CUDA_SUCCESS;
}

/* cuMemGetInfo (API v1, 32-bit sizes): clamped to 4 GiB - 1. */
CUAPI CUresult cuMemGetInfo(unsigned int *free_b, unsigned int *total_b)
{
	size_t f, t;
	if (free_b == NULL || total_b == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = cuMemGetInfo_v2(&f, &t);
	if (r == CUDA_SUCCESS) {
		*free_b = f > 0xffffffffu ? 0xffffffffu : (unsigned)f;
		*total_b = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
	}
	return r;
}

CUAPI CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	CUresult r = sim_current_checked(NULL);
	if (r != CUDA_SUCCESS)
		return r;
	CUresult out = CUDA_ERROR_NOT_FOUND;
	pthread_mutex_lock(&mem_mu);
	for (size_t i = 0; i < nallocs; i++) {
		if (dptr >= allocs[i].ptr && dptr - allocs[i].ptr < allocs[i].size) {
			if (pbase)
				*pbase = allocs[i].ptr;
			if (psize)
				*psize = allocs[i].size;
			out = CUDA_SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&mem_mu);
	return out;
}

/* ---- host memory ---- */

CUAPI CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	if (pp == NULL || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sim_current_checked(NULL);
	if (r != CUDA_SUCCESS)
		return r;
	*pp = malloc(bytesize);
	return *pp ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUAPI CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
	(void)flags;
	return cuMemAllocHost_v2(pp, bytesize);
}
CUAPI CUresult cuMemFreeHost(void *p)
{
	free(p);
	return CUDA_SUCCESS;
}
CUAPI CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags)
{
	(void)flags;
	if (p == NULL || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	return sim_current_checked(NULL);
}
CUAPI CUresult cuMemHostUnregister(void *p)
{
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return sim_current_checked(NULL);
}

/* ---- copies and memsets: bounds only, contents not modelled ---- */

static CUresult check_dev_range(CUdeviceptr p, size_t n)
{
	CUresult r = sim_current_checked(NULL);
	if (r != CUDA_SUCCESS)
		return r;
	return in_bounds(p, n) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUAPI CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	if (src == NULL && n > 0)
		return CUDA_ERROR_INVALID_VALUE;
	return check_dev_range(dst, n);
}

CUAPI CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	if (dst == NULL && n > 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = check_dev_range(src, n);
	if (r == CUDA_SUCCESS && n > 0)
		memset(dst, 0, n);
	return r;
}

CUAPI CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	CUresult r = check_dev_range(dst, n);
	return r != CUDA_SUCCESS ? r : check_dev_range(src, n);
}

/* cuMemcpy (unified addressing): a pointer in no allocation is host memory. */
CUAPI CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	CUresult r = sim_current_checked(NULL);
	if (r != CUDA_SUCCESS)
		return r;
	int dd = in_bounds(dst, n), sd = in_bounds(src, n);
	if ((!dd && dst == 0) || (!sd && src == 0))
		return CUDA_ERROR_INVALID_VALUE;
	if (!dd && !sd)
		memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	else if (!dd)
		memset((void *)(uintptr_t)dst, 0, n);
	return CUDA_SUCCESS;
}

CUAPI CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	(void)s;
	return cuMemcpyHtoD_v2(dst, src, n);
}
CUAPI CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	(void)s;
	return cuMemcpyDtoH_v2(dst, src, n);
}
CUAPI CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	(void)s;
	return cuMemcpyDtoD_v2(dst, src, n);
}
CUAPI CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	(void)s;
	return cuMemcpy(dst, src, n);
}
CUAPI CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n)
{
	if (!sim_ctx_valid(dc) || !sim_ctx_valid(sc))
		return CUDA_ERROR_INVALID_CONTEXT;
	return cuMemcpyDtoD_v2(dst, src, n);
}
CUAPI CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc,
				 size_t n, CUstream s)
{
	(void)s;
	return cuMemcpyPeer(dst, dc, src, sc, n);
}

CUAPI CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char uc, size_t n)
{
	(void)uc;
	return check_dev_range(dst, n);
}
CUAPI CUresult cuMemsetD16_v2(CUdeviceptr dst, unsigned short us, size_t n)
{
	(void)us;
	if (n > (size_t)-1 / 2)
		return CUDA_ERROR_INVALID_VALUE;
	return check_dev_range(dst, n * 2);
}
CUAPI CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int ui, size_t n)
{
	(void)ui;
	if (n > (size_t)-1 / 4)
		return CUDA_ERROR_INVALID_VALUE;
	return check_dev_range(dst, n * 4);
}
CUAPI CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream s)
{
	(void)s;
	return cuMemsetD8_v2(dst, uc, n);
}
CUAPI CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short us, size_t n, CUstream s)
{
	(void)s;
	return cuMemsetD16_v2(dst, us, n);
}
CUAPI CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int ui, size_t n, CUstream s)
{
	(void)s;
	return cuMemsetD32_v2(dst, ui, n);
}

/* ---- memory pools: not simulated (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 0) ---- */

CUAPI CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
	CUresult r = sim_check_dev(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (pool == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_ERROR_NOT_SUPPORTED;
}
CUAPI CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	return cuDeviceGetDefaultMemPool(pool, dev);
}

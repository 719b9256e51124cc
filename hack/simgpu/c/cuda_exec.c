/*
 * cuda_exec.c: modules, kernels, streams, events and error strings of the simulated libcuda
 * (CUDA Driver API reference, modules "Module Management", "Library Management", "Execution
 * Control", "Stream Management", "Event Management", "Error Handling").
 *
 * Any module image is accepted and any function name resolves; cuLaunchKernel checks its
 * arguments and sleeps $SIMGPU_KERNEL_US microseconds (default 5) instead of running anything.
 * Streams and events are handles; everything completes immediately, and event timing is the
 * host's monotonic clock between two cuEventRecord calls.
 *
 * Not modelled: kernel execution and its effects, occupancy, graphs, cooperative launches,
 * stream ordering, priorities and callbacks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_internal.h"

/* ---- handle registry: every module, function, stream and event made here ---- */

enum { H_MOD = 1, H_FUNC, H_STREAM, H_EVENT };

typedef struct {
	int kind;
	unsigned flags;
	int recorded;
	struct timespec at;
	int dead;
} sim_handle;

static pthread_mutex_t h_mu = PTHREAD_MUTEX_INITIALIZER;
static sim_handle **handles;
static size_t nh, caph;

static sim_handle *h_new(int kind, unsigned flags)
{
	sim_handle *h = calloc(1, sizeof *h);
	if (h == NULL)
		return NULL;
	h->kind = kind;
	h->flags = flags;
	pthread_mutex_lock(&h_mu);
	if (nh == caph) {
		size_t nc = caph ? caph * 2 : 64;
		sim_handle **n = realloc(handles, nc * sizeof *n);
		if (n == NULL) {
			pthread_mutex_unlock(&h_mu);
			free(h);
			return NULL;
		}
		handles = n;
		caph = nc;
	}
	handles[nh++] = h;
	pthread_mutex_unlock(&h_mu);
	return h;
}

/* h_get returns p if it is a live handle of kind, else NULL. */
static sim_handle *h_get(const void *p, int kind)
{
	sim_handle *out = NULL;
	if (p == NULL)
		return NULL;
	pthread_mutex_lock(&h_mu);
	for (size_t i = nh; i-- > 0;) {
		if (handles[i] == p) {
			if (handles[i]->kind == kind && !handles[i]->dead)
				out = handles[i];
			break;
		}
	}
	pthread_mutex_unlock(&h_mu);
	return out;
}

/* h_kill marks a handle dead; the memory stays so stale handles fail cleanly. */
static CUresult h_kill(const void *p, int kind)
{
	sim_handle *h = h_get(p, kind);
	if (h == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&h_mu);
	h->dead = 1;
	pthread_mutex_unlock(&h_mu);
	return CUDA_SUCCESS;
}

/* stream_ok: NULL, CU_STREAM_LEGACY (0x1), CU_STREAM_PER_THREAD (0x2) or a live stream. */
static int stream_ok(CUstream s)
{
	return (uintptr_t)s <= 2 || h_get(s, H_STREAM) != NULL;
}

/* ---- modules and libraries ---- */

static CUresult new_module(CUmodule *m)
{
	if (m == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sim_current_checked(NULL);
	if (r != CUDA_SUCCESS)
		return r;
	sim_handle *h = h_new(H_MOD, 0);
	if (h == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*m = (CUmodule)h;
	return CUDA_SUCCESS;
}

CUAPI CUresult cuModuleLoad(CUmodule *m, const char *fname)
{
	if (fname == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (access(fname, R_OK) != 0)
		return CUDA_ERROR_FILE_NOT_FOUND;
	return new_module(m);
}
CUAPI CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	return image == NULL ? CUDA_ERROR_INVALID_VALUE : new_module(m);
}
CUAPI CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, void *opts,
				  void **vals)
{
	(void)n, (void)opts, (void)vals;
	return cuModuleLoadData(m, image);
}
CUAPI CUresult cuModuleLoadFatBinary(CUmodule *m, const void *fatCubin)
{
	return cuModuleLoadData(m, fatCubin);
}
CUAPI CUresult cuModuleUnload(CUmodule m) { return h_kill(m, H_MOD); }

CUAPI CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	if (f == NULL || name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (h_get(m, H_MOD) == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	sim_handle *h = h_new(H_FUNC, 0);
	if (h == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*f = (CUfunction)h;
	return CUDA_SUCCESS;
}

/* CUDA 12 runtimes load code through the library API: a library is a module here and a
 * kernel is a function. */
CUAPI CUresult cuLibraryLoadData(CUmodule *lib, const void *code, void *jo, void *jv,
				 unsigned int nj, void *lo, void *lv, unsigned int nl)
{
	(void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
	if (lib == NULL || code == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sim_initialized();
	if (r != CUDA_SUCCESS)
		return r;
	sim_handle *h = h_new(H_MOD, 0);
	if (h == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*lib = (CUmodule)h;
	return CUDA_SUCCESS;
}
CUAPI CUresult cuLibraryUnload(CUmodule lib) { return h_kill(lib, H_MOD); }
CUAPI CUresult cuLibraryGetKernel(CUfunction *k, CUmodule lib, const char *name)
{
	if (k == NULL || name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (h_get(lib, H_MOD) == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	sim_handle *h = h_new(H_FUNC, 0);
	if (h == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*k = (CUfunction)h;
	return CUDA_SUCCESS;
}
CUAPI CUresult cuLibraryGetModule(CUmodule *m, CUmodule lib)
{
	if (m == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (h_get(lib, H_MOD) == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	*m = lib;
	return CUDA_SUCCESS;
}
CUAPI CUresult cuKernelGetFunction(CUfunction *f, CUfunction k)
{
	if (f == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (h_get(k, H_FUNC) == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	*f = k;
	return sim_current_checked(NULL);
}

CUAPI CUresult cuFuncGetAttribute(int *pi, int attrib, CUfunction f)
{
	if (pi == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (h_get(f, H_FUNC) == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	*pi = attrib == 0 ? 1024 : 0; /* MAX_THREADS_PER_BLOCK, everything else 0 */
	return CUDA_SUCCESS;
}
CUAPI CUresult cuFuncSetAttribute(CUfunction f, int attrib, int value)
{
	(void)attrib, (void)value;
	return h_get(f, H_FUNC) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUAPI CUresult cuFuncSetCacheConfig(CUfunction f, int config)
{
	(void)config;
	return h_get(f, H_FUNC) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ---- execution ---- */

CUAPI CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			      unsigned int bx, unsigned int by, unsigned int bz,
			      unsigned int sharedMemBytes, CUstream s, void **params, void **extra)
{
	(void)sharedMemBytes, (void)params, (void)extra;
	CUresult r = sim_current_checked(NULL);
	if (r != CUDA_SUCCESS)
		return r;
	if (h_get(f, H_FUNC) == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!stream_ok(s))
		return CUDA_ERROR_INVALID_HANDLE;
	if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
	    (unsigned long long)bx * by * bz > 1024 || gy > 65535 || gz > 65535)
		return CUDA_ERROR_INVALID_VALUE;
	const char *e = getenv("SIMGPU_KERNEL_US");
	long us = e ? atol(e) : 5;
	if (us > 0)
		usleep((useconds_t)us);
	return CUDA_SUCCESS;
}

/* ---- streams ---- */

CUAPI CUresult cuStreamCreate(CUstream *ps, unsigned int flags)
{
	if (ps == NULL || flags > 1)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sim_current_checked(NULL);
	if (r != CUDA_SUCCESS)
		return r;
	sim_handle *h = h_new(H_STREAM, flags);
	if (h == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*ps = (CUstream)h;
	return CUDA_SUCCESS;
}
CUAPI CUresult cuStreamCreateWithPriority(CUstream *ps, unsigned int flags, int priority)
{
	(void)priority;
	return cuStreamCreate(ps, flags);
}
CUAPI CUresult cuStreamDestroy_v2(CUstream s) { return h_kill(s, H_STREAM); }
CUAPI CUresult cuStreamDestroy(CUstream s) { return cuStreamDestroy_v2(s); }
CUAPI CUresult cuStreamSynchronize(CUstream s)
{
	CUresult r = sim_current_checked(NULL);
	if (r != CUDA_SUCCESS)
		return r;
	return stream_ok(s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUAPI CUresult cuStreamQuery(CUstream s) { return cuStreamSynchronize(s); }
CUAPI CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
	(void)flags;
	if (!stream_ok(s) || h_get(e, H_EVENT) == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	return CUDA_SUCCESS;
}

/* ---- events ---- */

#define CU_EVENT_DISABLE_TIMING 0x2

CUAPI CUresult cuEventCreate(CUevent *pe, unsigned int flags)
{
	if (pe == NULL || flags > 0xf)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sim_current_checked(NULL);
	if (r != CUDA_SUCCESS)
		return r;
	sim_handle *h = h_new(H_EVENT, flags);
	if (h == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*pe = (CUevent)h;
	return CUDA_SUCCESS;
}
CUAPI CUresult cuEventRecord(CUevent e, CUstream s)
{
	sim_handle *h = h_get(e, H_EVENT);
	if (h == NULL || !stream_ok(s))
		return CUDA_ERROR_INVALID_HANDLE;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	pthread_mutex_lock(&h_mu);
	h->at = now;
	h->recorded = 1;
	pthread_mutex_unlock(&h_mu);
	return CUDA_SUCCESS;
}
CUAPI CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags)
{
	(void)flags;
	return cuEventRecord(e, s);
}
CUAPI CUresult cuEventSynchronize(CUevent e)
{
	return h_get(e, H_EVENT) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUAPI CUresult cuEventQuery(CUevent e) { return cuEventSynchronize(e); }
CUAPI CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
	if (ms == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	sim_handle *a = h_get(start, H_EVENT), *b = h_get(end, H_EVENT);
	if (a == NULL || b == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&h_mu);
	int ok = a->recorded && b->recorded;
	double d = (double)(b->at.tv_sec - a->at.tv_sec) * 1e3 +
		   (double)(b->at.tv_nsec - a->at.tv_nsec) / 1e6;
	pthread_mutex_unlock(&h_mu);
	if (!ok)
		return CUDA_ERROR_INVALID_HANDLE;
	*ms = (float)d;
	return CUDA_SUCCESS;
}
CUAPI CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end)
{
	return cuEventElapsedTime(ms, start, end);
}
CUAPI CUresult cuEventDestroy_v2(CUevent e) { return h_kill(e, H_EVENT); }
CUAPI CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }

/* ---- error strings (names and texts as the real driver reports them) ---- */

static const struct { CUresult code; const char *name, *text; } errs[] = {
	{CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
	{CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	{CUDA_ERROR_PROFILER_DISABLED, "CUDA_ERROR_PROFILER_DISABLED", "profiler disabled while using external profiling tool"},
	{CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
	{CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
	{CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{CUDA_ERROR_DEVICE_NOT_LICENSED, "CUDA_ERROR_DEVICE_NOT_LICENSED", "device doesn't have valid Grid license"},
	{CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	{CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
	{CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
	{CUDA_ERROR_ECC_UNCORRECTABLE, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
	{CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "context is already in use"},
	{CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	{CUDA_ERROR_INVALID_SOURCE, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
	{CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
	{CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
	{CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	{CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
	{CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
	{CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	{CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
	{CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "primary context active"},
	{CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
	{CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	{CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	{CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	{CUDA_ERROR_SYSTEM_NOT_READY, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
	{CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
	{CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* Unknown codes: CUDA_ERROR_INVALID_VALUE and *pStr = NULL, as documented. */
CUAPI CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	if (pStr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
		if (errs[i].code == error) {
			*pStr = errs[i].name;
			return CUDA_SUCCESS;
		}
	}
	*pStr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

CUAPI CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	if (pStr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
		if (errs[i].code == error) {
			*pStr = errs[i].text;
			return CUDA_SUCCESS;
		}
	}
	*pStr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

/*
 * cudatest: edge cases of the simulated libcuda's Driver API (hack/simgpu/cuda_test.go runs
 * it against a live daemon with at least one visible device). Prints "ok <check>" or
 * "FAIL <check>: got X want Y" per check; exits 1 when any failed. Expected values are the
 * documented CUDA Driver API results.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_sim.h"

static int failed;

static void expect(const char *what, long long got, long long want)
{
	if (got == want) {
		printf("ok %s\n", what);
	} else {
		printf("FAIL %s: got %lld want %lld\n", what, got, want);
		failed = 1;
	}
}

static void *other_thread(void *arg)
{
	CUcontext c = (CUcontext)1;
	expect("other thread has no current context", cuCtxGetCurrent(&c) == CUDA_SUCCESS && c == NULL, 1);
	*(int *)arg = 1;
	return NULL;
}

#define MIB (1ull << 20)

int main(void)
{
	int n = -1, v = 0, x = 0;
	CUdevice d = -1;
	CUcontext ctx = NULL, c2 = NULL;
	CUdeviceptr p = 0, q = 0;
	size_t fr = 0, tot = 0, fr2 = 0, tot2 = 0;

	expect("count before cuInit", cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
	expect("driver version before cuInit", cuDriverGetVersion(&v), CUDA_SUCCESS);
	expect("cuInit flags", cuInit(1), CUDA_ERROR_INVALID_VALUE);
	expect("cuInit", cuInit(0), CUDA_SUCCESS);
	expect("cuInit again", cuInit(0), CUDA_SUCCESS);
	expect("driver version", cuDriverGetVersion(&v) == CUDA_SUCCESS && v >= 12000, 1);
	expect("count", cuDeviceGetCount(&n) == CUDA_SUCCESS && n >= 1, 1);
	expect("count NULL", cuDeviceGetCount(NULL), CUDA_ERROR_INVALID_VALUE);
	expect("device past count", cuDeviceGet(&d, n), CUDA_ERROR_INVALID_DEVICE);
	expect("device -1", cuDeviceGet(&d, -1), CUDA_ERROR_INVALID_DEVICE);
	expect("device NULL", cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);
	expect("device 0", cuDeviceGet(&d, 0), CUDA_SUCCESS);
	expect("name NULL", cuDeviceGetName(NULL, 10, d), CUDA_ERROR_INVALID_VALUE);
	expect("uuid NULL", cuDeviceGetUuid(NULL, d), CUDA_ERROR_INVALID_VALUE);
	expect("attribute warp size", cuDeviceGetAttribute(&x, CU_DEVICE_ATTRIBUTE_WARP_SIZE, d) == 0 && x == 32, 1);
	expect("attribute SMs", cuDeviceGetAttribute(&x, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d) == 0 && x > 0, 1);
	expect("attribute memory pools", cuDeviceGetAttribute(&x, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, d) == 0 && x == 0, 1);
	expect("attribute 0", cuDeviceGetAttribute(&x, (CUdevice_attribute)0, d), CUDA_ERROR_INVALID_VALUE);
	expect("attribute bad device", cuDeviceGetAttribute(&x, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 999), CUDA_ERROR_INVALID_DEVICE);
	char bus[32];
	CUdevice back = -1;
	expect("pci bus id", cuDeviceGetPCIBusId(bus, sizeof bus, d), CUDA_SUCCESS);
	expect("by pci bus id", cuDeviceGetByPCIBusId(&back, bus) == CUDA_SUCCESS && back == d, 1);
	expect("by bad pci bus id", cuDeviceGetByPCIBusId(&back, "nonsense"), CUDA_ERROR_INVALID_VALUE);
	int ma = 0, mi = -1;
	expect("compute capability", cuDeviceComputeCapability(&ma, &mi, d) == 0 && ma >= 7 && mi >= 0, 1);

	/* no context yet */
	expect("alloc without context", cuMemAlloc_v2(&p, MIB), CUDA_ERROR_INVALID_CONTEXT);
	expect("meminfo without context", cuMemGetInfo_v2(&fr, &tot), CUDA_ERROR_INVALID_CONTEXT);
	expect("current is NULL", cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx == NULL, 1);
	expect("pop empty stack", cuCtxPopCurrent_v2(&ctx), CUDA_ERROR_INVALID_CONTEXT);
	expect("ctxgetdevice without context", cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
	int bogus[16] = {0};
	expect("set bogus context", cuCtxSetCurrent((CUcontext)bogus), CUDA_ERROR_INVALID_CONTEXT);
	expect("destroy bogus context", cuCtxDestroy_v2((CUcontext)bogus), CUDA_ERROR_INVALID_CONTEXT);

	/* a created context */
	expect("ctx create bad device", cuCtxCreate_v2(&ctx, 0, 999), CUDA_ERROR_INVALID_DEVICE);
	expect("ctx create", cuCtxCreate_v2(&ctx, 0, 0), CUDA_SUCCESS);
	expect("ctx is current", cuCtxGetCurrent(&c2) == CUDA_SUCCESS && c2 == ctx, 1);
	expect("ctx device", cuCtxGetDevice(&d) == CUDA_SUCCESS && d == 0, 1);
	unsigned api = 0;
	expect("ctx api version", cuCtxGetApiVersion(ctx, &api) == 0 && api == 3020, 1);
	expect("synchronize", cuCtxSynchronize(), CUDA_SUCCESS);
	int seen = 0;
	pthread_t th;
	pthread_create(&th, NULL, other_thread, &seen);
	pthread_join(th, NULL);
	expect("other thread ran", seen, 1);

	expect("meminfo", cuMemGetInfo_v2(&fr, &tot) == 0 && tot > 0 && fr <= tot, 1);
	expect("alloc 0 bytes", cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
	expect("alloc NULL", cuMemAlloc_v2(NULL, MIB), CUDA_ERROR_INVALID_VALUE);
	expect("alloc above total", cuMemAlloc_v2(&p, tot + 1024 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
	expect("alloc 1 GiB", cuMemAlloc_v2(&p, 1024 * MIB), CUDA_SUCCESS);
	expect("meminfo after alloc", cuMemGetInfo_v2(&fr2, &tot2) == 0 && fr - fr2 >= 1024 * MIB, 1);
	char host[4096];
	memset(host, 7, sizeof host);
	expect("memcpy HtoD", cuMemcpyHtoD_v2(p, host, sizeof host), CUDA_SUCCESS);
	expect("memcpy HtoD at end", cuMemcpyHtoD_v2(p + 1024 * MIB - 16, host, 16), CUDA_SUCCESS);
	expect("memcpy HtoD past end", cuMemcpyHtoD_v2(p + 1024 * MIB - 16, host, 17), CUDA_ERROR_INVALID_VALUE);
	expect("memcpy DtoH", cuMemcpyDtoH_v2(host, p, sizeof host) == 0 && host[100] == 0, 1);
	expect("memcpy DtoH unknown", cuMemcpyDtoH_v2(host, 0x1000, 16), CUDA_ERROR_INVALID_VALUE);
	expect("memset", cuMemsetD8_v2(p, 1, 1024 * MIB), CUDA_SUCCESS);
	expect("memset past end", cuMemsetD8_v2(p, 1, 1024 * MIB + 1), CUDA_ERROR_INVALID_VALUE);
	size_t pitch = 0;
	expect("alloc pitch", cuMemAllocPitch_v2(&q, &pitch, 1000, 10, 4) == 0 && pitch == 1024, 1);
	expect("alloc pitch bad element", cuMemAllocPitch_v2(&q, &pitch, 1000, 10, 3), CUDA_ERROR_INVALID_VALUE);
	expect("memcpy DtoD", cuMemcpyDtoD_v2(q, p, 1024), CUDA_SUCCESS);
	expect("free pitch", cuMemFree_v2(q), CUDA_SUCCESS);
	expect("free", cuMemFree_v2(p), CUDA_SUCCESS);
	expect("free twice", cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
	expect("free unknown", cuMemFree_v2(0xdeadbeef000ull), CUDA_ERROR_INVALID_VALUE);
	expect("meminfo back", cuMemGetInfo_v2(&fr2, &tot2) == 0 && fr2 == fr, 1);
	expect("managed alloc", cuMemAllocManaged(&p, MIB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
	expect("managed free", cuMemFree_v2(p), CUDA_SUCCESS);

	/* modules, launches, streams, events */
	CUmodule mod;
	CUfunction fn;
	CUstream s;
	CUevent e1, e2;
	float ms = -1;
	expect("module load", cuModuleLoadData(&mod, "fake image"), CUDA_SUCCESS);
	expect("get function", cuModuleGetFunction(&fn, mod, "kernel"), CUDA_SUCCESS);
	expect("stream create", cuStreamCreate(&s, 0), CUDA_SUCCESS);
	expect("event create", cuEventCreate(&e1, 0) == 0 && cuEventCreate(&e2, 0) == 0, 1);
	expect("event record", cuEventRecord(e1, s), CUDA_SUCCESS);
	expect("launch", cuLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
	expect("launch 2048 threads", cuLaunchKernel(fn, 1, 1, 1, 2048, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
	expect("launch bad function", cuLaunchKernel((CUfunction)bogus, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
	expect("event record 2", cuEventRecord(e2, s), CUDA_SUCCESS);
	expect("stream sync", cuStreamSynchronize(s), CUDA_SUCCESS);
	expect("event sync", cuEventSynchronize(e2), CUDA_SUCCESS);
	expect("elapsed", cuEventElapsedTime(&ms, e1, e2) == 0 && ms >= 0, 1);
	expect("event destroy", cuEventDestroy_v2(e1), CUDA_SUCCESS);
	expect("event destroy twice", cuEventDestroy_v2(e1), CUDA_ERROR_INVALID_HANDLE);
	expect("stream destroy", cuStreamDestroy_v2(s), CUDA_SUCCESS);
	expect("stream destroy twice", cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
	expect("module unload", cuModuleUnload(mod), CUDA_SUCCESS);

	/* destroying a context frees its memory and pops it */
	expect("alloc before destroy", cuMemAlloc_v2(&p, 512 * MIB), CUDA_SUCCESS);
	expect("ctx destroy", cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
	expect("no current after destroy", cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
	expect("ctx destroy twice", cuCtxDestroy_v2(ctx), CUDA_ERROR_INVALID_CONTEXT);
	expect("push destroyed", cuCtxPushCurrent_v2(ctx), CUDA_ERROR_INVALID_CONTEXT);
	expect("free after destroy", cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);

	/* primary context */
	int active = -1;
	unsigned flags = 99;
	expect("primary retain", cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
	expect("primary active", cuDevicePrimaryCtxGetState(0, &flags, &active) == 0 && active == 1, 1);
	expect("primary retain again", cuDevicePrimaryCtxRetain(&c2, 0) == 0 && c2 == ctx, 1);
	expect("push primary", cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
	expect("meminfo in primary, memory back", cuMemGetInfo_v2(&fr2, &tot2) == 0 && fr2 == fr, 1);
	expect("pop primary", cuCtxPopCurrent_v2(&c2) == 0 && c2 == ctx, 1);
	expect("destroy primary refused", cuCtxDestroy_v2(ctx), CUDA_ERROR_INVALID_CONTEXT);
	expect("primary release", cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
	expect("primary release 2", cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
	expect("primary inactive", cuDevicePrimaryCtxGetState(0, &flags, &active) == 0 && active == 0, 1);

	/* entry points */
	void *self = dlopen("libcuda.so.1", RTLD_NOW);
	void *fp = (void *)1;
	CUdriverProcAddressQueryResult st = 99;
	expect("dlopen libcuda.so.1", self != NULL, 1);
	expect("procaddr cuMemAlloc 12000", cuGetProcAddress_v2("cuMemAlloc", &fp, 12000, 0, &st) == 0 && fp == dlsym(self, "cuMemAlloc_v2") && st == CU_GET_PROC_ADDRESS_SUCCESS, 1);
	expect("procaddr cuMemAlloc 2000", cuGetProcAddress("cuMemAlloc", &fp, 2000, 0) == 0 && fp == dlsym(self, "cuMemAlloc"), 1);
	expect("procaddr cuCtxCreate 12080", cuGetProcAddress("cuCtxCreate", &fp, 12080, 0) == 0 && fp == dlsym(self, "cuCtxCreate_v4"), 1);
	expect("procaddr cuGetProcAddress 12000", cuGetProcAddress("cuGetProcAddress", &fp, 12000, 0) == 0 && fp == dlsym(self, "cuGetProcAddress_v2"), 1);
	expect("procaddr too old", cuGetProcAddress_v2("cuLibraryLoadData", &fp, 11080, 0, &st) == CUDA_ERROR_NOT_FOUND && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, 1);
	expect("procaddr unknown", cuGetProcAddress_v2("cuNoSuchThing", &fp, 12000, 0, &st) == CUDA_ERROR_NOT_FOUND && fp == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, 1);
	expect("procaddr stub", cuGetProcAddress("cuGraphCreate", &fp, 12000, 0) == 0 && ((CUresult(*)(void))fp)() == CUDA_ERROR_NOT_SUPPORTED, 1);
	expect("procaddr NULL", cuGetProcAddress(NULL, &fp, 12000, 0), CUDA_ERROR_INVALID_VALUE);
	const char *str = "x";
	expect("error name", cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &str) == 0 && strcmp(str, "CUDA_ERROR_OUT_OF_MEMORY") == 0, 1);
	expect("error name unknown", cuGetErrorName((CUresult)12345, &str) == CUDA_ERROR_INVALID_VALUE && str == NULL, 1);
	expect("error string", cuGetErrorString(CUDA_ERROR_NO_DEVICE, &str) == 0 && strcmp(str, "no CUDA-capable device is detected") == 0, 1);
	CUmemoryPool pool;
	expect("default mem pool", cuDeviceGetDefaultMemPool(&pool, 0), CUDA_ERROR_NOT_SUPPORTED);
	const void *tbl;
	CUuuid id = {{0}};
	expect("export table", cuGetExportTable(&tbl, &id), CUDA_ERROR_NOT_FOUND);
	return failed;
}

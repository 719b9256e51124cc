/*
 * cuda_procaddr.c: cuGetProcAddress, cuGetExportTable, per-thread-stream aliases and the
 * NOT_SUPPORTED stubs of the simulated libcuda (CUDA Driver API reference, module "Driver
 * Entry Point Access"; CUDA Programming Guide, "Driver Entry Point Access").
 *
 * cuGetProcAddress(symbol, pfn, cudaVersion, flags[, status]) takes the BASE name (no _v2
 * suffix) and the CUDA version the caller was built for, and returns the newest versioned
 * implementation introduced at or before that version: "cuMemAlloc" with 12000 gives
 * cuMemAlloc_v2, with 2000 gives the 32-bit cuMemAlloc. A name known only in newer versions
 * gives CUDA_ERROR_NOT_FOUND with CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT; an unknown name
 * gives CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND and *pfn = NULL. As a
 * leniency the exact exported name ("cuMemAlloc_v2") is also found. The per-thread
 * default-stream flag returns the same implementations (streams are not modelled).
 *
 * Names this simulator does not implement are exported as stubs returning
 * CUDA_ERROR_NOT_SUPPORTED, so that consumers resolving ~200 cu* symbols with dlsym
 * (HAMi-core's libvgpu.so) find every common one.
 */
#include <string.h>

#include "cuda_internal.h"

/* (base name, CUDA version that introduced this variant, exported symbol) */
#define ENTRIES(E)                                                                          \
	E(cuInit, 2000, cuInit) E(cuDriverGetVersion, 2020, cuDriverGetVersion)                  \
	E(cuDeviceGet, 2000, cuDeviceGet) E(cuDeviceGetCount, 2000, cuDeviceGetCount)             \
	E(cuDeviceGetName, 2000, cuDeviceGetName) E(cuDeviceGetUuid, 9020, cuDeviceGetUuid)       \
	E(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2)                                           \
	E(cuDeviceTotalMem, 2000, cuDeviceTotalMem) E(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2) \
	E(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute)                                     \
	E(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId)                                       \
	E(cuDeviceGetByPCIBusId, 4010, cuDeviceGetByPCIBusId)                                   \
	E(cuDeviceComputeCapability, 2000, cuDeviceComputeCapability)                           \
	E(cuDeviceCanAccessPeer, 4000, cuDeviceCanAccessPeer)                                   \
	E(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain)                             \
	E(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease)                           \
	E(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2)                       \
	E(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset)                               \
	E(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2)                           \
	E(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState)                         \
	E(cuDevicePrimaryCtxSetFlags, 7000, cuDevicePrimaryCtxSetFlags)                         \
	E(cuDevicePrimaryCtxSetFlags, 11000, cuDevicePrimaryCtxSetFlags_v2)                     \
	E(cuCtxCreate, 2000, cuCtxCreate) E(cuCtxCreate, 3020, cuCtxCreate_v2)                  \
	E(cuCtxCreate, 11040, cuCtxCreate_v3) E(cuCtxCreate, 12050, cuCtxCreate_v4)             \
	E(cuCtxDestroy, 2000, cuCtxDestroy) E(cuCtxDestroy, 4000, cuCtxDestroy_v2)              \
	E(cuCtxSetCurrent, 4000, cuCtxSetCurrent) E(cuCtxGetCurrent, 4000, cuCtxGetCurrent)     \
	E(cuCtxPushCurrent, 2000, cuCtxPushCurrent) E(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2) \
	E(cuCtxPopCurrent, 2000, cuCtxPopCurrent) E(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2)  \
	E(cuCtxGetDevice, 2000, cuCtxGetDevice) E(cuCtxSynchronize, 2000, cuCtxSynchronize)     \
	E(cuCtxGetApiVersion, 3020, cuCtxGetApiVersion) E(cuCtxGetFlags, 7000, cuCtxGetFlags)   \
	E(cuCtxSetFlags, 12010, cuCtxSetFlags) E(cuCtxGetId, 12000, cuCtxGetId)                 \
	E(cuCtxSetLimit, 3010, cuCtxSetLimit) E(cuCtxGetLimit, 3010, cuCtxGetLimit)             \
	E(cuCtxGetStreamPriorityRange, 5050, cuCtxGetStreamPriorityRange)                       \
	E(cuCtxEnablePeerAccess, 4000, cuCtxEnablePeerAccess)                                   \
	E(cuCtxDisablePeerAccess, 4000, cuCtxDisablePeerAccess)                                 \
	E(cuMemAlloc, 2000, cuMemAlloc) E(cuMemAlloc, 3020, cuMemAlloc_v2)                      \
	E(cuMemFree, 2000, cuMemFree) E(cuMemFree, 3020, cuMemFree_v2)                          \
	E(cuMemGetInfo, 2000, cuMemGetInfo) E(cuMemGetInfo, 3020, cuMemGetInfo_v2)              \
	E(cuMemAllocPitch, 3020, cuMemAllocPitch_v2) E(cuMemAllocManaged, 6000, cuMemAllocManaged) \
	E(cuMemAllocAsync, 11020, cuMemAllocAsync) E(cuMemFreeAsync, 11020, cuMemFreeAsync)     \
	E(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2)                                  \
	E(cuMemAllocHost, 3020, cuMemAllocHost_v2) E(cuMemHostAlloc, 2020, cuMemHostAlloc)      \
	E(cuMemFreeHost, 2000, cuMemFreeHost) E(cuMemHostRegister, 6050, cuMemHostRegister_v2)  \
	E(cuMemHostUnregister, 4000, cuMemHostUnregister)                                       \
	E(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2) E(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2)           \
	E(cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2) E(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2) \
	E(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2)                                        \
	E(cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2) E(cuMemcpy, 4000, cuMemcpy)            \
	E(cuMemcpyAsync, 4000, cuMemcpyAsync) E(cuMemcpyPeer, 4000, cuMemcpyPeer)               \
	E(cuMemcpyPeerAsync, 4000, cuMemcpyPeerAsync) E(cuMemsetD8, 3020, cuMemsetD8_v2)        \
	E(cuMemsetD16, 3020, cuMemsetD16_v2) E(cuMemsetD32, 3020, cuMemsetD32_v2)               \
	E(cuMemsetD8Async, 3020, cuMemsetD8Async) E(cuMemsetD16Async, 3020, cuMemsetD16Async)   \
	E(cuMemsetD32Async, 3020, cuMemsetD32Async)                                             \
	E(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool)                          \
	E(cuDeviceGetMemPool, 11020, cuDeviceGetMemPool) E(cuModuleLoad, 2000, cuModuleLoad)    \
	E(cuModuleLoadData, 2000, cuModuleLoadData) E(cuModuleLoadDataEx, 2010, cuModuleLoadDataEx) \
	E(cuModuleLoadFatBinary, 2000, cuModuleLoadFatBinary) E(cuModuleUnload, 2000, cuModuleUnload) \
	E(cuModuleGetFunction, 2000, cuModuleGetFunction)                                       \
	E(cuLibraryLoadData, 12000, cuLibraryLoadData) E(cuLibraryUnload, 12000, cuLibraryUnload) \
	E(cuLibraryGetKernel, 12000, cuLibraryGetKernel)                                        \
	E(cuLibraryGetModule, 12000, cuLibraryGetModule)                                        \
	E(cuKernelGetFunction, 12000, cuKernelGetFunction)                                      \
	E(cuFuncGetAttribute, 2020, cuFuncGetAttribute) E(cuFuncSetAttribute, 9000, cuFuncSetAttribute) \
	E(cuFuncSetCacheConfig, 3000, cuFuncSetCacheConfig) E(cuLaunchKernel, 4000, cuLaunchKernel) \
	E(cuStreamCreate, 2000, cuStreamCreate)                                                 \
	E(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority)                         \
	E(cuStreamDestroy, 2000, cuStreamDestroy) E(cuStreamDestroy, 4000, cuStreamDestroy_v2)  \
	E(cuStreamSynchronize, 2000, cuStreamSynchronize) E(cuStreamQuery, 2000, cuStreamQuery) \
	E(cuStreamWaitEvent, 3020, cuStreamWaitEvent) E(cuEventCreate, 2000, cuEventCreate)     \
	E(cuEventRecord, 2000, cuEventRecord)                                                   \
	E(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags)                                \
	E(cuEventSynchronize, 2000, cuEventSynchronize) E(cuEventQuery, 2000, cuEventQuery)     \
	E(cuEventElapsedTime, 2000, cuEventElapsedTime)                                         \
	E(cuEventElapsedTime, 12080, cuEventElapsedTime_v2)                                     \
	E(cuEventDestroy, 2000, cuEventDestroy) E(cuEventDestroy, 4000, cuEventDestroy_v2)      \
	E(cuGetErrorName, 6000, cuGetErrorName) E(cuGetErrorString, 6000, cuGetErrorString)     \
	E(cuGetProcAddress, 11030, cuGetProcAddress) E(cuGetProcAddress, 12000, cuGetProcAddress_v2) \
	E(cuGetExportTable, 3000, cuGetExportTable) E(cuProfilerStart, 4000, cuProfilerStart)   \
	E(cuProfilerStop, 4000, cuProfilerStop)

/* Exported NOT_SUPPORTED stubs (exact exported names). */
#define STUBS(S)                                                                            \
	S(cuDeviceGetLuid) S(cuDeviceGetProperties) S(cuDeviceGetP2PAttribute)                   \
	S(cuDeviceGetTexture1DLinearMaxWidth) S(cuDeviceGetExecAffinitySupport)                 \
	S(cuDeviceSetMemPool) S(cuDeviceGetNvSciSyncAttributes) S(cuFlushGPUDirectRDMAWrites)  \
	S(cuCtxGetCacheConfig) S(cuCtxSetCacheConfig) S(cuCtxGetSharedMemConfig)                 \
	S(cuCtxSetSharedMemConfig) S(cuCtxAttach) S(cuCtxDetach) S(cuCtxResetPersistingL2Cache)  \
	S(cuCtxGetExecAffinity) S(cuCtxRecordEvent) S(cuCtxWaitEvent) S(cuMemAllocPitch)        \
	S(cuMemAllocHost) S(cuMemHostGetDevicePointer_v2) S(cuMemHostGetFlags)                  \
	S(cuMemcpy2D_v2) S(cuMemcpy2DAsync_v2) S(cuMemcpy2DUnaligned_v2) S(cuMemcpy3D_v2)      \
	S(cuMemcpy3DAsync_v2) S(cuMemcpy3DPeer) S(cuMemcpy3DPeerAsync) S(cuMemcpyAtoA_v2)      \
	S(cuMemcpyAtoD_v2) S(cuMemcpyAtoH_v2) S(cuMemcpyAtoHAsync_v2) S(cuMemcpyDtoA_v2)       \
	S(cuMemcpyHtoA_v2) S(cuMemcpyHtoAAsync_v2) S(cuMemcpyBatchAsync) S(cuMemcpy3DBatchAsync) \
	S(cuMemsetD2D8_v2) S(cuMemsetD2D16_v2) S(cuMemsetD2D32_v2) S(cuMemsetD2D8Async)         \
	S(cuMemsetD2D16Async) S(cuMemsetD2D32Async) S(cuArrayCreate_v2) S(cuArrayDestroy)      \
	S(cuArrayGetDescriptor_v2) S(cuArray3DCreate_v2) S(cuArray3DGetDescriptor_v2)           \
	S(cuMipmappedArrayCreate) S(cuMipmappedArrayDestroy) S(cuMemAddressReserve)             \
	S(cuMemAddressFree) S(cuMemCreate) S(cuMemRelease) S(cuMemMap) S(cuMemUnmap)            \
	S(cuMemSetAccess) S(cuMemGetAccess) S(cuMemGetAllocationGranularity)                    \
	S(cuMemGetAllocationPropertiesFromHandle) S(cuMemExportToShareableHandle)               \
	S(cuMemImportFromShareableHandle) S(cuMemRetainAllocationHandle) S(cuMemMapArrayAsync)  \
	S(cuMemPoolCreate) S(cuMemPoolDestroy) S(cuMemPoolSetAttribute) S(cuMemPoolGetAttribute) \
	S(cuMemPoolTrimTo) S(cuMemPoolSetAccess) S(cuMemPoolGetAccess) S(cuMemAllocFromPoolAsync) \
	S(cuMemPoolExportToShareableHandle) S(cuMemPoolImportFromShareableHandle)               \
	S(cuMemPoolExportPointer) S(cuMemPoolImportPointer) S(cuMemPrefetchAsync)               \
	S(cuMemPrefetchAsync_v2) S(cuMemAdvise) S(cuMemAdvise_v2) S(cuMemRangeGetAttribute)     \
	S(cuMemRangeGetAttributes) S(cuPointerGetAttribute) S(cuPointerGetAttributes)           \
	S(cuPointerSetAttribute) S(cuMemGetHandleForAddressRange) S(cuIpcGetMemHandle)          \
	S(cuIpcOpenMemHandle) S(cuIpcOpenMemHandle_v2) S(cuIpcCloseMemHandle) S(cuIpcGetEventHandle) \
	S(cuIpcOpenEventHandle) S(cuModuleGetGlobal_v2) S(cuModuleGetTexRef) S(cuModuleGetSurfRef) \
	S(cuModuleGetLoadingMode) S(cuModuleGetFunctionCount) S(cuModuleEnumerateFunctions)     \
	S(cuLinkCreate_v2) S(cuLinkAddData_v2) S(cuLinkAddFile_v2) S(cuLinkComplete) S(cuLinkDestroy) \
	S(cuLibraryLoadFromFile) S(cuLibraryGetGlobal) S(cuLibraryGetManaged)                   \
	S(cuLibraryGetUnifiedFunction) S(cuLibraryGetKernelCount) S(cuLibraryEnumerateKernels)  \
	S(cuKernelGetAttribute) S(cuKernelSetAttribute) S(cuKernelSetCacheConfig) S(cuKernelGetName) \
	S(cuKernelGetLibrary) S(cuFuncGetModule) S(cuFuncGetName) S(cuFuncLoad) S(cuFuncIsLoaded) \
	S(cuFuncSetBlockShape) S(cuFuncSetSharedSize) S(cuFuncSetSharedMemConfig) S(cuParamSetSize) \
	S(cuParamSeti) S(cuParamSetf) S(cuParamSetv) S(cuLaunch) S(cuLaunchGrid) S(cuLaunchGridAsync) \
	S(cuLaunchKernelEx) S(cuLaunchCooperativeKernel) S(cuLaunchCooperativeKernelMultiDevice) \
	S(cuLaunchHostFunc) S(cuOccupancyMaxActiveBlocksPerMultiprocessor)                      \
	S(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) S(cuOccupancyMaxPotentialBlockSize) \
	S(cuOccupancyMaxPotentialBlockSizeWithFlags) S(cuOccupancyAvailableDynamicSMemPerBlock) \
	S(cuOccupancyMaxPotentialClusterSize) S(cuOccupancyMaxActiveClusters)                   \
	S(cuStreamAddCallback) S(cuStreamAttachMemAsync) S(cuStreamGetPriority) S(cuStreamGetFlags) \
	S(cuStreamGetCtx) S(cuStreamGetId) S(cuStreamGetDevice) S(cuStreamBeginCapture_v2)      \
	S(cuStreamEndCapture) S(cuStreamIsCapturing) S(cuStreamGetCaptureInfo_v2)              \
	S(cuStreamGetCaptureInfo_v3) S(cuStreamUpdateCaptureDependencies)                       \
	S(cuStreamWaitValue32_v2) S(cuStreamWaitValue64_v2) S(cuStreamWriteValue32_v2)          \
	S(cuStreamWriteValue64_v2) S(cuStreamBatchMemOp_v2) S(cuStreamGetAttribute)            \
	S(cuStreamSetAttribute) S(cuStreamCopyAttributes) S(cuThreadExchangeStreamCaptureMode) \
	S(cuGraphCreate) S(cuGraphDestroy) S(cuGraphInstantiate_v2) S(cuGraphInstantiateWithFlags) \
	S(cuGraphInstantiateWithParams) S(cuGraphLaunch) S(cuGraphExecDestroy)                  \
	S(cuGraphAddKernelNode_v2) S(cuGraphAddMemcpyNode) S(cuGraphAddMemsetNode)              \
	S(cuGraphAddHostNode) S(cuGraphAddEmptyNode) S(cuGraphAddMemAllocNode)                  \
	S(cuGraphAddMemFreeNode) S(cuGraphGetNodes) S(cuGraphGetRootNodes) S(cuGraphClone)     \
	S(cuGraphExecUpdate_v2) S(cuGraphUpload) S(cuGraphKernelNodeGetParams_v2)              \
	S(cuGraphKernelNodeSetParams_v2) S(cuGraphExecKernelNodeSetParams_v2)                  \
	S(cuGraphMemFreeNodeGetParams) S(cuGraphMemAllocNodeGetParams) S(cuDeviceGraphMemTrim)  \
	S(cuDeviceGetGraphMemAttribute) S(cuDeviceSetGraphMemAttribute) S(cuUserObjectCreate)  \
	S(cuUserObjectRetain) S(cuUserObjectRelease) S(cuGraphRetainUserObject)                \
	S(cuGraphReleaseUserObject) S(cuImportExternalMemory) S(cuExternalMemoryGetMappedBuffer) \
	S(cuExternalMemoryGetMappedMipmappedArray) S(cuDestroyExternalMemory)                   \
	S(cuImportExternalSemaphore) S(cuSignalExternalSemaphoresAsync)                         \
	S(cuWaitExternalSemaphoresAsync) S(cuDestroyExternalSemaphore) S(cuTexObjectCreate)    \
	S(cuTexObjectDestroy) S(cuTexObjectGetResourceDesc) S(cuSurfObjectCreate)               \
	S(cuSurfObjectDestroy) S(cuTexRefCreate) S(cuTexRefDestroy) S(cuTexRefSetAddress_v2)   \
	S(cuTexRefSetArray) S(cuTexRefSetFormat) S(cuProfilerInitialize)                        \
	S(cuGraphicsUnregisterResource) S(cuGraphicsMapResources) S(cuGraphicsUnmapResources)  \
	S(cuGraphicsResourceGetMappedPointer_v2) S(cuGraphicsSubResourceGetMappedArray)        \
	S(cuCoredumpGetAttribute) S(cuCoredumpSetAttribute) S(cuTensorMapEncodeTiled)          \
	S(cuTensorMapEncodeIm2col) S(cuTensorMapReplaceAddress) S(cuGreenCtxCreate)             \
	S(cuGreenCtxDestroy) S(cuCtxFromGreenCtx) S(cuDeviceGetDevResource)                     \
	S(cuCtxGetDevResource) S(cuStreamGetGreenCtx) S(cuDevResourceGenerateDesc)              \
	S(cuDevSmResourceSplitByCount) S(cuDeviceRegisterAsyncNotification)                     \
	S(cuDeviceUnregisterAsyncNotification) S(cuMulticastCreate) S(cuMulticastAddDevice)    \
	S(cuMulticastBindMem) S(cuMulticastBindAddr) S(cuMulticastUnbind)                       \
	S(cuMulticastGetGranularity) S(cuCheckpointProcessGetState) S(cuCheckpointProcessLock) \
	S(cuCheckpointProcessCheckpoint) S(cuCheckpointProcessRestore)                          \
	S(cuCheckpointProcessUnlock) S(cuCheckpointProcessGetRestoreThreadId)

#define DEFINE_STUB(name)                                                                   \
	CUAPI CUresult name(void) { return CUDA_ERROR_NOT_SUPPORTED; }
STUBS(DEFINE_STUB)

/* Implemented entry points the headers do not declare. */
CUAPI CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	if (can == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sim_check_dev(dev);
	if (r == CUDA_SUCCESS)
		r = sim_check_dev(peer);
	if (r == CUDA_SUCCESS)
		*can = dev != peer; /* NVLinked DGX boards: every pair */
	return r;
}
CUAPI CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!sim_ctx_valid(peer))
		return CUDA_ERROR_INVALID_CONTEXT;
	return sim_current_checked(NULL);
}
CUAPI CUresult cuCtxDisablePeerAccess(CUcontext peer)
{
	if (!sim_ctx_valid(peer))
		return CUDA_ERROR_INVALID_CONTEXT;
	return sim_current_checked(NULL);
}
CUAPI CUresult cuProfilerStart(void) { return CUDA_SUCCESS; }
CUAPI CUresult cuProfilerStop(void) { return CUDA_SUCCESS; }

/* cuGetExportTable: the private tables of NVIDIA's runtime are not simulated. */
CUAPI CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
	if (ppExportTable == NULL || pExportTableId == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*ppExportTable = NULL;
	return CUDA_ERROR_NOT_FOUND;
}

/* Per-thread default stream variants (cuda.h with CUDA_API_PER_THREAD_DEFAULT_STREAM): each is
 * a tail jump to the same implementation, whatever its signature. */
#if defined(__x86_64__)
#define FWD(alias, target)                                                                  \
	__asm__(".text\n.globl " #alias "\n.type " #alias ",@function\n" #alias ":\n\tjmp " #target \
		"@PLT\n.size " #alias ",.-" #alias "\n");
#elif defined(__aarch64__)
#define FWD(alias, target)                                                                  \
	__asm__(".text\n.globl " #alias "\n.type " #alias ",%function\n" #alias ":\n\tb " #target \
		"\n.size " #alias ",.-" #alias "\n");
#else
#define FWD(alias, target)
#endif
FWD(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2) FWD(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2)
FWD(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2) FWD(cuMemcpy_ptds, cuMemcpy)
FWD(cuMemcpyPeer_ptds, cuMemcpyPeer) FWD(cuMemsetD8_v2_ptds, cuMemsetD8_v2)
FWD(cuMemsetD16_v2_ptds, cuMemsetD16_v2) FWD(cuMemsetD32_v2_ptds, cuMemsetD32_v2)
FWD(cuMemcpyAsync_ptsz, cuMemcpyAsync) FWD(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2)
FWD(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2)
FWD(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2) FWD(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync)
FWD(cuMemsetD8Async_ptsz, cuMemsetD8Async) FWD(cuMemsetD16Async_ptsz, cuMemsetD16Async)
FWD(cuMemsetD32Async_ptsz, cuMemsetD32Async) FWD(cuLaunchKernel_ptsz, cuLaunchKernel)
FWD(cuStreamSynchronize_ptsz, cuStreamSynchronize) FWD(cuStreamQuery_ptsz, cuStreamQuery)
FWD(cuStreamWaitEvent_ptsz, cuStreamWaitEvent) FWD(cuEventRecord_ptsz, cuEventRecord)
FWD(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags)
FWD(cuMemAllocAsync_ptsz, cuMemAllocAsync) FWD(cuMemFreeAsync_ptsz, cuMemFreeAsync)

/* The table: symbols are referenced by assembler name so no C prototype is needed here. */
#define DECLARE(base, ver, sym) extern void sim_fn_##sym(void) __asm__(#sym);
ENTRIES(DECLARE)

typedef struct {
	const char *base;
	int version;
	const char *sym;
	void (*fn)(void);
} proc_entry;

#define ROW(base, ver, sym) {#base, ver, #sym, sim_fn_##sym},
static const proc_entry table[] = {ENTRIES(ROW)};

#define STUB_ROW(name) {#name, (void (*)(void))name},
static const struct { const char *sym; void (*fn)(void); } stubs[] = {STUBS(STUB_ROW)};

/* base_len: length of name without a trailing "_v<digits>" suffix. */
static size_t base_len(const char *name)
{
	size_t n = strlen(name), i = n;
	while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9')
		i--;
	if (i < n && i >= 2 && name[i - 1] == 'v' && name[i - 2] == '_')
		return i - 2;
	return n;
}

void *sim_export_lookup(const char *name)
{
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		if (strcmp(table[i].sym, name) == 0)
			return (void *)table[i].fn;
	for (size_t i = 0; i < sizeof stubs / sizeof stubs[0]; i++)
		if (strcmp(stubs[i].sym, name) == 0)
			return (void *)stubs[i].fn;
	return NULL;
}

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion,
		       CUdriverProcAddressQueryResult *status)
{
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	const proc_entry *best = NULL;
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
		if (strcmp(table[i].base, symbol) != 0)
			continue;
		st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
		if (table[i].version <= cudaVersion && (best == NULL || table[i].version > best->version))
			best = &table[i];
	}
	void *fn = best ? (void *)best->fn : NULL;
	if (fn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) {
		size_t n = strlen(symbol);
		for (size_t i = 0; i < sizeof stubs / sizeof stubs[0] && fn == NULL; i++)
			if (base_len(stubs[i].sym) == n && strncmp(stubs[i].sym, symbol, n) == 0)
				fn = (void *)stubs[i].fn;
		if (fn == NULL)
			fn = sim_export_lookup(symbol); /* leniency: exact exported name */
	}
	if (fn)
		st = CU_GET_PROC_ADDRESS_SUCCESS;
	*pfn = fn;
	if (status)
		*status = st;
	return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUAPI CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
				   cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
	if (symbol == NULL || pfn == NULL || flags > 2)
		return CUDA_ERROR_INVALID_VALUE;
	return lookup(symbol, pfn, cudaVersion, symbolStatus);
}

CUAPI CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}

/*
 * nvml_device.c - simulated libnvidia-ml.so: device state and facts (memory, NUMA, processes,
 * utilization, topology, model facts, MIG off). Facts a real driver would read from the GPU are
 * derived from the model name (architecture, compute capability) or are plausible constants
 * (power, temperature), documented where set.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvml_internal.h"

/* ---- memory and NUMA ---- */

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    SIMNVML_DEV(device, d);
    unsigned long long total, used;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = simnvml_mem(d, &total, &used);
    if (r != NVML_SUCCESS)
        return r;
    memory->total = total;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    SIMNVML_DEV(device, d);
    unsigned long long total, used;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t r = simnvml_mem(d, &total, &used);
    if (r != NVML_SUCCESS)
        return r;
    memory->total = total;
    memory->reserved = 0; /* the simulation reserves nothing for the driver */
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
    SIMNVML_DEV(device, d);
    if (!node)
        return NVML_ERROR_INVALID_ARGUMENT;
    *node = (unsigned)d->d.numa;
    return NVML_SUCCESS;
}

/* Utilization: both rates are the percentage of memory in use (as pkg/fake simulates it). */
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    SIMNVML_DEV(device, d);
    unsigned long long total, used;
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = simnvml_mem(d, &total, &used);
    if (r != NVML_SUCCESS)
        return r;
    unsigned pct = total ? (unsigned)(used * 100 / total) : 0;
    utilization->gpu = pct;
    utilization->memory = pct;
    return NVML_SUCCESS;
}

/* ---- processes ---- */

/* Reads PROCS for d into pids/bytes (at most SIMGPU_MAX_LINE/4 entries); returns the count, -1
   when the GPU is lost (ERR LOST: broken by an XID; or no daemon), -2 for any other failure. */
static int simnvml_procs(struct nvmlDevice_st *d, unsigned *pids, unsigned long long *bytes, int max)
{
    char req[32], ans[SIMGPU_MAX_LINE];
    snprintf(req, sizeof req, "PROCS %d", d->host);
    int rc = simgpu_request(req, ans, sizeof ans);
    if (rc != 0)
        return rc < 0 || strncmp(ans, "LOST", 4) == 0 ? -1 : -2;
    char *p = ans, *end;
    long n = strtol(p, &end, 10);
    if (end == p || n < 0)
        return -2;
    int k = 0;
    for (p = end; k < n && k < max; k++) {
        if (sscanf(p, " %u:%llu", &pids[k], &bytes[k]) != 2)
            return -2;
        p = strchr(p + 1, ' ');
        if (!p)
            p = "";
    }
    return k;
}

/* The common part of nvmlDeviceGet*RunningProcesses: size handling per nvml.h (INSUFFICIENT_SIZE
   with the needed count when *infoCount is too small; infos may be NULL when *infoCount is 0). */
#define SIMNVML_PROCS_MAX 512
static nvmlReturn_t simnvml_running(nvmlDevice_t device, unsigned int *infoCount, void *infos, int v1, int compute)
{
    SIMNVML_DEV(device, d);
    static __thread unsigned pids[SIMNVML_PROCS_MAX];
    static __thread unsigned long long bytes[SIMNVML_PROCS_MAX];
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    int n = 0;
    if (compute && (n = simnvml_procs(d, pids, bytes, SIMNVML_PROCS_MAX)) < 0)
        return n == -1 ? NVML_ERROR_GPU_IS_LOST : NVML_ERROR_UNKNOWN;
    if (*infoCount < (unsigned)n) {
        *infoCount = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n > 0 && !infos)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < n; i++) {
        if (v1) {
            nvmlProcessInfo_v1_t *o = (nvmlProcessInfo_v1_t *)infos + i;
            o->pid = pids[i];
            o->usedGpuMemory = bytes[i];
        } else {
            nvmlProcessInfo_t *o = (nvmlProcessInfo_t *)infos + i;
            o->pid = pids[i];
            o->usedGpuMemory = bytes[i];
            o->gpuInstanceId = 0xFFFFFFFFu; /* not MIG */
            o->computeInstanceId = 0xFFFFFFFFu;
        }
    }
    *infoCount = (unsigned)n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *c, nvmlProcessInfo_t *i) { return simnvml_running(dev, c, i, 0, 1); }
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t dev, unsigned int *c, nvmlProcessInfo_v2_t *i) { return simnvml_running(dev, c, i, 0, 1); }
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t dev, unsigned int *c, nvmlProcessInfo_v1_t *i) { return simnvml_running(dev, c, i, 1, 1); }
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t dev, unsigned int *c, nvmlProcessInfo_t *i) { return simnvml_running(dev, c, i, 0, 0); }
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t dev, unsigned int *c, nvmlProcessInfo_v2_t *i) { return simnvml_running(dev, c, i, 0, 0); }
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t dev, unsigned int *c, nvmlProcessInfo_v1_t *i) { return simnvml_running(dev, c, i, 1, 0); }
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *c, nvmlProcessInfo_t *i) { return simnvml_running(dev, c, i, 0, 0); }
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t dev, unsigned int *c, nvmlProcessInfo_v2_t *i) { return simnvml_running(dev, c, i, 0, 0); }
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t dev, unsigned int *c, nvmlProcessInfo_v1_t *i) { return simnvml_running(dev, c, i, 1, 0); }

/* ---- topology ---- */

/* P2P as pkg/fake: OK between two distinct devices that both have NVLink links (TOPO; the named
   DGX profiles, all-to-all), for every capability index; NOT_SUPPORTED for a device and itself and
   on nodes without NVLink (custom profiles). */
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuP2PCapsIndex_t p2pIndex,
                                    nvmlGpuP2PStatus_t *p2pStatus)
{
    SIMNVML_DEV(device1, a);
    SIMNVML_DEV(device2, b);
    (void)p2pIndex;
    if (!p2pStatus)
        return NVML_ERROR_INVALID_ARGUMENT;
    *p2pStatus = a != b && a->d.nvlinks > 0 && b->d.nvlinks > 0 ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* NVLink state as pkg/fake: links 0..nvlinks-1 are active; NOT_SUPPORTED without NVLink,
   INVALID_ARGUMENT for a link out of range. */
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    SIMNVML_DEV(device, d);
    if (d->d.nvlinks <= 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!isActive || link >= (unsigned)d->d.nvlinks)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

/* Common ancestor by NUMA node, as pkg/fake: same GPU INTERNAL, same node NODE, else SYSTEM. */
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t *pathInfo)
{
    SIMNVML_DEV(device1, a);
    SIMNVML_DEV(device2, b);
    if (!pathInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    *pathInfo = a == b ? NVML_TOPOLOGY_INTERNAL : a->d.numa == b->d.numa ? NVML_TOPOLOGY_NODE : NVML_TOPOLOGY_SYSTEM;
    return NVML_SUCCESS;
}

/* ---- model facts ---- */

/* Architecture and compute capability by model token (NVIDIA CUDA GPUs table). */
static void simnvml_arch(const char *name, unsigned *arch, int *major, int *minor)
{
    static const struct { const char *token; unsigned arch; int major, minor; } t[] = {
        {"B200", NVML_DEVICE_ARCH_BLACKWELL, 10, 0}, {"GH200", NVML_DEVICE_ARCH_HOPPER, 9, 0},
        {"H100", NVML_DEVICE_ARCH_HOPPER, 9, 0},     {"H200", NVML_DEVICE_ARCH_HOPPER, 9, 0},
        {"H800", NVML_DEVICE_ARCH_HOPPER, 9, 0},     {"H20", NVML_DEVICE_ARCH_HOPPER, 9, 0},
        {"A100", NVML_DEVICE_ARCH_AMPERE, 8, 0},     {"A800", NVML_DEVICE_ARCH_AMPERE, 8, 0},
        {"A30", NVML_DEVICE_ARCH_AMPERE, 8, 0},      {"L40", NVML_DEVICE_ARCH_ADA, 8, 9},
        {"L4", NVML_DEVICE_ARCH_ADA, 8, 9},          {"T4", NVML_DEVICE_ARCH_TURING, 7, 5},
        {"V100", NVML_DEVICE_ARCH_VOLTA, 7, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strstr(name, t[i].token)) {
            *arch = t[i].arch, *major = t[i].major, *minor = t[i].minor;
            return;
        }
    *arch = NVML_DEVICE_ARCH_AMPERE, *major = 8, *minor = 6; /* A10, A40 and anything unknown */
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    SIMNVML_DEV(device, d);
    int ma, mi;
    unsigned a;
    if (!arch)
        return NVML_ERROR_INVALID_ARGUMENT;
    simnvml_arch(d->d.name, &a, &ma, &mi);
    *arch = a;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    SIMNVML_DEV(device, d);
    unsigned a;
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    simnvml_arch(d->d.name, &a, major, minor);
    return NVML_SUCCESS;
}

#define SIMNVML_SET(dev, ptr, value)  \
    do {                              \
        SIMNVML_DEV(dev, d_);         \
        (void)d_;                     \
        if (!(ptr))                   \
            return NVML_ERROR_INVALID_ARGUMENT; \
        *(ptr) = (value);             \
        return NVML_SUCCESS;          \
    } while (0)

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type) { SIMNVML_SET(device, type, NVML_BRAND_NVIDIA); }
/* Board id: the daemon index + 0x100 (each GPU its own board, as on SXM systems). */
nvmlReturn_t nvmlDeviceGetBoardId(nvmlDevice_t device, unsigned int *boardId)
{
    SIMNVML_DEV(device, d);
    if (!boardId)
        return NVML_ERROR_INVALID_ARGUMENT;
    *boardId = 0x100u + (unsigned)d->host;
    return NVML_SUCCESS;
}
/* Idle-ish constants: 72 W, 34 C. */
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) { SIMNVML_SET(device, power, 72000u); }
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t s, unsigned int *temp) { (void)s; SIMNVML_SET(device, temp, 34u); }
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode) { SIMNVML_SET(device, mode, NVML_COMPUTEMODE_DEFAULT); }
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode) { SIMNVML_SET(device, mode, NVML_FEATURE_ENABLED); }
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *t) { SIMNVML_SET(device, t, nvmlEventTypeXidCriticalError); }

/* ---- MIG: not simulated (full GPUs only) ---- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    SIMNVML_DEV(device, d);
    (void)d, (void)currentMode, (void)pendingMode;
    return NVML_ERROR_NOT_SUPPORTED;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) { SIMNVML_SET(device, count, 0u); }
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMig) { SIMNVML_SET(device, isMig, 0u); }
nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    (void)migDevice, (void)device;
    return simnvml_initialized() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
}
/* Full GPUs report NOT_SUPPORTED for attributes (pkg/nvml then takes SMs from the model). */
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    SIMNVML_DEV(device, d);
    (void)d, (void)attributes;
    return NVML_ERROR_NOT_SUPPORTED;
}
nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *a) { return nvmlDeviceGetAttributes_v2(device, a); }

/* Field values: each one NOT_SUPPORTED, the call itself succeeds. */
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    SIMNVML_DEV(device, d);
    (void)d;
    if (valuesCount < 0 || (valuesCount > 0 && !values))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < valuesCount; i++)
        values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

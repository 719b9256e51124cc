/*
 * nvml_internal.h - state shared by the simulated libnvidia-ml's source files (hidden symbols).
 * Built with -DNVML_NO_UNVERSIONED_FUNC_DEFS so that nvml.h declares the legacy unversioned
 * entry points (nvmlInit, nvmlDeviceGetCount, ...) as functions of their own, which this
 * library exports next to the versioned ones.
 */
#ifndef SIMGPU_NVML_INTERNAL_H
#define SIMGPU_NVML_INTERNAL_H

#include <nvml.h>
#include "simgpu_client.h"

/* One visible device; nvmlDevice_t handles point into simnvml_devs. */
struct nvmlDevice_st {
    simgpu_dev d;
    int host;           /* the daemon's index */
    unsigned int index; /* NVML index: position among the visible devices */
};

SIMGPU_HIDDEN extern struct nvmlDevice_st simnvml_devs[SIMGPU_MAX_DEVICES];
SIMGPU_HIDDEN extern int simnvml_ndev;

/* NVML_SUCCESS and *out set when h is a live handle; NVML_ERROR_UNINITIALIZED before nvmlInit,
   NVML_ERROR_INVALID_ARGUMENT for anything else (NULL, foreign or stale pointers). */
SIMGPU_HIDDEN nvmlReturn_t simnvml_dev(nvmlDevice_t h, struct nvmlDevice_st **out);
/* Whether nvmlInit succeeded and nvmlShutdown did not undo it. */
SIMGPU_HIDDEN int simnvml_initialized(void);
/* Memory total and used bytes of a device (MEM), NVML_ERROR_GPU_IS_LOST/UNKNOWN on failure. */
SIMGPU_HIDDEN nvmlReturn_t simnvml_mem(struct nvmlDevice_st *d, unsigned long long *total, unsigned long long *used);

#define SIMNVML_DEV(h, var)                          \
    struct nvmlDevice_st *var;                       \
    do {                                             \
        nvmlReturn_t r_ = simnvml_dev((h), &var);    \
        if (r_ != NVML_SUCCESS)                      \
            return r_;                               \
    } while (0)

#endif

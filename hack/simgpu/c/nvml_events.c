/*
 * nvml_events.c - simulated libnvidia-ml.so: event sets. The only event is
 * nvmlEventTypeXidCriticalError: XIDs injected into the daemon (`simgpu xid`), polled with
 * EVENTS every SIMNVML_POLL_MS while nvmlEventSetWait waits. A set sees the events injected after
 * it was created, on the devices registered with it.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvml_internal.h"

/* Poll interval of nvmlEventSetWait in milliseconds. */
#define SIMNVML_POLL_MS 50
/* Most event sets alive at once. */
#define SIMNVML_MAX_SETS 64

struct nvmlEventSet_st {
    int used;
    unsigned long long since;                 /* last event seq seen */
    unsigned char registered[SIMGPU_MAX_DEVICES]; /* by NVML index */
};

static struct nvmlEventSet_st simnvml_sets[SIMNVML_MAX_SETS];
static pthread_mutex_t simnvml_sets_mu = PTHREAD_MUTEX_INITIALIZER;

/* Validates an event set handle. Callers hold simnvml_sets_mu. */
static int simnvml_set_ok(nvmlEventSet_t set)
{
    uintptr_t p = (uintptr_t)set.handle, base = (uintptr_t)simnvml_sets;
    return p >= base && p < base + sizeof simnvml_sets && (p - base) % sizeof simnvml_sets[0] == 0 && set.handle->used;
}

/* EVENTS <since>: parses the answer's last seq into *last and returns a pointer to the events
   ("<seq>:<i>:<xid> ..."), or NULL on error. */
static const char *simnvml_events(unsigned long long since, unsigned long long *last, char *ans, size_t len)
{
    char req[48];
    snprintf(req, sizeof req, "EVENTS %llu", since);
    if (simgpu_request(req, ans, len) != 0)
        return NULL;
    char *end;
    *last = strtoull(ans, &end, 10);
    return end == ans ? NULL : end;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    char ans[SIMGPU_MAX_LINE];
    unsigned long long last;
    if (!simnvml_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!simnvml_events(UINT64_MAX, &last, ans, sizeof ans))
        return NVML_ERROR_UNKNOWN;
    pthread_mutex_lock(&simnvml_sets_mu);
    for (int i = 0; i < SIMNVML_MAX_SETS; i++) {
        if (!simnvml_sets[i].used) {
            memset(&simnvml_sets[i], 0, sizeof simnvml_sets[i]);
            simnvml_sets[i].used = 1;
            simnvml_sets[i].since = last;
            set->handle = &simnvml_sets[i];
            pthread_mutex_unlock(&simnvml_sets_mu);
            return NVML_SUCCESS;
        }
    }
    pthread_mutex_unlock(&simnvml_sets_mu);
    return NVML_ERROR_MEMORY;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    if (!simnvml_initialized())
        return NVML_ERROR_UNINITIALIZED;
    pthread_mutex_lock(&simnvml_sets_mu);
    nvmlReturn_t r = NVML_ERROR_INVALID_ARGUMENT;
    if (simnvml_set_ok(set)) {
        set.handle->used = 0;
        r = NVML_SUCCESS;
    }
    pthread_mutex_unlock(&simnvml_sets_mu);
    return r;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
    SIMNVML_DEV(device, d);
    if (!(eventTypes & nvmlEventTypeXidCriticalError))
        return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&simnvml_sets_mu);
    nvmlReturn_t r = NVML_ERROR_INVALID_ARGUMENT;
    if (simnvml_set_ok(set)) {
        set.handle->registered[d->index] = 1;
        r = NVML_SUCCESS;
    }
    pthread_mutex_unlock(&simnvml_sets_mu);
    return r;
}

static long long simnvml_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Takes the first event after set->since on a registered device into data. Returns 1 when one
   was found, 0 when none (set->since then covers everything seen), -1 on error. */
static int simnvml_next(nvmlEventSet_t set, nvmlEventData_t *data)
{
    char ans[SIMGPU_MAX_LINE];
    for (;;) {
        pthread_mutex_lock(&simnvml_sets_mu);
        int ok = simnvml_set_ok(set);
        unsigned long long since = ok ? set.handle->since : 0;
        pthread_mutex_unlock(&simnvml_sets_mu);
        if (!ok)
            return -1;
        unsigned long long last, seq, xid;
        int host, n;
        const char *p = simnvml_events(since, &last, ans, sizeof ans);
        if (!p)
            return -1;
        while (sscanf(p, " %llu:%d:%llu%n", &seq, &host, &xid, &n) == 3) {
            p += n;
            since = seq;
            struct nvmlDevice_st *d = NULL;
            for (int i = 0; i < simnvml_ndev; i++)
                if (simnvml_devs[i].host == host)
                    d = &simnvml_devs[i];
            pthread_mutex_lock(&simnvml_sets_mu);
            int hit = simnvml_set_ok(set) && d && set.handle->registered[d->index];
            if (simnvml_set_ok(set) && set.handle->since < since)
                set.handle->since = since;
            pthread_mutex_unlock(&simnvml_sets_mu);
            if (hit) {
                memset(data, 0, sizeof *data);
                data->device.handle = d;
                data->eventType = nvmlEventTypeXidCriticalError;
                data->eventData = xid;
                data->gpuInstanceId = 0xFFFFFFFFu;
                data->computeInstanceId = 0xFFFFFFFFu;
                return 1;
            }
        }
        if (since >= last)
            return 0; /* else the answer was cut short: ask again */
    }
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    if (!simnvml_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!data)
        return NVML_ERROR_INVALID_ARGUMENT;
    long long deadline = simnvml_now_ms() + timeoutms;
    for (;;) {
        int r = simnvml_next(set, data);
        if (r > 0)
            return NVML_SUCCESS;
        if (r < 0) {
            pthread_mutex_lock(&simnvml_sets_mu);
            int ok = simnvml_set_ok(set);
            pthread_mutex_unlock(&simnvml_sets_mu);
            return ok ? NVML_ERROR_UNKNOWN : NVML_ERROR_INVALID_ARGUMENT;
        }
        long long left = deadline - simnvml_now_ms();
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        long long ms = left < SIMNVML_POLL_MS ? left : SIMNVML_POLL_MS;
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
    }
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

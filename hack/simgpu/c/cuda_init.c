/*
 * cuda_init.c: initialization, device enumeration and device queries of the simulated
 * libcuda (CUDA Driver API reference, modules "Initialization", "Version Management",
 * "Device Management", "Error Handling": https://docs.nvidia.com/cuda/cuda-driver-api/).
 *
 * Devices come from the simgpu daemon through simgpu_devices(): the GPUs whose
 * /dev/nvidia<minor> node exists in this process's view, in host (PCI) order. On top of that
 * cuInit applies CUDA_VISIBLE_DEVICES like the real driver (CUDA C Programming Guide, "CUDA
 * Environment Variables"): a comma list of ordinals into the devices found or of UUID
 * prefixes ("GPU-...", matching one device); parsing stops at the first invalid, unknown,
 * ambiguous, empty or repeated entry; an empty value leaves no device; unset leaves all.
 * CUDA_DEVICE_ORDER may be FASTEST_FIRST (the default) or PCI_BUS_ID: both mean host order
 * here, since the simulated GPUs of one node are identical. cuInit's result (failure included)
 * is kept for the life of the process, as the driver does.
 *
 * Error choices: with no daemon (the equivalent of no kernel module / no /dev/nvidia*
 * nodes) and with no visible device, cuInit returns CUDA_ERROR_NO_DEVICE (100), which is what
 * the real driver returns on a machine whose driver sees no GPU and with
 * CUDA_VISIBLE_DEVICES="". A daemon answering "ERR LOST" or dying mid-run maps to
 * CUDA_ERROR_UNKNOWN (999): the real driver reports a fallen-off-the-bus GPU with various
 * errors, this simulator picks one.
 *
 * Not modelled: MIG devices (MIG-... UUIDs never match), compute modes, device properties
 * beyond a per-architecture table, clocks, CUDA use after fork() (the child gets a new daemon
 * connection, so the parent's pointers are unknown to it).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

int sim_ndev;
sim_device sim_devs[SIM_MAX_DEVICES];
int sim_cuda_version = 13000; /* CUDA 13.0, what driver 580 reports */

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static int init_done;
static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;

CUresult sim_initialized(void)
{
	pthread_mutex_lock(&init_mu);
	CUresult r = init_done ? init_result : CUDA_ERROR_NOT_INITIALIZED;
	pthread_mutex_unlock(&init_mu);
	return r;
}

CUresult sim_check_dev(CUdevice dev)
{
	CUresult r = sim_initialized();
	if (r != CUDA_SUCCESS)
		return r;
	if (dev < 0 || dev >= sim_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

CUresult sim_daemon_error(int rc, const char *resp)
{
	if (rc < 0)
		return CUDA_ERROR_UNKNOWN;
	if (strncmp(resp, "OOM", 3) == 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (strncmp(resp, "NOT_FOUND", 9) == 0 || strncmp(resp, "INVALID", 7) == 0)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_ERROR_UNKNOWN; /* LOST and anything unexpected */
}

/* cc_of guesses the compute capability from the marketing name (NVIDIA "CUDA GPUs" table). */
static void cc_of(const char *name, int *major, int *minor)
{
	static const struct { const char *tok; int ma, mi; } t[] = {
		{"B200", 10, 0}, {"B100", 10, 0}, {"GB200", 10, 0}, {"H100", 9, 0}, {"H200", 9, 0},
		{"H800", 9, 0}, {"H20", 9, 0}, {"A100", 8, 0}, {"A800", 8, 0}, {"A30", 8, 0},
		{"L40", 8, 9}, {"L4", 8, 9}, {"RTX 40", 8, 9}, {"A10", 8, 6}, {"A40", 8, 6},
		{"A16", 8, 6}, {"A2", 8, 6}, {"RTX 30", 8, 6}, {"T4", 7, 5}, {"V100", 7, 0},
		{"P100", 6, 0}, {"P4", 6, 1},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		if (strstr(name, t[i].tok)) {
			*major = t[i].ma;
			*minor = t[i].mi;
			return;
		}
	}
	*major = 8;
	*minor = 0;
}

/* parse_uuid reads the 16 bytes of "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
static void parse_uuid(const char *s, unsigned char out[16])
{
	memset(out, 0, 16);
	if (strncmp(s, "GPU-", 4) == 0)
		s += 4;
	int n = 0;
	for (; *s && n < 32; s++) {
		if (*s == '-')
			continue;
		if (!isxdigit((unsigned char)*s))
			break;
		int v = isdigit((unsigned char)*s) ? *s - '0' : (tolower((unsigned char)*s) - 'a' + 10);
		out[n / 2] |= (unsigned char)(n % 2 == 0 ? v << 4 : v);
		n++;
	}
}

/* parse_bdf reads "domain:bus:device.function" (or "bus:device.function", or without the
 * function); returns 0 on success. */
static int parse_bdf(const char *s, int *dom, int *bus, int *dev, int *fn)
{
	unsigned a, b, c, d;
	int colons = 0;
	for (const char *p = s; *p; p++)
		colons += *p == ':';
	*fn = 0;
	if (colons == 2) {
		int k = sscanf(s, "%x:%x:%x.%x", &a, &b, &c, &d);
		if (k < 3)
			return -1;
		*dom = (int)a, *bus = (int)b, *dev = (int)c;
		if (k == 4)
			*fn = (int)d;
		return 0;
	}
	if (colons == 1) {
		int k = sscanf(s, "%x:%x.%x", &b, &c, &d);
		if (k < 2)
			return -1;
		*dom = 0, *bus = (int)b, *dev = (int)c;
		if (k == 3)
			*fn = (int)d;
		return 0;
	}
	return -1;
}

/* visible_entry resolves one CUDA_VISIBLE_DEVICES entry to an index into all[], or -1. */
static int visible_entry(const char *e, const sim_device *all, int n)
{
	if (*e == '\0')
		return -1;
	if (isdigit((unsigned char)*e)) {
		char *end;
		long v = strtol(e, &end, 10);
		if (*end != '\0' || v < 0 || v >= n)
			return -1;
		return (int)v;
	}
	if (strncasecmp(e, "GPU-", 4) != 0)
		return -1; /* MIG-... and anything else: not simulated */
	int found = -1;
	for (int i = 0; i < n; i++) {
		if (strncasecmp(all[i].d.uuid, e, strlen(e)) == 0) {
			if (found >= 0)
				return -1; /* ambiguous prefix */
			found = i;
		}
	}
	return found;
}

/* apply_visible filters all[0..n) into sim_devs by CUDA_VISIBLE_DEVICES. */
static void apply_visible(const sim_device *all, int n)
{
	const char *env = getenv("CUDA_VISIBLE_DEVICES");
	sim_ndev = 0;
	if (env == NULL) {
		for (int i = 0; i < n && i < SIM_MAX_DEVICES; i++)
			sim_devs[sim_ndev++] = all[i];
		return;
	}
	char buf[4096];
	snprintf(buf, sizeof buf, "%s", env);
	int used[SIM_MAX_DEVICES] = {0};
	char *rest = buf, *tok;
	while ((tok = strsep(&rest, ",")) != NULL) { /* an empty entry is invalid: it stops */
		while (isspace((unsigned char)*tok))
			tok++;
		char *end = tok + strlen(tok);
		while (end > tok && isspace((unsigned char)end[-1]))
			*--end = '\0';
		int i = visible_entry(tok, all, n);
		if (i < 0 || used[i] || sim_ndev >= SIM_MAX_DEVICES)
			break;
		used[i] = 1;
		sim_devs[sim_ndev++] = all[i];
	}
}

static CUresult do_init(void)
{
	static simgpu_dev raw[SIM_MAX_DEVICES];
	static int hidx[SIM_MAX_DEVICES];
	static sim_device all[SIM_MAX_DEVICES];
	int n = simgpu_devices(raw, hidx, SIM_MAX_DEVICES);
	if (n < 0)
		return CUDA_ERROR_NO_DEVICE; /* no daemon: like no kernel module */
	char drv[64];
	int cuv = 0;
	if (simgpu_versions(drv, sizeof drv, &cuv) == 0 && cuv > 0)
		sim_cuda_version = cuv;
	for (int i = 0; i < n; i++) {
		sim_device *s = &all[i];
		memset(s, 0, sizeof *s);
		s->d = raw[i];
		s->daemon_index = hidx[i];
		if (parse_bdf(raw[i].bus_id, &s->pci_domain, &s->pci_bus, &s->pci_dev, &s->pci_fn) != 0)
			s->pci_bus = i + 1;
		cc_of(raw[i].name, &s->cc_major, &s->cc_minor);
		parse_uuid(raw[i].uuid, s->uuid);
	}
	const char *order = getenv("CUDA_DEVICE_ORDER");
	(void)order; /* FASTEST_FIRST and PCI_BUS_ID both give host order; others are ignored */
	apply_visible(all, n);
	return sim_ndev > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUAPI CUresult cuInit(unsigned int flags)
{
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&init_mu);
	if (!init_done) {
		init_result = do_init();
		init_done = 1;
	}
	CUresult r = init_result;
	pthread_mutex_unlock(&init_mu);
	return r;
}

CUAPI CUresult cuDriverGetVersion(int *version)
{
	if (version == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&init_mu);
	int v = sim_cuda_version;
	pthread_mutex_unlock(&init_mu);
	const char *e = getenv("SIMGPU_CUDA_VERSION");
	if (!init_done && e && atoi(e) > 0)
		v = atoi(e);
	*version = v;
	return CUDA_SUCCESS;
}

CUAPI CUresult cuDeviceGetCount(int *count)
{
	if (count == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sim_initialized();
	if (r != CUDA_SUCCESS)
		return r;
	*count = sim_ndev;
	return CUDA_SUCCESS;
}

CUAPI CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
	if (dev == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = sim_check_dev(ordinal);
	if (r != CUDA_SUCCESS)
		return r;
	*dev = ordinal;
	return CUDA_SUCCESS;
}

CUAPI CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	CUresult r = sim_check_dev(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (name == NULL || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, (size_t)len, "%s", sim_devs[dev].d.name);
	return CUDA_SUCCESS;
}

CUAPI CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	CUresult r = sim_check_dev(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (uuid == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(uuid->bytes, sim_devs[dev].uuid, 16);
	return CUDA_SUCCESS;
}

/* cuDeviceGetUuid_v2 differs only for MIG instances (not simulated). */
CUAPI CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid(uuid, dev); }

CUAPI CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CUresult r = sim_check_dev(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (bytes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = (size_t)sim_devs[dev].d.total;
	return CUDA_SUCCESS;
}

/* cuDeviceTotalMem (API v1, 32-bit size): clamped to 4 GiB - 1. */
CUAPI CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	size_t b;
	if (bytes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = cuDeviceTotalMem_v2(&b, dev);
	if (r == CUDA_SUCCESS)
		*bytes = b > 0xffffffffu ? 0xffffffffu : (unsigned int)b;
	return r;
}

/* attr_value returns a plausible value for the architecture; unknown attributes give 0. */
static int attr_value(const sim_device *s, int a)
{
	int hopper = s->cc_major >= 9;
	switch (a) {
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
	case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
	case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
	case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return hopper ? 1980000 : 1410000;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
	case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return s->d.sms;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return 0; /* default */
	case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: return 512;
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
	case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return s->pci_bus;
	case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return s->pci_dev; /* the BDF's device number */
	case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return s->pci_domain;
	case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return hopper ? 2619000 : 1215000;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
	case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return hopper ? 52428800 : 41943040;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
	case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return s->cc_major;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return s->cc_minor;
	case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return hopper ? 233472 : 167936;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
	case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
	case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: return (int)(s - sim_devs);
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return hopper ? 232448 : 166912;
	case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 0; /* cuMemPool*: not simulated */
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return hopper;
	case CU_DEVICE_ATTRIBUTE_NUMA_ID: return -1;
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: return s->d.numa;
	default: return 0;
	}
}

CUAPI CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	CUresult r = sim_check_dev(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (pi == NULL || (int)attrib <= 0 || (int)attrib >= CU_DEVICE_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	*pi = attr_value(&sim_devs[dev], (int)attrib);
	return CUDA_SUCCESS;
}

CUAPI CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
	CUresult r = sim_check_dev(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (major == NULL || minor == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*major = sim_devs[dev].cc_major;
	*minor = sim_devs[dev].cc_minor;
	return CUDA_SUCCESS;
}

/* cuDeviceGetPCIBusId writes "dddd:bb:dd.f" (the driver's 4-digit-domain form). */
CUAPI CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	CUresult r = sim_check_dev(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (pciBusId == NULL || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	const sim_device *s = &sim_devs[dev];
	snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.%x", s->pci_domain, s->pci_bus, s->pci_dev,
		 s->pci_fn);
	return CUDA_SUCCESS;
}

CUAPI CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
	CUresult r = sim_initialized();
	if (r != CUDA_SUCCESS)
		return r;
	int dom, bus, d, fn;
	if (dev == NULL || pciBusId == NULL || parse_bdf(pciBusId, &dom, &bus, &d, &fn) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < sim_ndev; i++) {
		const sim_device *s = &sim_devs[i];
		if (s->pci_domain == dom && s->pci_bus == bus && s->pci_dev == d && s->pci_fn == fn) {
			*dev = i;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_DEVICE;
}

/*
 * cudaprobe: what a CUDA program sees, as one JSON object on stdout.
 *
 *   cudaprobe [--max-mib N] [--hold-mib M --hold-seconds S] [--dlsym]
 *
 * Like the CUDA runtime it dlopens "libcuda.so.1" and resolves the driver API through
 * cuGetProcAddress_v2 (CUDA 12 style, cudaVersion 12000), falling back to dlsym of the _v2
 * names (--dlsym forces dlsym). So it works against the real driver, the simgpu simulated one,
 * and with HAMi-core's libvgpu.so preloaded (which intercepts both paths).
 *
 * For each device: name, UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx from cuDeviceGetUuid),
 * total/free MiB from cuMemGetInfo in the device's primary context, and alloc_mib: how much it
 * could allocate in 256 MiB cuMemAlloc steps up to N (default 4096), all freed again before
 * free_mib is read; alloc_error is the CUDA error name of the first refusal ("" if none).
 * --hold-mib M allocates M MiB on every device first and keeps it; --hold-seconds S sleeps S
 * seconds before printing (after writing "cudaprobe: holding" to stderr), so a second process
 * can observe the memory in use.
 *
 * Output: {"devices":[...],"libvgpu":bool,"env":{...},"error":""}. "libvgpu" is true when
 * libvgpu.so is mapped into this process; "env" holds the variables HAMi-core reads that are
 * set, plus "ld_so_preload" (the content of /etc/ld.so.preload when present). "error" is the
 * cuInit failure name (devices is then []) or a dlopen failure. Exit 0 when the JSON was
 * printed, 2 on bad flags.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

static struct {
	CUresult (*Init)(unsigned);
	CUresult (*DeviceGetCount)(int *);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*DeviceGetName)(char *, int, CUdevice);
	CUresult (*DeviceGetUuid)(unsigned char *, CUdevice);
	CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*PrimaryCtxRelease)(CUdevice);
	CUresult (*CtxSetCurrent)(CUcontext);
	CUresult (*MemGetInfo)(size_t *, size_t *);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*GetErrorName)(CUresult, const char **);
} cu;

/* ---- output buffer with JSON escaping ---- */

static char *out;
static size_t outlen, outcap;

static void put(const char *s, size_t n)
{
	if (outlen + n + 1 > outcap) {
		size_t nc = (outcap + n + 1) * 2;
		char *o = realloc(out, nc);
		if (o == NULL) {
			perror("cudaprobe");
			exit(1);
		}
		out = o;
		outcap = nc;
	}
	memcpy(out + outlen, s, n);
	outlen += n;
	out[outlen] = '\0';
}
static void puts_raw(const char *s) { put(s, strlen(s)); }
static void putf(const char *fmt, long long v)
{
	char b[64];
	snprintf(b, sizeof b, fmt, v);
	puts_raw(b);
}
static void put_str(const char *s)
{
	puts_raw("\"");
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		char b[8];
		switch (*p) {
		case '"': puts_raw("\\\""); break;
		case '\\': puts_raw("\\\\"); break;
		case '\n': puts_raw("\\n"); break;
		case '\r': puts_raw("\\r"); break;
		case '\t': puts_raw("\\t"); break;
		default:
			if (*p < 0x20) {
				snprintf(b, sizeof b, "\\u%04x", *p);
				puts_raw(b);
			} else {
				put((const char *)p, 1);
			}
		}
	}
	puts_raw("\"");
}

static const char *errname(CUresult r)
{
	const char *s = NULL;
	static char b[32];
	if (cu.GetErrorName && cu.GetErrorName(r, &s) == 0 && s)
		return s;
	snprintf(b, sizeof b, "CUDA_ERROR_%d", r);
	return b;
}

/* ---- resolving the driver API ---- */

static void *resolve(void *lib, const char *base, const char *v2name, int use_dlsym)
{
	typedef CUresult (*gpa_t)(const char *, void **, int, unsigned long long, int *);
	static gpa_t gpa;
	static int tried;
	if (!use_dlsym && !tried) {
		tried = 1;
		gpa = (gpa_t)dlsym(lib, "cuGetProcAddress_v2");
	}
	void *fn = NULL;
	int status = 0;
	if (!use_dlsym && gpa && gpa(base, &fn, 12000, 0, &status) == 0 && fn)
		return fn;
	return dlsym(lib, v2name);
}

static int load(void *lib, int use_dlsym)
{
#define R(field, base, sym)                                                                  \
	if ((*(void **)&cu.field = resolve(lib, base, sym, use_dlsym)) == NULL)                 \
		return -1;
	R(Init, "cuInit", "cuInit");
	R(DeviceGetCount, "cuDeviceGetCount", "cuDeviceGetCount");
	R(DeviceGet, "cuDeviceGet", "cuDeviceGet");
	R(DeviceGetName, "cuDeviceGetName", "cuDeviceGetName");
	R(DeviceGetUuid, "cuDeviceGetUuid", "cuDeviceGetUuid");
	R(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain");
	R(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2");
	R(CtxSetCurrent, "cuCtxSetCurrent", "cuCtxSetCurrent");
	R(MemGetInfo, "cuMemGetInfo", "cuMemGetInfo_v2");
	R(MemAlloc, "cuMemAlloc", "cuMemAlloc_v2");
	R(MemFree, "cuMemFree", "cuMemFree_v2");
	R(GetErrorName, "cuGetErrorName", "cuGetErrorName");
#undef R
	return 0;
}

/* ---- environment ---- */

static int first_env;
static void env_entry(const char *key, const char *val)
{
	if (!first_env)
		puts_raw(",");
	first_env = 0;
	put_str(key);
	puts_raw(":");
	put_str(val);
}

static void put_env(void)
{
	static const char *names[] = {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
				      "CUDA_DEVICE_ORDER", "CUDA_DEVICE_MEMORY_LIMIT",
				      "CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_MEMORY_SHARED_CACHE",
				      "CUDA_OVERSUBSCRIBE", "GPU_CORE_UTILIZATION_POLICY",
				      "LIBCUDA_LOG_LEVEL", "LD_PRELOAD"};
	first_env = 1;
	puts_raw("{");
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		const char *v = getenv(names[i]);
		if (v)
			env_entry(names[i], v);
		if (i == 3 || i == 4) { /* the per-device _<i> variants follow their base */
			for (int k = 0; k < 16; k++) {
				char key[64];
				snprintf(key, sizeof key, "%s_%d", names[i], k);
				if ((v = getenv(key)))
					env_entry(key, v);
			}
		}
	}
	FILE *f = fopen("/etc/ld.so.preload", "r");
	if (f) {
		char buf[8192];
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		buf[n] = '\0';
		fclose(f);
		env_entry("ld_so_preload", buf);
	}
	puts_raw("}");
}

static int libvgpu_loaded(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	int found = 0;
	if (f == NULL)
		return 0;
	while (!found && fgets(line, sizeof line, f))
		found = strstr(line, "libvgpu.so") != NULL;
	fclose(f);
	return found;
}

static int parse_num(const char *s, long *v)
{
	char *end;
	if (s == NULL || *s == '\0')
		return -1;
	*v = strtol(s, &end, 10);
	return (*end != '\0' || *v < 0) ? -1 : 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: cudaprobe [--max-mib N] [--hold-mib M] [--hold-seconds S] [--dlsym]\n");
	exit(2);
}

#define MIB (1ull << 20)
#define MAX_DEV 64

int main(int argc, char **argv)
{
	long max_mib = 4096, hold_mib = 0, hold_s = 0;
	int use_dlsym = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '=');
		char flag[64];
		const char *val = NULL;
		if (eq && (size_t)(eq - a) < sizeof flag) {
			memcpy(flag, a, (size_t)(eq - a));
			flag[eq - a] = '\0';
			val = eq + 1;
		} else {
			snprintf(flag, sizeof flag, "%s", a);
		}
		long *dst = NULL;
		if (strcmp(flag, "--max-mib") == 0)
			dst = &max_mib;
		else if (strcmp(flag, "--hold-mib") == 0)
			dst = &hold_mib;
		else if (strcmp(flag, "--hold-seconds") == 0)
			dst = &hold_s;
		else if (strcmp(flag, "--dlsym") == 0 && val == NULL) {
			use_dlsym = 1;
			continue;
		} else
			usage();
		if (val == NULL)
			val = ++i < argc ? argv[i] : NULL;
		if (parse_num(val, dst) != 0)
			usage();
	}

	char error[512] = "";
	puts_raw("{\"devices\":[");
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (lib == NULL) {
		snprintf(error, sizeof error, "dlopen libcuda.so.1: %s", dlerror());
	} else if (load(lib, use_dlsym) != 0) {
		snprintf(error, sizeof error, "libcuda.so.1: missing driver API entry points");
	} else {
		CUresult r = cu.Init(0);
		int n = 0;
		if (r == 0)
			r = cu.DeviceGetCount(&n);
		if (r != 0) {
			snprintf(error, sizeof error, "%s", errname(r));
			n = 0;
		}
		if (n > MAX_DEV)
			n = MAX_DEV;
		CUcontext ctxs[MAX_DEV] = {0};
		CUdeviceptr held[MAX_DEV] = {0};
		for (int i = 0; i < n && hold_mib > 0; i++) {
			CUdevice d;
			if (cu.DeviceGet(&d, i) == 0 && cu.PrimaryCtxRetain(&ctxs[i], d) == 0 &&
			    cu.CtxSetCurrent(ctxs[i]) == 0) {
				CUresult hr = cu.MemAlloc(&held[i], (size_t)hold_mib * MIB);
				if (hr != 0)
					fprintf(stderr, "cudaprobe: hold on device %d: %s\n", i, errname(hr));
			}
		}
		for (int i = 0; i < n; i++) {
			CUdevice d = i;
			char name[256] = "", uuid[64] = "";
			unsigned char u[16];
			size_t fr = 0, tot = 0;
			long alloc = 0;
			const char *aerr = "";
			CUresult e = cu.DeviceGet(&d, i);
			if (e == 0)
				e = cu.DeviceGetName(name, sizeof name, d);
			if (e == 0 && (e = cu.DeviceGetUuid(u, d)) == 0)
				snprintf(uuid, sizeof uuid,
					 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
					 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10],
					 u[11], u[12], u[13], u[14], u[15]);
			if (e == 0 && ctxs[i] == NULL)
				e = cu.PrimaryCtxRetain(&ctxs[i], d);
			if (e == 0)
				e = cu.CtxSetCurrent(ctxs[i]);
			if (e == 0) {
				CUdeviceptr ptrs[4096];
				int np = 0;
				while (alloc < max_mib && np < 4096) {
					long step = max_mib - alloc < 256 ? max_mib - alloc : 256;
					CUresult ar = cu.MemAlloc(&ptrs[np], (size_t)step * MIB);
					if (ar != 0) {
						aerr = errname(ar);
						break;
					}
					np++;
					alloc += step;
				}
				while (np > 0)
					cu.MemFree(ptrs[--np]);
				e = cu.MemGetInfo(&fr, &tot);
			}
			if (e != 0 && *aerr == '\0')
				aerr = errname(e);
			puts_raw(i ? ",{" : "{");
			putf("\"index\":%lld,\"uuid\":", i);
			put_str(uuid);
			puts_raw(",\"name\":");
			put_str(name);
			putf(",\"total_mib\":%lld", (long long)(tot / MIB));
			putf(",\"free_mib\":%lld", (long long)(fr / MIB));
			putf(",\"alloc_mib\":%lld,\"alloc_error\":", alloc);
			put_str(aerr);
			puts_raw("}");
		}
		if (hold_s > 0) {
			fprintf(stderr, "cudaprobe: holding\n");
			fflush(stderr);
			sleep((unsigned)hold_s);
		}
		for (int i = 0; i < n; i++) {
			if (held[i]) {
				cu.CtxSetCurrent(ctxs[i]);
				cu.MemFree(held[i]);
			}
			if (ctxs[i])
				cu.PrimaryCtxRelease(i);
		}
	}
	puts_raw("],\"libvgpu\":");
	puts_raw(libvgpu_loaded() ? "true" : "false");
	puts_raw(",\"env\":");
	put_env();
	puts_raw(",\"error\":");
	put_str(error);
	puts_raw("}\n");
	fwrite(out, 1, outlen, stdout);
	return fflush(stdout) == 0 ? 0 : 1;
}

/*
 * simgpu_client.c - the daemon client shared by the simulated libnvidia-ml and libcuda; see
 * simgpu_client.h for the protocol. All symbols are static or hidden.
 */
#define _GNU_SOURCE
#include "simgpu_client.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* The NVIDIA character device major (Documentation/admin-guide/devices.txt: 195 = nvidia). */
#define SIMGPU_NVIDIA_MAJOR 195
/* Seconds a request waits for the daemon's answer before it counts as an I/O error. */
#define SIMGPU_TIMEOUT_S 30

static pthread_mutex_t simgpu_mu = PTHREAD_MUTEX_INITIALIZER;
static int simgpu_fd = -1;
static pid_t simgpu_fd_pid;
static char simgpu_rbuf[SIMGPU_MAX_LINE];
static size_t simgpu_rlen;

/* Device list cache (simgpu_devices), guarded by simgpu_mu. */
static int simgpu_ndev = -1;
static simgpu_dev simgpu_devs[SIMGPU_MAX_DEVICES];
static int simgpu_host[SIMGPU_MAX_DEVICES];
static char simgpu_driver[64];
static int simgpu_cuda;

/* fork() while another thread holds the mutex must not leave the child's copy locked. */
static void simgpu_prefork(void) { pthread_mutex_lock(&simgpu_mu); }
static void simgpu_postfork(void) { pthread_mutex_unlock(&simgpu_mu); }
__attribute__((constructor)) static void simgpu_init(void)
{
    pthread_atfork(simgpu_prefork, simgpu_postfork, simgpu_postfork);
}

static void simgpu_disconnect(void)
{
    if (simgpu_fd >= 0)
        close(simgpu_fd);
    simgpu_fd = -1;
    simgpu_rlen = 0;
}

/* The driver root this library belongs to (see simgpu_client.h), found once: "" for "/". */
static pthread_once_t simgpu_root_once = PTHREAD_ONCE_INIT;
static char simgpu_root[4096];

/* Sets simgpu_root to the nearest ancestor A of this library's own directory (its mapping in
   /proc/self/maps, so no libdl and no symbol newer than glibc 2.2.5) that holds
   A/run/nvidia-persistenced/socket; "" when none does or the mapping is not found. */
static void simgpu_find_root(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return;
    uintptr_t self = (uintptr_t)&simgpu_find_root;
    char line[4096 + 256], path[4096] = "";
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &at) < 2 || at == 0 || self < lo || self >= hi)
            continue;
        snprintf(path, sizeof path, "%s", line + at);
        path[strcspn(path, "\n")] = 0;
        break;
    }
    fclose(f);
    for (char *slash = strrchr(path, '/'); path[0] == '/' && slash; slash = strrchr(path, '/')) {
        *slash = 0; /* path is now the next ancestor ("" for "/") */
        char sock[sizeof path + 64];
        snprintf(sock, sizeof sock, "%s%s", path, SIMGPU_DEFAULT_SOCKET);
        if (access(sock, F_OK) == 0) {
            snprintf(simgpu_root, sizeof simgpu_root, "%s", path);
            return;
        }
    }
}

static const char *simgpu_root_dir(void)
{
    pthread_once(&simgpu_root_once, simgpu_find_root);
    return simgpu_root;
}

static const char *simgpu_socket_path(void)
{
    static char derived[sizeof simgpu_root + 64];
    const char *p = getenv("SIMGPU_SOCKET");
    if (p && *p)
        return p;
    snprintf(derived, sizeof derived, "%s%s", simgpu_root_dir(), SIMGPU_DEFAULT_SOCKET);
    return derived;
}

/* $SIMGPU_DEV_ROOT when set; else with $SIMGPU_SOCKET set "" (the host's /dev), and without it the
   driver root the socket was found in. */
static const char *simgpu_dev_root(void)
{
    const char *root = getenv("SIMGPU_DEV_ROOT");
    if (root)
        return root;
    const char *sock = getenv("SIMGPU_SOCKET");
    return (sock && *sock) ? "" : simgpu_root_dir();
}

/* Sends line (without "\n") and reads one answer line into ans (NUL-terminated, no "\n").
   Returns 0, or -1 on I/O error (the connection is then closed). Callers hold simgpu_mu. */
static int simgpu_roundtrip(const char *line, char *ans, size_t ans_len)
{
    char out[SIMGPU_MAX_LINE];
    int n = snprintf(out, sizeof out, "%s\n", line);
    if (n <= 0 || (size_t)n >= sizeof out)
        return -1;
    for (size_t off = 0; off < (size_t)n;) {
        ssize_t w = send(simgpu_fd, out + off, (size_t)n - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            simgpu_disconnect();
            return -1;
        }
        off += (size_t)w;
    }
    for (;;) {
        char *nl = memchr(simgpu_rbuf, '\n', simgpu_rlen);
        if (nl) {
            size_t len = (size_t)(nl - simgpu_rbuf);
            size_t cp = len < ans_len - 1 ? len : ans_len - 1;
            memcpy(ans, simgpu_rbuf, cp);
            ans[cp] = 0;
            simgpu_rlen -= len + 1;
            memmove(simgpu_rbuf, nl + 1, simgpu_rlen);
            return 0;
        }
        if (simgpu_rlen == sizeof simgpu_rbuf) { /* over-long line: protocol violation */
            simgpu_disconnect();
            return -1;
        }
        ssize_t r = recv(simgpu_fd, simgpu_rbuf + simgpu_rlen, sizeof simgpu_rbuf - simgpu_rlen, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            simgpu_disconnect();
            return -1;
        }
        simgpu_rlen += (size_t)r;
    }
}

/* Writes "HELLO <program name>" into buf. */
static void simgpu_hello(char *buf, size_t len)
{
    snprintf(buf, len, "HELLO %s", program_invocation_short_name);
    for (char *p = buf + 6; *p; p++)
        if (*p == ' ')
            *p = '_';
}

/* Connects (again after fork) and says HELLO. Callers hold simgpu_mu. */
static int simgpu_connect(void)
{
    if (simgpu_fd >= 0 && simgpu_fd_pid == getpid())
        return 0;
    simgpu_disconnect(); /* a forked child must not share its parent's connection */
    const char *path = simgpu_socket_path();
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa.sun_path)
        return -1;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {.tv_sec = SIMGPU_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    simgpu_fd = fd;
    simgpu_fd_pid = getpid();
    char hello[128], ans[SIMGPU_MAX_LINE];
    simgpu_hello(hello, sizeof hello);
    if (simgpu_roundtrip(hello, ans, sizeof ans) < 0 || strncmp(ans, "OK", 2) != 0) {
        simgpu_disconnect();
        return -1;
    }
    return 0;
}

/* simgpu_request without taking the mutex. */
static int simgpu_request_locked(const char *req, char *resp, size_t resp_len)
{
    char ans[SIMGPU_MAX_LINE];
    if (resp && resp_len)
        resp[0] = 0;
    if (strchr(req, '\n') || simgpu_connect() < 0 || simgpu_roundtrip(req, ans, sizeof ans) < 0)
        return -1;
    int rc;
    const char *text;
    if (strncmp(ans, "OK", 2) == 0 && (ans[2] == 0 || ans[2] == ' ')) {
        rc = 0;
        text = ans[2] ? ans + 3 : ans + 2;
    } else if (strncmp(ans, "ERR ", 4) == 0) {
        rc = 1;
        text = ans + 4;
    } else {
        simgpu_disconnect();
        return -1;
    }
    if (resp && resp_len)
        snprintf(resp, resp_len, "%s", text);
    return rc;
}

SIMGPU_HIDDEN int simgpu_request(const char *req, char *resp, size_t resp_len)
{
    pthread_mutex_lock(&simgpu_mu);
    int rc = simgpu_request_locked(req, resp, resp_len);
    pthread_mutex_unlock(&simgpu_mu);
    return rc;
}

/* Parses a DEV answer into d. Returns 0 or -1. */
static int simgpu_parse_dev(const char *ans, simgpu_dev *d)
{
    int name_at = 0;
    memset(d, 0, sizeof *d);
    if (sscanf(ans, "%95s %u %llu %31s %d %d %x %n", d->uuid, &d->minor, &d->total, d->bus_id, &d->numa,
               &d->sms, &d->pci_device_id, &name_at) < 7 || name_at == 0)
        return -1;
    snprintf(d->name, sizeof d->name, "%s", ans + name_at);
    return 0;
}

/* Whether <dev root>/dev/nvidia<minor> is the char device 195:<minor> (simgpu_dev_root). */
static int simgpu_node_ok(unsigned minor)
{
    char path[4096 + 32];
    struct statx st;
    snprintf(path, sizeof path, "%s/dev/nvidia%u", simgpu_dev_root(), minor);
    /* statx (glibc 2.28), not stat (stat@GLIBC_2.33): the library is mounted into containers
       whose glibc may be older than the host's. */
    return statx(AT_FDCWD, path, 0, STATX_TYPE, &st) == 0 && S_ISCHR(st.stx_mode) &&
           st.stx_rdev_major == SIMGPU_NVIDIA_MAJOR && st.stx_rdev_minor == minor;
}

/* Loads the device list into the cache. Callers hold simgpu_mu. */
static int simgpu_load_locked(void)
{
    char ans[SIMGPU_MAX_LINE], hello[128];
    if (simgpu_ndev >= 0)
        return simgpu_ndev;
    simgpu_hello(hello, sizeof hello);
    if (simgpu_request_locked(hello, ans, sizeof ans) != 0)
        return -1;
    char drv[64];
    int cuda, count;
    if (sscanf(ans, "%63s %d %d", drv, &cuda, &count) != 3 || count < 0)
        return -1;
    int n = 0;
    for (int i = 0; i < count && n < SIMGPU_MAX_DEVICES; i++) {
        char req[32];
        snprintf(req, sizeof req, "DEV %d", i);
        if (simgpu_request_locked(req, ans, sizeof ans) != 0 || simgpu_parse_dev(ans, &simgpu_devs[n]) < 0)
            return -1;
        snprintf(req, sizeof req, "TOPO %d", i);
        int rc = simgpu_request_locked(req, ans, sizeof ans);
        if (rc < 0)
            return -1;
        if (rc > 0 || sscanf(ans, "%d", &simgpu_devs[n].nvlinks) != 1 || simgpu_devs[n].nvlinks < 0)
            simgpu_devs[n].nvlinks = 0; /* a daemon without TOPO: no NVLink */
        if (!simgpu_node_ok(simgpu_devs[n].minor))
            continue;
        simgpu_host[n++] = i;
    }
    snprintf(simgpu_driver, sizeof simgpu_driver, "%s", drv);
    simgpu_cuda = cuda;
    simgpu_ndev = n;
    return n;
}

SIMGPU_HIDDEN int simgpu_devices(simgpu_dev *out, int *host_index, int max)
{
    pthread_mutex_lock(&simgpu_mu);
    int n = simgpu_load_locked();
    for (int i = 0; i < n && i < max; i++) {
        if (out)
            out[i] = simgpu_devs[i];
        if (host_index)
            host_index[i] = simgpu_host[i];
    }
    pthread_mutex_unlock(&simgpu_mu);
    return n;
}

SIMGPU_HIDDEN int simgpu_versions(char *driver_version, size_t ver_len, int *cuda_version)
{
    pthread_mutex_lock(&simgpu_mu);
    int rc = simgpu_load_locked() < 0 ? -1 : 0;
    if (rc == 0) {
        if (driver_version && ver_len)
            snprintf(driver_version, ver_len, "%s", simgpu_driver);
        if (cuda_version)
            *cuda_version = simgpu_cuda;
    }
    pthread_mutex_unlock(&simgpu_mu);
    return rc;
}

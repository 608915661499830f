/* NVML and CUDA driver probes through dlopen. The prototypes and struct layouts are
 * declared from NVIDIA's documented ABI (here and in nvml_abi.h) instead of including
 * nvml.h/cuda.h: lpx must build and run where no CUDA headers or driver exist. */
#define _GNU_SOURCE /* dlinfo */
#include "telemetry/telemetry.h"

#include "base/appendf.h"

#include "base/error.h"
#include "telemetry/nvml_abi.h"

#include <dlfcn.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Every NVML function lpx calls. The first four are required; a missing optional one
 * leaves its readings unavailable and is named in missing_symbols. */
#define NVML_FUNCS(X)                                                                              \
    X(nvmlInit_v2, 1, (void))                                                                      \
    X(nvmlShutdown, 1, (void))                                                                     \
    X(nvmlDeviceGetCount_v2, 1, (unsigned int *))                                                  \
    X(nvmlDeviceGetHandleByIndex_v2, 1, (unsigned int, nvml_device *))                             \
    X(nvmlSystemGetDriverVersion, 0, (char *, unsigned int))                                       \
    X(nvmlSystemGetCudaDriverVersion, 0, (int *))                                                  \
    X(nvmlDeviceGetName, 0, (nvml_device, char *, unsigned int))                                   \
    X(nvmlDeviceGetUUID, 0, (nvml_device, char *, unsigned int))                                   \
    X(nvmlDeviceGetCudaComputeCapability, 0, (nvml_device, int *, int *))                          \
    X(nvmlDeviceGetMemoryInfo, 0, (nvml_device, nvml_memory *))                                    \
    X(nvmlDeviceGetMemoryBusWidth, 0, (nvml_device, unsigned int *))                               \
    X(nvmlDeviceGetUtilizationRates, 0, (nvml_device, nvml_utilization *))                         \
    X(nvmlDeviceGetTemperature, 0, (nvml_device, int, unsigned int *))                             \
    X(nvmlDeviceGetTemperatureThreshold, 0, (nvml_device, int, unsigned int *))                    \
    X(nvmlDeviceGetPowerUsage, 0, (nvml_device, unsigned int *))                                   \
    X(nvmlDeviceGetEnforcedPowerLimit, 0, (nvml_device, unsigned int *))                           \
    X(nvmlDeviceGetPowerManagementDefaultLimit, 0, (nvml_device, unsigned int *))                  \
    X(nvmlDeviceGetClockInfo, 0, (nvml_device, int, unsigned int *))                               \
    X(nvmlDeviceGetMaxClockInfo, 0, (nvml_device, int, unsigned int *))                            \
    X(nvmlDeviceGetCurrentClocksEventReasons, 0, (nvml_device, unsigned long long *))              \
    X(nvmlDeviceGetCurrentClocksThrottleReasons, 0, (nvml_device, unsigned long long *))           \
    X(nvmlDeviceGetCurrPcieLinkGeneration, 0, (nvml_device, unsigned int *))                       \
    X(nvmlDeviceGetCurrPcieLinkWidth, 0, (nvml_device, unsigned int *))                            \
    X(nvmlDeviceGetMaxPcieLinkGeneration, 0, (nvml_device, unsigned int *))                        \
    X(nvmlDeviceGetMaxPcieLinkWidth, 0, (nvml_device, unsigned int *))                             \
    X(nvmlDeviceGetPcieThroughput, 0, (nvml_device, int, unsigned int *))                          \
    X(nvmlDeviceGetEccMode, 0, (nvml_device, int *, int *))                                        \
    X(nvmlDeviceGetTotalEccErrors, 0, (nvml_device, int, int, unsigned long long *))               \
    X(nvmlDeviceGetPersistenceMode, 0, (nvml_device, int *))                                       \
    X(nvmlDeviceGetMigMode, 0, (nvml_device, unsigned int *, unsigned int *))                      \
    X(nvmlDeviceGetComputeMode, 0, (nvml_device, int *))                                           \
    X(nvmlDeviceGetRemappedRows, 0,                                                                \
      (nvml_device, unsigned int *, unsigned int *, unsigned int *, unsigned int *))               \
    X(nvmlDeviceGetComputeRunningProcesses_v3, 0,                                                  \
      (nvml_device, unsigned int *, nvml_process_info *))                                          \
    X(nvmlDeviceGetComputeRunningProcesses_v2, 0,                                                  \
      (nvml_device, unsigned int *, nvml_process_info *))                                          \
    X(nvmlDeviceGetPciInfo_v3, 0, (nvml_device, nvml_pci_info *))                                  \
    X(nvmlDeviceGetNumaNodeId, 0, (nvml_device, unsigned int *))                                   \
    X(nvmlDeviceGetNvLinkState, 0, (nvml_device, unsigned int, int *))                             \
    X(nvmlDeviceGetNvLinkRemotePciInfo_v2, 0, (nvml_device, unsigned int, nvml_pci_info *))        \
    X(nvmlDeviceGetTopologyCommonAncestor, 0, (nvml_device, nvml_device, int *))

/* ---- CUDA driver ABI ----------------------------------------------------------------- */

#define CUDA_FUNCS(X)                                                                              \
    X(cuInit, 1, (unsigned int))                                                                   \
    X(cuDriverGetVersion, 1, (int *))                                                              \
    X(cuDeviceGetCount, 1, (int *))                                                                \
    X(cuGetErrorName, 0, (int, const char **))

struct lpx_telemetry {
    void *nvml_lib, *cuda_lib;
#define DECLARE_FN(name, required, args) nvml_ret(*name) args;
    NVML_FUNCS(DECLARE_FN)
    CUDA_FUNCS(DECLARE_FN)
#undef DECLARE_FN
    const char *(*nvmlErrorString)(nvml_ret);
    lpx_telemetry_state st;
};

static const char *nvml_err(const lpx_telemetry *t, nvml_ret r) {
    static _Thread_local char buf[32];
    const char *s = t->nvmlErrorString ? t->nvmlErrorString(r) : NULL;
    if (s) return s;
    snprintf(buf, sizeof buf, "NVML error %d", r);
    return buf;
}

static const char *cuda_err(const lpx_telemetry *t, int r) {
    static _Thread_local char buf[32];
    const char *s = NULL;
    if (t->cuGetErrorName && t->cuGetErrorName(r, &s) == 0 && s) return s;
    snprintf(buf, sizeof buf, "CUresult %d", r);
    return buf;
}

/* Opens the library named by the environment variable `var` when it is set (tests drive
 * doctor through a fake NVML this way), else the default soname. `path` gets the file the
 * loader opened (its search resolved a bare soname to a path), or the name asked for. */
static void *open_lib(const char *var, const char *soname, char *path, size_t cap) {
    const char *v = getenv(var);
    const char *name = v && v[0] ? v : soname;
    snprintf(path, cap, "%s", name);
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    struct link_map *lm = NULL;
    if (h && dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
        snprintf(path, cap, "%s", lm->l_name);
    return h;
}

static void load_nvml(lpx_telemetry *t) {
    lpx_telemetry_state *st = &t->st;
    /* The versioned soname: the unversioned libnvidia-ml.so is the toolkit's stub. */
    t->nvml_lib = open_lib("LPX_NVML_LIBRARY", "libnvidia-ml.so.1", st->nvml_library,
                           sizeof st->nvml_library);
    const char *lib = st->nvml_library;
    if (!t->nvml_lib) {
        snprintf(st->nvml_error, sizeof st->nvml_error, "%s", dlerror());
        return;
    }
    bool ok = true;
#define LOAD_FN(name, required, args)                                                              \
    *(void **)&t->name = dlsym(t->nvml_lib, #name);                                                \
    if (!t->name && required) {                                                                    \
        snprintf(st->nvml_error, sizeof st->nvml_error,                                            \
                 "%.160s lacks %s (driver too old for lpx)", lib, #name);                          \
        ok = false;                                                                                \
    } else if (!t->name)                                                                           \
        lpx_appendf(st->missing_symbols, sizeof st->missing_symbols, "%s%s",                       \
                    st->missing_symbols[0] ? " " : "", #name);
    NVML_FUNCS(LOAD_FN)
    if (!ok) return;
    *(void **)&t->nvmlErrorString = dlsym(t->nvml_lib, "nvmlErrorString");
    st->nvml_loaded = true;
    nvml_ret r = t->nvmlInit_v2();
    st->nvml_init_result = r;
    if (r != NVML_SUCCESS) {
        snprintf(st->nvml_error, sizeof st->nvml_error, "nvmlInit_v2: %s", nvml_err(t, r));
        return;
    }
    st->nvml_ready = true;
    unsigned int n = 0;
    r = t->nvmlDeviceGetCount_v2(&n);
    if (r != NVML_SUCCESS)
        snprintf(st->nvml_error, sizeof st->nvml_error, "nvmlDeviceGetCount_v2: %s",
                 nvml_err(t, r));
    else
        st->nvml_device_count = (int)n;
    if (t->nvmlSystemGetDriverVersion &&
        t->nvmlSystemGetDriverVersion(st->driver_version, sizeof st->driver_version) !=
            NVML_SUCCESS)
        st->driver_version[0] = '\0';
    int v = 0;
    if (t->nvmlSystemGetCudaDriverVersion && t->nvmlSystemGetCudaDriverVersion(&v) == NVML_SUCCESS)
        st->driver_cuda_version = v;
}

static void load_cuda(lpx_telemetry *t) {
    lpx_telemetry_state *st = &t->st;
    t->cuda_lib =
        open_lib("LPX_CUDA_LIBRARY", "libcuda.so.1", st->cuda_library, sizeof st->cuda_library);
    const char *lib = st->cuda_library;
    if (!t->cuda_lib) {
        snprintf(st->cuda_error, sizeof st->cuda_error, "%s", dlerror());
        return;
    }
#undef LOAD_FN
#define LOAD_FN(name, required, args)                                                              \
    *(void **)&t->name = dlsym(t->cuda_lib, #name);                                                \
    if (!t->name && required) {                                                                    \
        snprintf(st->cuda_error, sizeof st->cuda_error, "%.160s lacks %s", lib, #name);            \
        return;                                                                                    \
    }
    CUDA_FUNCS(LOAD_FN)
#undef LOAD_FN
    st->cuda_loaded = true;
    int v = 0;
    if (t->cuDriverGetVersion(&v) == 0 && v > 0 && st->driver_cuda_version == LPX_TEL_NA)
        st->driver_cuda_version = v;
    st->cuda_init_result = t->cuInit(0);
    if (st->cuda_init_result != 0) {
        snprintf(st->cuda_error, sizeof st->cuda_error, "cuInit: %s",
                 cuda_err(t, st->cuda_init_result));
        return;
    }
    int n = 0;
    int r = t->cuDeviceGetCount(&n);
    if (r != 0)
        snprintf(st->cuda_error, sizeof st->cuda_error, "cuDeviceGetCount: %s", cuda_err(t, r));
    else
        st->cuda_device_count = n;
}

lpx_status lpx_telemetry_open(unsigned flags, lpx_telemetry **out) {
    *out = NULL;
    lpx_telemetry *t = calloc(1, sizeof *t);
    if (!t) return lpx_errorf(LPX_ERR_NOMEM, "telemetry: out of memory");
    t->st.driver_cuda_version = LPX_TEL_NA;
    t->st.cuda_init_result = LPX_TEL_NA;
    t->st.nvml_init_result = LPX_TEL_NA;
    t->st.cuda_device_count = LPX_TEL_NA;
    load_nvml(t);
    if (flags & LPX_TEL_WITH_CUDA) load_cuda(t);
    *out = t;
    return LPX_OK;
}

void lpx_telemetry_close(lpx_telemetry *t) {
    if (!t) return;
    if (t->st.nvml_ready) t->nvmlShutdown();
    /* libcuda is left loaded: unloading it after cuInit is not supported by the driver. */
    if (t->nvml_lib) dlclose(t->nvml_lib);
    free(t);
}

const lpx_telemetry_state *lpx_telemetry_get_state(const lpx_telemetry *t) {
    return &t->st;
}

static lpx_status device(lpx_telemetry *t, int index, nvml_device *d) {
    if (!t->st.nvml_ready)
        return lpx_errorf(LPX_ERR_DEVICE, "NVML not available: %s", t->st.nvml_error);
    if (index < 0 || index >= t->st.nvml_device_count)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "GPU %d: only %d GPU(s) present", index,
                          t->st.nvml_device_count);
    nvml_ret r = t->nvmlDeviceGetHandleByIndex_v2((unsigned)index, d);
    if (r != NVML_SUCCESS)
        return lpx_errorf(LPX_ERR_DEVICE, "GPU %d: nvmlDeviceGetHandleByIndex_v2: %s", index,
                          nvml_err(t, r));
    return LPX_OK;
}

/* Each reading: call when the symbol exists, store on success, note the reason otherwise.
 * Returns the NVML result (NVML_ERROR_NOT_SUPPORTED for a missing symbol). */
#define MISSING_SYMBOL (-1)
typedef struct reader {
    lpx_telemetry *t;
    char *unread;
    size_t cap;
    bool lost;
} reader;

static bool got(reader *rd, const char *what, nvml_ret r) {
    if (r == NVML_SUCCESS) return true;
    if (r == NVML_ERROR_GPU_IS_LOST) rd->lost = true;
    lpx_appendf(rd->unread, rd->cap, "%s%s: %s", rd->unread[0] ? "; " : "", what,
                r == MISSING_SYMBOL ? "not in this libnvidia-ml" : nvml_err(rd->t, r));
    return false;
}
#define READ(rd, fn, what, ...)                                                                    \
    ((rd)->t->fn ? got(rd, what, (rd)->t->fn(__VA_ARGS__)) : got(rd, what, MISSING_SYMBOL))

static int u2i(unsigned int v) {
    return v > 0x7fffffffu ? LPX_TEL_NA : (int)v;
}

lpx_status lpx_telemetry_facts(lpx_telemetry *t, int index, lpx_gpu_facts *f) {
    memset(f, 0, sizeof *f);
    f->index = index;
    nvml_device d;
    LPX_TRY(device(t, index, &d));
    reader rd = {t, f->unread, sizeof f->unread, false};
    unsigned int u = 0;
    int a = 0, b = 0;
    if (!READ(&rd, nvmlDeviceGetName, "name", d, f->name, sizeof f->name))
        snprintf(f->name, sizeof f->name, "GPU %d", index);
    if (!READ(&rd, nvmlDeviceGetUUID, "uuid", d, f->uuid, sizeof f->uuid)) f->uuid[0] = '\0';
    f->cc_major = f->cc_minor = LPX_TEL_NA;
    if (READ(&rd, nvmlDeviceGetCudaComputeCapability, "compute capability", d, &a, &b))
        f->cc_major = a, f->cc_minor = b;
    nvml_memory m;
    f->mem_total =
        READ(&rd, nvmlDeviceGetMemoryInfo, "memory", d, &m) ? (int64_t)m.total : LPX_TEL_NA;
#define READ_U(field, fn, what, ...)                                                               \
    f->field = READ(&rd, fn, what, __VA_ARGS__, &u) ? u2i(u) : LPX_TEL_NA
    READ_U(mem_bus_width, nvmlDeviceGetMemoryBusWidth, "memory bus width", d);
    READ_U(sm_clock_max_mhz, nvmlDeviceGetMaxClockInfo, "max SM clock", d, NVML_CLOCK_SM);
    READ_U(mem_clock_max_mhz, nvmlDeviceGetMaxClockInfo, "max memory clock", d, NVML_CLOCK_MEM);
    READ_U(pcie_gen_max, nvmlDeviceGetMaxPcieLinkGeneration, "max PCIe generation", d);
    READ_U(pcie_width_max, nvmlDeviceGetMaxPcieLinkWidth, "max PCIe width", d);
    READ_U(power_limit_mw, nvmlDeviceGetEnforcedPowerLimit, "power limit", d);
    READ_U(power_default_limit_mw, nvmlDeviceGetPowerManagementDefaultLimit, "default power limit",
           d);
    READ_U(temp_slowdown_c, nvmlDeviceGetTemperatureThreshold, "slowdown temperature", d,
           NVML_TEMP_THRESHOLD_SLOWDOWN);
    READ_U(temp_shutdown_c, nvmlDeviceGetTemperatureThreshold, "shutdown temperature", d,
           NVML_TEMP_THRESHOLD_SHUTDOWN);
#undef READ_U
    f->ecc_current = f->ecc_pending = LPX_TEL_NA;
    if (READ(&rd, nvmlDeviceGetEccMode, "ECC mode", d, &a, &b))
        f->ecc_current = a, f->ecc_pending = b;
    unsigned long long ull = 0;
    f->ecc_uncorrected = LPX_TEL_NA;
    if (f->ecc_current == 1 && READ(&rd, nvmlDeviceGetTotalEccErrors, "ECC errors", d,
                                    NVML_MEMORY_ERROR_UNCORRECTED, NVML_VOLATILE_ECC, &ull))
        f->ecc_uncorrected = ull > INT64_MAX ? INT64_MAX : (int64_t)ull;
    f->persistence =
        READ(&rd, nvmlDeviceGetPersistenceMode, "persistence mode", d, &a) ? a : LPX_TEL_NA;
    unsigned int mc = 0, mp = 0;
    f->mig_current = f->mig_pending = LPX_TEL_NA;
    if (READ(&rd, nvmlDeviceGetMigMode, "MIG mode", d, &mc, &mp))
        f->mig_current = u2i(mc), f->mig_pending = u2i(mp);
    f->compute_mode = READ(&rd, nvmlDeviceGetComputeMode, "compute mode", d, &a) ? a : LPX_TEL_NA;
    unsigned int rc = 0, ru = 0, rp = 0, rf = 0;
    f->rows_remap_pending = f->rows_remap_failed = LPX_TEL_NA;
    if (READ(&rd, nvmlDeviceGetRemappedRows, "remapped rows", d, &rc, &ru, &rp, &rf))
        f->rows_remap_pending = rp ? 1 : 0, f->rows_remap_failed = rf ? 1 : 0;
    if (rd.lost) return lpx_errorf(LPX_ERR_DEVICE, "GPU %d is lost (fell off the bus)", index);
    return LPX_OK;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

lpx_status lpx_telemetry_sample(lpx_telemetry *t, int index, lpx_gpu_sample *s) {
    memset(s, 0, sizeof *s);
    nvml_device d;
    LPX_TRY(device(t, index, &d));
    s->t = now_s();
    reader rd = {t, s->unread, sizeof s->unread, false};
    unsigned int u = 0;
    nvml_utilization ut;
    s->util_gpu = s->util_mem = LPX_TEL_NA;
    if (READ(&rd, nvmlDeviceGetUtilizationRates, "utilisation", d, &ut))
        s->util_gpu = u2i(ut.gpu), s->util_mem = u2i(ut.memory);
    nvml_memory m;
    s->mem_total = s->mem_used = s->mem_free = LPX_TEL_NA;
    if (READ(&rd, nvmlDeviceGetMemoryInfo, "memory", d, &m))
        s->mem_total = (int64_t)m.total, s->mem_used = (int64_t)m.used,
        s->mem_free = (int64_t)m.free;
#define READ_U(field, fn, what, ...)                                                               \
    s->field = READ(&rd, fn, what, __VA_ARGS__, &u) ? u2i(u) : LPX_TEL_NA
    READ_U(temp_c, nvmlDeviceGetTemperature, "temperature", d, NVML_TEMPERATURE_GPU);
    READ_U(power_mw, nvmlDeviceGetPowerUsage, "power", d);
    READ_U(sm_clock_mhz, nvmlDeviceGetClockInfo, "SM clock", d, NVML_CLOCK_SM);
    READ_U(mem_clock_mhz, nvmlDeviceGetClockInfo, "memory clock", d, NVML_CLOCK_MEM);
    READ_U(pcie_gen, nvmlDeviceGetCurrPcieLinkGeneration, "PCIe generation", d);
    READ_U(pcie_width, nvmlDeviceGetCurrPcieLinkWidth, "PCIe width", d);
    READ_U(pcie_tx_kbps, nvmlDeviceGetPcieThroughput, "PCIe TX", d, NVML_PCIE_UTIL_TX_BYTES);
    READ_U(pcie_rx_kbps, nvmlDeviceGetPcieThroughput, "PCIe RX", d, NVML_PCIE_UTIL_RX_BYTES);
#undef READ_U
    unsigned long long bits = 0;
    /* The "event reasons" name replaced "throttle reasons" in newer drivers; same bits. */
    if (t->nvmlDeviceGetCurrentClocksEventReasons)
        s->throttle =
            READ(&rd, nvmlDeviceGetCurrentClocksEventReasons, "throttle reasons", d, &bits)
                ? (int64_t)(bits & 0x7fffffffffffffffULL)
                : LPX_TEL_NA;
    else
        s->throttle =
            READ(&rd, nvmlDeviceGetCurrentClocksThrottleReasons, "throttle reasons", d, &bits)
                ? (int64_t)(bits & 0x7fffffffffffffffULL)
                : LPX_TEL_NA;
    if (rd.lost) return lpx_errorf(LPX_ERR_DEVICE, "GPU %d is lost (fell off the bus)", index);
    return LPX_OK;
}

static void process_name(uint32_t pid, char *buf, size_t cap) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/comm", pid);
    FILE *f = fopen(path, "r");
    snprintf(buf, cap, "?");
    if (!f) return;
    if (fgets(buf, (int)cap, f)) buf[strcspn(buf, "\n")] = '\0';
    fclose(f);
}

lpx_status lpx_telemetry_processes(lpx_telemetry *t, int index, lpx_gpu_process *procs, size_t cap,
                                   size_t *n_out) {
    *n_out = 0;
    nvml_device d;
    LPX_TRY(device(t, index, &d));
    nvml_ret (*fn)(nvml_device, unsigned int *, nvml_process_info *) =
        t->nvmlDeviceGetComputeRunningProcesses_v3 ? t->nvmlDeviceGetComputeRunningProcesses_v3
                                                   : t->nvmlDeviceGetComputeRunningProcesses_v2;
    if (!fn)
        return lpx_errorf(LPX_ERR_UNSUPPORTED,
                          "GPU %d: this driver's NVML has no process query (_v2/_v3)", index);
    nvml_process_info *info = NULL;
    unsigned int n = 0;
    nvml_ret r = NVML_ERROR_INSUFFICIENT_SIZE;
    /* Processes may start between the size query and the read: retry a few times. */
    for (int attempt = 0; attempt < 4 && r == NVML_ERROR_INSUFFICIENT_SIZE; attempt++) {
        unsigned int room = n + 8;
        nvml_process_info *p = realloc(info, room * sizeof *info);
        if (!p) {
            free(info);
            return lpx_errorf(LPX_ERR_NOMEM, "GPU %d: out of memory listing processes", index);
        }
        info = p;
        n = room;
        r = fn(d, &n, info);
    }
    if (r != NVML_SUCCESS) {
        free(info);
        return lpx_errorf(r == NVML_ERROR_GPU_IS_LOST ? LPX_ERR_DEVICE : LPX_ERR_UNSUPPORTED,
                          "GPU %d: listing processes: %s", index, nvml_err(t, r));
    }
    for (unsigned int i = 0; i < n && i < cap; i++) {
        procs[i].pid = info[i].pid;
        procs[i].mem_used = info[i].used_gpu_memory == NVML_VALUE_NOT_AVAILABLE ||
                                    info[i].used_gpu_memory > INT64_MAX
                                ? LPX_TEL_NA
                                : (int64_t)info[i].used_gpu_memory;
        process_name(info[i].pid, procs[i].name, sizeof procs[i].name);
    }
    *n_out = n;
    free(info);
    return LPX_OK;
}

lpx_status lpx_telemetry_links(lpx_telemetry *t, int index, lpx_gpu_links *out) {
    memset(out, 0, sizeof *out);
    out->numa_node = out->n_links = LPX_TEL_NA;
    nvml_device d;
    LPX_TRY(device(t, index, &d));
    nvml_pci_info pci;
    if (t->nvmlDeviceGetPciInfo_v3 && t->nvmlDeviceGetPciInfo_v3(d, &pci) == NVML_SUCCESS)
        snprintf(out->bus_id, sizeof out->bus_id, "%.31s", pci.bus_id);
    unsigned int node = 0;
    if (t->nvmlDeviceGetNumaNodeId && t->nvmlDeviceGetNumaNodeId(d, &node) == NVML_SUCCESS)
        out->numa_node = u2i(node);
    if (!t->nvmlDeviceGetNvLinkState || !t->nvmlDeviceGetNvLinkRemotePciInfo_v2) return LPX_OK;
    /* A GPU without NVLink answers NOT_SUPPORTED for link 0: n_links stays unknown. */
    for (unsigned int l = 0; l < NVML_NVLINK_MAX_LINKS && l < LPX_NVLINK_MAX; l++) {
        int active = NVML_FEATURE_DISABLED;
        nvml_ret r = t->nvmlDeviceGetNvLinkState(d, l, &active);
        if (r != NVML_SUCCESS) break;
        if (out->n_links == LPX_TEL_NA) out->n_links = 0;
        if (active != NVML_FEATURE_ENABLED ||
            t->nvmlDeviceGetNvLinkRemotePciInfo_v2(d, l, &pci) != NVML_SUCCESS)
            continue;
        snprintf(out->remote[out->n_links++], sizeof out->remote[0], "%.31s", pci.bus_id);
    }
    return LPX_OK;
}

int lpx_telemetry_common_ancestor(lpx_telemetry *t, int i, int j) {
    nvml_device a, b;
    int level = 0;
    if (!t->nvmlDeviceGetTopologyCommonAncestor || device(t, i, &a) != LPX_OK ||
        device(t, j, &b) != LPX_OK || t->nvmlDeviceGetTopologyCommonAncestor(a, b, &level))
        return LPX_TEL_NA;
    return level;
}

void lpx_throttle_text(int64_t bits, char *buf, size_t cap) {
    static const struct {
        int64_t bit;
        const char *name;
    } names[] = {
        {LPX_THR_SW_POWER_CAP, "power cap"},        {LPX_THR_HW_SLOWDOWN, "hardware slowdown"},
        {LPX_THR_SW_THERMAL, "thermal (software)"}, {LPX_THR_HW_THERMAL, "thermal (hardware)"},
        {LPX_THR_HW_POWER_BRAKE, "power brake"},    {LPX_THR_APP_CLOCKS, "application clocks"},
        {LPX_THR_DISPLAY_CLOCKS, "display clocks"},
    };
    buf[0] = '\0';
    if (bits == LPX_TEL_NA) {
        snprintf(buf, cap, "unknown");
        return;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (bits & names[i].bit) lpx_appendf(buf, cap, "%s%s", buf[0] ? ", " : "", names[i].name);
    if (!buf[0]) snprintf(buf, cap, "none");
}

/* A stand-in for libnvidia-ml.so.1 and libcuda.so.1, for tests only: lpx loads it through
 * LPX_NVML_LIBRARY / LPX_CUDA_LIBRARY, and LPX_FAKE_NVML_STATE picks what it reports.
 * One GPU, an H200 in good health, unless the state names one fault:
 *   healthy, nogpu, old_driver, cc_not_compiled, pcie_x8, thermal, power_cap, ecc_on,
 *   low_memory, foreign_process, mig_on
 * Signatures follow NVIDIA's documented ABI, as src/telemetry/telemetry.c declares it. */
#include <stdlib.h>
#include <string.h>

typedef int nvml_ret;
typedef struct nvml_device_st *nvml_device;
enum { OK = 0, NOT_SUPPORTED = 3, INVALID_ARGUMENT = 2, INSUFFICIENT_SIZE = 7 };
typedef struct {
    unsigned long long total, free, used;
} nvml_memory;
typedef struct {
    unsigned int gpu, memory;
} nvml_utilization;
typedef struct {
    unsigned int pid;
    unsigned long long used_gpu_memory;
    unsigned int gpu_instance_id, compute_instance_id;
} nvml_process_info;

#define GIB (1024ULL * 1024 * 1024)
static struct nvml_device_st { int unused; } the_gpu;

static int is(const char *state) {
    const char *s = getenv("LPX_FAKE_NVML_STATE");
    return strcmp(s && s[0] ? s : "healthy", state) == 0;
}

static void copy(char *dst, unsigned int cap, const char *src) {
    if (!cap) return;
    strncpy(dst, src, cap - 1);
    dst[cap - 1] = '\0';
}

nvml_ret nvmlInit_v2(void) {
    return OK;
}
nvml_ret nvmlShutdown(void) {
    return OK;
}
const char *nvmlErrorString(nvml_ret r) {
    return r == OK ? "Success" : "fake NVML error";
}

nvml_ret nvmlDeviceGetCount_v2(unsigned int *n) {
    *n = is("nogpu") ? 0 : 1;
    return OK;
}
nvml_ret nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvml_device *d) {
    if (is("nogpu") || i != 0) return INVALID_ARGUMENT;
    *d = &the_gpu;
    return OK;
}
nvml_ret nvmlSystemGetDriverVersion(char *buf, unsigned int cap) {
    copy(buf, cap, is("old_driver") ? "470.256.02" : "580.159.04");
    return OK;
}
/* CUDA 11.4 for the old driver: older than any toolkit lpx builds with. */
nvml_ret nvmlSystemGetCudaDriverVersion(int *v) {
    *v = is("old_driver") ? 11040 : 13000;
    return OK;
}
nvml_ret nvmlDeviceGetName(nvml_device d, char *buf, unsigned int cap) {
    (void)d;
    copy(buf, cap, is("cc_not_compiled") ? "Tesla K80" : "NVIDIA H200");
    return OK;
}
nvml_ret nvmlDeviceGetUUID(nvml_device d, char *buf, unsigned int cap) {
    (void)d;
    copy(buf, cap, "GPU-fa4e0000-0000-0000-0000-000000000000");
    return OK;
}
/* Kepler's 3.7: no lpx build carries kernels for it. */
nvml_ret nvmlDeviceGetCudaComputeCapability(nvml_device d, int *major, int *minor) {
    (void)d;
    *major = is("cc_not_compiled") ? 3 : 9;
    *minor = is("cc_not_compiled") ? 7 : 0;
    return OK;
}
nvml_ret nvmlDeviceGetMemoryInfo(nvml_device d, nvml_memory *m) {
    (void)d;
    m->total = 141 * GIB;
    m->used = is("low_memory") ? 140 * GIB : is("foreign_process") ? 20 * GIB : 1 * GIB;
    m->free = m->total - m->used;
    return OK;
}
nvml_ret nvmlDeviceGetMemoryBusWidth(nvml_device d, unsigned int *v) {
    (void)d;
    *v = 6144;
    return OK;
}
nvml_ret nvmlDeviceGetUtilizationRates(nvml_device d, nvml_utilization *u) {
    (void)d;
    u->gpu = u->memory = 0;
    return OK;
}
nvml_ret nvmlDeviceGetTemperature(nvml_device d, int sensor, unsigned int *v) {
    (void)d, (void)sensor;
    *v = is("thermal") ? 84 : 35;
    return OK;
}
nvml_ret nvmlDeviceGetTemperatureThreshold(nvml_device d, int which, unsigned int *v) {
    (void)d;
    *v = which == 1 ? 87 : 95; /* slowdown, shutdown */
    return OK;
}
nvml_ret nvmlDeviceGetPowerUsage(nvml_device d, unsigned int *mw) {
    (void)d;
    *mw = is("power_cap") ? 300000 : 90000;
    return OK;
}
nvml_ret nvmlDeviceGetEnforcedPowerLimit(nvml_device d, unsigned int *mw) {
    (void)d;
    *mw = is("power_cap") ? 300000 : 700000;
    return OK;
}
nvml_ret nvmlDeviceGetPowerManagementDefaultLimit(nvml_device d, unsigned int *mw) {
    (void)d;
    *mw = 700000;
    return OK;
}
nvml_ret nvmlDeviceGetClockInfo(nvml_device d, int which, unsigned int *mhz) {
    (void)d;
    *mhz = which == 1 ? (is("thermal") || is("power_cap") ? 1200 : 1980) : 2619;
    return OK;
}
nvml_ret nvmlDeviceGetMaxClockInfo(nvml_device d, int which, unsigned int *mhz) {
    (void)d;
    *mhz = which == 1 ? 1980 : 2619;
    return OK;
}
/* Bits: 0x1 idle, 0x4 software power cap, 0x20 software thermal slowdown. */
nvml_ret nvmlDeviceGetCurrentClocksEventReasons(nvml_device d, unsigned long long *bits) {
    (void)d;
    *bits = is("thermal") ? 0x20 : is("power_cap") ? 0x4 : 0x1;
    return OK;
}
nvml_ret nvmlDeviceGetCurrPcieLinkGeneration(nvml_device d, unsigned int *v) {
    (void)d;
    *v = 5;
    return OK;
}
nvml_ret nvmlDeviceGetCurrPcieLinkWidth(nvml_device d, unsigned int *v) {
    (void)d;
    *v = is("pcie_x8") ? 8 : 16;
    return OK;
}
nvml_ret nvmlDeviceGetMaxPcieLinkGeneration(nvml_device d, unsigned int *v) {
    (void)d;
    *v = 5;
    return OK;
}
nvml_ret nvmlDeviceGetMaxPcieLinkWidth(nvml_device d, unsigned int *v) {
    (void)d;
    *v = 16;
    return OK;
}
nvml_ret nvmlDeviceGetPcieThroughput(nvml_device d, int which, unsigned int *kbps) {
    (void)d, (void)which;
    *kbps = 100;
    return OK;
}
/* ecc_on: ECC is on and has counted uncorrected errors since the driver loaded. */
nvml_ret nvmlDeviceGetEccMode(nvml_device d, int *current, int *pending) {
    (void)d;
    *current = *pending = 1;
    return OK;
}
nvml_ret nvmlDeviceGetTotalEccErrors(nvml_device d, int type, int counter, unsigned long long *n) {
    (void)d, (void)type, (void)counter;
    *n = is("ecc_on") ? 2 : 0;
    return OK;
}
nvml_ret nvmlDeviceGetPersistenceMode(nvml_device d, int *on) {
    (void)d;
    *on = 1;
    return OK;
}
nvml_ret nvmlDeviceGetMigMode(nvml_device d, unsigned int *current, unsigned int *pending) {
    (void)d;
    *current = *pending = is("mig_on") ? 1 : 0;
    return OK;
}
nvml_ret nvmlDeviceGetComputeMode(nvml_device d, int *mode) {
    (void)d;
    *mode = 0;
    return OK;
}
nvml_ret nvmlDeviceGetRemappedRows(nvml_device d, unsigned int *corr, unsigned int *unc,
                                   unsigned int *pending, unsigned int *failed) {
    (void)d;
    *corr = *unc = *pending = *failed = 0;
    return OK;
}
/* foreign_process: PID 1 (never lpx itself) holds 19 GiB. */
nvml_ret nvmlDeviceGetComputeRunningProcesses_v3(nvml_device d, unsigned int *n,
                                                 nvml_process_info *info) {
    (void)d;
    unsigned int want = is("foreign_process") ? 1 : 0;
    if (*n < want) {
        *n = want;
        return INSUFFICIENT_SIZE;
    }
    *n = want;
    if (want) info[0] = (nvml_process_info){1, 19 * GIB, 0xFFFFFFFFu, 0xFFFFFFFFu};
    return OK;
}

/* ---- libcuda ---- */
int cuInit(unsigned int flags) {
    (void)flags;
    return is("nogpu") ? 100 : 0; /* CUDA_ERROR_NO_DEVICE */
}
int cuDriverGetVersion(int *v) {
    return nvmlSystemGetCudaDriverVersion(v);
}
int cuDeviceGetCount(int *n) {
    *n = is("nogpu") ? 0 : 1;
    return 0;
}
int cuGetErrorName(int r, const char **s) {
    *s = r == 100 ? "CUDA_ERROR_NO_DEVICE" : r == 0 ? "CUDA_SUCCESS" : "CUDA_ERROR_UNKNOWN";
    return 0;
}

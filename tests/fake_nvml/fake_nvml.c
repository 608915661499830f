/* A stand-in for libnvidia-ml.so.1 and libcuda.so.1, for tests only: lpx loads it through
 * LPX_NVML_LIBRARY / LPX_CUDA_LIBRARY, and LPX_FAKE_NVML_STATE names a row of the table
 * below (default "healthy"): one H200 in good health, or that GPU with one fault. An
 * unknown name makes nvmlInit_v2, cuDriverGetVersion and cuInit fail (lpx calls nothing
 * else then), so a misspelt state cannot pass as healthy.
 * Signatures follow NVIDIA's documented ABI, as src/telemetry declares it (nvml_abi.h). */
#include "../../src/telemetry/nvml_abi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024ULL * 1024)
#define GIB (1024 * MIB)

/* Throttle ("clock event") reason bits; the healthy GPU has none. */
#define SW_POWER_CAP 0x4ULL
#define SW_THERMAL 0x20ULL

typedef struct fake_state {
    const char *name;
    int no_gpu;              /* NVML counts 0 GPUs, cuInit says CUDA_ERROR_NO_DEVICE */
    const char *driver;      /* driver version */
    int cuda;                /* newest CUDA it supports, 1000*major + 10*minor */
    const char *gpu;         /* name */
    int cc_major, cc_minor;  /* compute capability */
    unsigned mem_used_gib;   /* of 141 GiB */
    unsigned mem_growth_mib; /* more in use at every memory reading */
    unsigned util;           /* GPU utilisation % */
    unsigned temp_c;         /* slowdown at 87 C, shutdown at 95 C */
    unsigned power_mw, power_limit_mw;
    unsigned sm_clock_mhz;         /* of 1980 */
    unsigned long long throttle;   /* reason bits */
    unsigned pcie_width;           /* of 16, gen 5 of 5 */
    unsigned long long ecc_errors; /* uncorrected, with ECC on */
    unsigned mig;                  /* MIG mode on */
    unsigned foreign_gib;          /* PID 1 (never lpx) holds this much */
} fake_state;

/* The first row is the healthy GPU; a fault row names only what differs from it (a field
 * left 0 reads as the healthy row's). */
static const fake_state states[] = {
    {.name = "healthy",
     .driver = "580.159.04",
     .cuda = 13000,
     .gpu = "NVIDIA H200",
     .cc_major = 9,
     .cc_minor = 0,
     .mem_used_gib = 1,
     .temp_c = 35,
     .power_mw = 90000,
     .power_limit_mw = 700000,
     .sm_clock_mhz = 1980,
     .pcie_width = 16},
    {.name = "nogpu", .no_gpu = 1},
    /* CUDA 11.4: older than any toolkit lpx builds with. */
    {.name = "old_driver", .driver = "470.256.02", .cuda = 11040},
    /* Kepler's 3.7: no lpx build carries kernels for it. */
    {.name = "cc_not_compiled", .gpu = "Tesla K80", .cc_major = 3, .cc_minor = 7},
    {.name = "pcie_x8", .pcie_width = 8},
    {.name = "thermal", .temp_c = 84, .sm_clock_mhz = 1200, .throttle = SW_THERMAL},
    {.name = "power_cap",
     .power_mw = 300000,
     .power_limit_mw = 300000,
     .sm_clock_mhz = 1200,
     .throttle = SW_POWER_CAP},
    {.name = "ecc_on", .ecc_errors = 2},
    {.name = "low_memory", .mem_used_gib = 140},
    {.name = "foreign_process", .mem_used_gib = 20, .foreign_gib = 19},
    {.name = "mig_on", .mig = 1},
    {.name = "saturated", .util = 99, .mem_used_gib = 138},
    {.name = "mem_growing", .mem_growth_mib = 512},
};
#define N_STATES (sizeof states / sizeof states[0])

/* Multi-GPU machines for doctor's topology (the GPUs' other readings are the healthy
 * row's): how many, the NUMA node of each (-1: nvmlDeviceGetNumaNodeId not supported),
 * NVML's common ancestor of each pair, and the NVLinks. */
#define FAKE_MAX_GPUS 8
enum { LINKS_NONE, LINKS_PAIRS, LINKS_SWITCH };
typedef struct fake_topo {
    const char *name;
    int n;
    int numa[FAKE_MAX_GPUS];
    int same_node_level, cross_node_level; /* pairs on one NUMA node, on two */
    int links; /* NONE: NVLink not supported; PAIRS: GPUs 2k and 2k+1 joined by 4 links;
                  SWITCH: 18 links each to NVSwitches */
} fake_topo;
static const fake_topo topos[] = {
    {.name = "healthy", .n = 1, .numa = {0}},
    /* 4 GPUs on two sockets: NVLink pairs 0-1 and 2-3 (the one on node 1 has no CPUs
     * here, so its CPU list is unreadable) */
    {.name = "nvlink_pairs", .n = 4, .numa = {0, 0, 1, 1}, 20, 50, LINKS_PAIRS},
    /* an HGX board: 8 GPUs, every pair through NVSwitches */
    {.name = "nvswitch8", .n = 8, .numa = {0, 0, 0, 0, 1, 1, 1, 1}, 40, 50, LINKS_SWITCH},
    /* 2 PCIe cards under one host bridge, an old driver without the NUMA query */
    {.name = "pcie2", .n = 2, .numa = {-1, -1}, 30, 30, LINKS_NONE},
};
static const fake_topo *topo(void) {
    const char *s = getenv("LPX_FAKE_NVML_STATE");
    for (size_t i = 1; i < sizeof topos / sizeof topos[0]; i++)
        if (s && !strcmp(topos[i].name, s)) return &topos[i];
    return &topos[0];
}

/* The row LPX_FAKE_NVML_STATE names (a topology's name is the healthy row); NULL for an
 * unknown name. */
static const fake_state *state(void) {
    const char *s = getenv("LPX_FAKE_NVML_STATE");
    if (topo() != &topos[0]) return &states[0];
    for (size_t i = 0; i < N_STATES; i++)
        if (!strcmp(states[i].name, s && s[0] ? s : "healthy")) return &states[i];
    return NULL;
}
/* A reading of the current state, the healthy row's where the state leaves it 0. */
#define V(field) (state()->field ? state()->field : states[0].field)

static struct nvml_device_st {
    int index;
} gpus[FAKE_MAX_GPUS] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};

static void copy(char *dst, unsigned int cap, const char *src) {
    if (!cap) return;
    strncpy(dst, src, cap - 1);
    dst[cap - 1] = '\0';
}

nvml_ret nvmlInit_v2(void) {
    return state() ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
nvml_ret nvmlShutdown(void) {
    return NVML_SUCCESS;
}
const char *nvmlErrorString(nvml_ret r) {
    return r == NVML_SUCCESS         ? "Success"
           : r == NVML_ERROR_UNKNOWN ? "fake NVML: unknown LPX_FAKE_NVML_STATE"
                                     : "fake NVML error";
}

nvml_ret nvmlDeviceGetCount_v2(unsigned int *n) {
    *n = state()->no_gpu ? 0 : (unsigned)topo()->n;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvml_device *d) {
    if (state()->no_gpu || i >= (unsigned)topo()->n) return NVML_ERROR_INVALID_ARGUMENT;
    *d = &gpus[i];
    return NVML_SUCCESS;
}
nvml_ret nvmlSystemGetDriverVersion(char *buf, unsigned int cap) {
    copy(buf, cap, V(driver));
    return NVML_SUCCESS;
}
nvml_ret nvmlSystemGetCudaDriverVersion(int *v) {
    *v = V(cuda);
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetName(nvml_device d, char *buf, unsigned int cap) {
    copy(buf, cap, V(gpu));
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetUUID(nvml_device d, char *buf, unsigned int cap) {
    copy(buf, cap, "GPU-fa4e0000-0000-0000-0000-000000000000");
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetCudaComputeCapability(nvml_device d, int *major, int *minor) {
    *major = V(cc_major);
    *minor = V(cc_minor);
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetMemoryInfo(nvml_device d, nvml_memory *m) {
    static unsigned long long readings;
    m->total = 141 * GIB;
    m->used = V(mem_used_gib) * GIB + readings++ * state()->mem_growth_mib * MIB;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetMemoryBusWidth(nvml_device d, unsigned int *v) {
    *v = 6144;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetUtilizationRates(nvml_device d, nvml_utilization *u) {
    u->gpu = V(util);
    u->memory = u->gpu / 2;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetTemperature(nvml_device d, int sensor, unsigned int *v) {
    *v = V(temp_c);
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetTemperatureThreshold(nvml_device d, int which, unsigned int *v) {
    *v = which == 1 ? 87 : 95; /* slowdown, shutdown */
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetPowerUsage(nvml_device d, unsigned int *mw) {
    *mw = V(power_mw);
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetEnforcedPowerLimit(nvml_device d, unsigned int *mw) {
    *mw = V(power_limit_mw);
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetPowerManagementDefaultLimit(nvml_device d, unsigned int *mw) {
    *mw = states[0].power_limit_mw;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetClockInfo(nvml_device d, int which, unsigned int *mhz) {
    *mhz = which == 1 ? V(sm_clock_mhz) : 2619;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetMaxClockInfo(nvml_device d, int which, unsigned int *mhz) {
    *mhz = which == 1 ? states[0].sm_clock_mhz : 2619;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetCurrentClocksEventReasons(nvml_device d, unsigned long long *bits) {
    *bits = V(throttle);
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetCurrPcieLinkGeneration(nvml_device d, unsigned int *v) {
    *v = 5;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetCurrPcieLinkWidth(nvml_device d, unsigned int *v) {
    *v = V(pcie_width);
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetMaxPcieLinkGeneration(nvml_device d, unsigned int *v) {
    *v = 5;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetMaxPcieLinkWidth(nvml_device d, unsigned int *v) {
    *v = states[0].pcie_width;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetPcieThroughput(nvml_device d, int which, unsigned int *kbps) {
    *kbps = 100;
    return NVML_SUCCESS;
}
/* ECC is on in every state; ecc_on adds uncorrected errors since the driver loaded. */
nvml_ret nvmlDeviceGetEccMode(nvml_device d, int *current, int *pending) {
    *current = *pending = 1;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetTotalEccErrors(nvml_device d, int type, int counter, unsigned long long *n) {
    *n = state()->ecc_errors;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetPersistenceMode(nvml_device d, int *on) {
    *on = 1;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetMigMode(nvml_device d, unsigned int *current, unsigned int *pending) {
    *current = *pending = state()->mig;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetComputeMode(nvml_device d, int *mode) {
    *mode = 0;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetRemappedRows(nvml_device d, unsigned int *corr, unsigned int *unc,
                                   unsigned int *pending, unsigned int *failed) {
    *corr = *unc = *pending = *failed = 0;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetComputeRunningProcesses_v3(nvml_device d, unsigned int *n,
                                                 nvml_process_info *info) {
    unsigned int want = state()->foreign_gib ? 1 : 0;
    if (*n < want) {
        *n = want;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *n = want;
    if (want)
        info[0] = (nvml_process_info){1, state()->foreign_gib * GIB, 0xFFFFFFFFu, 0xFFFFFFFFu};
    return NVML_SUCCESS;
}

/* ---- topology ---- */
static void bus_id(nvml_pci_info *p, unsigned bus) {
    memset(p, 0, sizeof *p);
    p->bus = bus;
    snprintf(p->bus_id, sizeof p->bus_id, "00000000:%02X:00.0", bus);
}
nvml_ret nvmlDeviceGetPciInfo_v3(nvml_device d, nvml_pci_info *p) {
    bus_id(p, 0x18 + 0x10 * (unsigned)d->index);
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetNumaNodeId(nvml_device d, unsigned int *node) {
    if (topo()->numa[d->index] < 0) return NVML_ERROR_NOT_SUPPORTED;
    *node = (unsigned)topo()->numa[d->index];
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetNvLinkState(nvml_device d, unsigned int link, int *active) {
    const int kind = topo()->links;
    if (kind == LINKS_NONE || link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_NOT_SUPPORTED;
    *active = kind == LINKS_SWITCH || link < 4;
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetNvLinkRemotePciInfo_v2(nvml_device d, unsigned int link, nvml_pci_info *p) {
    if (topo()->links == LINKS_PAIRS) return nvmlDeviceGetPciInfo_v3(&gpus[d->index ^ 1], p);
    bus_id(p, 0xa0 + link % 4); /* four NVSwitches */
    return NVML_SUCCESS;
}
nvml_ret nvmlDeviceGetTopologyCommonAncestor(nvml_device a, nvml_device b, int *level) {
    const fake_topo *t = topo();
    *level = a == b                                   ? 0
             : t->numa[a->index] == t->numa[b->index] ? t->same_node_level
                                                      : t->cross_node_level;
    return NVML_SUCCESS;
}

/* ---- libcuda ---- */
int cuInit(unsigned int flags) {
    return !state() ? 999 : state()->no_gpu ? 100 : 0; /* CUDA_ERROR_UNKNOWN, _NO_DEVICE */
}
int cuDriverGetVersion(int *v) {
    return state() ? nvmlSystemGetCudaDriverVersion(v) : 999;
}
int cuDeviceGetCount(int *n) {
    *n = state()->no_gpu ? 0 : topo()->n;
    return 0;
}
int cuGetErrorName(int r, const char **s) {
    *s = r == 100 ? "CUDA_ERROR_NO_DEVICE" : r == 0 ? "CUDA_SUCCESS" : "CUDA_ERROR_UNKNOWN";
    return 0;
}

/* GPU facts from the driver: NVML and the CUDA driver API, both loaded at run time
 * with dlopen, so lpx has no link-time dependency on the driver and can explain what
 * is missing on a machine without one. One source for doctor, monitor, the server's
 * /metrics and bench.
 *
 * Every reading may be unavailable (not supported by the GPU or the driver, no
 * permission, symbol missing in an old libnvidia-ml): such a field holds
 * LPX_TEL_NA and the reason is appended to the struct's `unread` text. */
#ifndef LPX_TELEMETRY_TELEMETRY_H
#define LPX_TELEMETRY_TELEMETRY_H

#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LPX_TEL_NA (-1)

/* nvmlComputeMode_t values. */
#define LPX_COMPUTE_DEFAULT 0
#define LPX_COMPUTE_PROHIBITED 2
#define LPX_COMPUTE_EXCLUSIVE_PROCESS 3

/* Clock event ("throttle") reason bits, as NVML reports them. */
#define LPX_THR_GPU_IDLE 0x1ULL
#define LPX_THR_APP_CLOCKS 0x2ULL
#define LPX_THR_SW_POWER_CAP 0x4ULL
#define LPX_THR_HW_SLOWDOWN 0x8ULL
#define LPX_THR_SYNC_BOOST 0x10ULL
#define LPX_THR_SW_THERMAL 0x20ULL
#define LPX_THR_HW_THERMAL 0x40ULL
#define LPX_THR_HW_POWER_BRAKE 0x80ULL
#define LPX_THR_DISPLAY_CLOCKS 0x100ULL

typedef struct lpx_telemetry lpx_telemetry;

/* What could be loaded and initialised. Texts are "" when there is nothing to say. */
typedef struct lpx_telemetry_state {
    char nvml_library[256];    /* the file loaded as NVML, as the dynamic loader found it;
                                  before that, the name asked for (libnvidia-ml.so.1 or
                                  $LPX_NVML_LIBRARY) */
    char cuda_library[256];    /* the same for libcuda.so.1 / $LPX_CUDA_LIBRARY */
    bool nvml_loaded;          /* NVML opened and its required symbols found */
    bool nvml_ready;           /* nvmlInit_v2 succeeded */
    char nvml_error[256];      /* why not: dlerror() text, missing symbol, nvmlInit error */
    int nvml_init_result;      /* nvmlReturn_t of nvmlInit_v2; LPX_TEL_NA when not called */
    bool cuda_loaded;          /* libcuda opened (only when asked for) */
    int cuda_init_result;      /* CUresult of cuInit(0); LPX_TEL_NA when not called */
    char cuda_error[256];      /* why libcuda failed to load or cuInit failed */
    char driver_version[80];   /* "580.159.04"; "" unknown */
    int driver_cuda_version;   /* newest CUDA the driver supports, 1000*major + 10*minor */
    int nvml_device_count;     /* GPUs NVML sees (all of the machine's, in a container those
                                  mapped in); 0 when NVML is not ready */
    int cuda_device_count;     /* GPUs CUDA sees (after CUDA_VISIBLE_DEVICES); LPX_TEL_NA
                                  when libcuda was not asked for or failed */
    char missing_symbols[256]; /* optional NVML symbols the library lacks */
} lpx_telemetry_state;

/* Per-GPU facts that do not change while a program runs. */
typedef struct lpx_gpu_facts {
    int index;
    char name[96]; /* "NVIDIA H200" */
    char uuid[96];
    int cc_major, cc_minor; /* compute capability */
    int64_t mem_total;      /* bytes */
    int mem_bus_width;      /* bits */
    int sm_clock_max_mhz, mem_clock_max_mhz;
    int pcie_gen_max, pcie_width_max; /* of the link as the system allows */
    int power_limit_mw;               /* enforced limit */
    int power_default_limit_mw;
    int temp_slowdown_c; /* the GPU slows itself down from here */
    int temp_shutdown_c;
    int ecc_current, ecc_pending; /* 0 off, 1 on */
    int64_t ecc_uncorrected;      /* volatile uncorrected errors since the driver loaded */
    int persistence;              /* 0 off, 1 on */
    int mig_current, mig_pending; /* 0 off, 1 on */
    int compute_mode;             /* LPX_COMPUTE_* */
    int rows_remap_pending;       /* 1: memory rows wait for a GPU reset to be remapped */
    int rows_remap_failed;        /* 1: a row could not be remapped (the GPU needs service) */
    char unread[512];             /* readings NVML did not give, with its reason */
} lpx_gpu_facts;

/* One sample of the changing readings. */
typedef struct lpx_gpu_sample {
    double t;                              /* seconds, CLOCK_MONOTONIC */
    int util_gpu, util_mem;                /* percent over the driver's last sample period */
    int64_t mem_total, mem_used, mem_free; /* bytes */
    int temp_c;
    int power_mw;
    int sm_clock_mhz, mem_clock_mhz;
    int pcie_gen, pcie_width;           /* current link */
    int64_t pcie_tx_kbps, pcie_rx_kbps; /* KB/s */
    int64_t throttle;                   /* LPX_THR_* bits; LPX_TEL_NA when unknown */
    char unread[512];
} lpx_gpu_sample;

typedef struct lpx_gpu_process {
    uint32_t pid;
    int64_t mem_used; /* bytes; LPX_TEL_NA when the driver does not say */
    char name[64];    /* from /proc/PID/comm; "?" when not visible (other PID namespace) */
} lpx_gpu_process;

/* Flags for lpx_telemetry_open. */
#define LPX_TEL_WITH_CUDA 1u /* also load libcuda.so.1 and call cuInit (doctor) */

/* Never fails for a missing driver: the state says what is missing. Fails only when
 * memory runs out. */
lpx_status lpx_telemetry_open(unsigned flags, lpx_telemetry **out);
void lpx_telemetry_close(lpx_telemetry *t);
const lpx_telemetry_state *lpx_telemetry_get_state(const lpx_telemetry *t);

lpx_status lpx_telemetry_facts(lpx_telemetry *t, int index, lpx_gpu_facts *out);
/* LPX_ERR_DEVICE when the GPU stopped answering (fell off the bus). */
lpx_status lpx_telemetry_sample(lpx_telemetry *t, int index, lpx_gpu_sample *out);
/* Compute processes on the GPU: writes up to cap, *n_out the full count. */
lpx_status lpx_telemetry_processes(lpx_telemetry *t, int index, lpx_gpu_process *procs, size_t cap,
                                   size_t *n_out);

/* What the topology of several GPUs is made from (doctor/topology.h). */
#define LPX_NVLINK_MAX 18
typedef struct lpx_gpu_links {
    char bus_id[32];                 /* this GPU's PCI bus id as NVML writes it
                                        ("00000000:17:00.0"); "" when not read */
    int numa_node;                   /* nvmlDeviceGetNumaNodeId; LPX_TEL_NA: not said (older
                                        drivers: doctor reads sysfs instead) */
    int n_links;                     /* active NVLinks; LPX_TEL_NA: no NVLink readable */
    char remote[LPX_NVLINK_MAX][32]; /* the far end's PCI bus id of each active link: a
                                        GPU's, or an NVSwitch's */
} lpx_gpu_links;
lpx_status lpx_telemetry_links(lpx_telemetry *t, int index, lpx_gpu_links *out);
/* NVML's nearest common ancestor of GPUs i and j (nvmlGpuTopologyLevel_t: 0 one board,
 * 10 one PCIe switch, 20 several, 30 a host bridge, 40 one NUMA node, 50 across the CPUs'
 * interconnect); LPX_TEL_NA when not readable. */
int lpx_telemetry_common_ancestor(lpx_telemetry *t, int i, int j);

/* "thermal, power cap" style text of throttle bits (idle and sync boost omitted). */
void lpx_throttle_text(int64_t bits, char *buf, size_t cap);

#endif

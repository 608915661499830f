/* lpx doctor's GPU topology (nvidia-smi topo -m through NVML) and NUMA placement: pure
 * functions of written-down readings, so every verdict is unit-tested on made-up
 * machines (tests/unit/test_doctor_topology.c); doctor.c gathers the readings
 * (telemetry.h's lpx_telemetry_links and lpx_telemetry_common_ancestor, sysfs). */
#ifndef LPX_DOCTOR_TOPOLOGY_H
#define LPX_DOCTOR_TOPOLOGY_H

#include "doctor/checks.h"
#include "telemetry/telemetry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LPX_TOPO_MAX_GPUS 16 /* GPUs in the matrix; more are left out of it (and said) */
#define LPX_CPU_MASK_BITS 4096

typedef struct lpx_cpu_mask {
    uint64_t w[LPX_CPU_MASK_BITS / 64];
} lpx_cpu_mask;

/* A Linux CPU list ("0-27,56-83", sysfs cpulist and taskset -c) into m; false for
 * anything else (an empty list included, CPUs past LPX_CPU_MASK_BITS). */
bool lpx_cpulist_parse(const char *text, lpx_cpu_mask *m);
/* m as a CPU list; "none" when empty. */
void lpx_cpulist_format(const lpx_cpu_mask *m, char *buf, size_t cap);

typedef struct lpx_topology {
    int n;                                               /* GPUs in it */
    int n_all;                                           /* GPUs the driver sees (n may be fewer) */
    int numa[LPX_TOPO_MAX_GPUS];                         /* NUMA node; LPX_TEL_NA: not known */
    int level[LPX_TOPO_MAX_GPUS][LPX_TOPO_MAX_GPUS];     /* common ancestor (telemetry.h) */
    int nvlinks[LPX_TOPO_MAX_GPUS][LPX_TOPO_MAX_GPUS];   /* active NVLinks joining i and j */
    bool nvswitch[LPX_TOPO_MAX_GPUS][LPX_TOPO_MAX_GPUS]; /* those links go through a switch */
} lpx_topology;

/* The NVLinks between each pair from each GPU's links (g[n]): a link whose far end is
 * GPU j's bus id joins i and j directly; a link to anything else is an NVSwitch's, and
 * two GPUs that both have switch links are joined by the fewer of the two counts (an
 * HGX board: every pair NV18). Fills t->nvlinks and t->nvswitch. */
void lpx_topo_count_nvlinks(const lpx_gpu_links *g, int n, lpx_topology *t);
/* The matrix entry of nvidia-smi topo -m for i and j: X (itself), NV# (# NVLinks),
 * PIX (at most one PCIe switch, or one board), PXB (several switches), PHB (a host
 * bridge), NODE (host bridges of one NUMA node), SYS (across the CPUs' interconnect),
 * ? (not known). */
const char *lpx_topo_link_name(const lpx_topology *t, int i, int j, char *buf, size_t cap);
/* The matrix with a NUMA column and the legend, one line each, as lpx doctor prints it. */
void lpx_topo_matrix_text(const lpx_topology *t, char *buf, size_t cap);
/* gpu.topology: SKIP without a GPU, else OK with each pair's link (data parallel moves
 * nothing between GPUs, so no link is a fault; the text says which pairs cross the
 * CPUs' interconnect). */
void lpx_eval_topology(const lpx_topology *t, lpx_check *out);
/* gpuN.numa: where GPU gpu's NUMA node lies against the CPUs this process may run on.
 * WARN when affinity has no CPU of the node: host-GPU copies and the engine's thread
 * cross the sockets (fix: numactl/taskset, the container's cpuset); else OK, saying so
 * when the node is not known (LPX_TEL_NA: a one-node machine) or node_cpus is NULL (its
 * CPU list unreadable), as the PCIe check does for a link the driver does not report
 * (SKIP is kept for machines without a GPU). */
void lpx_eval_numa(int gpu, int node, const lpx_cpu_mask *node_cpus, const lpx_cpu_mask *affinity,
                   lpx_check *out);

#endif

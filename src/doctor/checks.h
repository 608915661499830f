/* Doctor's checks: readings in, a verdict out. Every evaluator here is a pure function
 * of hand-fillable structs (host facts, telemetry state, GPU facts and sample, build
 * facts), so each diagnosis is unit-tested on written-down readings, no GPU needed.
 * Gathering the readings is doctor.c's job. */
#ifndef LPX_DOCTOR_CHECKS_H
#define LPX_DOCTOR_CHECKS_H

#include "base/error.h"
#include "telemetry/telemetry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum lpx_check_level {
    LPX_CHECK_OK = 0,
    LPX_CHECK_WARN = 1,
    LPX_CHECK_FAIL = 2,
    LPX_CHECK_SKIP = 3, /* not applicable here (no GPU: the GPU checks); counts as no fault */
} lpx_check_level;

typedef struct lpx_check {
    char id[32]; /* "driver.module", "gpu0.pcie" */
    lpx_check_level level;
    char found[768]; /* what was seen */
    char fix[512];   /* what to do; "" when nothing */
} lpx_check;

typedef struct lpx_checks {
    lpx_check *v;
    size_t n, cap;
    bool oom; /* a check was lost for want of memory */
} lpx_checks;

/* Appends a check (found formatted from fmt). Returns false when memory runs out. */
bool lpx_checks_add(lpx_checks *c, const char *id, lpx_check_level level, const char *fix,
                    const char *fmt, ...) LPX_PRINTF(5, 6);
void lpx_checks_free(lpx_checks *c);
/* The worst of OK, WARN and FAIL among the checks (SKIP is no fault). */
lpx_check_level lpx_checks_worst(const lpx_checks *c);
/* The process exit status for a result: 0 all OK, 1 a FAIL, 3 WARN but no FAIL; with
 * no_gpu (lpx_checks_no_gpu) and no FAIL or WARN, 4: no GPU here, the CPU backend is
 * fine (what a CPU-only CI job expects). */
int lpx_check_exit_status(lpx_check_level worst, bool no_gpu);
const char *lpx_check_level_name(lpx_check_level l);

/* How lpx was built. */
typedef struct lpx_build_facts {
    bool have_cuda;
    const char *cuda_archs; /* CMAKE_CUDA_ARCHITECTURES: "90", "80;89;90-real", "native" */
    int cuda_version;       /* toolkit lpx was built with, 1000*major + 10*minor; 0 none */
} lpx_build_facts;
lpx_build_facts lpx_build_facts_get(void);

/* The machine outside the GPU. */
typedef struct lpx_host_facts {
    bool modules_readable; /* /proc/modules could be read */
    bool nvidia_module, nvidia_uvm_module, nouveau_module;
    bool dev_nvidiactl, dev_nvidia_uvm;
    int dev_nvidia_n; /* /dev/nvidia0, /dev/nvidia1, ... */
    bool in_container;
    char container_hint[96]; /* "/.dockerenv", "cgroup: kubepods", ... */
    bool nvidia_visible_set, cuda_visible_set, nvidia_caps_set;
    char nvidia_visible[128];         /* NVIDIA_VISIBLE_DEVICES */
    char cuda_visible[128];           /* CUDA_VISIBLE_DEVICES */
    char nvidia_caps[128];            /* NVIDIA_DRIVER_CAPABILITIES */
    int cpu_cores;                    /* usable by this process */
    int64_t ram_total, ram_available; /* bytes */
    char cpu_features[64];            /* "avx2 fma avx512f" */
} lpx_host_facts;

/* Driver, libraries, CUDA version, GPU count, container, CPU fallback. */
void lpx_eval_host(const lpx_host_facts *h, const lpx_telemetry_state *st, const lpx_build_facts *b,
                   lpx_checks *out);

/* Whether this is simply a machine without an NVIDIA GPU: no GPU device nodes, no nvidia
 * kernel module seen, no NVML or libcuda library that loads. Then the driver and GPU checks that
 * only say so (build.cuda without CUDA, driver.*, gpu.count, the container's no-GPU
 * verdict) become SKIP: one cause, one verdict ("no GPU: CPU backend"), not five FAILs.
 * A machine that has some of it (a node but no library, a driver that reports 0 GPUs)
 * keeps its FAILs: that is a broken setup, not an absent GPU. */
bool lpx_checks_no_gpu(const lpx_host_facts *h, const lpx_telemetry_state *st, lpx_checks *out);

/* Memory a model needs on the GPU; need < 0: no model given. */
typedef struct lpx_model_need {
    int64_t total; /* bytes, with the weights as stored */
    int64_t weights, kv, reserve;
    int64_t weights_bf16; /* the CUDA backend's bf16 copy (lpx_plan_model); 0: unknown */
    int64_t max_model_len, max_num_seqs;
} lpx_model_need;

/* One evaluator per GPU check; each fills *out. */
void lpx_eval_arch(const lpx_gpu_facts *f, const lpx_build_facts *b, lpx_check *out);
/* model.ram, without a GPU: whether the model fits in RAM for the CPU backend: the weights
 * as stored (that backend keeps the file's blocks) and its fp32 KV cache, twice need->kv
 * (bf16). */
void lpx_eval_ram(const lpx_host_facts *h, const lpx_model_need *need, lpx_check *out);
void lpx_eval_memory(const lpx_gpu_facts *f, const lpx_gpu_sample *s, const lpx_model_need *need,
                     lpx_check *out);
void lpx_eval_ecc(const lpx_gpu_facts *f, lpx_check *out);
void lpx_eval_pcie(const lpx_gpu_facts *f, const lpx_gpu_sample *s, lpx_check *out);
void lpx_eval_clocks(const lpx_gpu_facts *f, const lpx_gpu_sample *s, lpx_check *out);
void lpx_eval_temperature(const lpx_gpu_facts *f, const lpx_gpu_sample *s, lpx_check *out);
void lpx_eval_power(const lpx_gpu_facts *f, const lpx_gpu_sample *s, lpx_check *out);
void lpx_eval_persistence(const lpx_gpu_facts *f, lpx_check *out);
void lpx_eval_mig(const lpx_gpu_facts *f, lpx_check *out);
/* procs_error: why the process list is unknown, or NULL. own_pid is not "other". */
void lpx_eval_processes(const lpx_gpu_facts *f, const lpx_gpu_process *procs, size_t n,
                        const char *procs_error, uint32_t own_pid, lpx_check *out);

/* All of the above for one GPU, appended to out. */
void lpx_eval_gpu(const lpx_gpu_facts *f, const lpx_gpu_sample *s, const lpx_gpu_process *procs,
                  size_t n_procs, const char *procs_error, uint32_t own_pid,
                  const lpx_build_facts *b, const lpx_model_need *need, lpx_checks *out);

#endif

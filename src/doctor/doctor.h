/* lpx doctor: gathers the readings (host, driver, every GPU), runs the checks of
 * checks.h over them and prints the verdicts as text or JSON. */
#ifndef LPX_DOCTOR_DOCTOR_H
#define LPX_DOCTOR_DOCTOR_H

#include "doctor/checks.h"
#include "doctor/plan.h"
#include "doctor/topology.h"

#include <stdio.h>

#define LPX_DOCTOR_MAX_PROCS 64

typedef struct lpx_doctor_report {
    lpx_build_facts build;
    lpx_host_facts host;
    lpx_telemetry_state state;
    int n_gpus;
    lpx_gpu_facts *facts;    /* [n_gpus] */
    lpx_gpu_sample *samples; /* [n_gpus] */
    lpx_gpu_process *procs;  /* [n_gpus][LPX_DOCTOR_MAX_PROCS] */
    size_t *n_procs;         /* [n_gpus], each at most LPX_DOCTOR_MAX_PROCS */
    bool has_need;
    lpx_model_need need;
    lpx_checks checks;
    bool no_gpu;        /* lpx_checks_no_gpu: the GPU checks are SKIP, the verdict "no GPU" */
    lpx_topology topo;  /* links between the GPUs and the NUMA node of each */
    char affinity[256]; /* the CPUs this process may run on, as a CPU list */
} lpx_doctor_report;

/* Reads /proc, /dev, the environment and the CPU. */
void lpx_host_facts_read(lpx_host_facts *h);

/* What a model asks of GPU memory: weights + KV of max_num_seqs sequences of
 * max_model_len tokens + a reserve for context, workspaces and activations. */
lpx_status lpx_model_need_compute(const lpx_plan_model *m, int64_t max_model_len,
                                  int64_t max_num_seqs, int64_t reserve, lpx_model_need *out);

/* build: the lpx build to judge the machine for; NULL for this one (lpx_build_facts_get).
 * need may be NULL (no model given). */
lpx_status lpx_doctor_run(const lpx_build_facts *build, const lpx_model_need *need,
                          lpx_doctor_report *r);
void lpx_doctor_report_free(lpx_doctor_report *r);

/* The exit status of lpx doctor for it (lpx_check_exit_status). */
int lpx_doctor_exit_status(const lpx_doctor_report *r);
void lpx_doctor_print(FILE *f, const lpx_doctor_report *r);
/* The report as a JSON document (malloc'd; free with lpx_free), NULL when out of memory. */
char *lpx_doctor_json(const lpx_doctor_report *r);

#endif

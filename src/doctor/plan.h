/* lpx plan: the bandwidth floor and the memory plan of a model on a GPU.
 *
 * Decode is memory-bound (PERF.md): one step reads every weight once plus the KV cache
 * of every sequence, so
 *     bytes_per_step = decode_bytes_per_step + B * T * kv_bytes_per_token
 *     floor_ms       = bytes_per_step / bandwidth
 * and sequences of max_model_len tokens fit while
 *     weights + reserve + n * max_model_len * kv_bytes_per_token <= mem * utilisation.
 * kv_bytes_per_token is that of the KV dtype planned for (bf16 by default; fp8 about
 * half); the plan also gives the memory side for each dtype (lpx_plan.kv). Without a GPU
 * the plan is the CPU backend's on this host (lpx_plan_host): RAM, the measured read
 * bandwidth, an f32 KV cache (twice bf16) unless fp8 is asked for. */
#ifndef LPX_DOCTOR_PLAN_H
#define LPX_DOCTOR_PLAN_H

#include "lpx.h"

#include <stdbool.h>
#include <stdint.h>

/* What plan needs of a model (lpx_model_info has all of it). */
typedef struct lpx_plan_model {
    int64_t weight_bytes;          /* as the file stores them (the CPU backend's) */
    int64_t decode_bytes_per_step; /* read per decode step at batch 1, as stored */
    /* the CUDA backend's copy where it fits: matrices in bf16 (2 bytes a value), norms
     * and biases in f32; it keeps the file's blocks only when that copy does not fit
     * (docs/backend.md); 0: unknown */
    int64_t weight_bytes_bf16, decode_bytes_bf16;
    int64_t kv_bytes_per_token;     /* K and V of every layer, bf16 */
    int64_t kv_bytes_per_token_fp8; /* the same in fp8 with its scales; 0: unknown */
    int64_t max_position_embeddings;
} lpx_plan_model;

/* A GPU of the built-in table. */
typedef struct lpx_gpu_spec {
    const char *key;   /* --gpu name: "h200" */
    const char *name;  /* "NVIDIA H200 SXM 141GB" */
    const char *match; /* substring of the NVML name that picks this row */
    int64_t mem_bytes; /* as NVML reports it (MiB granularity) */
    double bandwidth;  /* bytes/s: datasheet peak */
    double measured;   /* bytes/s read-only bandwidth measured by lpx; 0: none */
} lpx_gpu_spec;

/* The CUDA backend's bf16 copy of m's weights (info: lpx_model_info_get's): bytes held
 * (matrices 2 a value, vectors f32) and read per decode step; 0 when unknown. */
void lpx_plan_bf16_bytes(const lpx_model *m, const lpx_model_info *info, int64_t *held,
                         int64_t *read);

/* Opens a model (lpx_model_open) and takes its sizes; info may be NULL. */
lpx_status lpx_plan_model_load(const char *path, lpx_plan_model *out, lpx_model_info *info);

const lpx_gpu_spec *lpx_gpu_specs(int *n);
/* The row for a --gpu key (case-insensitive), or NULL. */
const lpx_gpu_spec *lpx_gpu_spec_find(const char *key);
/* The row whose match string is in an NVML name (auto), or NULL when not in the table. */
const lpx_gpu_spec *lpx_gpu_spec_match(const char *nvml_name);

/* The GPU a plan is made for. */
typedef struct lpx_plan_gpu {
    char name[128];
    int64_t mem_bytes;
    double bandwidth;           /* bytes/s used for the floor */
    char bandwidth_source[160]; /* where that figure comes from */
    bool host;                  /* the CPU backend on this host: KV f32 (its auto) or fp8 */
} lpx_plan_gpu;

/* The plan's device without a GPU: this host for the CPU backend, its available RAM and
 * its read bandwidth measured now (lpx_host_read_bandwidth). Its plan has no CUDA
 * reserve (lpx_plan_params.reserve_bytes 0). */
void lpx_plan_host(lpx_plan_gpu *g);

#define LPX_PLAN_MAX_BATCHES 16

typedef struct lpx_plan_params {
    int64_t max_model_len;  /* tokens a sequence may reach */
    int64_t context;        /* average context per sequence for the floor table */
    double mem_utilization; /* share of GPU memory lpx may take (vLLM's default 0.9) */
    int64_t reserve_bytes;  /* CUDA context, workspaces, activations (an estimate) */
    int64_t batches[LPX_PLAN_MAX_BATCHES];
    int n_batches;
    lpx_kv_dtype kv_dtype; /* the KV cache planned for: bf16 (auto) or fp8 */
} lpx_plan_params;

/* The memory side of the plan at one KV dtype. */
typedef struct lpx_plan_kv {
    lpx_kv_dtype dtype;      /* LPX_KV_BF16 or LPX_KV_FP8 */
    int64_t bytes_per_token; /* 0: not known for this model */
    int64_t bytes_per_seq;   /* at max_model_len */
    int64_t max_seqs;        /* sequences of max_model_len that fit in the KV budget */
    int64_t max_tokens;      /* KV tokens that fit */
} lpx_plan_kv;

typedef struct lpx_plan_row {
    int64_t batch;
    int64_t bytes_per_step;
    double ms_per_step; /* floor */
    double tok_s;       /* all sequences together: batch / step time */
    bool fits;          /* batch sequences of `context` tokens fit in memory */
} lpx_plan_row;

typedef struct lpx_plan {
    /* the weights the backend holds and reads a step: a GPU's bf16 copy where weights,
     * reserve and one full-length sequence fit in it, else the file's bytes */
    bool weights_bf16;
    int64_t weight_bytes, decode_bytes_per_step;
    lpx_kv_dtype kv_dtype;      /* the dtype of the figures below (params' auto: bf16) */
    int64_t kv_bytes_per_token; /* at that dtype */
    double floor_ms;            /* batch 1, empty context: weights alone */
    double floor_tok_s;
    int64_t usable_bytes;     /* mem_bytes * mem_utilization */
    int64_t kv_bytes_per_seq; /* at max_model_len */
    int64_t kv_budget;        /* usable - weights - reserve (may be negative) */
    int64_t max_seqs;         /* sequences of max_model_len that fit; 0: none */
    int64_t max_tokens;       /* KV tokens that fit in all */
    bool fits;                /* weights + reserve + one full sequence */
    lpx_plan_row rows[LPX_PLAN_MAX_BATCHES];
    int n_rows;
    lpx_plan_kv kv[2]; /* bf16 (host: f32), fp8: bytes per token and what fits in the same
                          budget */
} lpx_plan;

void lpx_plan_params_default(lpx_plan_params *p);
lpx_status lpx_plan_compute(const lpx_plan_model *m, const lpx_plan_gpu *g,
                            const lpx_plan_params *p, lpx_plan *out);
/* "1,16,64" -> batches; LPX_ERR_INVALID_ARG for anything else. */
lpx_status lpx_plan_parse_batches(const char *s, lpx_plan_params *p);

#endif

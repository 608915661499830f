/* The CUDA backend's tuning, one struct per instance: resolved at create from the
 * model's shape, the device's facts (what the kernels compiled to and what the GPU
 * holds) and the developer strings (lpx_backend_opts.tune / .trace, docs/dev.md).
 * Plain C (tuning.c), so that CI tests the resolution without a GPU
 * (tests/unit/test_cuda_tuning.c); the launchers take the resolved struct. */
#ifndef LPX_BACKEND_CUDA_TUNING_H
#define LPX_BACKEND_CUDA_TUNING_H

#include <stdbool.h>

#include "lpx.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The batch-1 decode kernels of a layer, as sets (letters o, f, g, d in the tune
 * string): o projection, the fused q/k/v + attention kernel, gate/up, down. */
enum { TK_O = 1, TK_F = 2, TK_G = 4, TK_D = 8 };

/* Ops a step may leave out (tune key skip; wrong output, for timing differences
 * only). rope: prefill steps only; decode attention does its own. */
enum {
    SK_EMBED = 1,
    SK_QKV = 2,
    SK_ROPE = 4,
    SK_ATTN = 8,
    SK_O = 16,
    SK_GU = 32,
    SK_DOWN = 64,
    SK_HEAD = 128,
    SK_SAMPLE = 256
};

/* Measured defaults (docs/lab/notebook.md rows; docs/dev.md lists them with their keys). */
/* Kernels that let their successor launch at their start: o (gate/up's weights
 * stream during the attention) and down (the next layer's fused kernel does its
 * setup under down); rows 26, 32, 43. */
#define CT_EARLY_DEFAULT (TK_O | TK_D)
/* Kernels that let it launch only once their own weights are used: none; rows 27, 43. */
#define CT_LATE_DEFAULT 0
/* Weight pieces of a batch-1 gate/up block in flight at once (MM_PACE); row 33. */
#define CT_PACE_DEFAULT 2
/* Batch-1 projections that run one block an SM (MM_SOLO): gate/up; row 34. */
#define CT_SOLO_DEFAULT TK_G
/* Keys of context up to which a batch-1 decode step runs the fused q/k/v +
 * attention kernel; past them the two-kernel path, whose attention splits over
 * every SM (the fused kernel's attention runs on its n_kv clusters only): fused
 * 1,378 / 864 / 577 tok/s at depth 1,024 / 4,096 / 8,192, two-kernel 902 / 829 /
 * 724 (docs/lab/notebook.md row 52). */
#define CT_QA_CTX_DEFAULT 4096
/* Keys of a decode attention work item at least: one 32-key tile (AP_MIN_KEYS), so
 * that short contexts at batch 2-32 split too (256 cost 16 sequences at depth 128
 * 9%: row 53). */
#define CT_ATTN_KEYS_DEFAULT 32
/* Largest pace the launch flags can carry (MM_PACE's four bits). */
#define CT_PACE_MAX 15

/* The model's shape, as far as the tuning depends on it. */
typedef struct cuda_shape {
    int n_heads, n_kv, head_dim;
    int d_model, d_ff;
} cuda_shape;

/* What the device and the compiled kernels are (cuda_backend.cu gathers them). */
typedef struct cuda_facts {
    int n_sms;
    int regs_per_sm;   /* cudaDeviceProp.regsPerMultiprocessor */
    int qa_cluster;    /* blocks per KV head of the fused kernel's plan, 0: no plan */
    int qa_regs;       /* registers a thread of the fused kernel variant of this shape */
    int qa_threads;    /* threads a block of it */
    int mv_regs;       /* registers a thread of matvec_tma_kernel<1> */
    int mv_small_regs; /* registers a thread of matvec_tma_small_kernel */
    int mv_threads;    /* threads a block of either */
    int mv_solo_smem;  /* dynamic shared memory that leaves one matvec_tma_kernel<1>
                          block an SM (occupancy calculator), 0: none */
} cuda_facts;

/* The tune string, parsed: each key's value, or "not given". */
typedef struct cuda_tune_overrides {
    int qa;                /* -1 default, 0 off, 1 on where the plan fits */
    int mv_small;          /* -1 auto, 0/1 forced */
    int early, late, solo; /* -1 default, else a TK_* set */
    int pace;              /* -1 default */
    int graphs, pdl;       /* -1 default (on), 0/1 */
    int qa_ctx;            /* -1 default */
    int attn_keys;         /* -1 default */
    int attn_waves;        /* -1 default */
    int wq;                /* -1 default (bf16 where it fits), 0 bf16, 1 kept quantized */
    unsigned skip;         /* SK_* set */
} cuda_tune_overrides;

/* One backend instance's tuning. */
typedef struct cuda_tuning {
    bool qa;          /* batch-1 decode: the fused q/k/v + attention kernel may run */
    bool mv_small;    /* batch-1 projections on matvec_tma_small_kernel */
    unsigned early;   /* TK_* launching their successor at their start */
    unsigned late;    /* TK_* launching it once their weights are used (never in early) */
    unsigned solo;    /* TK_* of the projections one block an SM (MM_SOLO) */
    int pace;         /* MM_PACE depth of the batch-1 gate/up, 0: all pieces at once */
    int mv_solo_smem; /* MM_SOLO's dynamic shared memory (cuda_facts) */
    bool graphs;      /* decode steps replay CUDA graphs */
    bool pdl;         /* programmatic dependent launch on every kernel */
    int qa_ctx;       /* the fused kernel runs for batch-1 steps of at most this many keys */
    int attn_keys;    /* keys of a decode attention work item at least */
    int attn_waves;   /* waves a step of more (token, KV head) pairs than slots is cut into */
    unsigned skip;    /* SK_* left out of every step */
} cuda_tuning;

/* The trace string, parsed. */
typedef struct cuda_trace_opts {
    bool timing;        /* GPU time of each batch-1 decode graph, printed at destroy */
    bool attn;          /* block 0's phase marks of the decode attention kernels */
    bool mv;            /* block 0's phases of the batch-1 projections */
    int blk_layer;      /* every block's marks of this layer's batch-1 kernels, -1: off */
    char blk_file[256]; /* where blk's CSV goes, "" = stderr */
} cuda_trace_opts;

/* Parses a tune string (NULL or "" = no overrides). Unknown keys and bad values are
 * LPX_ERR_INVALID_ARG naming them. */
lpx_status lpx_cuda_tune_parse(const char *s, cuda_tune_overrides *o);

/* Parses a trace string (NULL or "" = nothing traced), the same way. */
lpx_status lpx_cuda_trace_parse(const char *s, cuda_trace_opts *t);

/* Whether the fused q/k/v + attention kernel has a variant for this shape (head_dim
 * 64 or 128, a query group of at most 8, x of at most max_cols values, a multiple
 * of 8); its plan on the device decides the rest. */
bool lpx_cuda_qa_shape_fits(const cuda_shape *sh, int max_cols);

/* The tuning of one instance: the defaults above, the per-shape and per-device
 * choices, then the overrides. Pure: nothing but *t is written. */
void lpx_cuda_tuning_resolve(const cuda_shape *sh, const cuda_facts *f,
                             const cuda_tune_overrides *o, cuda_tuning *t);

#ifdef __cplusplus
}
#endif

#endif

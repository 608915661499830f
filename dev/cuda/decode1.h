/* The batch-1 decode step as one persistent kernel (decode1.cu, a workshop
 * experiment that left the product): its interface, as the CUDA backend of 3a42aba
 * called it. */
#ifndef LPX_DEV_CUDA_DECODE1_H
#define LPX_DEV_CUDA_DECODE1_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "base/error.h"
}

#define D1_MAX_SPLITS 16
#define D1_MAX_GROUP 8 /* query heads per KV head */

typedef struct d1_layer {
    const float *attn_norm, *ffn_norm; /* (d) */
    const float *bqkv;                 /* (qkv_rows) or NULL */
    const float *q_norm, *k_norm;      /* (hd) or NULL */
    const __nv_bfloat16 *wqkv, *wo, *wgu, *wdown; /* as cuda_layer in cuda_backend.cu */
} d1_layer;

/* Paged KV cache geometry (the layout of attention.cuh):
 * kv[block][layer][k|v][kv_head][slot][head_dim], bf16. */
typedef struct d1_kv {
    int n_heads, n_kv, head_dim, block_size;
    int64_t block_stride; /* elements per block */
} d1_kv;

typedef struct d1_params {
    const d1_layer *layers;        /* (n_layers), device */
    const __nv_bfloat16 *tok_embd; /* (vocab, d) */
    const __nv_bfloat16 *lm_head;  /* (vocab, d) */
    const float *out_norm;         /* (d) */
    const float *inv_freq;         /* (hd/2) */
    __nv_bfloat16 *kv;             /* paged cache */
    const int32_t *token, *pos, *slot; /* step inputs, one each */
    const int32_t *block_table;        /* (max_blocks) of the one sequence */
    float *x;               /* (d) residual stream */
    float *qkv;             /* (qkv_rows) */
    __nv_bfloat16 *attn;    /* (n_heads*hd) */
    __nv_bfloat16 *act;     /* (d_ff) */
    float *logits;          /* (vocab) */
    float *part_o;          /* (n_kv, max_splits, G, hd) */
    float *part_ml;         /* (n_kv, max_splits, G, 2) */
    int *done;              /* (n_kv) split counters, left at 0 */
    unsigned *bar;          /* grid barrier counter, starts at 0 */
    unsigned long long *trace; /* (2 + 10*n_layers) barrier times of block 0, or NULL */
    d1_kv g;
    int n_layers, d, qd, qkv_rows, d_ff, vocab;
    int max_splits, window, interleaved;
    float eps, scale;
} d1_params;

/* Sets the kernel's shared memory limit for head_dim hd and input vectors of up to
 * widest elements; *blocks_per_sm = how many blocks fit on one SM (0: unusable). */
lpx_status decode1_init(int hd, int widest, int *blocks_per_sm);

/* One cooperative launch of n_blocks blocks (all resident) on st. */
lpx_status decode1(const d1_params *p, int hd, int widest, int n_blocks, cudaStream_t st);

#endif

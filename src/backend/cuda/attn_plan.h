/* How a decode step's attention is cut into work items for the persistent grid of
 * attn_decode_kernel (attention.cuh): each item is one split of one (token, KV
 * head)'s keys. Plain C (attn_plan.c), so that CI tests the plan without a GPU
 * (tests/unit/test_cuda_attn_plan.c); the host builds a plan per decode step from
 * its positions and the kernel's blocks walk it. */
#ifndef LPX_BACKEND_CUDA_ATTN_PLAN_H
#define LPX_BACKEND_CUDA_ATTN_PLAN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One item: keys [k0, k1) of token t's KV head kvh, split `split` of n_split. Its
 * partial result goes to row `self` of the partial buffers; the n_split items of
 * one (t, kvh) are rows first .. first+n_split-1. 8 int32s, so the kernel reads an
 * item as two int4s. */
typedef struct lpx_attn_item {
    int32_t t, kvh, split, n_split;
    int32_t k0, k1, first, self;
} lpx_attn_item;

/* Keys of one item at least (one tile of the kernel: a smaller item leaves
 * warps idle), and splits of one (token, KV head) at most (the combine's loop). */
#define AP_MIN_KEYS 32
#define AP_MAX_SPLITS 128
/* Waves of the grid a step of more (token, KV head) pairs than grid slots is cut
 * into: equal items tail at most 1/AP_WAVES of the step. */
#define AP_WAVES 4
#define AP_MAX_WAVES 64 /* the most a tune string may ask for */

typedef struct lpx_attn_plan_in {
    int n_tokens;       /* tokens of the step, padding included */
    const int32_t *pos; /* (n_tokens) the token's position: it attends to keys 0..pos */
    const int32_t *seq; /* (n_tokens) its sequence, -1 = padding (no keys) */
    int n_kv;           /* KV heads */
    int window;         /* sliding window in keys, 0 = none */
    int slots;          /* blocks of the grid resident at once (SMs x blocks an SM) */
    int min_keys;       /* keys of an item at least (AP_MIN_KEYS unless tuned) */
    int waves;          /* waves of several-wave steps (AP_WAVES unless tuned) */
} lpx_attn_plan_in;

/* Items the plan of a step of n_tokens may need at most, for the capacity of the
 * item and partial buffers. */
int lpx_cuda_attn_plan_cap(int n_tokens, int n_kv, int slots);

/* The step's items into items (cap of them), largest first. Every (token, KV head)
 * gets its keys split into n_split nearly equal items: with no more pairs than
 * slots, as many splits as the slots allow in proportion to its keys (one wave);
 * with more, items of about total/(AP_WAVES*slots) keys. Returns the item count,
 * or -1 if cap is too small (a bug: cap comes from lpx_cuda_attn_plan_cap). */
int lpx_cuda_attn_plan(const lpx_attn_plan_in *in, lpx_attn_item *items, int cap);

#ifdef __cplusplus
}
#endif

#endif

/* Numeric kernels of the CPU backend over weights kept in their stored type.
 * Products over block types run as integer dot products against activations
 * quantized to int8 per block (cpu_qdot.h); with fp32 activations (the exact
 * mode, and plain F32/F16/BF16 weights) rows are dequantized to fp32 a few at a
 * time.
 *
 * Batch invariance: every output element is computed by the same code in the
 * same order whatever else is in the batch (a row of a product is one dot
 * product of the weight row with one token's activations, quantized per token),
 * so a token's logits are bit-identical alone, in a batch, in prefill or in
 * decode. */
#ifndef LPX_BACKEND_CPU_KERNELS_H
#define LPX_BACKEND_CPU_KERNELS_H

#include "backend/cpu/cpu_qdot.h"
#include "base/threadpool.h"
#include "model/model.h"

#include <stdint.h>

/* Row r of matrix w as float: a pointer into w itself for F32, otherwise
 * dequantized into buf (cols floats). */
const float *cpu_weight_row(const lpx_tensor *w, int64_t r, float *buf);

/* Dequantizes n elements (a multiple of the block) of type t to dst. */
void cpu_dequantize(lpx_dtype t, const void *src, float *dst, int64_t n);

float cpu_dot(const float *a, const float *b, int64_t n);

/* One matrix of a fused product: y[t][r] = bias[r] + sum_c w[r][c] * x[t][c],
 * or y[t][r] += ... when accumulate (a residual connection). */
typedef struct cpu_matmul_job {
    const lpx_tensor *w; /* (rows, cols) */
    const float *bias;   /* (rows) or NULL */
    float *y;            /* [n_tok][ldy] */
    int64_t ldy;
    bool accumulate;
} cpu_matmul_job;

/* What a product needs besides its operands: threads, kernels, scratch. */
#define CPU_MATMUL_ROWBUF(cols) (4 * (cols))
typedef struct cpu_matmul_env {
    lpx_threadpool *pool;
    const cpu_qkernels *qk; /* integer dots for block types; NULL: fp32 activations only */
    float *rowbuf;          /* [threads][rowbuf_stride >= CPU_MATMUL_ROWBUF(cols)] */
    int64_t rowbuf_stride;
    lpx_blk_q8 *xq; /* [n_tok][cols / 32] x quantized (with qk) */
} cpu_matmul_env;

/* Runs up to 4 products that share their input x [n_tok][ldx] (same cols) as
 * one parallel loop over all their rows. When every matrix has an integer dot
 * in e->qk, x is quantized once and all rows use it; otherwise fp32. */
void cpu_matmul(const cpu_matmul_env *e, const cpu_matmul_job *jobs, int n_jobs, const float *x,
                int64_t ldx, int64_t n_tok);

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i], i < n (out may alias x). */
void cpu_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);

/* Rotates one head of n = head_dim values in place: pairs (i, i + n/2) when
 * !interleaved (Hugging Face rotate_half), (2i, 2i+1) when interleaved. */
void cpu_rope(float *v, const float *cos_, const float *sin_, int64_t n, bool interleaved);

/* y[i] += a * x[i]. */
void cpu_axpy(float *y, float a, const float *x, int64_t n);

/* g[i] = silu(g[i]) * u[i]. */
void cpu_swiglu(float *g, const float *u, int64_t n);

#endif

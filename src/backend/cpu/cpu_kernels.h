/* Numeric kernels of the CPU backend: fp32 arithmetic over weights kept in
 * their stored type (F32/F16/BF16/Q8_0/Q4_0/Q4_1), dequantized a row at a time.
 *
 * Batch invariance: every output element is computed by the same code in the
 * same order whatever else is in the batch (a row of a product is one dot
 * product of the dequantized weight row with one token's activations), so a
 * token's logits are bit-identical alone, in a batch, in prefill or in decode. */
#ifndef LPX_BACKEND_CPU_KERNELS_H
#define LPX_BACKEND_CPU_KERNELS_H

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

/* Runs up to 4 products that share their input x [n_tok][ldx] (same cols) as
 * one parallel loop over all their rows. rowbuf: per-thread scratch, thread i
 * at rowbuf + i * rowbuf_stride, rowbuf_stride >= CPU_MATMUL_ROWBUF(cols). */
#define CPU_MATMUL_ROWBUF(cols) (4 * (cols))
void cpu_matmul(lpx_threadpool *pool, const cpu_matmul_job *jobs, int n_jobs, const float *x,
                int64_t ldx, int64_t n_tok, float *rowbuf, int64_t rowbuf_stride);

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

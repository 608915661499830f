/* Embedding gather, RMSNorm and SiLU·mul: the small row-wise kernels of a step. */
#ifndef LPX_BACKEND_CUDA_ELEMENTWISE_CUH
#define LPX_BACKEND_CUDA_ELEMENTWISE_CUH

#include "common.cuh"
#include "wquant.cuh"

// ----------------------------------------------------------------------------
// CUDA kernels

/* x[t] = emb[tokens[t]] as float (emb in any packing, wquant.cuh). One block per token. A token -1-r stands for
 * fed[r], the token the previous step drew for its logits row r (step_begin's
 * feed: the host did not know it when it queued this step). */
__global__ void embed_kernel(float *__restrict__ x,          // (T, d)
                             wmat emb,                       // (vocab, d)
                             const int32_t *__restrict__ tokens, // (T)
                             const int32_t *__restrict__ fed,    // (rows of the previous step) or NULL
                             int d) {
    grid_wait();
    grid_launch_next();
    const int t = blockIdx.x;
    const int id = tokens[t] >= 0 ? tokens[t] : fed[-1 - tokens[t]];
    for (int i = threadIdx.x; i < d; i += blockDim.x) x[(size_t)t * d + i] = wm_value(emb, id, i, d);
}

/* out[r] = x[src] / rms(x[src]) * w, src = rows ? rows[r] : r. The residual stream
 * stays in float; the normalised copy is bf16 because it feeds the matrix units. */
__global__ void rmsnorm_kernel(bf16 *__restrict__ out,           // (R, d)
                               const float *__restrict__ x,      // (T, d)
                               const float *__restrict__ w,      // (d)
                               const int32_t *__restrict__ rows, // (R) or NULL
                               int d, float eps) {
    grid_wait();
    grid_launch_next();
    const int r = blockIdx.x;
    const float *xr = x + (size_t)(rows ? rows[r] : r) * d;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
    const float inv = rsqrtf(block_sum(ss) / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        out[(size_t)r * d + i] = f2bf(xr[i] * inv * w[i]);
}

/* act = silu(gate) * up over the interleaved gate/up output (row 2j gate, 2j+1 up). */
__global__ void silu_mul_kernel(bf16 *__restrict__ act,       // (T, d_ff)
                                const float *__restrict__ gu, // (T, 2*d_ff)
                                int64_t n) {                  // T * d_ff
    grid_wait();
    grid_launch_next();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float2 v = reinterpret_cast<const float2 *>(gu)[i];
        act[i] = f2bf(v.x / (1.0f + expf(-v.x)) * v.y);
    }
}

// ----------------------------------------------------------------------------
// kernel launchers

static lpx_status embed(float *x, const wmat &emb, const int32_t *tokens, const int32_t *fed,
                        int T, int d, kstream st) {
    LPX_CUDA_TRY(launch(embed_kernel, dim3(T), dim3(256), 0, st, x, emb, tokens, fed, d));
    return LPX_OK;
}

static lpx_status rmsnorm(bf16 *out, const float *x, const float *w, const int32_t *rows, int R,
                          int d, float eps, kstream st) {
    LPX_CUDA_TRY(launch(rmsnorm_kernel, dim3(R), dim3(256), 0, st, out, x, w, rows, d, eps));
    return LPX_OK;
}

static lpx_status silu_mul(bf16 *act, const float *gu, int T, int d_ff, kstream st) {
    const int64_t n = (int64_t)T * d_ff;
    const int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    LPX_CUDA_TRY(launch(silu_mul_kernel, dim3(blocks), dim3(256), 0, st, act, gu, n));
    return LPX_OK;
}

#endif

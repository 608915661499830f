/* y = x · Wᵀ for every projection. A few tokens (decode): our own matrix-vector
 * kernel that streams the bf16 weights once with 16-byte loads, reusing each load
 * for all tokens. More tokens (prefill, large batches): cuBLAS bf16 GEMM with float
 * accumulation on the tensor cores. */
#ifndef LPX_BACKEND_CUDA_MATMUL_CUH
#define LPX_BACKEND_CUDA_MATMUL_CUH

#include "common.cuh"
#include "elementwise.cuh"

#include <cublas_v2.h>

#define MV_WARPS 8        /* warps per block */
#define MV_MAX_TOKENS 8   /* above this, cuBLAS */

// ----------------------------------------------------------------------------
// CUDA kernels

/* A warp owns one row, or 1/ksplit of it when rows are few, so that the grid
 * still gives every SM two blocks or more; each lane reads 8 consecutive bf16 per
 * 256-column chunk, four chunks in flight. The first chunks are loaded before
 * grid_wait(): weights never depend on the previous kernel, so their fetch
 * overlaps its tail (measured: a persistent variant with fewer, longer-lived
 * blocks was 30% slower at batch 1, docs/PERF.md).
 * x is staged in shared memory as bf16 when xs_bytes > 0: with norm_w set, x is
 * the float residual stream and the block applies RMSNorm while staging (so no
 * separate norm kernel); otherwise x is bf16. With xs_bytes == 0, x (bf16) is read
 * from global memory.
 * With act set, rows come in gate/up pairs (2j, 2j+1) and the block writes
 * act[j] = silu(gate)·up instead of y. With accumulate, y += result (the residual). */
template <int B>
__global__ void __launch_bounds__(MV_WARPS * 32)
    matvec_kernel(float *__restrict__ y, bf16 *__restrict__ act, const bf16 *__restrict__ W,
                        const void *__restrict__ x, const float *__restrict__ norm_w,
                        int xs_bytes, int rows, int cols, int ksplit, int accumulate, float eps) {
    extern __shared__ uint4 xs_raw[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rpb = MV_WARPS / ksplit;
    const int row = blockIdx.x * rpb + warp / ksplit;
    const int kp = warp % ksplit;
    const int cols8 = cols / 8, nchunks = (cols + 255) / 256;
    const int step = 4 * ksplit;
    const bool live = row < rows;
    const uint4 *wr = reinterpret_cast<const uint4 *>(W + (size_t)(live ? row : 0) * cols);
    uint4 w[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
        const int c = kp + u * ksplit, i = c * 32 + lane;
        w[u] = live && c < nchunks && i < cols8 ? __ldg(wr + i) : make_uint4(0, 0, 0, 0);
    }
    grid_wait();
    grid_launch_next();
    const uint4 *xv = reinterpret_cast<const uint4 *>(x);
    if (xs_bytes > 0) {
        bf16 *xs = reinterpret_cast<bf16 *>(xs_raw);
        if (norm_w) {
            const float *xf = reinterpret_cast<const float *>(x);
            for (int b = 0; b < B; b++) {
                float ss = 0.0f;
                for (int i = threadIdx.x; i < cols; i += blockDim.x)
                    ss += xf[(size_t)b * cols + i] * xf[(size_t)b * cols + i];
                const float inv = rsqrtf(block_sum(ss) / (float)cols + eps);
                for (int i = threadIdx.x; i < cols; i += blockDim.x)
                    xs[b * cols + i] = f2bf(xf[(size_t)b * cols + i] * inv * norm_w[i]);
            }
        } else {
            for (int i = threadIdx.x; i < B * cols8; i += blockDim.x) xs_raw[i] = xv[i];
        }
        __syncthreads();
        xv = xs_raw;
    }
    float acc[B];
#pragma unroll
    for (int b = 0; b < B; b++) acc[b] = 0.0f;
    if (live) {
        for (int c = kp; c < nchunks; c += step) {
            uint4 nw[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int cc = c + step + u * ksplit, i = cc * 32 + lane;
                nw[u] = cc < nchunks && i < cols8 ? __ldg(wr + i) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int i = (c + u * ksplit) * 32 + lane;
                if (c + u * ksplit < nchunks && i < cols8) {
#pragma unroll
                    for (int b = 0; b < B; b++) acc[b] += dot8(w[u], xv[b * cols8 + i]);
                }
                w[u] = nw[u];
            }
        }
    }
    __shared__ float red[MV_WARPS][B];
#pragma unroll
    for (int b = 0; b < B; b++) {
        const float v = warp_sum(acc[b]);
        if (lane == 0) red[warp][b] = v;
    }
    __syncthreads();
    const int t = threadIdx.x;
    if (!act) {
        if (t < rpb * B) {
            const int r = t / B, b = t % B, grow = blockIdx.x * rpb + r;
            if (grow < rows) {
                float s = 0.0f;
                for (int k = 0; k < ksplit; k++) s += red[r * ksplit + k][b];
                float *dst = y + (size_t)b * rows + grow;
                *dst = accumulate ? *dst + s : s;
            }
        }
    } else if (t < rpb / 2 * B) {
        const int p = t / B, b = t % B, grow = blockIdx.x * rpb + 2 * p;
        if (grow + 1 < rows) {
            float g = 0.0f, u = 0.0f;
            for (int k = 0; k < ksplit; k++) {
                g += red[2 * p * ksplit + k][b];
                u += red[(2 * p + 1) * ksplit + k][b];
            }
            act[(size_t)b * (rows / 2) + grow / 2] = f2bf(g / (1.0f + expf(-g)) * u);
        }
    }
}

// ----------------------------------------------------------------------------
// kernel launchers

#define LPX_CUBLAS_TRY(call)                                                                       \
    do {                                                                                           \
        cublasStatus_t lpx_cb_s_ = (call);                                                         \
        if (lpx_cb_s_ != CUBLAS_STATUS_SUCCESS)                                                    \
            return lpx_errorf(LPX_ERR_DEVICE, "%s:%d: %s: %s", __FILE__, __LINE__, #call,          \
                              cublasGetStatusString(lpx_cb_s_));                                   \
    } while (0)

#define MV_SMEM_MAX (64 * 1024) /* x staged in shared memory up to this size */

/* Smallest split of a row over warps that still gives every SM two blocks. */
static int matvec_ksplit(int rows, int cols, int n_sms, bool pairs) {
    const int nchunks = (cols + 255) / 256;
    int ks = 1;
    while (ks < (pairs ? MV_WARPS / 2 : MV_WARPS) && ks * 2 <= nchunks &&
           (int64_t)ceil_div(rows, MV_WARPS / ks) < 2 * (int64_t)n_sms)
        ks *= 2;
    return ks;
}

template <int B>
static cudaError_t matvec_launch(float *y, bf16 *act, const bf16 *W, const void *x,
                                 const float *norm_w, int rows, int cols, int n_sms,
                                 bool accumulate, float eps, cudaStream_t st) {
    const int xs = B * cols * (int)sizeof(bf16) <= MV_SMEM_MAX ? B * cols * (int)sizeof(bf16) : 0;
    const int ks = matvec_ksplit(rows, cols, n_sms, act != NULL);
    return launch(matvec_kernel<B>, dim3(ceil_div(rows, MV_WARPS / ks)), dim3(MV_WARPS * 32),
                  (size_t)xs, st, y, act, W, x, norm_w, xs, rows, cols, ks, (int)accumulate, eps);
}

/* Lets every matvec instantiation take MV_SMEM_MAX of shared memory. */
static lpx_status matvec_init(void) {
#define MV_ATTR(B)                                                                                 \
    LPX_CUDA_TRY(cudaFuncSetAttribute(matvec_kernel<B>,                                            \
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, MV_SMEM_MAX))
    MV_ATTR(1); MV_ATTR(2); MV_ATTR(3); MV_ATTR(4); MV_ATTR(5); MV_ATTR(6); MV_ATTR(7); MV_ATTR(8);
#undef MV_ATTR
    return LPX_OK;
}

typedef struct matmul_ctx {
    cublasHandle_t blas;
    int n_sms;
} matmul_ctx;

/* y (T, rows) float = x (T, cols) · W (rows, cols)ᵀ; accumulate adds to y.
 * x is bf16, or, with norm_w set, the float residual stream that is RMS-normalised
 * (weight norm_w, eps) first (through h (T, cols) bf16 as scratch where not fused).
 * With act set (and W's rows gate/up pairs), writes act (T, rows/2) = silu(g)·u,
 * through gu (T, rows) float as scratch on the GEMM path. cols % 8 == 0. */
static lpx_status matmul(const matmul_ctx *mc, float *y, bf16 *act, float *gu, const bf16 *W,
                         const void *x, const float *norm_w, bf16 *h, float eps, int T, int rows,
                         int cols, bool accumulate, cudaStream_t st) {
    const bool fuse = T <= MV_MAX_TOKENS && T * cols * (int)sizeof(bf16) <= MV_SMEM_MAX;
    if (norm_w && !fuse) {
        LPX_TRY(rmsnorm(h, (const float *)x, norm_w, NULL, T, cols, eps, st));
        x = h;
        norm_w = NULL;
    }
    if (T <= MV_MAX_TOKENS) {
        const int ks = mc->n_sms;
        cudaError_t e;
        switch (T) {
        case 1: e = matvec_launch<1>(y, act, W, x, norm_w, rows, cols, ks, accumulate, eps, st); break;
        case 2: e = matvec_launch<2>(y, act, W, x, norm_w, rows, cols, ks, accumulate, eps, st); break;
        case 3: e = matvec_launch<3>(y, act, W, x, norm_w, rows, cols, ks, accumulate, eps, st); break;
        case 4: e = matvec_launch<4>(y, act, W, x, norm_w, rows, cols, ks, accumulate, eps, st); break;
        case 5: e = matvec_launch<5>(y, act, W, x, norm_w, rows, cols, ks, accumulate, eps, st); break;
        case 6: e = matvec_launch<6>(y, act, W, x, norm_w, rows, cols, ks, accumulate, eps, st); break;
        case 7: e = matvec_launch<7>(y, act, W, x, norm_w, rows, cols, ks, accumulate, eps, st); break;
        default: e = matvec_launch<8>(y, act, W, x, norm_w, rows, cols, ks, accumulate, eps, st); break;
        }
        LPX_CUDA_TRY(e);
        return LPX_OK;
    }
    /* Column-major view: Yᵀ (rows × T) = W (rows × cols, stored as cols × rows) · Xᵀ. */
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    float *out = act ? gu : y;
    LPX_CUBLAS_TRY(cublasSetStream(mc->blas, st));
    LPX_CUBLAS_TRY(cublasGemmEx(mc->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, T, cols, &alpha, W,
                                CUDA_R_16BF, cols, x, CUDA_R_16BF, cols, &beta, out, CUDA_R_32F,
                                rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (act) return silu_mul(act, gu, T, rows / 2, st);
    return LPX_OK;
}

#endif

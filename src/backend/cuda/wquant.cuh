/* Weight matrices on the device in the packings of wpack.h (bf16, q8, q4): the
 * descriptor the kernels take, the chunk dot products of the matrix-vector
 * kernels (matmul.cuh), the dequantization into bf16 tiles that feeds cuBLAS for
 * many tokens, and single elements for the embedding gather.
 *
 * A lane reads 16 bytes of codes a chunk (16 q8 or 32 q4 elements, within one
 * scale group) and turns each code into a float with one byte permute and one
 * subtraction: 0x4B000000 | byte is the float 2^23 + byte, so 2^23 + byte - bias
 * is byte - 128 (q8), byte (q4 with mins) or byte - 8 (q4 without), exactly; no
 * integer-to-float conversions (a quarter-rate instruction), one FMA a token. */
#ifndef LPX_BACKEND_CUDA_WQUANT_CUH
#define LPX_BACKEND_CUDA_WQUANT_CUH

#include "common.cuh"
#include "wpack.h"

#include <cuda_fp16.h>

/* A weight matrix on the device: rows of row_bytes (wpack.h's layout). */
typedef struct wmat {
    const void *w;
    int kind;      /* lpx_wp_kind */
    int row_bytes; /* cols * 2 for bf16 */
    int gshift;    /* log2 of the group (q8, q4) */
    int has_min;
} wmat;

/* The descriptor of w, rows of row_bytes in packing f. */
static inline wmat wmat_of(const void *w, lpx_wp_format f, int row_bytes) {
    return wmat{w, f.kind, row_bytes, f.group ? __builtin_ctz((unsigned)f.group) : 0, f.has_min};
}
/* The kernels' offset of the mins from the scales, in halves (0: none). */
static inline int wm_moff(const wmat &W, int cols) {
    return W.has_min ? cols >> W.gshift : 0;
}

/* Kernel template argument: the packing (lpx_wp_kind). */
#define WF_BF16 LPX_WP_BF16
#define WF_Q8 LPX_WP_Q8
#define WF_Q4 LPX_WP_Q4

/* Elements of a 16-byte chunk of codes, and bytes of a row's codes. */
template <int F> struct wf_traits {
    static constexpr int CH = F == WF_Q8 ? 16 : F == WF_Q4 ? 32 : 8;
};
static __host__ __device__ __forceinline__ int wm_code_bytes(int kind, int cols) {
    return kind == LPX_WP_Q8 ? cols : kind == LPX_WP_Q4 ? cols / 2 : 2 * cols;
}

/* The float subtracted from 2^23 + byte to give a code's value. */
static __device__ __forceinline__ float wq_bias(int F, int has_min) {
    return F == WF_Q8 ? 8388736.0f : has_min ? 8388608.0f : 8388616.0f;
}
static __device__ __forceinline__ float wq_code(uint32_t word, int k, float bias) {
    return __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7440u + (unsigned)k)) - bias;
}
/* Σ code·x over 8 elements: codes in bytes of a then c, x 8 bf16. */
static __device__ __forceinline__ float dot8_codes(uint32_t a, uint32_t c, uint4 x, float bias) {
    float s = wq_code(a, 0, bias) * bf_lo(x.x);
    s = fmaf(wq_code(a, 1, bias), bf_hi(x.x), s);
    s = fmaf(wq_code(a, 2, bias), bf_lo(x.y), s);
    s = fmaf(wq_code(a, 3, bias), bf_hi(x.y), s);
    s = fmaf(wq_code(c, 0, bias), bf_lo(x.z), s);
    s = fmaf(wq_code(c, 1, bias), bf_hi(x.z), s);
    s = fmaf(wq_code(c, 2, bias), bf_lo(x.w), s);
    s = fmaf(wq_code(c, 3, bias), bf_hi(x.w), s);
    return s;
}
static __device__ __forceinline__ float sum8(uint4 x) {
    return ((bf_lo(x.x) + bf_hi(x.x)) + (bf_lo(x.y) + bf_hi(x.y))) +
           ((bf_lo(x.z) + bf_hi(x.z)) + (bf_lo(x.w) + bf_hi(x.w)));
}

/* acc[j][b] += Σ over chunk ci of row j's elements times token b's x, for R rows
 * whose chunks are w[j] and whose scales start at sc[j] (mins moff halves after:
 * moff 0 = none); x: the chunk's first uint4 of token 0's x, xstride uint4s a
 * token. Each x load serves all R rows. */
template <int F, int R, int B>
static __device__ __forceinline__ void qdot_chunk(const uint4 (&w)[R], const __half *const (&sc)[R],
                                                  int ci, int gshift, int moff, const uint4 *x,
                                                  int xstride, float (&acc)[R][B]) {
    constexpr int CH = wf_traits<F>::CH;
    const float bias = wq_bias(F, moff != 0);
    float g[R][B], xsum[B];
#pragma unroll
    for (int b = 0; b < B; b++) {
        xsum[b] = 0.0f;
#pragma unroll
        for (int j = 0; j < R; j++)
            g[j][b] = 0.0f;
    }
#pragma unroll
    for (int p = 0; p < CH / 8; p++) {
        uint4 xv[B];
#pragma unroll
        for (int b = 0; b < B; b++) {
            xv[b] = x[(size_t)b * xstride + p];
            if (moff) xsum[b] += sum8(xv[b]);
        }
#pragma unroll
        for (int j = 0; j < R; j++) {
            uint32_t a = p & 1 ? w[j].z : w[j].x, c = p & 1 ? w[j].w : w[j].y;
            if (F == WF_Q4) { /* pieces 0, 1: low nibbles; 2, 3: high */
                const int sh = (p >> 1) * 4;
                a = (a >> sh) & 0x0F0F0F0Fu;
                c = (c >> sh) & 0x0F0F0F0Fu;
            }
#pragma unroll
            for (int b = 0; b < B; b++)
                g[j][b] += dot8_codes(a, c, xv[b], bias);
        }
    }
    const int gi = (ci * CH) >> gshift;
#pragma unroll
    for (int j = 0; j < R; j++) {
        const float s = __half2float(sc[j][gi]), m = moff ? __half2float(sc[j][gi + moff]) : 0.0f;
#pragma unroll
        for (int b = 0; b < B; b++)
            acc[j][b] = fmaf(s, g[j][b], fmaf(m, xsum[b], acc[j][b]));
    }
}

/* Element (row, c) of a packed matrix as float. */
static __device__ __forceinline__ float wm_value(const wmat &m, int64_t row, int c, int cols) {
    const uint8_t *r = (const uint8_t *)m.w + (size_t)row * m.row_bytes;
    if (m.kind == LPX_WP_BF16) return bf2f(((const bf16 *)r)[c]);
    const __half *sc = (const __half *)(r + wm_code_bytes(m.kind, cols));
    const int g = c >> m.gshift;
    const float s = __half2float(sc[g]);
    const float mn = m.has_min ? __half2float(sc[g + (cols >> m.gshift)]) : 0.0f;
    int v;
    if (m.kind == LPX_WP_Q8) {
        v = (int)r[c] - 128;
    } else {
        const uint8_t by = r[(c >> 5) * 16 + (c & 15)];
        v = ((c & 16) ? by >> 4 : by & 15) - (m.has_min ? 0 : 8);
    }
    return fmaf(s, (float)v, mn);
}

/* out (n, cols) bf16 = rows [r0, r0 + n) of m (q8 or q4): a thread a 16-byte chunk
 * of codes (one group's scale and min), its CH values written as 16-byte stores. */
template <int F>
__global__ void dequant_kernel(bf16 *__restrict__ out, wmat m, int64_t r0, int n, int cols) {
    constexpr int CH = wf_traits<F>::CH;
    grid_wait();
    grid_launch_next();
    const int per_row = cols / CH, groups = cols >> m.gshift;
    const float bias = wq_bias(F, m.has_min);
    const int64_t chunks = (int64_t)n * per_row;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < chunks;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / per_row;
        const int ci = (int)(i % per_row);
        const uint8_t *row = (const uint8_t *)m.w + (size_t)(r0 + r) * m.row_bytes;
        const uint4 w = __ldg(reinterpret_cast<const uint4 *>(row) + ci);
        const __half *sc = (const __half *)(row + wm_code_bytes(F, cols));
        const int gi = (ci * CH) >> m.gshift;
        const float s = __half2float(sc[gi]), mn = m.has_min ? __half2float(sc[gi + groups]) : 0.0f;
        uint4 *o = reinterpret_cast<uint4 *>(out + (size_t)r * cols + (size_t)ci * CH);
#pragma unroll
        for (int p = 0; p < CH / 8; p++) { /* 8 elements: words a then c, as qdot_chunk */
            uint32_t a = p & 1 ? w.z : w.x, c = p & 1 ? w.w : w.y;
            if (F == WF_Q4) {
                const int sh = (p >> 1) * 4;
                a = (a >> sh) & 0x0F0F0F0Fu;
                c = (c >> sh) & 0x0F0F0F0Fu;
            }
            uint32_t v[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint32_t word = k < 2 ? a : c;
                const float lo = fmaf(s, wq_code(word, 2 * (k & 1), bias), mn);
                const float hi = fmaf(s, wq_code(word, 2 * (k & 1) + 1, bias), mn);
                v[k] = (uint32_t)__bfloat16_as_ushort(f2bf(lo)) |
                       ((uint32_t)__bfloat16_as_ushort(f2bf(hi)) << 16);
            }
            o[p] = make_uint4(v[0], v[1], v[2], v[3]);
        }
    }
}

#endif

/* The paged KV cache's two element types on the device: bf16 (the default) and
 * fp8 e4m3 with one float scale per (token, layer, K or V, kv head), the format of
 * src/format/kv_fp8.h that the CPU backend stores too (--kv-cache-dtype fp8).
 *
 * Codes sit where a bf16 cache keeps its values (kv_offset in attention.cuh, one
 * byte each); scales are a second array indexed by lpx_kv_fp8_scale_index. A head
 * is quantized as kv_fp8.h says (the amax of its bf16-rounded values, its scale
 * and codes from the same integer encoder as the host's), so a CUDA cache holds
 * the codes the CPU backend would store for the same values. Reading decodes codes
 * with the e4m3 -> f16 conversion (exact) and applies the scale once per key (to
 * the score) or per value row (to its softmax weight). */
#ifndef LPX_BACKEND_CUDA_KV_CACHE_CUH
#define LPX_BACKEND_CUDA_KV_CACHE_CUH

#include "common.cuh"

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <type_traits>

#include "format/kv_fp8.h"

/* The element type of a cache: F8 codes or bf16 values. */
template <bool F8> using kv_elem = typename std::conditional<F8, uint8_t, bf16>::type;

/* Four e4m3 codes (byte i = element i) as floats, exactly. */
static __device__ __forceinline__ void fp8x4_f32(uint32_t w, float *f) {
    const __half2_raw lo =
        __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> 16), __NV_E4M3);
    const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&lo));
    const float2 b = __half22float2(*reinterpret_cast<const __half2 *>(&hi));
    f[0] = a.x;
    f[1] = a.y;
    f[2] = b.x;
    f[3] = b.y;
}

/* Two e4m3 codes (byte 0 = element 0) as floats. */
static __device__ __forceinline__ void fp8x2_f32(uint32_t w, float *f) {
    const __half2_raw r =
        __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);
    const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&r));
    f[0] = a.x;
    f[1] = a.y;
}

/* N consecutive cached elements at p (N a multiple of 2, p aligned to N elements'
 * bytes up to 8) as floats, before any fp8 scale. */
template <bool F8, int N>
static __device__ __forceinline__ void kv_load(const kv_elem<F8> *p, float (&f)[N]) {
    if constexpr (F8) {
        if constexpr (N % 4 == 0) {
#pragma unroll
            for (int i = 0; i < N; i += 4)
                fp8x4_f32(*reinterpret_cast<const uint32_t *>(p + i), f + i);
        } else {
#pragma unroll
            for (int i = 0; i < N; i += 2)
                fp8x2_f32(*reinterpret_cast<const uint16_t *>(p + i), f + i);
        }
    } else if constexpr (N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 4) {
            const uint2 w = *reinterpret_cast<const uint2 *>(p + i);
            f[i] = bf_lo(w.x);
            f[i + 1] = bf_hi(w.x);
            f[i + 2] = bf_lo(w.y);
            f[i + 3] = bf_hi(w.y);
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; i += 2) {
            const uint32_t w = *reinterpret_cast<const uint32_t *>(p + i);
            f[i] = bf_lo(w);
            f[i + 1] = bf_hi(w);
        }
    }
}

/* Sixteen bytes of cached elements (8 bf16 or 16 fp8) as floats. */
template <bool F8>
static __device__ __forceinline__ void kv_chunk(uint4 c, float (&f)[F8 ? 16 : 8]) {
    if constexpr (F8) {
        fp8x4_f32(c.x, f);
        fp8x4_f32(c.y, f + 4);
        fp8x4_f32(c.z, f + 8);
        fp8x4_f32(c.w, f + 12);
    } else {
        f[0] = bf_lo(c.x);
        f[1] = bf_hi(c.x);
        f[2] = bf_lo(c.y);
        f[3] = bf_hi(c.y);
        f[4] = bf_lo(c.z);
        f[5] = bf_hi(c.z);
        f[6] = bf_lo(c.w);
        f[7] = bf_hi(c.w);
    }
}

/* A cache's shape: kv[block][layer][k|v][kv_head][slot][head_dim], elements of
 * kv_elem<fp8>; with fp8 a second array of scales (kv_scale_at). */
typedef struct kv_geom {
    int n_heads, n_kv, head_dim, block_size, n_layers;
    int bs_shift;         /* log2(block_size): block sizes are powers of two */
    int fp8;              /* the element type: 1 fp8 codes with scales, 0 bf16 */
    int64_t block_stride; /* elements per block: n_layers*2*n_kv*block_size*head_dim */
} kv_geom;

static __device__ __forceinline__ int64_t kv_offset(const kv_geom g, int layer, int which, int kvh,
                                                    int block, int slot) {
    return block * g.block_stride +
           ((((int64_t)layer * 2 + which) * g.n_kv + kvh) * g.block_size + slot) * g.head_dim;
}

/* Scales a block of an fp8 cache (one a layer, K or V, kv head and slot). */
static inline size_t kv_block_scales(const kv_geom *g) {
    return (size_t)g->n_layers * 2 * g->n_kv * g->block_size;
}

/* Bytes of a block's elements (codes or bf16 values). */
static inline size_t kv_block_elem_bytes(const kv_geom *g) {
    return (size_t)g->block_stride * (g->fp8 ? sizeof(uint8_t) : sizeof(bf16));
}

/* Bytes a block: its elements, and with fp8 its scales (they follow all blocks'
 * elements in the same allocation). */
static inline size_t kv_block_bytes(const kv_geom *g) {
    return kv_block_elem_bytes(g) + (g->fp8 ? kv_block_scales(g) * sizeof(float) : 0);
}

/* Index of a head's scale in an fp8 cache's scales (kv_fp8.h's
 * scales[block][layer][k|v][kv_head][slot]). */
static __device__ __forceinline__ int64_t kv_scale_at(const kv_geom g, int layer, int which,
                                                      int kvh, int64_t block, int slot) {
    return lpx_kv_fp8_scale_index(block, layer, which, kvh, slot, g.n_layers, g.n_kv, g.block_size);
}

/* One head's quantization (kv_fp8.h), the head held by a warp, DPL bf16-rounded
 * values a lane (x): codes into c, returns the head's scale. */
template <int DPL>
static __device__ __forceinline__ float warp_fp8_quantize(const float (&x)[DPL],
                                                          uint8_t (&c)[DPL]) {
    float amax = 0.0f;
    bool bad = false;
#pragma unroll
    for (int e = 0; e < DPL; e++) {
        const uint32_t a = __float_as_uint(x[e]) & 0x7FFFFFFFu;
        bad |= a >= 0x7F800000u;
        amax = fmaxf(amax, __uint_as_float(a));
    }
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (__any_sync(0xffffffffu, bad)) {
#pragma unroll
        for (int e = 0; e < DPL; e++)
            c[e] = LPX_KV_FP8_NAN;
        return __uint_as_float(0x7FC00000u);
    }
    if (amax < LPX_KV_FP8_TINY) {
#pragma unroll
        for (int e = 0; e < DPL; e++)
            c[e] = lpx_kv_fp8_encode(x[e]);
        return 1.0f;
    }
    const float inv = LPX_KV_FDIV(LPX_KV_FP8_MAX, amax);
#pragma unroll
    for (int e = 0; e < DPL; e++)
        c[e] = lpx_kv_fp8_encode(LPX_KV_FMUL(x[e], inv));
    return LPX_KV_FDIV(amax, LPX_KV_FP8_MAX);
}

/* The token's own key or value head, held by a warp (DPL values a lane, x), as the
 * cache holds it: into the block's copy cur (bf16 values, or F8 codes with the scale
 * into *cur_scale) and, when store, into the cache at dst (the lane's first element;
 * F8: the scale at *dst_scale). F8's pointers to scales are unused for bf16. */
template <bool F8, int DPL>
static __device__ __forceinline__ void kv_put_head(const float (&x)[DPL], kv_elem<F8> *cur,
                                                   float *cur_scale, kv_elem<F8> *dst,
                                                   float *dst_scale, bool store) {
    const int lane = threadIdx.x & 31;
    if constexpr (F8) {
        float xb[DPL];
        uint8_t code[DPL];
#pragma unroll
        for (int e = 0; e < DPL; e++)
            xb[e] = bf2f(f2bf(x[e]));
        const float sc = warp_fp8_quantize<DPL>(xb, code);
#pragma unroll
        for (int e = 0; e < DPL; e++) {
            cur[lane * DPL + e] = code[e];
            if (store) dst[e] = code[e];
        }
        if (lane == 0) {
            *cur_scale = sc;
            if (store) *dst_scale = sc;
        }
    } else {
#pragma unroll
        for (int e = 0; e < DPL; e++) {
            const bf16 xb = f2bf(x[e]);
            cur[lane * DPL + e] = xb;
            if (store) dst[e] = xb;
        }
    }
}

/* The same for a head held by a whole block, one bf16-rounded value a thread (x):
 * returns the thread's code and sets *scale. Every thread of the block calls it. */
static __device__ __forceinline__ uint8_t block_fp8_quantize(float x, float *scale) {
    __shared__ float part[32];
    __shared__ int bad_any;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const uint32_t a = __float_as_uint(x) & 0x7FFFFFFFu;
    float amax = __uint_as_float(a);
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const bool bad = __any_sync(0xffffffffu, a >= 0x7F800000u);
    __syncthreads(); /* part[] may still be read by a previous call */
    if (threadIdx.x == 0) bad_any = 0;
    __syncthreads();
    if (lane == 0) {
        part[warp] = amax;
        if (bad) bad_any = 1;
    }
    __syncthreads();
    amax = 0.0f;
    for (int i = 0; i < nw; i++)
        amax = fmaxf(amax, part[i]);
    if (bad_any) {
        *scale = __uint_as_float(0x7FC00000u);
        return LPX_KV_FP8_NAN;
    }
    if (amax < LPX_KV_FP8_TINY) {
        *scale = 1.0f;
        return lpx_kv_fp8_encode(x);
    }
    *scale = LPX_KV_FDIV(amax, LPX_KV_FP8_MAX);
    return lpx_kv_fp8_encode(LPX_KV_FMUL(x, LPX_KV_FDIV(LPX_KV_FP8_MAX, amax)));
}

#endif

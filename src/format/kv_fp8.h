/* The fp8 KV cache format (--kv-cache-dtype fp8): the bits every backend stores, so
 * that the CPU backend (src/backend/cpu/) and the CUDA kernels write and read the same
 * cache from the same values. Like sample_math.h, every function here is plain C on
 * the host and __host__ __device__ under nvcc, and gives the same bits on both: the
 * encoder is integer arithmetic on the float's bits, the two float operations of a
 * head's quantization (a division and a multiply) are LPX_KV_FDIV / LPX_KV_FMUL
 * (correctly rounded IEEE single on both sides, nothing to fuse), and no libm
 * function is used.
 *
 * Element format: OCP FP8 E4M3 ("e4m3fn"): sign, 4 exponent bits (bias 7), 3
 * mantissa bits; no infinities; S.1111.111 is NaN; the largest finite value is 448,
 * the smallest normal 2^-6, subnormals m * 2^-9 (m = 1..7). Encoding rounds to
 * nearest, ties to even, saturates to +-448 (infinities too) and keeps NaN as NaN,
 * like CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3). Decoding is exact.
 *
 * Granularity: one float32 scale per (token, layer, K or V, kv head), dynamic (no
 * calibration). For one head's head_dim values x[i] (after the key's norm and RoPE:
 * the values a bf16 cache would hold, so each is first rounded to bf16; fp8 is
 * "bf16, then quantized"):
 *     amax  = max |bf16(x[i])|                         (exact: a max of floats)
 *     amax == 0 or amax < LPX_KV_FP8_TINY:  scale = 1, code[i] = encode(bf16(x[i]))
 *                                           (+-0: every such value is below fp8's
 *                                           smallest subnormal, 2^-9)
 *     any bf16(x[i]) not finite (inf, NaN): scale = NaN, code[i] = NaN: the head
 *                                           reads back as NaN, as attention over an
 *                                           inf or NaN key or value gives anyway
 *     otherwise:  scale   = amax / 448.0f              (LPX_KV_FDIV)
 *                 inv     = 448.0f / amax              (LPX_KV_FDIV)
 *                 code[i] = encode(bf16(x[i]) * inv)   (LPX_KV_FMUL)
 * and a cached value reads back as decode(code) * scale (LPX_KV_FMUL).
 *
 * Layout: the codes sit exactly where a bf16 cache keeps its values, one byte each
 * instead of two, in each backend's order:
 *     CPU:  codes[block][layer][k|v][slot][kv_head][head_dim]
 *     CUDA: codes[block][layer][k|v][kv_head][slot][head_dim] (attention.cuh kv_offset)
 * and the scales are a second array of the same block-major shape, one float a head:
 *     scales[block][layer][k|v][kv_head][slot]  float32  (lpx_kv_fp8_scale_index)
 * so a block is one contiguous piece of each array and a block copy (copy_block,
 * prefix caching) is one copy of its codes and one of its scales. KV bytes per token:
 * n_layers * 2 * n_kv_heads * (head_dim + 4). */
#ifndef LPX_FORMAT_KV_FP8_H
#define LPX_FORMAT_KV_FP8_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define LPX_KV_HD static __host__ __device__ __forceinline__
#else
#define LPX_KV_HD static inline
#endif

#if defined(__CUDA_ARCH__)
#define LPX_KV_FDIV(a, b) __fdiv_rn((a), (b))
#define LPX_KV_FMUL(a, b) __fmul_rn((a), (b))
#else
#define LPX_KV_FDIV(a, b) ((a) / (b))
#define LPX_KV_FMUL(a, b) ((a) * (b))
#endif

#define LPX_KV_FP8_MAX 448.0f
#define LPX_KV_FP8_NAN 0x7F      /* S.1111.111 with the sign clear */
#define LPX_KV_FP8_TINY 0x1p-64f /* amax below this: the head is stored as zeros */

LPX_KV_HD uint32_t lpx_kv_f32_bits(float x) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

LPX_KV_HD float lpx_kv_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

/* float -> bf16 bits, round to nearest even; NaN -> 0x7FFF, the canonical NaN of
 * CUDA's __float2bfloat16_rn (cvt.rn.bf16.f32). */
LPX_KV_HD uint16_t lpx_kv_bf16_bits(float x) {
    uint32_t u = lpx_kv_f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

LPX_KV_HD float lpx_kv_bf16_f32(uint16_t h) {
    return lpx_kv_bits_f32((uint32_t)h << 16);
}

/* float -> e4m3fn code: round to nearest even, saturating to +-448, NaN -> NaN. */
LPX_KV_HD uint8_t lpx_kv_fp8_encode(float x) {
    const uint32_t u = lpx_kv_f32_bits(x);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | LPX_KV_FP8_NAN;
    if (a >= 0x43E00000u) return sign | 0x7E; /* |x| >= 448 (inf too): 448 */
    if (a >= 0x3C800000u) {                   /* |x| >= 2^-6: a normal code */
        /* drop 20 of the 23 mantissa bits, ties to even; a carry moves the exponent */
        const uint32_t r = a + 0x7FFFFu + ((a >> 20) & 1u);
        return sign | (uint8_t)((r >> 20) - (120u << 3)); /* exponent 127 - 7 = 120 */
    }
    /* |x| < 2^-6: a subnormal code m * 2^-9, m = 0..8 (8 is 2^-6, the first normal) */
    const uint32_t e = a >> 23;
    if (e < 117) return sign; /* |x| < 2^-10: rounds to 0 (f32 subnormals too) */
    const uint32_t m = (a & 0x7FFFFFu) | 0x800000u, s = 141u - e; /* s = 21..24 */
    uint32_t q = m >> s;
    const uint32_t rest = m & ((1u << s) - 1u), half = 1u << (s - 1u);
    if (rest > half || (rest == half && (q & 1u))) q++;
    return sign | (uint8_t)q;
}

/* e4m3fn code -> float, exact. */
LPX_KV_HD float lpx_kv_fp8_decode(uint8_t c) {
    const uint32_t sign = (uint32_t)(c & 0x80u) << 24, e = (c >> 3) & 0xFu, m = c & 7u;
    if (e == 15 && m == 7) return lpx_kv_bits_f32(sign | 0x7FC00000u);
    if (e == 0) /* m * 2^-9: exponent 127 - 9 for the leading bit of m */
        return m ? lpx_kv_bits_f32(sign | lpx_kv_f32_bits((float)m * 0x1p-9f))
                 : lpx_kv_bits_f32(sign);
    return lpx_kv_bits_f32(sign | ((e + 120u) << 23) | (m << 20));
}

/* One head's n values (already bf16-rounded floats) -> n codes; returns the scale. */
LPX_KV_HD float lpx_kv_fp8_quantize(const float *x, int n, uint8_t *codes) {
    float amax = 0.0f;
    int finite = 1;
    for (int i = 0; i < n; i++) {
        const uint32_t a = lpx_kv_f32_bits(x[i]) & 0x7FFFFFFFu;
        if (a >= 0x7F800000u) finite = 0;
        const float v = lpx_kv_bits_f32(a);
        if (v > amax) amax = v;
    }
    if (!finite) {
        for (int i = 0; i < n; i++)
            codes[i] = LPX_KV_FP8_NAN;
        return lpx_kv_bits_f32(0x7FC00000u);
    }
    if (amax < LPX_KV_FP8_TINY) {
        for (int i = 0; i < n; i++)
            codes[i] = lpx_kv_fp8_encode(x[i]);
        return 1.0f;
    }
    const float inv = LPX_KV_FDIV(LPX_KV_FP8_MAX, amax);
    for (int i = 0; i < n; i++)
        codes[i] = lpx_kv_fp8_encode(LPX_KV_FMUL(x[i], inv));
    return LPX_KV_FDIV(amax, LPX_KV_FP8_MAX);
}

/* A cached value: decode(code) * scale. */
LPX_KV_HD float lpx_kv_fp8_value(uint8_t code, float scale) {
    return LPX_KV_FMUL(lpx_kv_fp8_decode(code), scale);
}

/* Index of a head's scale in scales[block][layer][k|v][kv_head][slot]. */
LPX_KV_HD int64_t lpx_kv_fp8_scale_index(int64_t block, int layer, int which, int kv_head, int slot,
                                         int n_layers, int n_kv_heads, int block_size) {
    return (((block * n_layers + layer) * 2 + which) * n_kv_heads + kv_head) * block_size + slot;
}

#endif

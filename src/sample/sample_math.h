/* The arithmetic of sampling that must give the same bits on the host (sampler.c)
 * and on the GPU (backend/cuda/sampling.cuh), so a sampled token depends on the
 * logits only, never on the device that drew it:
 *  - exp by a fixed double-precision polynomial (expf differs between libm and
 *    CUDA in the last bit);
 *  - probabilities as 40-bit fixed-point integers, whose sums do not depend on
 *    the order of addition (a parallel reduction gives the sequential result);
 *  - the draw as an integer target below the kept mass.
 * Every double operation is written as LPX_DMUL/LPX_DADD so neither compiler may
 * fuse a multiply and an add (the host side is also built with -ffp-contract=off). */
#ifndef LPX_SAMPLE_SAMPLE_MATH_H
#define LPX_SAMPLE_SAMPLE_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define LPX_HD static __host__ __device__ __forceinline__
#else
#define LPX_HD static inline
#endif

#if defined(__CUDA_ARCH__)
#define LPX_DMUL(a, b) __dmul_rn((a), (b))
#define LPX_DADD(a, b) __dadd_rn((a), (b))
#else
#define LPX_DMUL(a, b) ((a) * (b))
#define LPX_DADD(a, b) ((a) + (b))
#endif

/* Probabilities (relative to the most likely token, which has 1) scaled to
 * integers: w * 2^40, truncated. A token below 2^-40 of the best weighs 0; a
 * vocabulary below 2^24 keeps every sum under 2^64. */
#define LPX_SAMPLE_FIX_BITS 40
#define LPX_SAMPLE_MAX_VOCAB (1 << 24)

LPX_HD uint64_t lpx_splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* 53 uniform bits for output token `index` of a request seeded `seed`. */
LPX_HD uint64_t lpx_sample_bits(uint64_t seed, int64_t index) {
    return lpx_splitmix64(lpx_splitmix64(seed) ^ (uint64_t)index) >> 11;
}

/* floor(u * mass) for u = bits / 2^53 in [0, 1): the draw's target, < mass. */
LPX_HD uint64_t lpx_sample_target(uint64_t bits, uint64_t mass) {
#if defined(__CUDA_ARCH__)
    return __umul64hi(bits << 11, mass);
#else
    return (uint64_t)(((unsigned __int128)bits * mass) >> 53);
#endif
}

/* exp(x) for x <= 0, rounded to float; 0 below -110 (under the smallest
 * subnormal) and for NaN. Range reduction x = k ln2 + r (ln2 split so k*hi is
 * exact), then a degree-11 Taylor polynomial on |r| <= 0.35 (error < 1e-14,
 * far below a float's rounding). */
LPX_HD float lpx_exp_neg(float xf) {
    const double x = (double)xf;
    if (!(x > -110.0)) return 0.0f;
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const double inv_ln2 = 1.44269504088896338700e+00;
    const double k = floor(LPX_DADD(LPX_DMUL(x, inv_ln2), 0.5));
    const double r = LPX_DADD(LPX_DADD(x, -LPX_DMUL(k, ln2_hi)), -LPX_DMUL(k, ln2_lo));
    double p = 1.0 / 39916800.0;
    p = LPX_DADD(LPX_DMUL(p, r), 1.0 / 3628800.0);
    p = LPX_DADD(LPX_DMUL(p, r), 1.0 / 362880.0);
    p = LPX_DADD(LPX_DMUL(p, r), 1.0 / 40320.0);
    p = LPX_DADD(LPX_DMUL(p, r), 1.0 / 5040.0);
    p = LPX_DADD(LPX_DMUL(p, r), 1.0 / 720.0);
    p = LPX_DADD(LPX_DMUL(p, r), 1.0 / 120.0);
    p = LPX_DADD(LPX_DMUL(p, r), 1.0 / 24.0);
    p = LPX_DADD(LPX_DMUL(p, r), 1.0 / 6.0);
    p = LPX_DADD(LPX_DMUL(p, r), 0.5);
    p = LPX_DADD(LPX_DMUL(p, r), 1.0);
    p = LPX_DADD(LPX_DMUL(p, r), 1.0);
    /* 2^k, k in [-159, 0]: a normal double built from its exponent field. */
    const uint64_t bits = (uint64_t)((int64_t)k + 1023) << 52;
    double scale;
#if defined(__CUDA_ARCH__)
    scale = __longlong_as_double((long long)bits);
#else
    __builtin_memcpy(&scale, &bits, sizeof scale);
#endif
    return (float)LPX_DMUL(p, scale);
}

/* A probability weight (in [0, 1]) as the fixed-point integer that is summed. */
LPX_HD uint64_t lpx_sample_fix(float w) {
    return (uint64_t)(w * (float)(1ull << LPX_SAMPLE_FIX_BITS));
}

/* Rank key of a candidate: larger w first, then lower id. Distinct per token. */
LPX_HD uint64_t lpx_sample_key(float w, int32_t id, int32_t vocab) {
    uint32_t wb;
#if defined(__CUDA_ARCH__)
    wb = __float_as_uint(w);
#else
    __builtin_memcpy(&wb, &w, sizeof wb);
#endif
    return ((uint64_t)wb << 32) | (uint64_t)(uint32_t)(vocab - 1 - id);
}

/* The mass top_p keeps: top_p of total, at least 1, at most total. */
LPX_HD uint64_t lpx_sample_top_p_want(float top_p, uint64_t total) {
    double want = LPX_DMUL((double)top_p, (double)total);
    uint64_t w = want >= 18446744073709551615.0 ? total : (uint64_t)want;
    if (w > total) w = total;
    return w < 1 ? 1 : w;
}

#endif

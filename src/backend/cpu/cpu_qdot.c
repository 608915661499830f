#include "backend/cpu/cpu_qdot.h"

#include "format/ggml.h"

#include <math.h>
#include <string.h>

/* ---- plain C: the reference --------------------------------------------- */

static float rd_f16(const uint8_t *p) {
    return lpx_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* d = amax / 127 and q = round-half-even(x / d), as the AVX2 version rounds
 * (cvtps uses the default rounding mode), so both give the same bytes. Inputs
 * are finite (a NaN or inf activation is a broken model either way). */
static void quantize_c(const float *x, lpx_blk_q8 *out, int64_t n) {
    for (int64_t b = 0; b < n / LPX_QK; b++, x += LPX_QK) {
        float amax = 0.0f;
        for (int j = 0; j < LPX_QK; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < LPX_QK; j++) {
            int q = (int)nearbyintf(x[j] * id);
            out[b].q[j] = (int8_t)q;
            sum += q;
        }
        out[b].d = d;
        out[b].s = d * (float)sum;
    }
}

static float dot_q8_0_c(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += LPX_Q8_0_BYTES) {
        int s = 0;
        for (int j = 0; j < LPX_QK; j++)
            s += (int8_t)w[2 + j] * x[b].q[j];
        acc += rd_f16(w) * x[b].d * (float)s;
    }
    return acc;
}

static float dot_q4_0_c(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += LPX_Q4_0_BYTES) {
        int s = 0;
        for (int j = 0; j < LPX_QK / 2; j++)
            s += ((w[2 + j] & 15) - 8) * x[b].q[j] + ((w[2 + j] >> 4) - 8) * x[b].q[j + 16];
        acc += rd_f16(w) * x[b].d * (float)s;
    }
    return acc;
}

static float dot_q4_1_c(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++, w += LPX_Q4_1_BYTES) {
        int s = 0;
        for (int j = 0; j < LPX_QK / 2; j++)
            s += (w[4 + j] & 15) * x[b].q[j] + (w[4 + j] >> 4) * x[b].q[j + 16];
        acc += rd_f16(w) * x[b].d * (float)s + rd_f16(w + 2) * x[b].s;
    }
    return acc;
}

/* K-quants: each 32-element sub-block (two 16-element halves in Q6_K) meets
 * one activation block; nb counts activation blocks (8 per super-block). */
static float dot_q45_k_c(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb, bool five) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb / 8; i++, w += five ? LPX_Q5_K_BYTES : LPX_Q4_K_BYTES, x += 8) {
        const float d = rd_f16(w), dmin = rd_f16(w + 2);
        const uint8_t *qh = w + 16, *q = w + (five ? 48 : 16);
        uint8_t sc[8], m[8];
        lpx_blk_k4_scales(w + 4, sc, m);
        for (int j = 0; j < 8; j++) {
            const uint8_t *qs = q + 32 * (j / 2);
            int s = 0;
            for (int l = 0; l < LPX_QK; l++) {
                int v = (j & 1 ? qs[l] >> 4 : qs[l] & 15) + (five ? ((qh[l] >> j) & 1) << 4 : 0);
                s += v * x[j].q[l];
            }
            acc += d * (float)sc[j] * x[j].d * (float)s - dmin * (float)m[j] * x[j].s;
        }
    }
    return acc;
}

static float dot_q4_k_c(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb) {
    return dot_q45_k_c(w, x, nb, false);
}

static float dot_q5_k_c(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb) {
    return dot_q45_k_c(w, x, nb, true);
}

/* Element 32 k + l of a 128-element half: the low (k < 2) or high nibble of
 * ql[l + 32 (k & 1)], bits 2k, 2k+1 of qh[l] on top, minus 32; scales
 * sc[2k] and sc[2k + 1] for its two 16-element halves. */
static float dot_q6_k_c(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb) {
    float acc = 0.0f;
    for (int64_t i = 0; i < nb / 8; i++, w += LPX_Q6_K_BYTES) {
        const float d = rd_f16(w + 208);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w + 64 * h, *qh = w + 128 + 32 * h;
            const int8_t *sc = (const int8_t *)(w + 192 + 8 * h);
            for (int k = 0; k < 4; k++, x++) {
                int s[2] = {0, 0};
                for (int l = 0; l < LPX_QK; l++) {
                    int lo = ql[l + 32 * (k & 1)];
                    int v = ((k < 2 ? lo & 15 : lo >> 4) | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
                    s[l / 16] += v * x->q[l];
                }
                acc += d * x->d * (float)(sc[2 * k] * s[0] + sc[2 * k + 1] * s[1]);
            }
        }
    }
    return acc;
}

/* ---- AVX2 ---------------------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define HAVE_AVX2 1

AVX2 static inline float f16_avx2(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

AVX2 static inline float hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 bytes of nibbles to 32 bytes 0..15 in element order (low nibbles first). */
AVX2 static inline __m256i nibbles_avx2(const uint8_t *p) {
    __m128i t = _mm_loadu_si128((const __m128i *)p);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* Sums of 4 products of unsigned u (0..255) and signed q bytes, as 8 floats.
 * maddubs adds pairs into int16 without overflow for the ranges used here
 * (|q| <= 127, u <= 128: 2 * 128 * 127 < 32768). */
AVX2 static inline __m256 madd_u8i8_avx2(__m256i u, __m256i q) {
    __m256i p16 = _mm256_maddubs_epi16(u, q);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/* Signed weights w times signed activations: |w| and q with w's sign. */
AVX2 static inline __m256 madd_i8i8_avx2(__m256i w, __m256i q) {
    return madd_u8i8_avx2(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q, w));
}

AVX2 static void quantize_avx2(const float *x, lpx_blk_q8 *out, int64_t n) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t b = 0; b < n / LPX_QK; b++, x += LPX_QK) {
        __m256 v[4];
        for (int k = 0; k < 4; k++)
            v[k] = _mm256_loadu_ps(x + 8 * k);
        __m256 m = _mm256_max_ps(
            _mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
            _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m256 mul = _mm256_set1_ps(id);
        __m256i i[4];
        for (int k = 0; k < 4; k++)
            i[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], mul));
        __m256i sum = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        /* packs work per 128-bit lane; the permute puts the 4-byte groups back in order */
        __m256i p =
            _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)out[b].q, p);
        out[b].d = d;
        out[b].s = d * (float)_mm_cvtsi128_si32(s4);
    }
}

/* One weight block of a 32-block type against nt tokens' activation blocks
 * (x, x + ldx, ...): the weights are unpacked once and used for every token;
 * acc[k] and mins[k] (Q4_1's offsets, lane 1) are token k's. Per token the
 * operations are the same whatever nt is, so one token alone and four at
 * once give the same bits (batch invariance). */
#define NT_MAX 4
AVX2 static inline __attribute__((always_inline)) void
block_avx2(const lpx_dtype t, const uint8_t *w, const lpx_blk_q8 *x, int64_t ldx, const int nt,
           __m256 *acc, __m128 *mins) {
    if (t == LPX_DT_Q4_1) {
        int32_t dm;
        memcpy(&dm, w, 4);
        const __m128 dmf = _mm_cvtph_ps(_mm_cvtsi32_si128(dm)); /* (d, m) */
        const __m256i q = nibbles_avx2(w + 4);
#pragma GCC unroll 4
        for (int k = 0; k < nt; k++) {
            const lpx_blk_q8 *xk = x + k * ldx;
            /* (d, m) * (x.d, x.s) = (scale, offset) */
            __m128 f = _mm_mul_ps(dmf, _mm_castpd_ps(_mm_load_sd((const double *)&xk->d)));
            mins[k] = _mm_add_ps(mins[k], f);
            __m256 p = madd_u8i8_avx2(q, _mm256_loadu_si256((const __m256i *)xk->q));
            acc[k] = _mm256_fmadd_ps(_mm256_broadcastss_ps(f), p, acc[k]);
        }
        return;
    }
    const float d = f16_avx2(w);
    const __m256i q = t == LPX_DT_Q8_0 ? _mm256_loadu_si256((const __m256i *)(w + 2))
                                       : _mm256_sub_epi8(nibbles_avx2(w + 2), _mm256_set1_epi8(8));
#pragma GCC unroll 4
    for (int k = 0; k < nt; k++) {
        const lpx_blk_q8 *xk = x + k * ldx;
        __m256 p = madd_i8i8_avx2(q, _mm256_loadu_si256((const __m256i *)xk->q));
        acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d * xk->d), p, acc[k]);
    }
}

/* out[k] = the row's dot with token k's nb activation blocks (x + k * nb).
 * Two accumulators per token, over even and odd blocks, hide the FMA latency. */
AVX2 static inline __attribute__((always_inline)) void dotn_avx2(const lpx_dtype t,
                                                                 const uint8_t *w,
                                                                 const lpx_blk_q8 *x, int64_t nb,
                                                                 const int nt, float *out) {
    const int bytes = t == LPX_DT_Q8_0   ? LPX_Q8_0_BYTES
                      : t == LPX_DT_Q4_1 ? LPX_Q4_1_BYTES
                                         : LPX_Q4_0_BYTES;
    __m256 a0[NT_MAX], a1[NT_MAX];
    __m128 m[NT_MAX];
#pragma GCC unroll 4
    for (int k = 0; k < nt; k++) {
        a0[k] = a1[k] = _mm256_setzero_ps();
        m[k] = _mm_setzero_ps();
    }
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, w += 2 * bytes) {
        block_avx2(t, w, x + b, nb, nt, a0, m);
        block_avx2(t, w + bytes, x + b + 1, nb, nt, a1, m);
    }
    if (b < nb) block_avx2(t, w, x + b, nb, nt, a0, m);
#pragma GCC unroll 4
    for (int k = 0; k < nt; k++) {
        out[k] = hsum_avx2(_mm256_add_ps(a0[k], a1[k]));
        if (t == LPX_DT_Q4_1) out[k] += _mm_cvtss_f32(_mm_movehdup_ps(m[k]));
    }
}

#define DOTS_AVX2(name, T)                                                                         \
    AVX2 static float dot_##name##_avx2(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb) {       \
        float out;                                                                                 \
        dotn_avx2(T, w, x, nb, 1, &out);                                                           \
        return out;                                                                                \
    }                                                                                              \
    AVX2 static void dot4_##name##_avx2(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb,         \
                                        float out[4]) {                                            \
        dotn_avx2(T, w, x, nb, 4, out);                                                            \
    }
DOTS_AVX2(q8_0, LPX_DT_Q8_0)
DOTS_AVX2(q4_0, LPX_DT_Q4_0)
DOTS_AVX2(q4_1, LPX_DT_Q4_1)

/* Q4_K, Q5_K: a pair of sub-blocks per 32 bytes of nibbles; Q5_K's fifth
 * bits come from qh, bit 2p (2p + 1) of each byte for pair p's low (high)
 * sub-block, shifted down 2 per pair. The mins go through the block sums. */
AVX2 static inline float dot_q45_k_avx2(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb,
                                        bool five) {
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    float mins = 0.0f;
    for (int64_t i = 0; i < nb / 8; i++, w += five ? LPX_Q5_K_BYTES : LPX_Q4_K_BYTES, x += 8) {
        const float d = f16_avx2(w), dmin = f16_avx2(w + 2);
        const uint8_t *q = w + (five ? 48 : 16);
        uint8_t sc[8], m[8];
        lpx_blk_k4_scales(w + 4, sc, m);
        __m256i hb = five ? _mm256_loadu_si256((const __m256i *)(w + 16)) : _mm256_setzero_si256();
        for (int p = 0; p < 4; p++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(q + 32 * p));
            __m256i lo = _mm256_and_si256(raw, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            if (five) {
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), b4));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hb, 3), b4));
                hb = _mm256_srli_epi16(hb, 2);
            }
            const lpx_blk_q8 *x0 = x + 2 * p, *x1 = x0 + 1;
            a0 =
                _mm256_fmadd_ps(_mm256_set1_ps(d * (float)sc[2 * p] * x0->d),
                                madd_u8i8_avx2(lo, _mm256_loadu_si256((const __m256i *)x0->q)), a0);
            a1 =
                _mm256_fmadd_ps(_mm256_set1_ps(d * (float)sc[2 * p + 1] * x1->d),
                                madd_u8i8_avx2(hi, _mm256_loadu_si256((const __m256i *)x1->q)), a1);
            mins += dmin * ((float)m[2 * p] * x0->s + (float)m[2 * p + 1] * x1->s);
        }
    }
    return hsum_avx2(_mm256_add_ps(a0, a1)) - mins;
}

AVX2 static float dot_q4_k_avx2(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb) {
    return dot_q45_k_avx2(w, x, nb, false);
}

AVX2 static float dot_q5_k_avx2(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb) {
    return dot_q45_k_avx2(w, x, nb, true);
}

/* Q6_K: per activation block the 6-bit values as signed bytes (sign trick),
 * pair sums scaled by the two 16-element scales in one madd. */
AVX2 static float dot_q6_k_avx2(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb) {
    const __m256i m4 = _mm256_set1_epi8(15), b45 = _mm256_set1_epi8(0x30),
                  off = _mm256_set1_epi8(32);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb / 8; i++, w += LPX_Q6_K_BYTES) {
        const float d = f16_avx2(w + 208);
        for (int h = 0; h < 2; h++) {
            const __m256i ql[2] = {_mm256_loadu_si256((const __m256i *)(w + 64 * h)),
                                   _mm256_loadu_si256((const __m256i *)(w + 64 * h + 32))};
            __m256i qh = _mm256_loadu_si256((const __m256i *)(w + 128 + 32 * h));
            const int8_t *sc = (const int8_t *)(w + 192 + 8 * h);
            for (int k = 0; k < 4; k++, x++) {
                __m256i lo = k < 2 ? _mm256_and_si256(ql[k & 1], m4)
                                   : _mm256_and_si256(_mm256_srli_epi16(ql[k & 1], 4), m4);
                __m256i v = _mm256_sub_epi8(
                    _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), b45)), off);
                qh = _mm256_srli_epi16(qh, 2);
                __m256i xq = _mm256_loadu_si256((const __m256i *)x->q);
                __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(xq, v));
                __m256i s16 =
                    _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
                __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, s16));
                if (k & 1)
                    a1 = _mm256_fmadd_ps(_mm256_set1_ps(d * x->d), p, a1);
                else
                    a0 = _mm256_fmadd_ps(_mm256_set1_ps(d * x->d), p, a0);
            }
        }
    }
    return hsum_avx2(_mm256_add_ps(a0, a1));
}

/* AVX2 and FMA as libgcc/compiler-rt see them (which checks that the OS saves
 * the AVX state); F16C from cpuid itself (clang's builtin does not know it). */
static bool has_avx2(void) {
    unsigned a, b, c, d;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#else
#define HAVE_AVX2 0
static bool has_avx2(void) {
    return false;
}
#endif

bool cpu_qkernels_init(cpu_qkernels *k, const char *isa) {
    memset(k, 0, sizeof *k);
    bool any = !isa || !isa[0], c = !any && !strcmp(isa, "c"), avx2 = !any && !strcmp(isa, "avx2");
    if (!any && !c && !avx2) return false;
    if (avx2 && !has_avx2()) return false;
#if HAVE_AVX2
    if (!c && has_avx2()) {
        k->isa = "avx2";
        k->quantize = quantize_avx2;
        k->dot[LPX_DT_Q8_0] = dot_q8_0_avx2;
        k->dot[LPX_DT_Q4_0] = dot_q4_0_avx2;
        k->dot[LPX_DT_Q4_1] = dot_q4_1_avx2;
        k->dot4[LPX_DT_Q8_0] = dot4_q8_0_avx2;
        k->dot4[LPX_DT_Q4_0] = dot4_q4_0_avx2;
        k->dot4[LPX_DT_Q4_1] = dot4_q4_1_avx2;
        k->dot[LPX_DT_Q4_K] = dot_q4_k_avx2;
        k->dot[LPX_DT_Q5_K] = dot_q5_k_avx2;
        k->dot[LPX_DT_Q6_K] = dot_q6_k_avx2;
        return true;
    }
#endif
    k->isa = "c";
    k->quantize = quantize_c;
    k->dot[LPX_DT_Q8_0] = dot_q8_0_c;
    k->dot[LPX_DT_Q4_0] = dot_q4_0_c;
    k->dot[LPX_DT_Q4_1] = dot_q4_1_c;
    k->dot[LPX_DT_Q4_K] = dot_q4_k_c;
    k->dot[LPX_DT_Q5_K] = dot_q5_k_c;
    k->dot[LPX_DT_Q6_K] = dot_q6_k_c;
    return true;
}

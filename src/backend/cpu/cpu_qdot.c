#include "backend/cpu/cpu_qdot.h"

#include "format/ggml.h"

#include <math.h>
#include <string.h>

/* ---- plain C: the reference --------------------------------------------- */

/* Dot product of one weight row of nb activation blocks' length (w: the row's
 * bytes, x: [nb] blocks). */
typedef float (*cpu_qdot_fn)(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb);

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

/* 16 bytes of nibbles to 32 bytes 0..15 in element order (low nibbles first). */
AVX2 static inline __m256i nibbles_avx2(const uint8_t *p) {
    /* the 16 bytes in both halves (one load), the upper half shifted by 4 */
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    v = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
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

/* The tile: 8 rows in the 8 float lanes of one accumulator per token, so the
 * scales of 8 rows are applied by one multiply and no float sum runs across
 * lanes. Per (row, token) and activation block b, in block order:
 *   acc = fma(d_w[b] * d_x[b], (float)isum[b], acc)   isum: the exact integer dot
 *   acc = fma(m_w[b], s_x[b], acc)                     types with an offset
 * where Q4_0 is read as unsigned nibbles with the offset m = -8 d, Q4_1 and
 * the K-quants' sub-blocks (d = d * sc[j], m = -dmin * m[j]) likewise, and
 * Q8_0 and Q6_K are signed (Q6_K's two 16-element scales go into isum).
 * Lanes never mix, so a row's result does not depend on its lane, on the
 * other rows or on T. */
#define ALWAYS __attribute__((always_inline))

static inline bool is_k(lpx_dtype t) {
    return t == LPX_DT_Q4_K || t == LPX_DT_Q5_K || t == LPX_DT_Q6_K;
}

static inline int wbytes(lpx_dtype t) { /* of one weight block (32 or 256 elements) */
    return t == LPX_DT_Q8_0   ? LPX_Q8_0_BYTES
           : t == LPX_DT_Q4_0 ? LPX_Q4_0_BYTES
           : t == LPX_DT_Q4_1 ? LPX_Q4_1_BYTES
           : t == LPX_DT_Q4_K ? LPX_Q4_K_BYTES
           : t == LPX_DT_Q5_K ? LPX_Q5_K_BYTES
                              : LPX_Q6_K_BYTES;
}

/* The 32 values of activation block j of weight block s (j = 0 for the
 * 32-element types), as bytes: unsigned, or signed for Q8_0 and Q6_K. */
AVX2 static inline ALWAYS __m256i wvals_avx2(const lpx_dtype t, const uint8_t *s, const int j) {
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m128i jc = _mm_cvtsi32_si128(j);
    switch (t) {
    case LPX_DT_Q8_0:
        return _mm256_loadu_si256((const __m256i *)(s + 2));
    case LPX_DT_Q4_0:
        return nibbles_avx2(s + 2);
    case LPX_DT_Q4_1:
        return nibbles_avx2(s + 4);
    case LPX_DT_Q4_K:
    case LPX_DT_Q5_K: {
        __m256i raw =
            _mm256_loadu_si256((const __m256i *)(s + (t == LPX_DT_Q5_K ? 48 : 16) + 32 * (j >> 1)));
        __m256i v = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(raw, 4) : raw, m4);
        if (t == LPX_DT_Q4_K) return v;
        __m256i hb = _mm256_srl_epi16(_mm256_loadu_si256((const __m256i *)(s + 16)), jc);
        return _mm256_or_si256(v, _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(1)), 4));
    }
    default: { /* Q6_K: sub-block j = 4 h + k */
        const int h = j >> 2, k = j & 3;
        __m256i ql = _mm256_loadu_si256((const __m256i *)(s + 64 * h + 32 * (k & 1)));
        __m256i lo = _mm256_and_si256(k < 2 ? ql : _mm256_srli_epi16(ql, 4), m4);
        /* bits 2k, 2k + 1 of each qh byte moved to bits 4, 5 by one 16-bit
         * shift (none for k = 2); what crosses between bytes is masked off */
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(s + 128 + 32 * h));
        const __m256i hi = _mm256_and_si256(k < 2    ? _mm256_slli_epi16(qh, 4 - 2 * k)
                                            : k == 2 ? qh
                                                     : _mm256_srli_epi16(qh, 2),
                                            _mm256_set1_epi8(0x30));
        return _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
    }
    }
}

/* Lane l of the tile's accumulators holds row LANE_ROW[l] (the order the
 * gather below produces without a cross-lane permute). */
static const int LANE_ROW[8] = {0, 1, 4, 5, 2, 3, 6, 7};

AVX2 static inline ALWAYS int i32_at(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The f16 pair at p[r] + off of 8 rows (Q4_1's d and m; for the other types
 * the second is the first weight bytes, unused) as 8 floats each, in lane
 * order. Inserts with constant lanes, which GCC and clang take as immediates. */
AVX2 static inline ALWAYS void gather_f16x2_avx2(const uint8_t *const p[8], size_t off,
                                                 __m256 *first, __m256 *second) {
    __m128i lo = _mm_cvtsi32_si128(i32_at(p[0] + off)), hi = _mm_cvtsi32_si128(i32_at(p[4] + off));
#define INS(r)                                                                                     \
    lo = _mm_insert_epi32(lo, i32_at(p[r] + off), r);                                              \
    hi = _mm_insert_epi32(hi, i32_at(p[r + 4] + off), r)
    INS(1);
    INS(2);
    INS(3);
#undef INS
    /* a = (rows 0, 1 | 2, 3) and b = (4, 5 | 6, 7) as (first, second) pairs */
    const __m256 a = _mm256_cvtph_ps(lo), b = _mm256_cvtph_ps(hi);
    *first = _mm256_shuffle_ps(a, b, 0x88);
    *second = _mm256_shuffle_ps(a, b, 0xdd);
}

/* Lane l = the sum of p[LANE_ROW[l]]'s 8 lanes (integer, exact). */
AVX2 static inline ALWAYS __m256i reduce8_avx2(const __m256i p[8]) {
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[4], p[5]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[2], p[3]), _mm256_hadd_epi32(p[6], p[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

/* lpx_blk_k4_scales for the super-blocks at p[r] + off of 8 rows at once, so
 * no scalar code runs per row: out[j] holds sub-block j's 6-bit scales of the
 * rows in lane order (LANE_ROW), then its 8 mins. Per row the scale
 * bytes are three words a, b, c: sc[0..3] = a & 63, sc[4..7] = (c & 15) |
 * (a >> 2 & 0x30), m[0..3] = b & 63, m[4..7] = (c >> 4) | (b >> 2 & 0x30),
 * made as the words (sc0-3, sc4-7, m0-3, m4-7); a 256-bit register holds
 * lanes i and i + 4, so unpacks, a permute and 64-bit unpacks transpose. */
AVX2 static inline ALWAYS void k4_scales_avx2(const uint8_t *const p[8], size_t off,
                                              uint8_t out[8][16]) {
    const __m256i shift = _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4),
                  lo_mask = _mm256_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f,
                                              0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f),
                  hi_mask =
                      _mm256_setr_epi32(0, 0x30303030, 0, 0x30303030, 0, 0x30303030, 0, 0x30303030);
    __m256i y[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        /* 16 bytes from the 12 scale bytes on: the rest is the block's own */
        __m256i v = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(p[LANE_ROW[i + 4]] + off)),
                                     _mm_loadu_si128((const __m128i *)(p[LANE_ROW[i]] + off)));
        __m256i lo = _mm256_srlv_epi32(_mm256_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)), shift);
        __m256i hi = _mm256_srli_epi32(_mm256_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)), 2);
        y[i] = _mm256_or_si256(_mm256_and_si256(lo, lo_mask), _mm256_and_si256(hi, hi_mask));
    }
    /* bytes: a (column pairs of lanes 0, 1), then 16-bit: b (4 lanes) per half */
    const __m256i a0 = _mm256_unpacklo_epi8(y[0], y[1]), a1 = _mm256_unpackhi_epi8(y[0], y[1]),
                  a2 = _mm256_unpacklo_epi8(y[2], y[3]), a3 = _mm256_unpackhi_epi8(y[2], y[3]);
    const __m256i b[4] = {_mm256_unpacklo_epi16(a0, a2), _mm256_unpackhi_epi16(a0, a2),
                          _mm256_unpacklo_epi16(a1, a3), _mm256_unpackhi_epi16(a1, a3)};
    /* 64-bit column 4i + c of all 8 lanes at c[i] in the order 0, 2, 1, 3, so
     * the 64-bit unpacks pair scale column j with min column 8 + j */
    const __m256i halves = _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7);
    __m256i c[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        c[i] = _mm256_permutevar8x32_epi32(b[i], halves);
    _mm256_storeu_si256((__m256i *)out[0], _mm256_unpacklo_epi64(c[0], c[2]));
    _mm256_storeu_si256((__m256i *)out[2], _mm256_unpackhi_epi64(c[0], c[2]));
    _mm256_storeu_si256((__m256i *)out[4], _mm256_unpacklo_epi64(c[1], c[3]));
    _mm256_storeu_si256((__m256i *)out[6], _mm256_unpackhi_epi64(c[1], c[3]));
}

/* Q6_K's two 16-element scales sc[0], sc[1] of one sub-block as the int16
 * factors of madd: sc[0] in the low 128 bits, sc[1] in the high (each byte
 * put in an int16's top byte, then an arithmetic shift sign-extends it). */
AVX2 static inline ALWAYS __m256i q6_scales_avx2(const uint8_t *sc) {
    uint16_t v;
    memcpy(&v, sc, 2);
    const __m256i top =
        _mm256_setr_epi8(-128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0,
                         -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1);
    return _mm256_srai_epi16(_mm256_shuffle_epi8(_mm256_set1_epi16((short)v), top), 8);
}

AVX2 static inline ALWAYS void tile_avx2(const lpx_dtype t, const uint8_t *w, size_t rb,
                                         const int R, const lpx_blk_q8 *x, int64_t nb, const int T,
                                         float out[][CPU_QT_ROWS]) {
    const bool k = is_k(t), sgn = t == LPX_DT_Q8_0 || t == LPX_DT_Q6_K,
               offset = t != LPX_DT_Q8_0 && t != LPX_DT_Q6_K;
    const int G = k ? 8 : 1, bytes = wbytes(t);
    const __m256i ones = _mm256_set1_epi16(1);
    const uint8_t *p[8]; /* the rows; those past R repeat row 0 (computed, not stored) */
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        p[r] = w + (r < R ? (size_t)r * rb : 0);
    const __m256i lane_of = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7); /* = LANE_ROW */
    __m256 acc[CPU_QT_TOKENS];
#pragma GCC unroll 4
    for (int i = 0; i < T; i++)
        acc[i] = _mm256_setzero_ps();
    __m256 dsb = _mm256_setzero_ps(), msb = dsb; /* K-quants: the super-block's d, -dmin */
    uint8_t scm[8][16]; /* Q4_K, Q5_K: [sub-block][8 scales, 8 mins by lane] */
    for (int64_t b0 = 0; b0 < nb; b0 += G) {
        const size_t off = (size_t)(b0 / G) * (size_t)bytes;
        /* Q6_K's d is the second of the pair at 206: one at 208 would end past the block */
        if (k) {
            __m256 second;
            gather_f16x2_avx2(p, off + (t == LPX_DT_Q6_K ? 206 : 0), &dsb, &second);
            if (t == LPX_DT_Q6_K) {
                dsb = second;
            } else {
                msb = _mm256_xor_ps(second, _mm256_set1_ps(-0.0f));
                k4_scales_avx2(p, off + 4, scm);
            }
        }
        /* unrolled, so a sub-block's offsets and shifts are constants (Q6_K:
         * 25% fewer instructions) */
#pragma GCC unroll 8
        for (int j = 0; j < G; j++) {
            const int64_t b = b0 + j;
            __m256i q[8], a[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                q[r] = wvals_avx2(t, p[r] + off, j);
                a[r] = sgn ? _mm256_sign_epi8(q[r], q[r]) : q[r];
            }
            /* Q6_K: sub-block j = 4 h + k has scales 8 h + 2 k and the next */
            const size_t sc6 = off + 192 + 8 * (size_t)(j >> 2) + 2 * (size_t)(j & 3);
            __m256 d8 = dsb, m8 = msb;
            if (k && t != LPX_DT_Q6_K) {
                /* the widenings read the low 8 bytes: the scales, then the mins */
                const __m128i sc = _mm_loadu_si128((const __m128i *)scm[j]),
                              mn = _mm_unpackhi_epi64(sc, sc);
                d8 = _mm256_mul_ps(dsb, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc)));
                m8 = _mm256_mul_ps(msb, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mn)));
            } else if (!k) {
                __m256 second;
                gather_f16x2_avx2(p, off, &d8, &second);
                if (t == LPX_DT_Q4_1) m8 = second;
                if (t == LPX_DT_Q4_0) m8 = _mm256_mul_ps(d8, _mm256_set1_ps(-8.0f));
            }
#pragma GCC unroll 4
            for (int i = 0; i < T; i++) {
                const lpx_blk_q8 *xb = x + i * nb + b;
                const __m256i xq = _mm256_loadu_si256((const __m256i *)xb->q);
                __m256i s[8];
#pragma GCC unroll 8
                for (int r = 0; r < 8; r++) {
                    __m256i p16 = _mm256_maddubs_epi16(a[r], sgn ? _mm256_sign_epi8(xq, q[r]) : xq);
                    s[r] = _mm256_madd_epi16(p16,
                                             t == LPX_DT_Q6_K ? q6_scales_avx2(p[r] + sc6) : ones);
                }
                const __m256 f = _mm256_cvtepi32_ps(reduce8_avx2(s));
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_set1_ps(xb->d)), f, acc[i]);
                if (offset) acc[i] = _mm256_fmadd_ps(m8, _mm256_set1_ps(xb->s), acc[i]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < T; i++)
        _mm256_storeu_ps(out[i], _mm256_permutevar8x32_ps(acc[i], lane_of));
}

#define TILE_AVX2(name, TYPE)                                                                      \
    AVX2 static void tile_##name##_avx2(const uint8_t *w, size_t rb, int R, const lpx_blk_q8 *x,   \
                                        int64_t nb, int T, float out[][CPU_QT_ROWS]) {             \
        switch (T) { /* constant token counts, so each is unrolled */                              \
        case 4:                                                                                    \
            tile_avx2(TYPE, w, rb, R, x, nb, 4, out);                                              \
            return;                                                                                \
        case 3:                                                                                    \
            tile_avx2(TYPE, w, rb, R, x, nb, 3, out);                                              \
            return;                                                                                \
        case 2:                                                                                    \
            tile_avx2(TYPE, w, rb, R, x, nb, 2, out);                                              \
            return;                                                                                \
        default:                                                                                   \
            tile_avx2(TYPE, w, rb, R, x, nb, 1, out);                                              \
        }                                                                                          \
    }
TILE_AVX2(q8_0, LPX_DT_Q8_0)
TILE_AVX2(q4_0, LPX_DT_Q4_0)
TILE_AVX2(q4_1, LPX_DT_Q4_1)
TILE_AVX2(q4_k, LPX_DT_Q4_K)
TILE_AVX2(q5_k, LPX_DT_Q5_K)
TILE_AVX2(q6_k, LPX_DT_Q6_K)

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

/* The plain C tile: each (row, token) one call of the type's dot. */
static void tile_c(cpu_qdot_fn dot, const uint8_t *w, size_t rb, int R, const lpx_blk_q8 *x,
                   int64_t nb, int T, float out[][CPU_QT_ROWS]) {
    for (int i = 0; i < T; i++)
        for (int r = 0; r < R; r++)
            out[i][r] = dot(w + (size_t)r * rb, x + i * nb, nb);
}

#define TILE_C(name)                                                                               \
    static void tile_##name##_c(const uint8_t *w, size_t rb, int R, const lpx_blk_q8 *x,           \
                                int64_t nb, int T, float out[][CPU_QT_ROWS]) {                     \
        tile_c(dot_##name##_c, w, rb, R, x, nb, T, out);                                           \
    }
TILE_C(q8_0)
TILE_C(q4_0)
TILE_C(q4_1)
TILE_C(q4_k)
TILE_C(q5_k)
TILE_C(q6_k)

bool cpu_qkernels_init(cpu_qkernels *k, const char *isa) {
    memset(k, 0, sizeof *k);
    bool any = !isa || !isa[0], c = !any && !strcmp(isa, "c"), avx2 = !any && !strcmp(isa, "avx2");
    if (!any && !c && !avx2) return false;
    if (avx2 && !has_avx2()) return false;
#if HAVE_AVX2
    if (!c && has_avx2()) {
        k->isa = "avx2";
        k->quantize = quantize_avx2;
        k->tile[LPX_DT_Q8_0] = tile_q8_0_avx2;
        k->tile[LPX_DT_Q4_0] = tile_q4_0_avx2;
        k->tile[LPX_DT_Q4_1] = tile_q4_1_avx2;
        k->tile[LPX_DT_Q4_K] = tile_q4_k_avx2;
        k->tile[LPX_DT_Q5_K] = tile_q5_k_avx2;
        k->tile[LPX_DT_Q6_K] = tile_q6_k_avx2;
        return true;
    }
#endif
    k->isa = "c";
    k->quantize = quantize_c;
    k->tile[LPX_DT_Q8_0] = tile_q8_0_c;
    k->tile[LPX_DT_Q4_0] = tile_q4_0_c;
    k->tile[LPX_DT_Q4_1] = tile_q4_1_c;
    k->tile[LPX_DT_Q4_K] = tile_q4_k_c;
    k->tile[LPX_DT_Q5_K] = tile_q5_k_c;
    k->tile[LPX_DT_Q6_K] = tile_q6_k_c;
    return true;
}

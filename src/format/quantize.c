/* Float rows into ggml blocks. Layouts: src/format/blocks.h; methods: quantize.h and
 * docs/quantize.md. Each block is quantized on its own, so a row's result does not
 * depend on the rows around it. */
#include "format/quantize.h"

#include "format/blocks.h"
#include "format/ggml.h"

#include <math.h>
#include <string.h>

/* Candidate grids each fit tries: iscale = (nmax + GRID_STEP * k) / range, |k| <= GRID_K. */
#define GRID_K 10
#define GRID_STEP 0.1f
/* Rounds of quantize-with-the-best-fit, refit, after the grid. */
#define REFIT_ROUNDS 2

uint16_t lpx_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
    if (ax > 0x7f800000) return (uint16_t)(sign | 0x7e00);  /* NaN */
    if (ax >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* rounds past 65504: inf */
    if (ax < 0x38800000) { /* below the smallest normal half: a subnormal or zero */
        if (ax < 0x33000000) return (uint16_t)sign; /* under half the least subnormal */
        uint32_t man = (ax & 0x7fffff) | 0x800000, e = ax >> 23; /* value = man * 2^(e-150) */
        uint32_t shift = 126 - e, h = man >> shift, rem = man & ((1u << shift) - 1),
                 half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((ax >> 13) - (112u << 10)), rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

uint16_t lpx_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* The f16 a scale is stored as, read back: what dequantization will multiply by. */
static float as_f16(float f) {
    return lpx_f16_to_f32(lpx_f32_to_f16(f));
}

static int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

static void q8_0(const float *x, uint8_t *b) {
    float amax = 0;
    for (int j = 0; j < LPX_QK; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    float d = as_f16(amax / 127), id = d ? 1 / d : 0;
    wr16(b, lpx_f32_to_f16(amax / 127));
    for (int j = 0; j < LPX_QK; j++)
        b[2 + j] = (uint8_t)(int8_t)clampi((int)lrintf(x[j] * id), -127, 127);
}

static void q4_0(const float *x, uint8_t *b) {
    float vmax = 0; /* the value of largest magnitude, with its sign: it becomes q - 8 = -8 */
    for (int j = 0; j < LPX_QK; j++)
        if (fabsf(x[j]) > fabsf(vmax)) vmax = x[j];
    float d = as_f16(vmax / -8), id = d ? 1 / d : 0;
    wr16(b, lpx_f32_to_f16(vmax / -8));
    for (int j = 0; j < 16; j++) {
        int lo = clampi((int)lrintf(x[j] * id) + 8, 0, 15);
        int hi = clampi((int)lrintf(x[j + 16] * id) + 8, 0, 15);
        b[2 + j] = (uint8_t)(lo | hi << 4);
    }
}

static void q4_1(const float *x, uint8_t *b) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < LPX_QK; j++) {
        mn = fminf(mn, x[j]);
        mx = fmaxf(mx, x[j]);
    }
    float d = as_f16((mx - mn) / 15), m = as_f16(mn), id = d ? 1 / d : 0;
    wr16(b, lpx_f32_to_f16((mx - mn) / 15));
    wr16(b + 2, lpx_f32_to_f16(mn));
    for (int j = 0; j < 16; j++) {
        int lo = clampi((int)lrintf((x[j] - m) * id), 0, 15);
        int hi = clampi((int)lrintf((x[j + 16] - m) * id), 0, 15);
        b[4 + j] = (uint8_t)(lo | hi << 4);
    }
}

/* Weighted least squares of x ~ s * q + o over the n values for fixed q: the pair (s, o)
 * with o <= 0 (asym) or o == 0; returns the weighted squared error. */
static float lsq(int n, const float *x, const float *w, const int8_t *q, bool asym, float *s,
                 float *o) {
    double sw = 0, sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; i++) {
        sw += w[i];
        sq += w[i] * q[i];
        sqq += (double)w[i] * q[i] * q[i];
        sx += w[i] * x[i];
        sqx += (double)w[i] * q[i] * x[i];
    }
    double det = sw * sqq - sq * sq, ss = 0, oo = 0;
    if (asym && det > 0) {
        ss = (sw * sqx - sq * sx) / det;
        oo = (sqq * sx - sq * sqx) / det;
    }
    if (!asym || det <= 0 || oo > 0) {
        oo = 0;
        ss = sqq > 0 ? sqx / sqq : 0;
    }
    double err = 0;
    for (int i = 0; i < n; i++) {
        double e = ss * q[i] + oo - x[i];
        err += w[i] * e * e;
    }
    *s = (float)ss;
    *o = (float)oo;
    return (float)err;
}

/* q[i] = round((x[i] - o) / s) clamped to [qmin, qmax]. */
static void quant_with(int n, const float *x, float s, float o, int qmin, int qmax, int8_t *q) {
    float is = s ? 1 / s : 0;
    for (int i = 0; i < n; i++)
        q[i] = (int8_t)clampi((int)lrintf((x[i] - o) * is), qmin, qmax);
}

/* The best fit of x[n] ~ s * q + o, q in [qmin, qmax]: over the candidate grid that
 * maps the range onto qmax - qmin + GRID_STEP * k steps, then REFIT_ROUNDS of
 * requantizing with the best fit. asym: o <= 0 is fitted (Q4_K/Q5_K's min); else o = 0
 * and the grid maps the value of largest magnitude to qmin (Q6_K, ggml's choice). */
static void fit(int n, const float *x, const float *w, int qmin, int qmax, bool asym, float *s,
                float *o) {
    float mn = 0, mx = 0, vmax = 0;
    for (int i = 0; i < n; i++) {
        mn = fminf(mn, x[i]);
        mx = fmaxf(mx, x[i]);
        if (fabsf(x[i]) > fabsf(vmax)) vmax = x[i];
    }
    *s = *o = 0;
    if (asym ? mx == mn : vmax == 0) return;
    int8_t q[LPX_QK];
    float best = INFINITY;
    for (int k = -GRID_K; k <= GRID_K; k++) {
        float steps = (float)(qmax - qmin) + GRID_STEP * (float)k, ts, to;
        if (asym)
            quant_with(n, x, (mx - mn) / steps, mn, qmin, qmax, q);
        else
            quant_with(n, x, vmax / ((float)qmin - GRID_STEP * (float)k), 0, qmin, qmax, q);
        float err = lsq(n, x, w, q, asym, &ts, &to);
        if (err < best && (asym ? ts > 0 : ts != 0)) {
            best = err;
            *s = ts;
            *o = to;
        }
    }
    for (int r = 0; r < REFIT_ROUNDS && *s != 0; r++) {
        float ts, to;
        quant_with(n, x, *s, *o, qmin, qmax, q);
        float err = lsq(n, x, w, q, asym, &ts, &to);
        if (!(err < best) || (asym ? ts <= 0 : ts == 0)) break;
        best = err;
        *s = ts;
        *o = to;
    }
}

/* Q4_K (five false) and Q5_K super-blocks of 256. */
static void q45_k(const float *x, uint8_t *b, bool five) {
    const int nmax = five ? 31 : 15;
    float w[LPX_QK], sc[8], mn[8], smax = 0, mmax = 0;
    for (int j = 0; j < 8; j++) {
        const float *xj = x + 32 * j;
        float ss = 0;
        for (int l = 0; l < 32; l++)
            ss += xj[l] * xj[l];
        float rms = sqrtf(ss / 32);
        for (int l = 0; l < 32; l++)
            w[l] = rms + fabsf(xj[l]);
        float o;
        fit(32, xj, w, 0, nmax, true, &sc[j], &o);
        mn[j] = -o;
        smax = fmaxf(smax, sc[j]);
        mmax = fmaxf(mmax, mn[j]);
    }
    float d = as_f16(smax / 63), dmin = as_f16(mmax / 63);
    uint8_t L[8], M[8];
    for (int j = 0; j < 8; j++) {
        L[j] = (uint8_t)(d ? clampi((int)lrintf(sc[j] / d), 0, 63) : 0);
        M[j] = (uint8_t)(dmin ? clampi((int)lrintf(mn[j] / dmin), 0, 63) : 0);
    }
    memset(b, 0, five ? LPX_Q5_K_BYTES : LPX_Q4_K_BYTES);
    wr16(b, lpx_f32_to_f16(smax / 63));
    wr16(b + 2, lpx_f32_to_f16(mmax / 63));
    uint8_t *s = b + 4, *qh = five ? b + 16 : NULL, *qs = b + (five ? 48 : 16);
    for (int j = 0; j < 4; j++) { /* the inverse of lpx_blk_k4_scales */
        s[j] = (uint8_t)(L[j] | (L[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(M[j] | (M[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((L[j + 4] & 0xf) | (M[j + 4] & 0xf) << 4);
    }
    for (int j = 0; j < 8; j++) {
        int8_t q[LPX_QK];
        quant_with(32, x + 32 * j, d * L[j], -dmin * M[j], 0, nmax, q);
        for (int l = 0; l < 32; l++) {
            qs[32 * (j / 2) + l] |= (uint8_t)((q[l] & 0xf) << (j & 1 ? 4 : 0));
            if (qh) qh[l] |= (uint8_t)(((q[l] >> 4) & 1) << j);
        }
    }
}

static void q6_k(const float *x, uint8_t *b) {
    float w[16], sc[16], smax = 0;
    for (int j = 0; j < 16; j++) {
        const float *xj = x + 16 * j;
        for (int l = 0; l < 16; l++)
            w[l] = xj[l] * xj[l];
        float o;
        fit(16, xj, w, -32, 31, false, &sc[j], &o);
        if (fabsf(sc[j]) > fabsf(smax)) smax = sc[j];
    }
    /* The largest scale becomes -128, so that its sign flip buys the int8's extra step. */
    float d = as_f16(smax / -128);
    memset(b, 0, LPX_Q6_K_BYTES);
    int8_t *scales = (int8_t *)(b + 192);
    uint8_t *ql = b, *qh = b + 128;
    for (int j = 0; j < 16; j++) {
        scales[j] = (int8_t)(d ? clampi((int)lrintf(sc[j] / d), -128, 127) : 0);
        int8_t q[16];
        if (scales[j])
            quant_with(16, x + 16 * j, d * scales[j], 0, -32, 31, q);
        else
            memset(q, 0, sizeof q);
        for (int l = 0; l < 16; l++) { /* element e of the 256: see deq_q6_k in dtype.c */
            int e = 16 * j + l, half = e / 128, r = e % 128, v = q[l] + 32;
            uint8_t *lo = ql + 64 * half + r % 64, *hi = qh + 32 * half + r % 32;
            *lo |= (uint8_t)((v & 0xf) << (r >= 64 ? 4 : 0));
            *hi |= (uint8_t)((v >> 4) << (2 * (r / 32)));
        }
    }
    wr16(b + 208, lpx_f32_to_f16(smax / -128));
}

bool lpx_quantize_row(lpx_dtype t, const float *src, void *dst, int64_t n, int64_t *bad_at) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(src[i]) || (t == LPX_DT_F16 && fabsf(src[i]) > 65504.0f)) {
            *bad_at = i;
            return false;
        }
    uint8_t *p = dst;
    const int be = lpx_dtype_block_elems(t), bb = lpx_dtype_block_bytes(t);
    for (int64_t i = 0; i < n; i += be, src += be, p += bb) {
        switch (t) {
        case LPX_DT_F32:
            memcpy(p, src, 4);
            break;
        case LPX_DT_F16:
            wr16(p, lpx_f32_to_f16(*src));
            break;
        case LPX_DT_BF16:
            wr16(p, lpx_f32_to_bf16(*src));
            break;
        case LPX_DT_Q8_0:
            q8_0(src, p);
            break;
        case LPX_DT_Q4_0:
            q4_0(src, p);
            break;
        case LPX_DT_Q4_1:
            q4_1(src, p);
            break;
        case LPX_DT_Q4_K:
        case LPX_DT_Q5_K:
            q45_k(src, p, t == LPX_DT_Q5_K);
            break;
        case LPX_DT_Q6_K:
            q6_k(src, p);
            break;
        case LPX_DT_COUNT:
            break;
        }
    }
    return true;
}

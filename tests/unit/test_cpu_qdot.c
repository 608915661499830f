/* The CPU backend's integer dot products (src/backend/cpu/cpu_qdot.c), every
 * implementation this machine runs: the activation quantization gives the same
 * bytes in every implementation and stays within half a step of its input;
 * each weight type's dot equals a float64 reference over the dequantized
 * weights (lpx_dequantize_row) and dequantized activations, for rows of odd
 * block counts at odd addresses, including the extremes (-128 weights, +-127
 * activations); the SIMD dots equal the plain C ones to float rounding; a
 * tile of any shape (1..8 rows, 1..4 tokens, rows at odd addresses and odd
 * block counts) gives each (row, token) the bits of that row and token alone
 * and the float64 reference's value. */
#include "backend/cpu/cpu_qdot.h"
#include "test.h"

#include <math.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) {
    return (float)(rnd() % 20001) / 10000.0f - 1.0f;
} /* [-1, 1] */

enum { MAXB = 24, N = MAXB * LPX_QK };

/* A row of nb activation blocks' length of type t at p: random bytes,
 * plausible f16 scales, and with `extreme` every Q8_0 weight -128 or 127 and
 * every K-quant 6-bit scale and min 63. */
static void rnd_row(lpx_dtype t, uint8_t *p, int nb, bool extreme) {
    const int bytes = lpx_dtype_block_bytes(t), n = nb * LPX_QK / lpx_dtype_block_elems(t);
    for (int i = 0; i < n * bytes; i++)
        p[i] = (uint8_t)rnd();
    for (int b = 0; b < n; b++) {
        uint8_t *blk = p + b * bytes;
        uint16_t s[2];
        for (int k = 0; k < 2; k++)
            s[k] = (uint16_t)(0x2400 | (rnd() & 0x3ff) | (rnd() & 1) << 15);
        memcpy(blk + (t == LPX_DT_Q6_K ? 208 : 0), s,
               t == LPX_DT_Q8_0 || t == LPX_DT_Q4_0 || t == LPX_DT_Q6_K ? 2 : 4);
        if (t == LPX_DT_Q8_0 && extreme)
            for (int j = 0; j < 32; j++)
                blk[2 + j] = rnd() & 1 ? 0x80 : 0x7f;
        if ((t == LPX_DT_Q4_K || t == LPX_DT_Q5_K) && extreme) memset(blk + 4, 0xff, 12);
        if (t == LPX_DT_Q6_K && extreme)
            for (int j = 0; j < 16; j++)
                blk[192 + j] = rnd() & 1 ? 0x80 : 0x7f;
    }
}

static void test_quantize(const cpu_qkernels *k, const cpu_qkernels *ref) {
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = rndf() * (i < LPX_QK ? 0.0f : i < 2 * LPX_QK ? 1e-30f : (float)(1 + i % 7));
    static lpx_blk_q8 a[MAXB], b[MAXB];
    k->quantize(x, a, N);
    ref->quantize(x, b, N);
    CHECK(!memcmp(a, b, sizeof a));
    bool ok = true;
    for (int blk = 0; blk < MAXB; blk++) {
        int sum = 0;
        for (int j = 0; j < LPX_QK; j++) {
            float v = x[blk * LPX_QK + j];
            ok &= a[blk].q[j] != -128;
            ok &= fabsf(v - a[blk].d * a[blk].q[j]) <= 0.5001f * a[blk].d;
            sum += a[blk].q[j];
        }
        ok &= a[blk].s == a[blk].d * (float)sum;
    }
    CHECK(ok);
    CHECK(a[0].d == 0.0f && a[0].s == 0.0f);
}

static float dot1(const cpu_qkernels *k, lpx_dtype t, const uint8_t *w, const lpx_blk_q8 *x,
                  int64_t nb) {
    float out[CPU_QT_TOKENS][CPU_QT_ROWS];
    k->tile[t](w, 0, 1, x, nb, 1, out);
    return out[0][0];
}

/* float64 reference of row w (nb blocks of type t) . the quantized x; mag: sum |w x| */
static double ref_dot(lpx_dtype t, const uint8_t *w, const lpx_blk_q8 *x, int nb, double *mag) {
    static float f[N];
    lpx_dequantize_row(t, w, f, nb * LPX_QK);
    double ref = 0;
    *mag = 0;
    for (int i = 0; i < nb * LPX_QK; i++) {
        double xv = (double)x[i / LPX_QK].d * x[i / LPX_QK].q[i % LPX_QK];
        ref += (double)f[i] * xv;
        *mag += fabs((double)f[i] * xv);
    }
    return ref;
}

/* Every tile shape against the one-row one-token tile (bits) and the float64
 * reference; rows an odd number of bytes apart, at an odd address. */
static void test_tiles(const cpu_qkernels *k, lpx_dtype t) {
    const int step = lpx_dtype_block_elems(t) / LPX_QK, nb = step == 1 ? 7 : 16;
    const size_t rb = (size_t)nb * LPX_QK / lpx_dtype_block_elems(t) * lpx_dtype_block_bytes(t),
                 stride = rb + 3;
    static uint8_t rows[CPU_QT_ROWS * (MAXB * 34 + 3) + 1];
    static lpx_blk_q8 xq[CPU_QT_TOKENS * MAXB];
    float x[N];
    for (int r = 0; r < CPU_QT_ROWS; r++)
        rnd_row(t, rows + 1 + r * stride, nb, r == 3);
    for (int i = 0; i < CPU_QT_TOKENS; i++) {
        for (int j = 0; j < nb * LPX_QK; j++)
            x[j] = i == 2 ? (rnd() & 1 ? 1.0f : -1.0f) : rndf();
        k->quantize(x, xq + i * nb, nb * LPX_QK);
    }
    bool same = true, close = true;
    for (int R = 1; R <= CPU_QT_ROWS; R++)
        for (int T = 1; T <= CPU_QT_TOKENS; T++) {
            float out[CPU_QT_TOKENS][CPU_QT_ROWS];
            k->tile[t](rows + 1, stride, R, xq, nb, T, out);
            for (int i = 0; i < T; i++)
                for (int r = 0; r < R; r++) {
                    const uint8_t *w = rows + 1 + r * stride;
                    float one = dot1(k, t, w, xq + i * nb, nb);
                    same &= !memcmp(&one, &out[i][r], sizeof one);
                    double mag, ref = ref_dot(t, w, xq + i * nb, nb, &mag);
                    close &= fabs(out[i][r] - ref) <= 1e-6 * (mag + 1e-30);
                }
        }
    if (!same || !close)
        fprintf(stderr, "%s %s tiles: %s\n", k->isa, lpx_dtype_name(t),
                !same ? "a tile's bits differ from the single dot's" : "off the float64 reference");
    CHECK(same && close);
}

/* |got - float64 reference| relative to sum |w * x| over every row tried. */
static double dot_error(const cpu_qkernels *k, lpx_dtype t, bool extreme) {
    static uint8_t row[MAXB * 34 + 1]; /* the largest row: Q8_0 */
    static lpx_blk_q8 xq[MAXB];
    float x[N], w[N];
    double worst = 0;
    const int step = lpx_dtype_block_elems(t) / LPX_QK; /* 8 for K-quants */
    for (int nb = step; nb <= MAXB; nb += step == 1 ? 3 : step) {
        for (int i = 0; i < nb * LPX_QK; i++)
            x[i] = extreme ? (rnd() & 1 ? 1.0f : -1.0f) : rndf();
        k->quantize(x, xq, nb * LPX_QK);
        uint8_t *p = row + 1; /* blocks need no alignment */
        rnd_row(t, p, nb, extreme);
        lpx_dequantize_row(t, p, w, nb * LPX_QK);
        double ref = 0, mag = 0;
        for (int i = 0; i < nb * LPX_QK; i++) {
            double xv = (double)xq[i / LPX_QK].d * xq[i / LPX_QK].q[i % LPX_QK];
            ref += (double)w[i] * xv;
            mag += fabs((double)w[i] * xv);
        }
        double e = fabs(dot1(k, t, p, xq, nb) - ref) / (mag + 1e-30);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

static void test_dots(const cpu_qkernels *k, const cpu_qkernels *ref) {
    const lpx_dtype types[] = {LPX_DT_Q8_0, LPX_DT_Q4_0, LPX_DT_Q4_1,
                               LPX_DT_Q4_K, LPX_DT_Q5_K, LPX_DT_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        lpx_dtype t = types[i];
        CHECK(k->tile[t] != NULL);
        if (!k->tile[t]) continue;
        for (int extreme = 0; extreme < 2; extreme++) {
            double e = dot_error(k, t, extreme);
            if (!(e < 1e-6))
                fprintf(stderr, "%s %s%s: relative error %g\n", k->isa, lpx_dtype_name(t),
                        extreme ? " (extremes)" : "", e);
            CHECK(e < 1e-6);
        }
        /* the same inputs through both implementations */
        static uint8_t row[MAXB * 34];
        static lpx_blk_q8 xq[MAXB];
        float x[N];
        for (int j = 0; j < N; j++)
            x[j] = rndf();
        ref->quantize(x, xq, N);
        rnd_row(t, row, MAXB, false);
        float a = dot1(k, t, row, xq, MAXB), b = dot1(ref, t, row, xq, MAXB);
        CHECK(fabsf(a - b) <= 1e-5f * (fabsf(b) + 1.0f));
        test_tiles(k, t);
    }
    CHECK(k->tile[LPX_DT_F32] == NULL && k->tile[LPX_DT_BF16] == NULL);
}

int main(void) {
    cpu_qkernels c, best, k;
    CHECK(cpu_qkernels_init(&c, "c") && !strcmp(c.isa, "c"));
    CHECK(cpu_qkernels_init(&best, NULL));
    CHECK(!cpu_qkernels_init(&k, "sse9"));
    printf("best kernels here: %s\n", best.isa);
    const char *isas[] = {"c", "avx2"};
    for (int i = 0; i < 2; i++) {
        if (!cpu_qkernels_init(&k, isas[i])) {
            printf("%s: not on this CPU, skipped\n", isas[i]);
            continue;
        }
        test_quantize(&k, &c);
        test_dots(&k, &c);
    }
    TEST_DONE();
}

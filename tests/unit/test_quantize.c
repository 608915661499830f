/* The block quantizers (src/format/quantize.c) against lpx_dequantize_row: the error of
 * quantize -> dequantize on random data per type, relative to the signal's RMS (bounds
 * measured, then asserted with a margin; LPX_QUANT_PRINT=1 prints the figures), exact
 * round trips of values each type represents, the f16/bf16 rounding against a float64
 * reference, and non-finite input refused. */
#include "format/blocks.h"
#include "format/ggml.h"
#include "format/quantize.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define N 4096 /* 16 super-blocks */

static uint64_t rng = 0x9e3779b97f4a7c15u;
static double uniform(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float gauss(void) {
    double u = uniform() + 1e-12, v = uniform();
    return (float)(sqrt(-2 * log(u)) * cos(2 * 3.14159265358979323846 * v));
}

/* RMS error of the round trip over RMS of x. */
static double rel_rmse(lpx_dtype t, const float *x, int64_t n) {
    size_t bytes;
    CHECK(lpx_dtype_row_bytes(t, n, &bytes));
    uint8_t *q = malloc(bytes);
    float *y = malloc((size_t)n * sizeof *y);
    int64_t bad = -1;
    CHECK(lpx_quantize_row(t, x, q, n, &bad));
    lpx_dequantize_row(t, q, y, n);
    double se = 0, ss = 0;
    for (int64_t i = 0; i < n; i++) {
        se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        ss += (double)x[i] * x[i];
    }
    free(q);
    free(y);
    return sqrt(se / ss);
}

static void test_error_bounds(void) {
    /* Measured on this data (gaussian, and gaussian with heavy-tailed outliers as real
     * weights have) and asserted with ~15% margin. */
    static const struct {
        lpx_dtype t;
        double gauss, tails;
    } bound[] = {
        /* measured: F16 0.00021 / 0.00021, BF16 0.00165 / 0.00158, Q8_0 0.00545 / 0.00970,
         * Q6_K 0.0176 / 0.0287, Q5_K 0.0363 / 0.0482, Q4_K 0.0727 / 0.0942, Q4_1 0.0794 /
         * 0.1035, Q4_0 0.0880 / 0.1586 */
        {LPX_DT_F16, 2.5e-4, 2.5e-4}, {LPX_DT_BF16, 1.9e-3, 1.9e-3}, {LPX_DT_Q8_0, 0.0063, 0.0112},
        {LPX_DT_Q6_K, 0.0203, 0.033}, {LPX_DT_Q5_K, 0.042, 0.056},   {LPX_DT_Q4_K, 0.084, 0.109},
        {LPX_DT_Q4_1, 0.092, 0.120},  {LPX_DT_Q4_0, 0.102, 0.183},
    };
    float *x = malloc(N * sizeof *x), *t = malloc(N * sizeof *t);
    for (int i = 0; i < N; i++) {
        x[i] = 0.02f * gauss();
        t[i] = x[i] * (uniform() < 0.01 ? 8.0f : 1.0f);
    }
    const char *print = getenv("LPX_QUANT_PRINT");
    for (size_t k = 0; k < sizeof bound / sizeof *bound; k++) {
        double eg = rel_rmse(bound[k].t, x, N), et = rel_rmse(bound[k].t, t, N);
        if (print) printf("%-5s gauss %.5f tails %.5f\n", lpx_dtype_name(bound[k].t), eg, et);
        CHECK(eg < bound[k].gauss);
        CHECK(et < bound[k].tails);
    }
    /* The K-quants' scale search is worth its bits: Q4_K (4.5 bits a weight) beats Q4_1 (5). */
    CHECK(rel_rmse(LPX_DT_Q4_K, x, N) < 0.95 * rel_rmse(LPX_DT_Q4_1, x, N));
    CHECK(rel_rmse(LPX_DT_Q4_K, t, N) < 0.95 * rel_rmse(LPX_DT_Q4_1, t, N));
    free(x);
    free(t);
}

static void test_exact(void) {
    /* Blocks whose values each type holds exactly: a block's q span its full range, its
     * scale (and min) are f16 values. */
    float x[N], y[N];
    uint8_t q[N * 2];
    int64_t bad;
    const float d = 0.0078125f, m = -0.375f; /* 2^-7, f16-exact */
    for (int i = 0; i < N; i++) {
        int j = i % 32, qv = j == 0 ? -127 : j == 1 ? 127 : (int)(uniform() * 255) - 127;
        x[i] = d * (float)qv;
    }
    CHECK(lpx_quantize_row(LPX_DT_Q8_0, x, q, N, &bad));
    lpx_dequantize_row(LPX_DT_Q8_0, q, y, N);
    CHECK(!memcmp(x, y, sizeof x));
    for (int i = 0; i < N; i++) {
        int j = i % 32, qv = j == 0 ? 0 : j == 1 ? 15 : (int)(uniform() * 16);
        x[i] = d * (float)qv + m;
    }
    CHECK(lpx_quantize_row(LPX_DT_Q4_1, x, q, N, &bad));
    lpx_dequantize_row(LPX_DT_Q4_1, q, y, N);
    CHECK(!memcmp(x, y, sizeof x));
    for (int i = 0; i < N; i++) {
        int j = i % 32, qv = j == 0 ? 0 : (int)(uniform() * 16);
        x[i] = d * (float)(qv - 8);
    }
    CHECK(lpx_quantize_row(LPX_DT_Q4_0, x, q, N, &bad));
    lpx_dequantize_row(LPX_DT_Q4_0, q, y, N);
    CHECK(!memcmp(x, y, sizeof x));
    /* K-quants: what one quantization gives, quantized again, comes back unchanged
     * (the fit finds the grid it came from). */
    static const lpx_dtype kq[] = {LPX_DT_Q4_K, LPX_DT_Q5_K, LPX_DT_Q6_K};
    for (size_t k = 0; k < 3; k++) {
        float z[N];
        for (int i = 0; i < N; i++)
            x[i] = 0.02f * gauss();
        CHECK(lpx_quantize_row(kq[k], x, q, N, &bad));
        lpx_dequantize_row(kq[k], q, y, N);
        CHECK(lpx_quantize_row(kq[k], y, q, N, &bad));
        lpx_dequantize_row(kq[k], q, z, N);
        int same = 0;
        for (int i = 0; i < N; i++)
            same += y[i] == z[i];
        if (getenv("LPX_QUANT_PRINT"))
            printf("%s requantized: %d of %d values unchanged\n", lpx_dtype_name(kq[k]), same, N);
        CHECK(same == N);
    }
    /* Plain types: every f16 and bf16 value converts back to itself. */
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        CHECK(lpx_f32_to_f16(lpx_f16_to_f32((uint16_t)h)) == h);
        if ((h & 0x7f80) != 0x7f80) CHECK(lpx_f32_to_bf16(lpx_bf16_to_f32((uint16_t)h)) == h);
    }
}

/* Round to nearest even against a float64 reference: the nearest of the two f16 values
 * around x (ties: the even one), over random floats of every f16 magnitude. */
static void test_rounding(void) {
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        float f = (float)((uniform() - 0.5) * pow(2.0, uniform() * 44 - 28));
        uint16_t h = lpx_f32_to_f16(f);
        double got = lpx_f16_to_f32(h), err = fabs(got - f);
        uint16_t dn = (uint16_t)(h - ((h & 0x7fff) ? 1 : 0)), up = (uint16_t)(h + 1);
        double e_dn = fabs((double)lpx_f16_to_f32(dn) - f),
               e_up = fabs((double)lpx_f16_to_f32(up) - f);
        if (err > e_dn || err > e_up || ((err == e_dn || err == e_up) && (h & 1))) bad++;
        uint16_t b = lpx_f32_to_bf16(f);
        double gb = lpx_bf16_to_f32(b), eb = fabs(gb - f);
        double eb_up = fabs((double)lpx_bf16_to_f32((uint16_t)(b + 1)) - f);
        double eb_dn = fabs((double)lpx_bf16_to_f32((uint16_t)(b - 1)) - f);
        if (eb > eb_up || eb > eb_dn || ((eb == eb_up || eb == eb_dn) && (b & 1))) bad++;
    }
    CHECK(bad == 0);
    CHECK(lpx_f32_to_f16(65504.0f) == 0x7bff && lpx_f32_to_f16(65520.0f) == 0x7c00);
    CHECK(lpx_f32_to_f16(-0.0f) == 0x8000 && lpx_f32_to_f16(5.96046448e-8f) == 1);
}

static void test_refused(void) {
    float x[256] = {0};
    uint8_t q[LPX_Q6_K_BYTES];
    int64_t bad = -1;
    x[77] = NAN;
    CHECK(!lpx_quantize_row(LPX_DT_Q6_K, x, q, 256, &bad) && bad == 77);
    x[77] = 0;
    x[5] = INFINITY;
    CHECK(!lpx_quantize_row(LPX_DT_Q8_0, x, q, 32, &bad) && bad == 5);
    x[5] = 70000.0f;
    CHECK(!lpx_quantize_row(LPX_DT_F16, x, q, 32, &bad) && bad == 5);
    CHECK(lpx_quantize_row(LPX_DT_BF16, x, q, 32, &bad));
}

int main(void) {
    test_error_bounds();
    test_exact();
    test_rounding();
    test_refused();
    TEST_DONE();
}

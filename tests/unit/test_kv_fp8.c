/* The fp8 KV format of src/format/kv_fp8.h: every code decodes and re-encodes to
 * itself, ties go to even, values past 448 saturate, NaN stays NaN, every encoding is
 * the nearest code (checked against a brute-force search over a sweep of float bit
 * patterns), and a head's quantization follows the documented rules (zero, tiny and
 * non-finite heads, the scale, the error bound).
 * With arguments it is the C side of tests/py/test_kv_fp8.py, which checks the same
 * encoder and quantizer against ml_dtypes' float8_e4m3fn and numpy float32:
 *   test_kv_fp8 encode IN.f32 OUT.u8
 *   test_kv_fp8 quantize HD IN.f32 OUT   (OUT: per row of HD, HD codes then a float scale) */
#include "format/kv_fp8.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static float dec(int c) {
    return lpx_kv_fp8_decode((uint8_t)c);
}

static void codes_round_trip(void) {
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        float v = dec(c);
        if ((c & 0x7F) == 0x7F) {
            bad += !isnan(v) || lpx_kv_fp8_encode(v) != (uint8_t)c;
            continue;
        }
        bad += lpx_kv_fp8_encode(v) != (uint8_t)c || isnan(v) || isinf(v);
        bad += (c & 0x80) ? !signbit(v) : signbit(v) != 0;
    }
    CHECK(bad == 0);
    for (int c = 1; c <= 0x7E; c++)
        CHECK(dec(c) > dec(c - 1)); /* positive codes in order */
    CHECK(dec(0x7E) == 448.0f && dec(0xFE) == -448.0f);
    CHECK(dec(0x38) == 1.0f && dec(0x08) == 0x1p-6f && dec(0x01) == 0x1p-9f);
    CHECK(dec(0x07) == 7 * 0x1p-9f && dec(0x00) == 0.0f && signbit(dec(0x80)));
}

static void ties_to_even(void) {
    int bad = 0;
    for (int sign = 0; sign <= 0x80; sign += 0x80)
        for (int c = 0; c < 0x7E; c++) {
            const float lo = dec(sign | c), hi = dec(sign | (c + 1));
            const float mid = (lo + hi) / 2; /* exact: both have few mantissa bits */
            const int even = (c & 1) ? c + 1 : c;
            bad += lpx_kv_fp8_encode(mid) != (uint8_t)(sign | even);
            bad += lpx_kv_fp8_encode(nextafterf(mid, hi)) != (uint8_t)(sign | (c + 1));
            bad += lpx_kv_fp8_encode(nextafterf(mid, lo)) != (uint8_t)(sign | c);
        }
    CHECK(bad == 0);
    CHECK(lpx_kv_fp8_encode(0x1p-10f) == 0x00); /* half the smallest subnormal */
    CHECK(lpx_kv_fp8_encode(nextafterf(0x1p-10f, 1)) == 0x01);
    CHECK(lpx_kv_fp8_encode(-0x1p-10f) == 0x80);
    CHECK(lpx_kv_fp8_encode(1e-40f) == 0x00); /* an f32 subnormal */
}

static void saturation_and_nan(void) {
    const float big[] = {448.0f, 448.5f, 463.9f, 464.0f, 480.0f, 1e30f, INFINITY};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        CHECK(lpx_kv_fp8_encode(big[i]) == 0x7E);
        CHECK(lpx_kv_fp8_encode(-big[i]) == 0xFE);
    }
    CHECK(lpx_kv_fp8_encode(NAN) == 0x7F);
    CHECK(lpx_kv_fp8_encode(-NAN) == 0xFF);
    CHECK(isnan(dec(0x7F)) && isnan(dec(0xFF)));
}

/* The nearest code by search (ties: the even one), for |x| <= 448. */
static int nearest(float x) {
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7F) == 0x7F) continue;
        const double d = fabs((double)dec(c) - (double)x);
        if (d < bd || (d == bd && !(c & 1) && (dec(c) != 0 || signbit(x) == signbit(dec(c))))) {
            bd = d;
            best = c;
        }
    }
    return best;
}

static void encode_is_nearest(void) {
    int bad = 0, n = 0;
    for (uint64_t u = 0; u < ((uint64_t)1 << 32); u += 40961) {
        const float x = lpx_kv_bits_f32((uint32_t)u);
        if (!(fabsf(x) <= 448.0f)) continue;
        const int got = lpx_kv_fp8_encode(x), want = nearest(x);
        /* a zero result keeps x's sign: both zero codes are nearest to a tiny x */
        bad += got != want && !((got & 0x7F) == 0 && (want & 0x7F) == 0);
        n++;
    }
    printf("nearest-code sweep: %d values, %d wrong\n", n, bad);
    CHECK(bad == 0 && n > 50000);
}

static void bf16_rounding(void) {
    CHECK(lpx_kv_bf16_bits(1.0f) == 0x3F80);
    CHECK(lpx_kv_bf16_bits(1.0f + 0x1p-8f) == 0x3F80);     /* tie, down to even */
    CHECK(lpx_kv_bf16_bits(1.0f + 3 * 0x1p-8f) == 0x3F82); /* tie, up to even */
    CHECK(lpx_kv_bf16_bits(nextafterf(1.0f + 0x1p-8f, 2)) == 0x3F81);
    CHECK(lpx_kv_bf16_bits(NAN) == 0x7FFF && lpx_kv_bf16_bits(INFINITY) == 0x7F80);
    CHECK(lpx_kv_bf16_f32(0xC040) == -3.0f);
}

static void quantize_rules(void) {
    float x[64];
    uint8_t q[64];
    memset(x, 0, sizeof x);
    CHECK(lpx_kv_fp8_quantize(x, 64, q) == 1.0f);
    int zeros = 0;
    for (int i = 0; i < 64; i++)
        zeros += q[i] == 0;
    CHECK(zeros == 64);
    x[3] = -1e-30f; /* tiny: stored as zeros, scale 1 */
    CHECK(lpx_kv_fp8_quantize(x, 64, q) == 1.0f && q[3] == 0x80);
    x[5] = INFINITY;
    CHECK(isnan(lpx_kv_fp8_quantize(x, 64, q)) && q[0] == 0x7F && q[63] == 0x7F);
    x[5] = NAN;
    CHECK(isnan(lpx_kv_fp8_quantize(x, 64, q)));
    /* an ordinary head: the largest value maps to +-448, every value within half a
     * code step (2^-4 relative, or scale * 2^-10 near zero) */
    uint64_t r = 7;
    float amax = 0;
    for (int i = 0; i < 64; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = lpx_kv_bf16_f32(lpx_kv_bf16_bits(((float)(r >> 40) / (1 << 24) - 0.5f) * 6.0f));
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    }
    const float scale = lpx_kv_fp8_quantize(x, 64, q);
    CHECK(scale == amax / 448.0f);
    int worst = 0, at_max = 0;
    for (int i = 0; i < 64; i++) {
        const float y = lpx_kv_fp8_value(q[i], scale);
        worst += fabsf(y - x[i]) > fabsf(x[i]) * 0x1p-4f + scale * 0x1p-10f;
        at_max += fabsf(x[i]) == amax && (q[i] & 0x7F) == 0x7E;
        CHECK(q[i] == lpx_kv_fp8_encode(x[i] * (448.0f / amax)));
    }
    CHECK(worst == 0 && at_max >= 1);
    CHECK(lpx_kv_fp8_scale_index(2, 1, 1, 3, 5, 4, 6, 16) ==
          (((2 * 4 + 1) * 2 + 1) * 6 + 3) * 16 + 5);
}

static int io_mode(int argc, char **argv) {
    const bool quant = !strcmp(argv[1], "quantize");
    if (quant ? argc != 5 : argc != 4 || strcmp(argv[1], "encode")) {
        fprintf(stderr, "usage: test_kv_fp8 [encode IN OUT | quantize HD IN OUT]\n");
        return 2;
    }
    const int hd = quant ? atoi(argv[2]) : 1;
    FILE *in = fopen(argv[quant ? 3 : 2], "rb"), *out = fopen(argv[quant ? 4 : 3], "wb");
    if (!in || !out || hd < 1 || hd > 4096) return 1;
    float x[4096];
    uint8_t q[4096];
    while (fread(x, sizeof(float), (size_t)hd, in) == (size_t)hd) {
        if (quant) {
            const float s = lpx_kv_fp8_quantize(x, hd, q);
            fwrite(q, 1, (size_t)hd, out);
            fwrite(&s, sizeof s, 1, out);
        } else {
            q[0] = lpx_kv_fp8_encode(x[0]);
            fwrite(q, 1, 1, out);
        }
    }
    fclose(in);
    return fclose(out) ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc > 1) return io_mode(argc, argv);
    codes_round_trip();
    ties_to_even();
    saturation_and_nan();
    encode_is_nearest();
    bf16_rounding();
    quantize_rules();
    TEST_DONE();
}

/* The CUDA backend's weight packings (src/backend/cuda/wpack.c), without a GPU:
 * every GGUF type packs into the packing lpx_wp_choose gives it and unpacks to
 * lpx_dequantize_row's values (exactly where the file's scales are f16 fields,
 * within f16 rounding of the scale where the file implies a product), merged
 * matrices of mixed types hold every part, and bad scales and widths are errors
 * naming the tensor. */
#include "backend/cuda/wpack.h"
#include "format/quantize.h"
#include "test.h"

#include <math.h>
#include <string.h>

#define COLS 512
#define ROWS 6

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* roughly normal, with a few large values */
    float s = 0.0f;
    for (int i = 0; i < 4; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        s += (float)(rng >> 40) / (float)(1u << 24) - 0.5f;
    }
    return (rng & 63) == 0 ? 8.0f * s : s;
}

typedef struct qtensor {
    lpx_tensor t;
    uint8_t data[ROWS * COLS * 2];
} qtensor;

static void make(qtensor *q, lpx_dtype type, const char *name) {
    memset(q, 0, sizeof *q);
    snprintf(q->t.name, sizeof q->t.name, "%s", name);
    q->t.type = type;
    q->t.n_dims = 2;
    q->t.shape[0] = ROWS;
    q->t.shape[1] = COLS;
    size_t rb = 0;
    CHECK(lpx_dtype_row_bytes(type, COLS, &rb));
    float row[COLS];
    for (int r = 0; r < ROWS; r++) {
        for (int c = 0; c < COLS; c++)
            row[c] = frand() * (r + 1) * 0.05f;
        int64_t bad = -1;
        CHECK(lpx_quantize_row(type, row, q->data + r * rb, COLS, &bad));
    }
    q->t.data = q->data;
    q->t.nbytes = rb * ROWS;
}

/* Packs ts[0..n) as one matrix (stacked) and checks every row against the file's
 * values; rel: allowed error over (|s * code| + |m|) bounds, 0 = exact. Returns
 * the packing. */
static lpx_wp_format check_pack(const lpx_tensor *const *ts, int n, float rel) {
    lpx_wp_format f;
    CHECK(lpx_wp_choose(ts, n, COLS, &f) == LPX_OK);
    const size_t rb = lpx_wp_row_bytes(f, COLS);
    CHECK(rb > 0 && rb % 16 == 0);
    static uint8_t packed[4 * ROWS * 2 * COLS];
    CHECK((size_t)n * ROWS * rb <= sizeof packed);
    float tmp[COLS], want[COLS], got[COLS];
    for (int i = 0; i < n; i++)
        CHECK(lpx_wp_pack_rows(f, ts[i], packed, (int64_t)i * ROWS, 1, tmp) == LPX_OK);
    for (int i = 0; i < n; i++) {
        size_t sb = 0;
        lpx_dtype_row_bytes(ts[i]->type, COLS, &sb);
        for (int r = 0; r < ROWS; r++) {
            lpx_dequantize_row(ts[i]->type, (const uint8_t *)ts[i]->data + r * sb, want, COLS);
            lpx_wp_unpack_row(f, packed + ((size_t)i * ROWS + r) * rb, COLS, got);
            float amax = 0.0f;
            for (int c = 0; c < COLS; c++)
                amax = fmaxf(amax, fabsf(want[c]));
            int bad = 0;
            for (int c = 0; c < COLS; c++) {
                const float tol = rel > 0 ? rel * (4.0f * amax + 1e-30f) : 0.0f;
                if (!(fabsf(got[c] - want[c]) <= tol)) bad++;
            }
            if (bad)
                fprintf(stderr, "%s row %d (%s): %d of %d differ\n", ts[i]->name, r, lpx_wp_name(f),
                        bad, COLS);
            CHECK(bad == 0);
        }
    }
    return f;
}

static bool same(lpx_wp_format a, int kind, int group, int has_min) {
    return a.kind == kind && a.group == group && a.has_min == has_min;
}

int main(void) {
    static qtensor q8, q40, q41, q4k, q5k, q6k, f16;
    make(&q8, LPX_DT_Q8_0, "blk.0.attn_q.weight");
    make(&q40, LPX_DT_Q4_0, "blk.0.attn_k.weight");
    make(&q41, LPX_DT_Q4_1, "blk.0.attn_v.weight");
    make(&q4k, LPX_DT_Q4_K, "blk.0.ffn_gate.weight");
    make(&q5k, LPX_DT_Q5_K, "blk.0.ffn_up.weight");
    make(&q6k, LPX_DT_Q6_K, "blk.0.ffn_down.weight");
    make(&f16, LPX_DT_F16, "output.weight");
    const float r16 = 1.0f / 2048.0f; /* f16 rounding of a scale (and of an offset) */

    /* one type a matrix: the file's own layout where it has f16 scales */
    const lpx_tensor *one[1];
    one[0] = &q8.t;
    CHECK(same(check_pack(one, 1, 0.0f), LPX_WP_Q8, 32, 0));
    CHECK(lpx_wp_row_bytes((lpx_wp_format){LPX_WP_Q8, 32, 0}, COLS) == COLS / 32 * 34);
    one[0] = &q40.t;
    CHECK(same(check_pack(one, 1, 0.0f), LPX_WP_Q4, 32, 0));
    CHECK(lpx_wp_row_bytes((lpx_wp_format){LPX_WP_Q4, 32, 0}, COLS) == COLS / 32 * 18);
    one[0] = &q41.t;
    CHECK(same(check_pack(one, 1, 0.0f), LPX_WP_Q4, 32, 1));
    one[0] = &q4k.t;
    CHECK(same(check_pack(one, 1, r16), LPX_WP_Q4, 32, 1));
    one[0] = &q5k.t;
    CHECK(same(check_pack(one, 1, r16), LPX_WP_Q8, 32, 1));
    one[0] = &q6k.t;
    CHECK(same(check_pack(one, 1, r16), LPX_WP_Q8, 16, 0));
    one[0] = &f16.t;
    CHECK(same(check_pack(one, 1, 1.0f / 256.0f), LPX_WP_BF16, 0, 0));

    /* merged matrices take one packing that holds each part */
    const lpx_tensor *qkv_k[3] = {&q4k.t, &q4k.t, &q6k.t}; /* a Q4_K_M layer's q/k/v */
    CHECK(same(check_pack(qkv_k, 3, r16), LPX_WP_Q8, 16, 1));
    const lpx_tensor *four[3] = {&q40.t, &q41.t, &q4k.t};
    CHECK(same(check_pack(four, 3, r16), LPX_WP_Q4, 32, 1));
    const lpx_tensor *eight[3] = {&q8.t, &q40.t, &q6k.t};
    CHECK(same(check_pack(eight, 3, r16), LPX_WP_Q8, 16, 0));
    const lpx_tensor *mixed[2] = {&q8.t, &f16.t};
    CHECK(same(check_pack(mixed, 2, 1.0f / 256.0f), LPX_WP_BF16, 0, 0));

    /* interleaved rows (gate/up): row r of part i at 2r + i */
    {
        lpx_wp_format f;
        const lpx_tensor *gu[2] = {&q40.t, &q8.t};
        CHECK(lpx_wp_choose(gu, 2, COLS, &f) == LPX_OK && same(f, LPX_WP_Q8, 32, 0));
        const size_t rb = lpx_wp_row_bytes(f, COLS);
        static uint8_t packed[2 * ROWS * COLS * 2];
        float tmp[COLS], want[COLS], got[COLS];
        CHECK(lpx_wp_pack_rows(f, gu[0], packed, 0, 2, tmp) == LPX_OK);
        CHECK(lpx_wp_pack_rows(f, gu[1], packed, 1, 2, tmp) == LPX_OK);
        size_t sb = 0;
        lpx_dtype_row_bytes(LPX_DT_Q8_0, COLS, &sb);
        lpx_dequantize_row(LPX_DT_Q8_0, q8.data + 3 * sb, want, COLS);
        lpx_wp_unpack_row(f, packed + 7 * rb, COLS, got);
        CHECK(memcmp(want, got, sizeof want) == 0);
    }

    /* bad input: errors naming the tensor */
    {
        lpx_wp_format f;
        const lpx_tensor *t[1] = {&q8.t};
        CHECK(lpx_wp_choose(t, 1, 48, &f) != LPX_OK && strstr(lpx_last_error(), "attn_q"));
        static uint8_t out[ROWS * COLS * 2];
        float tmp[COLS];
        qtensor bad = q8;
        bad.t.data = bad.data;
        bad.data[34 * 3] = 0x00, bad.data[34 * 3 + 1] = 0x7c; /* row 0 block 3: d = inf */
        CHECK(lpx_wp_choose(t, 1, COLS, &f) == LPX_OK);
        CHECK(lpx_wp_pack_rows(f, &bad.t, out, 0, 1, tmp) != LPX_OK);
        CHECK(strstr(lpx_last_error(), "blk.0.attn_q.weight") &&
              strstr(lpx_last_error(), "finite"));
        const lpx_wp_format q4 = {LPX_WP_Q4, 32, 1};
        CHECK(lpx_wp_pack_rows(q4, &q8.t, out, 0, 1, tmp) != LPX_OK); /* 8-bit codes in q4 */
        const lpx_wp_format nomin = {LPX_WP_Q8, 32, 0};
        CHECK(lpx_wp_pack_rows(nomin, &q41.t, out, 0, 1, tmp) != LPX_OK); /* offsets lost */
    }
    TEST_DONE();
}

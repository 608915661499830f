/* Quantized Hugging Face checkpoints' weights to float rows: hf_quant.h has the
 * layouts. */
#include "format/hf_quant.h"

#include "format/ggml.h"
#include "format/kv_fp8.h"

#include <stdbool.h>
#include <string.h>

/* The AWQ nibble of column c (0..7) within its word: the inverse of AutoAWQ's pack
 * order {0, 2, 4, 6, 1, 3, 5, 7}. */
static const int awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void lpx_hfq_fp8_row(const uint8_t *q, const float *scale, int64_t in, int64_t o, int64_t bm,
                     int64_t bn, int64_t scale_cols, float *dst) {
    const uint8_t *row = q + o * in;
    const float *srow = scale + (o / bm) * scale_cols;
    for (int64_t i = 0; i < in; i++)
        dst[i] = lpx_kv_fp8_decode(row[i]) * srow[i / bn];
}

/* Nibble n of column col's word in a matrix packed 8 columns a word along rows of
 * `cols` columns (AWQ qweight and both qzeros). */
static int packed_cols(const uint8_t *base, int64_t row, int64_t col, int64_t cols, bool awq) {
    uint32_t w = rd32(base + 4 * (row * (cols / 8) + col / 8));
    int k = awq ? awq_nibble[col % 8] : (int)(col % 8);
    return (int)(w >> (4 * k)) & 0xf;
}

int lpx_hfq_int4_zero(const lpx_hfq_int4 *w, int64_t gi, int64_t o) {
    return packed_cols(w->qzeros, gi, o, w->out, w->layout == LPX_HFQ_AWQ);
}

void lpx_hfq_int4_rows(const lpx_hfq_int4 *w, int64_t o0, int64_t n, float *dst) {
    const bool awq = w->layout == LPX_HFQ_AWQ;
    const int64_t in = w->in, g = w->group;
    for (int64_t gi = 0; gi < in / g; gi++) {
        float s[LPX_HFQ_TILE];
        int z[LPX_HFQ_TILE];
        for (int64_t k = 0; k < n; k++) {
            uint16_t h;
            memcpy(&h, w->scales + 2 * (gi * w->out + o0 + k), 2);
            s[k] = lpx_f16_to_f32(h);
            z[k] = lpx_hfq_int4_zero(w, gi, o0 + k) + w->zero_offset;
        }
        if (awq) { /* word [i][j]: outputs 8j .. 8j + 7 of input i */
            for (int64_t i = gi * g; i < (gi + 1) * g; i++)
                for (int64_t j = 0; j < n / 8; j++) {
                    uint32_t word = rd32(w->qweight + 4 * (i * (w->out / 8) + o0 / 8 + j));
                    for (int c = 0; c < 8; c++) {
                        int64_t k = 8 * j + c;
                        int q = (int)(word >> (4 * awq_nibble[c])) & 0xf;
                        dst[k * in + i] = (float)(q - z[k]) * s[k];
                    }
                }
        } else { /* word [r][o]: inputs 8r .. 8r + 7 of output o */
            for (int64_t r = gi * g / 8; r < (gi + 1) * g / 8; r++)
                for (int64_t k = 0; k < n; k++) {
                    uint32_t word = rd32(w->qweight + 4 * (r * w->out + o0 + k));
                    for (int b = 0; b < 8; b++)
                        dst[k * in + 8 * r + b] =
                            (float)((int)((word >> (4 * b)) & 0xf) - z[k]) * s[k];
                }
        }
    }
}

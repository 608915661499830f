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

void lpx_hfq_int4_row(const lpx_hfq_int4 *w, int64_t o, float *dst) {
    const bool awq = w->layout == LPX_HFQ_AWQ;
    for (int64_t gi = 0; gi < w->in / w->group; gi++) {
        uint16_t h;
        memcpy(&h, w->scales + 2 * (gi * w->out + o), 2);
        const float s = lpx_f16_to_f32(h);
        const int z = lpx_hfq_int4_zero(w, gi, o) + w->zero_offset;
        for (int64_t i = gi * w->group; i < (gi + 1) * w->group; i++) {
            int q =
                awq ? packed_cols(w->qweight, i, o, w->out, true)
                    : (int)(rd32(w->qweight + 4 * ((i / 8) * w->out + o)) >> (4 * (i % 8))) & 0xf;
            dst[i] = (float)(q - z) * s;
        }
    }
}

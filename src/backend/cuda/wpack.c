/* The CUDA backend's weight packings (wpack.h): which one a matrix takes, and its
 * rows written from the file's blocks on the host. */
#include "backend/cuda/wpack.h"

#include "base/checked.h"
#include "format/blocks.h"
#include "format/ggml.h"
#include "format/quantize.h"

#include <math.h>
#include <string.h>

static uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}
static void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)(v & 0xff);
    p[1] = (uint8_t)(v >> 8);
}

/* What a file type holds, for the choice: 4-bit codes, a group, whether an offset. */
typedef struct src_kind {
    bool quant, four, min;
    int group;
} src_kind;

static src_kind kind_of(lpx_dtype t) {
    switch (t) {
    case LPX_DT_Q8_0:
        return (src_kind){true, false, false, 32};
    case LPX_DT_Q4_0:
        return (src_kind){true, true, false, 32};
    case LPX_DT_Q4_1:
    case LPX_DT_Q4_K:
        return (src_kind){true, true, true, 32};
    case LPX_DT_Q5_K:
        return (src_kind){true, false, true, 32};
    case LPX_DT_Q6_K:
        return (src_kind){true, false, false, 16};
    default:
        return (src_kind){false, false, false, 0};
    }
}

lpx_status lpx_wp_choose(const lpx_tensor *const *ts, int n, int64_t cols, lpx_wp_format *out) {
    lpx_wp_format f = {LPX_WP_Q4, 32, 0};
    for (int i = 0; i < n; i++) {
        const src_kind k = kind_of(ts[i]->type);
        if (!k.quant) {
            *out = (lpx_wp_format){LPX_WP_BF16, 0, 0};
            return LPX_OK;
        }
        if (!k.four) f.kind = LPX_WP_Q8;
        if (k.group < f.group) f.group = k.group;
        if (k.min) f.has_min = 1;
    }
    if (cols <= 0 || cols % f.group)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "cuda: tensor %s: %lld columns do not divide into "
                          "groups of %d",
                          ts[0]->name, (long long)cols, f.group);
    *out = f;
    return LPX_OK;
}

size_t lpx_wp_row_bytes(lpx_wp_format f, int64_t cols) {
    if (cols <= 0) return 0;
    if (f.kind == LPX_WP_BF16) { /* unpadded: cuBLAS and the kernels take cols as the stride */
        size_t b;
        return lpx_mul_size((size_t)cols, 2, &b) ? b : 0;
    }
    if (f.group <= 0 || cols % f.group) return 0;
    const size_t codes = f.kind == LPX_WP_Q8 ? (size_t)cols : (size_t)cols / 2;
    const size_t groups = (size_t)cols / (size_t)f.group;
    size_t b = codes + groups * 2 * (f.has_min ? 2u : 1u);
    if (b < codes) return 0;
    return (b + 15) / 16 * 16;
}

/* One group of the file's row: signed codes with value = s * code + m. */
typedef struct src_group {
    int8_t code[32];
    float s, m;
} src_group;

/* Group g (of size kind_of(t).group) of a row of type t. */
static void decode_group(lpx_dtype t, const uint8_t *row, int64_t g, src_group *o) {
    o->m = 0.0f;
    switch (t) {
    case LPX_DT_Q8_0: {
        const uint8_t *b = row + g * LPX_Q8_0_BYTES;
        o->s = lpx_f16_to_f32(rd16(b));
        for (int j = 0; j < 32; j++)
            o->code[j] = (int8_t)b[2 + j];
        break;
    }
    case LPX_DT_Q4_0: {
        const uint8_t *b = row + g * LPX_Q4_0_BYTES;
        o->s = lpx_f16_to_f32(rd16(b));
        for (int j = 0; j < 16; j++) {
            o->code[j] = (int8_t)((b[2 + j] & 0xf) - 8);
            o->code[j + 16] = (int8_t)((b[2 + j] >> 4) - 8);
        }
        break;
    }
    case LPX_DT_Q4_1: {
        const uint8_t *b = row + g * LPX_Q4_1_BYTES;
        o->s = lpx_f16_to_f32(rd16(b));
        o->m = lpx_f16_to_f32(rd16(b + 2));
        for (int j = 0; j < 16; j++) {
            o->code[j] = (int8_t)(b[4 + j] & 0xf);
            o->code[j + 16] = (int8_t)(b[4 + j] >> 4);
        }
        break;
    }
    case LPX_DT_Q4_K:
    case LPX_DT_Q5_K: { /* sub-block j of super-block g / 8, as lpx_dequantize_row */
        const bool five = t == LPX_DT_Q5_K;
        const uint8_t *b = row + (g / 8) * (five ? LPX_Q5_K_BYTES : LPX_Q4_K_BYTES);
        const int j = (int)(g % 8);
        uint8_t sc[8], mn[8];
        lpx_blk_k4_scales(b + 4, sc, mn);
        o->s = lpx_f16_to_f32(rd16(b)) * (float)sc[j];
        o->m = -lpx_f16_to_f32(rd16(b + 2)) * (float)mn[j];
        const uint8_t *qh = five ? b + 16 : NULL, *qs = b + (five ? 48 : 16) + 32 * (j / 2);
        for (int l = 0; l < 32; l++)
            o->code[l] =
                (int8_t)((j & 1 ? qs[l] >> 4 : qs[l] & 0xf) + (qh ? ((qh[l] >> j) & 1) << 4 : 0));
        break;
    }
    case LPX_DT_Q6_K: { /* 16 elements: group g is elements 16 g .. of the row */
        const uint8_t *b = row + (g / 16) * LPX_Q6_K_BYTES;
        const int e0 = (int)(g % 16) * 16; /* first element within the super-block */
        const int half = e0 / 128, r = e0 % 128, quarter = r / 32, l0 = r % 32;
        const uint8_t *ql = b + 64 * half, *qh = b + 128 + 32 * half;
        o->s = lpx_f16_to_f32(rd16(b + 208)) * (float)(int8_t)b[192 + e0 / 16];
        for (int i = 0; i < 16; i++) {
            const int l = l0 + i;
            const int lo = quarter & 1 ? ql[l + 32] : ql[l];
            const int q =
                (quarter < 2 ? lo & 0xf : lo >> 4) | (((qh[l] >> (2 * quarter)) & 3) << 4);
            o->code[i] = (int8_t)(q - 32);
        }
        break;
    }
    default:
        break;
    }
}

static bool finite16(uint16_t h) {
    return (h & 0x7c00) != 0x7c00;
}

lpx_status lpx_wp_pack_rows(lpx_wp_format f, const lpx_tensor *t, uint8_t *dst, int64_t row0,
                            int64_t step, float *tmp) {
    const int64_t rows = lpx_tensor_rows(t), cols = lpx_tensor_cols(t);
    const size_t rb = lpx_wp_row_bytes(f, cols);
    size_t sb = 0;
    if (rb == 0 || !lpx_dtype_row_bytes(t->type, cols, &sb))
        return lpx_errorf(LPX_ERR_FORMAT,
                          "cuda: tensor %s: %lld columns of %s cannot be held as %s", t->name,
                          (long long)cols, lpx_dtype_name(t->type), lpx_wp_name(f));
    const src_kind k = kind_of(t->type);
    if (f.kind != LPX_WP_BF16 && (!k.quant || k.group % f.group || (k.min && !f.has_min) ||
                                  (f.kind == LPX_WP_Q4 && !k.four)))
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: tensor %s: %s cannot be held as %s", t->name,
                          lpx_dtype_name(t->type), lpx_wp_name(f));
    const int64_t groups = f.kind == LPX_WP_BF16 ? 0 : cols / f.group;
    const size_t codes = f.kind == LPX_WP_Q8 ? (size_t)cols : (size_t)cols / 2;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *src = (const uint8_t *)t->data + (size_t)r * sb;
        uint8_t *o = dst + (size_t)(row0 + r * step) * rb;
        memset(o, 0, rb);
        if (f.kind == LPX_WP_BF16) {
            lpx_dequantize_row(t->type, src, tmp, cols);
            for (int64_t c = 0; c < cols; c++)
                wr16(o + 2 * c, lpx_f32_to_bf16(tmp[c]));
            continue;
        }
        uint8_t *sc = o + codes, *mn = sc + 2 * groups;
        const int per = k.group / f.group; /* packed groups a file group */
        src_group sg;
        for (int64_t g = 0; g < groups; g++) {
            const int part = (int)(g % per);
            if (part == 0) decode_group(t->type, src, g / per, &sg);
            const int8_t *code = sg.code + part * f.group;
            if (!isfinite(sg.s) || !isfinite(sg.m))
                return lpx_errorf(LPX_ERR_FORMAT,
                                  "cuda: tensor %s: row %lld: a scale is not "
                                  "finite",
                                  t->name, (long long)r);
            const uint16_t s16 = lpx_f32_to_f16(sg.s);
            /* Q4_0's signed codes become nibbles code + 8 with m = -8 s (exact) */
            const bool shift8 = t->type == LPX_DT_Q4_0 && (f.kind == LPX_WP_Q4 || f.has_min);
            const float m = shift8 ? -8.0f * lpx_f16_to_f32(s16) : sg.m;
            const uint16_t m16 = lpx_f32_to_f16(m);
            if (!finite16(s16) || (f.has_min && !finite16(m16)))
                return lpx_errorf(LPX_ERR_FORMAT,
                                  "cuda: tensor %s: row %lld: a scale (%g, %g) "
                                  "is beyond f16",
                                  t->name, (long long)r, sg.s, m);
            wr16(sc + 2 * g, s16);
            if (f.has_min) wr16(mn + 2 * g, m16);
            for (int e = 0; e < f.group; e++) {
                const int v = code[e] + (shift8 ? 8 : 0);
                const int64_t at = g * f.group + e;
                if (f.kind == LPX_WP_Q8) {
                    o[at] = (uint8_t)(v + 128);
                } else { /* group g's 16 bytes; e < 16 low nibble, else high */
                    uint8_t *by = o + g * 16 + (e & 15);
                    *by = (uint8_t)(*by | (e < 16 ? v : v << 4));
                }
            }
        }
    }
    return LPX_OK;
}

void lpx_wp_unpack_row(lpx_wp_format f, const uint8_t *row, int64_t cols, float *out) {
    if (f.kind == LPX_WP_BF16) {
        for (int64_t c = 0; c < cols; c++)
            out[c] = lpx_bf16_to_f32(rd16(row + 2 * c));
        return;
    }
    const int64_t groups = cols / f.group;
    const size_t codes = f.kind == LPX_WP_Q8 ? (size_t)cols : (size_t)cols / 2;
    const uint8_t *sc = row + codes, *mn = sc + 2 * groups;
    for (int64_t g = 0; g < groups; g++) {
        const float s = lpx_f16_to_f32(rd16(sc + 2 * g));
        const float m = f.has_min ? lpx_f16_to_f32(rd16(mn + 2 * g)) : 0.0f;
        for (int e = 0; e < f.group; e++) {
            const int64_t at = g * f.group + e;
            int v;
            if (f.kind == LPX_WP_Q8) {
                v = (int)row[at] - 128;
            } else {
                const uint8_t by = row[g * 16 + (e & 15)];
                v = (e < 16 ? by & 0xf : by >> 4) - (f.has_min ? 0 : 8);
            }
            out[at] = s * (float)v + m;
        }
    }
}

const char *lpx_wp_name(lpx_wp_format f) {
    if (f.kind == LPX_WP_BF16) return "bf16";
    if (f.kind == LPX_WP_Q4) return f.has_min ? "q4/32+min" : "q4/32";
    if (f.group == 16) return f.has_min ? "q8/16+min" : "q8/16";
    return f.has_min ? "q8/32+min" : "q8/32";
}

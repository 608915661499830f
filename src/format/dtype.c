/* Element types of weights: sizes, names and conversion to float. Block
 * layouts: src/format/blocks.h (ggml's ggml-common.h). */
#include "format/ggml.h"
#include "format/blocks.h"
#include "format/dtype.h"

#include "base/checked.h"

#include <string.h>

static const struct {
    const char *name;
    int block_elems, block_bytes;
} dtypes[LPX_DT_COUNT] = {
    [LPX_DT_F32] = {"F32", 1, 4},
    [LPX_DT_F16] = {"F16", 1, 2},
    [LPX_DT_BF16] = {"BF16", 1, 2},
    [LPX_DT_Q8_0] = {"Q8_0", 32, 34},
    [LPX_DT_Q4_0] = {"Q4_0", 32, 18},
    [LPX_DT_Q4_1] = {"Q4_1", 32, 20},
    [LPX_DT_Q4_K] = {"Q4_K", LPX_QK_K, LPX_Q4_K_BYTES},
    [LPX_DT_Q5_K] = {"Q5_K", LPX_QK_K, LPX_Q5_K_BYTES},
    [LPX_DT_Q6_K] = {"Q6_K", LPX_QK_K, LPX_Q6_K_BYTES},
};

static bool dtype_ok(lpx_dtype t) {
    return (unsigned)t < LPX_DT_COUNT;
}

const char *lpx_dtype_name(lpx_dtype t) {
    return dtype_ok(t) ? dtypes[t].name : "?";
}
int lpx_dtype_block_elems(lpx_dtype t) {
    return dtype_ok(t) ? dtypes[t].block_elems : 0;
}
int lpx_dtype_block_bytes(lpx_dtype t) {
    return dtype_ok(t) ? dtypes[t].block_bytes : 0;
}

bool lpx_dtype_row_bytes(lpx_dtype t, int64_t n, size_t *out) {
    if (!dtype_ok(t) || n < 0 || n % dtypes[t].block_elems) return false;
    return lpx_mul_size((size_t)(n / dtypes[t].block_elems), (size_t)dtypes[t].block_bytes, out);
}

float lpx_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: renormalise */
        exp = 113;
        while (!(man & 0x400)) {
            man <<= 1;
            exp--;
        }
        bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

float lpx_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

/* Q4_K (qh NULL) and Q5_K super-blocks. */
static void deq_q45_k(const uint8_t *x, float *y, int64_t nb, bool five) {
    for (int64_t i = 0; i < nb; i++, x += five ? LPX_Q5_K_BYTES : LPX_Q4_K_BYTES) {
        float d = lpx_f16_to_f32(rd16(x)), dmin = lpx_f16_to_f32(rd16(x + 2));
        const uint8_t *qh = five ? x + 16 : NULL, *q = x + (five ? 48 : 16);
        uint8_t sc[8], m[8];
        lpx_blk_k4_scales(x + 4, sc, m);
        for (int j = 0; j < 8; j++, y += 32) {
            const uint8_t *qs = q + 32 * (j / 2);
            float dj = d * sc[j], mj = dmin * m[j];
            for (int l = 0; l < 32; l++) {
                int v = (j & 1 ? qs[l] >> 4 : qs[l] & 0xf) + (qh ? ((qh[l] >> j) & 1) << 4 : 0);
                y[l] = dj * (float)v - mj;
            }
        }
    }
}

static void deq_q6_k(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += LPX_Q6_K_BYTES) {
        float d = lpx_f16_to_f32(rd16(x + 208));
        const uint8_t *ql = x, *qh = x + 128;
        const int8_t *sc = (const int8_t *)(x + 192);
        for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

void lpx_dequantize_row(lpx_dtype t, const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    switch (t) {
    case LPX_DT_F32:
        memcpy(dst, src, (size_t)n * 4);
        break;
    case LPX_DT_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = lpx_f16_to_f32(rd16(p + 2 * i));
        break;
    case LPX_DT_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = lpx_bf16_to_f32(rd16(p + 2 * i));
        break;
    case LPX_DT_Q8_0:
        for (int64_t b = 0; b < n / 32; b++, p += 34, dst += 32) {
            float d = lpx_f16_to_f32(rd16(p));
            for (int j = 0; j < 32; j++)
                dst[j] = d * (float)(int8_t)p[2 + j];
        }
        break;
    case LPX_DT_Q4_0:
        for (int64_t b = 0; b < n / 32; b++, p += 18, dst += 32) {
            float d = lpx_f16_to_f32(rd16(p));
            for (int j = 0; j < 16; j++) {
                dst[j] = d * (float)((p[2 + j] & 0xf) - 8);
                dst[j + 16] = d * (float)((p[2 + j] >> 4) - 8);
            }
        }
        break;
    case LPX_DT_Q4_1:
        for (int64_t b = 0; b < n / 32; b++, p += 20, dst += 32) {
            float d = lpx_f16_to_f32(rd16(p)), m = lpx_f16_to_f32(rd16(p + 2));
            for (int j = 0; j < 16; j++) {
                dst[j] = d * (float)(p[4 + j] & 0xf) + m;
                dst[j + 16] = d * (float)(p[4 + j] >> 4) + m;
            }
        }
        break;
    case LPX_DT_Q4_K:
    case LPX_DT_Q5_K:
        deq_q45_k(p, dst, n / LPX_QK_K, t == LPX_DT_Q5_K);
        break;
    case LPX_DT_Q6_K:
        deq_q6_k(p, dst, n / LPX_QK_K);
        break;
    case LPX_DT_COUNT:
        break;
    }
}

/* The ggml type table (ids and block sizes from ggml.h / gguf-py's
 * GGML_QUANT_SIZES) and the K-quant decoders lpx converts at load. */
#include "format/ggml.h"

#include <stddef.h>

#define KEEP(dt) (dt), false
#define DEQ -1, true
#define NONE -1, false
static const lpx_ggml_type_info types[] = {
    [0] = {"F32", 1, 4, KEEP(LPX_DT_F32)},
    [1] = {"F16", 1, 2, KEEP(LPX_DT_F16)},
    [2] = {"Q4_0", 32, 18, KEEP(LPX_DT_Q4_0)},
    [3] = {"Q4_1", 32, 20, KEEP(LPX_DT_Q4_1)},
    [6] = {"Q5_0", 32, 22, NONE},
    [7] = {"Q5_1", 32, 24, NONE},
    [8] = {"Q8_0", 32, 34, KEEP(LPX_DT_Q8_0)},
    [9] = {"Q8_1", 32, 40, NONE},
    [10] = {"Q2_K", 256, 84, NONE},
    [11] = {"Q3_K", 256, 110, NONE},
    [12] = {"Q4_K", 256, 144, DEQ},
    [13] = {"Q5_K", 256, 176, DEQ},
    [14] = {"Q6_K", 256, 210, DEQ},
    [15] = {"Q8_K", 256, 292, NONE},
    [16] = {"IQ2_XXS", 256, 66, NONE},
    [17] = {"IQ2_XS", 256, 74, NONE},
    [18] = {"IQ3_XXS", 256, 98, NONE},
    [19] = {"IQ1_S", 256, 50, NONE},
    [20] = {"IQ4_NL", 32, 18, NONE},
    [21] = {"IQ3_S", 256, 110, NONE},
    [22] = {"IQ2_S", 256, 82, NONE},
    [23] = {"IQ4_XS", 256, 136, NONE},
    [24] = {"I8", 1, 1, NONE},
    [25] = {"I16", 1, 2, NONE},
    [26] = {"I32", 1, 4, NONE},
    [27] = {"I64", 1, 8, NONE},
    [28] = {"F64", 1, 8, NONE},
    [29] = {"IQ1_M", 256, 56, NONE},
    [30] = {"BF16", 1, 2, KEEP(LPX_DT_BF16)},
    [34] = {"TQ1_0", 256, 54, NONE},
    [35] = {"TQ2_0", 256, 66, NONE},
    [39] = {"MXFP4", 32, 17, NONE},
};

const lpx_ggml_type_info *lpx_ggml_type(uint32_t id) {
    if (id >= sizeof types / sizeof types[0] || !types[id].name) return NULL;
    return &types[id];
}

static uint16_t rd16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}

/* 6-bit scale and min j of a Q4_K/Q5_K super-block (ggml's get_scale_min_k4). */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* block_q4_K: f16 d, f16 dmin, u8 scales[12], u8 qs[128] (144 bytes). */
static void deq_q4_k(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 144) {
        float d = lpx_f16_to_f32(rd16(x)), dmin = lpx_f16_to_f32(rd16(x + 2));
        const uint8_t *sc = x + 4, *q = x + 16;
        for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
            uint8_t s, m;
            scale_min_k4(is, sc, &s, &m);
            float d1 = d * s, m1 = dmin * m;
            scale_min_k4(is + 1, sc, &s, &m);
            float d2 = d * s, m2 = dmin * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

/* block_q5_K: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128] (176 bytes). */
static void deq_q5_k(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 176) {
        float d = lpx_f16_to_f32(rd16(x)), dmin = lpx_f16_to_f32(rd16(x + 2));
        const uint8_t *sc = x + 4, *qh = x + 16, *ql = x + 48;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t s, m;
            scale_min_k4(is, sc, &s, &m);
            float d1 = d * s, m1 = dmin * m;
            scale_min_k4(is + 1, sc, &s, &m);
            float d2 = d * s, m2 = dmin * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * ((ql[l] & 0xf) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* block_q6_K: u8 ql[128], u8 qh[64], i8 scales[16], f16 d (210 bytes). */
static void deq_q6_k(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 210) {
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

void lpx_ggml_dequantize_row(uint32_t id, const void *src, float *dst, int64_t n) {
    switch (id) {
    case LPX_GGML_Q4_K:
        deq_q4_k(src, dst, n / 256);
        break;
    case LPX_GGML_Q5_K:
        deq_q5_k(src, dst, n / 256);
        break;
    case LPX_GGML_Q6_K:
        deq_q6_k(src, dst, n / 256);
        break;
    default:
        break;
    }
}

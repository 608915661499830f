/* Element types of weights: sizes, names and conversion to float. Block
 * layouts follow ggml (ggml-common.h), little-endian, possibly unaligned. */
#include "format/ggml.h"
#include "format/dtype.h"

#include "base/checked.h"

#include <string.h>

static const struct {
    const char *name;
    int block_elems, block_bytes;
} dtypes[LPX_DT_COUNT] = {
    [LPX_DT_F32] = {"F32", 1, 4},     [LPX_DT_F16] = {"F16", 1, 2},
    [LPX_DT_BF16] = {"BF16", 1, 2},   [LPX_DT_Q8_0] = {"Q8_0", 32, 34},
    [LPX_DT_Q4_0] = {"Q4_0", 32, 18}, [LPX_DT_Q4_1] = {"Q4_1", 32, 20},
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
    case LPX_DT_COUNT:
        break;
    }
}

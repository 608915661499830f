#include "backend/cpu/cpu_kv.h"

#include "base/checked.h"
#include "base/error.h"
#include "format/kv_fp8.h"

#include <stdlib.h>
#include <string.h>

lpx_status cpu_kv_init(cpu_kv *kv, const lpx_config *c, lpx_kv_dtype d, int32_t n_blocks,
                       int32_t block_size) {
    memset(kv, 0, sizeof *kv);
    kv->dtype = d == LPX_KV_AUTO ? LPX_KV_F32 : d;
    if (kv->dtype != LPX_KV_F32 && kv->dtype != LPX_KV_BF16 && kv->dtype != LPX_KV_FP8)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cpu backend: KV cache dtype %d", (int)d);
    kv->elem_bytes = kv->dtype == LPX_KV_F32 ? 4 : kv->dtype == LPX_KV_BF16 ? 2 : 1;
    kv->block_size = block_size;
    kv->n_layers = c->n_layers;
    kv->n_kv_heads = c->n_kv_heads;
    kv->head_dim = c->head_dim;
    kv->n_blocks = n_blocks;
    kv->kv_dim = kv->n_kv_heads * kv->head_dim;
    kv->block_elems = kv->n_layers * 2 * kv->block_size * kv->kv_dim;
    int64_t elems, scales = 0;
    size_t data_bytes, scale_bytes = 0;
    if (!lpx_mul_i64(kv->block_elems, n_blocks, &elems) ||
        !lpx_mul_size((size_t)elems, kv->elem_bytes, &data_bytes) ||
        (kv->dtype == LPX_KV_FP8 &&
         (!lpx_mul_i64(kv->n_layers * 2 * kv->n_kv_heads * kv->block_size, n_blocks, &scales) ||
          !lpx_mul_size((size_t)scales, sizeof(float), &scale_bytes))))
        return lpx_errorf(LPX_ERR_NOMEM, "cpu backend: KV cache of %d blocks overflows", n_blocks);
    kv->data = calloc(data_bytes ? data_bytes : 1, 1);
    if (scale_bytes) kv->scales = calloc(scale_bytes, 1);
    if (!kv->data || (scale_bytes && !kv->scales))
        return lpx_errorf(LPX_ERR_NOMEM, "cpu backend: KV cache: cannot allocate %zu bytes",
                          data_bytes + scale_bytes);
    kv->bytes = data_bytes + scale_bytes;
    for (int c = 0; c < 256; c++)
        kv->fp8[c] = lpx_kv_fp8_decode((uint8_t)c);
    return LPX_OK;
}

void cpu_kv_free(cpu_kv *kv) {
    free(kv->data);
    free(kv->scales);
    kv->data = NULL;
    kv->scales = NULL;
}

static int64_t scale_index(const cpu_kv *kv, int32_t block, int layer, int which, int64_t slot,
                           int kvh) {
    return lpx_kv_fp8_scale_index(block, layer, which, kvh, (int)slot, (int)kv->n_layers,
                                  (int)kv->n_kv_heads, (int)kv->block_size);
}

void cpu_kv_write(cpu_kv *kv, int32_t block, int layer, int which, int64_t slot, const float *x,
                  float *tmp) {
    const int64_t i = cpu_kv_index(kv, block, layer, which, slot, 0), hd = kv->head_dim;
    if (kv->dtype == LPX_KV_F32) {
        memcpy((float *)kv->data + i, x, (size_t)kv->kv_dim * sizeof(float));
    } else if (kv->dtype == LPX_KV_BF16) {
        uint16_t *h = (uint16_t *)kv->data + i;
        for (int64_t e = 0; e < kv->kv_dim; e++)
            h[e] = lpx_kv_bf16_bits(x[e]);
    } else {
        uint8_t *codes = (uint8_t *)kv->data + i;
        for (int h = 0; h < kv->n_kv_heads; h++) {
            for (int64_t e = 0; e < hd; e++) /* fp8 is bf16, then quantized */
                tmp[e] = lpx_kv_bf16_f32(lpx_kv_bf16_bits(x[h * hd + e]));
            kv->scales[scale_index(kv, block, layer, which, slot, h)] =
                lpx_kv_fp8_quantize(tmp, (int)hd, codes + h * hd);
        }
    }
}

const float *cpu_kv_decode(const cpu_kv *kv, int64_t i, int32_t block, int layer, int which,
                           int64_t slot, int kvh, float *buf) {
    if (kv->dtype == LPX_KV_BF16) {
        const uint16_t *h = (const uint16_t *)kv->data + i;
        for (int64_t e = 0; e < kv->head_dim; e++)
            buf[e] = lpx_kv_bf16_f32(h[e]);
    } else {
        const uint8_t *codes = (const uint8_t *)kv->data + i;
        const float scale = kv->scales[scale_index(kv, block, layer, which, slot, kvh)];
        for (int64_t e = 0; e < kv->head_dim; e++)
            buf[e] = LPX_KV_FMUL(kv->fp8[codes[e]], scale); /* lpx_kv_fp8_value */
    }
    return buf;
}

void cpu_kv_copy_block(cpu_kv *kv, int32_t src, int32_t dst) {
    if (src == dst) return;
    const size_t bytes = (size_t)kv->block_elems * kv->elem_bytes;
    memcpy((char *)kv->data + (size_t)dst * bytes, (char *)kv->data + (size_t)src * bytes, bytes);
    if (kv->scales) {
        const size_t n = (size_t)(kv->n_layers * 2 * kv->n_kv_heads * kv->block_size);
        memcpy(kv->scales + (size_t)dst * n, kv->scales + (size_t)src * n, n * sizeof(float));
    }
}

/* The CPU backend's KV cache memory, in the dtype of --kv-cache-dtype:
 *   f32  (auto, the reference): the values as computed;
 *   bf16: each value rounded to bf16 (as the CUDA backend's cache);
 *   fp8:  each head's bf16 values as e4m3fn codes and one float32 scale
 *         (format/kv_fp8.h, bit for bit what the CUDA kernels store).
 * n_blocks contiguous blocks; block b holds, for every layer, K then V of its
 * block_size slots, one element of the dtype per value:
 *   data[b][layer][0 = K, 1 = V][slot][kv_head][head_dim]
 * and with fp8 the scales beside them, block-major too (kv_fp8.h):
 *   scales[b][layer][0 = K, 1 = V][kv_head][slot]
 * so a block copy is one memcpy of each and a layer's keys of a block are contiguous.
 * Built with -ffp-contract=off (CMakeLists.txt): the quantization's float operations
 * are kv_fp8.h's, unfused. */
#ifndef LPX_BACKEND_CPU_KV_H
#define LPX_BACKEND_CPU_KV_H

#include "lpx.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

typedef struct cpu_kv {
    lpx_kv_dtype dtype; /* LPX_KV_F32, LPX_KV_BF16 or LPX_KV_FP8 */
    int64_t block_size, n_layers, n_kv_heads, head_dim, n_blocks;
    int64_t kv_dim;      /* n_kv_heads * head_dim: values of one slot of one layer's K */
    int64_t block_elems; /* values in one block: n_layers * 2 * block_size * kv_dim */
    size_t elem_bytes;   /* 4, 2 or 1 */
    void *data;          /* [n_blocks][block_elems] elements of the dtype */
    float *scales;       /* fp8: [n_blocks][n_layers][2][n_kv_heads][block_size]; else NULL */
    size_t bytes;        /* allocated here */
    float fp8[256];      /* lpx_kv_fp8_decode of every code (the same values, looked up) */
} cpu_kv;

/* d: auto means f32. */
lpx_status cpu_kv_init(cpu_kv *kv, const lpx_config *c, lpx_kv_dtype d, int32_t n_blocks,
                       int32_t block_size);
void cpu_kv_free(cpu_kv *kv);

/* Stores K (which = 0) or V (1) of one slot of one layer: x is (kv_dim) values, tmp
 * (head_dim) scratch. */
void cpu_kv_write(cpu_kv *kv, int32_t block, int layer, int which, int64_t slot, const float *x,
                  float *tmp);
void cpu_kv_copy_block(cpu_kv *kv, int32_t src, int32_t dst);

/* Element index of head kvh of K or V of one slot of one layer. */
static inline int64_t cpu_kv_index(const cpu_kv *kv, int32_t block, int layer, int which,
                                   int64_t slot, int kvh) {
    return block * kv->block_elems + ((int64_t)layer * 2 + which) * kv->block_size * kv->kv_dim +
           slot * kv->kv_dim + kvh * kv->head_dim;
}

/* bf16 and fp8: the (head_dim) values at index i decoded into buf. */
const float *cpu_kv_decode(const cpu_kv *kv, int64_t i, int32_t block, int layer, int which,
                           int64_t slot, int kvh, float *buf);

/* One head's cached K or V as floats, (head_dim): in place for f32, else decoded into
 * buf (head_dim floats). */
static inline const float *cpu_kv_read(const cpu_kv *kv, int32_t block, int layer, int which,
                                       int64_t slot, int kvh, float *buf) {
    const int64_t i = cpu_kv_index(kv, block, layer, which, slot, kvh);
    if (kv->dtype == LPX_KV_F32) return (const float *)kv->data + i;
    return cpu_kv_decode(kv, i, block, layer, which, slot, kvh, buf);
}

#endif

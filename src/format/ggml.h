/* ggml tensor type ids as stored in GGUF files, and what lpx does with each:
 * keep it in its blocks (an lpx_dtype), convert it to F32 at load (K-quants),
 * or refuse it. For the container readers (src/format/) and the loaders (src/model/). */
#ifndef LPX_FORMAT_GGML_H
#define LPX_FORMAT_GGML_H

#include "format/dtype.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct lpx_ggml_type_info {
    const char *name; /* NULL: not a known ggml type id */
    int block_elems;
    int block_bytes;
    int lpx_type;         /* lpx_dtype kept as stored, or -1 */
    bool dequant_at_load; /* converted to F32 when loading a model */
} lpx_ggml_type_info;

#define LPX_GGML_Q4_K 12
#define LPX_GGML_Q5_K 13
#define LPX_GGML_Q6_K 14

/* Info for a ggml type id; NULL for ids no ggml version defines. */
const lpx_ggml_type_info *lpx_ggml_type(uint32_t id);

/* Converts a row of n elements of a dequant_at_load type to float
 * (n a multiple of the block). */
void lpx_ggml_dequantize_row(uint32_t id, const void *src, float *dst, int64_t n);

float lpx_f16_to_f32(uint16_t h);
float lpx_bf16_to_f32(uint16_t h);

#endif

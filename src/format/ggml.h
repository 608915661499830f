/* ggml tensor type ids as stored in GGUF files, and what lpx does with each:
 * keep it in its blocks (an lpx_dtype) or refuse it. For the container readers
 * (src/format/) and the loaders (src/model/). */
#ifndef LPX_FORMAT_GGML_H
#define LPX_FORMAT_GGML_H

#include "format/dtype.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct lpx_ggml_type_info {
    const char *name; /* NULL: not a known ggml type id */
    int block_elems;
    int block_bytes;
    int lpx_type; /* lpx_dtype kept as stored, or -1: refused */
} lpx_ggml_type_info;

/* Info for a ggml type id; NULL for ids no ggml version defines. */
const lpx_ggml_type_info *lpx_ggml_type(uint32_t id);

float lpx_f16_to_f32(uint16_t h);
float lpx_bf16_to_f32(uint16_t h);

#endif

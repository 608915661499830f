/* Float rows into ggml blocks (src/format/blocks.h): the writing half of
 * lpx_dequantize_row, for `lpx quantize`. docs/quantize.md describes the methods:
 *   Q8_0, Q4_0        absmax: one scale a block of 32 (Q4_0 maps the value of
 *                     largest magnitude to -8, ggml's choice)
 *   Q4_1              min-max: scale (max - min) / 15, offset min
 *   Q4_K, Q5_K        per sub-block of 32 a weighted least-squares fit of scale and
 *                     min over candidate grids (weights rms + |x|), then the 8
 *                     scales and mins quantized to 6 bits against the block's largest
 *   Q6_K              per sub-block of 16 a weighted least-squares symmetric scale
 *                     over candidate grids (weights x^2, q in -32..31), then the 16
 *                     scales to int8 against the largest
 *   F16, BF16, F32    round to nearest even */
#ifndef LPX_FORMAT_QUANTIZE_H
#define LPX_FORMAT_QUANTIZE_H

#include "format/dtype.h"

#include <stdbool.h>
#include <stdint.h>

uint16_t lpx_f32_to_f16(float f);
uint16_t lpx_f32_to_bf16(float f);

/* Writes row src[n] as type t into dst (lpx_dtype_row_bytes(t, n) bytes; n a multiple of
 * t's block). Returns false, writing nothing, when a value is not finite or (F16) beyond
 * its range; *bad_at is then its index. */
bool lpx_quantize_row(lpx_dtype t, const float *src, void *dst, int64_t n, int64_t *bad_at);

#endif

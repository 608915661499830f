/* The weight formats of quantized Hugging Face checkpoints (config.json's
 * quantization_config), decoded to float rows: the one statement of their bit
 * layouts in lpx. src/model/hf_quant.c checks a checkpoint's tensors against these
 * layouts and converts them at load. Little-endian; a matrix is W[out][in] (nn.Linear),
 * its row o the in values that output o reads.
 *
 * FP8 (quant_method "fp8", "fbgemm_fp8", compressed-tensors float 8-bit):
 *   weight  F8_E4M3 codes (out, in) (OCP e4m3fn: src/format/kv_fp8.h decodes them)
 *   scale   float32 values (ceil(out / bm), ceil(in / bn)):
 *           per tensor  bm = out, bn = in   (a [] or [1] weight_scale)
 *           per channel bm = 1,   bn = in   (weight_scale (out) or (out, 1))
 *           blocks      bm x bn             (weight_scale_inv, weight_block_size)
 *   W[o][i] = decode(q[o][i]) * scale[o / bm][i / bn], in float32 as transformers'
 *   Fp8Dequantize (both names of the scale multiply: weight_scale_inv is the
 *   dequantization factor despite its name).
 *
 * INT4 with group scales and zero points, groups of g along in:
 *   AWQ GEMM  qweight int32 (in, out / 8): nibble k (bits 4k..4k+3) of word [i][j] is
 *             q[i][8j + AWQ_ORDER[k]], AWQ_ORDER = {0, 2, 4, 6, 1, 3, 5, 7} (AutoAWQ's
 *             pack order)
 *             qzeros int32 (in / g, out / 8), packed the same way; scales f16 (in / g, out)
 *   GPTQ      qweight int32 (in / 8, out): nibble k of word [r][o] is q[8r + k][o]
 *             qzeros int32 (in / g, out / 8): nibble k of word [gi][j] is the stored
 *             zero of column 8j + k; scales f16 (in / g, out)
 *   W[o][i] = (q[i][o] - (z[i / g][o] + zero_offset)) * s[i / g][o], exact in float32;
 *   zero_offset is 1 for GPTQ checkpoints in the v1 format (AutoGPTQ's stored zeros are
 *   zero - 1), 0 for AWQ and GPTQ v2. */
#ifndef LPX_FORMAT_HF_QUANT_H
#define LPX_FORMAT_HF_QUANT_H

#include <stdint.h>

/* Row o of an fp8 matrix of `in` columns into dst[in]. q: the (out, in) codes; scale:
 * the scale matrix of scale_cols = ceil(in / bn) columns. */
void lpx_hfq_fp8_row(const uint8_t *q, const float *scale, int64_t in, int64_t o, int64_t bm,
                     int64_t bn, int64_t scale_cols, float *dst);

typedef enum lpx_hfq_int4_layout {
    LPX_HFQ_AWQ = 0,
    LPX_HFQ_GPTQ = 1,
} lpx_hfq_int4_layout;

typedef struct lpx_hfq_int4 {
    lpx_hfq_int4_layout layout;
    int64_t in, out, group; /* group divides in; 8 divides in (GPTQ) and out */
    const uint8_t *qweight; /* AWQ (in, out / 8), GPTQ (in / 8, out) int32 words */
    const uint8_t *qzeros;  /* (in / group, out / 8) int32 words */
    const uint8_t *scales;  /* (in / group, out) f16 */
    int zero_offset;        /* added to every stored zero */
} lpx_hfq_int4;

/* Rows o0 .. o0 + n of the int4 matrix into dst[n][in]; o0 and n multiples of 8 (n up
 * to LPX_HFQ_TILE): a word holds 8 outputs (AWQ) or 8 inputs of one output (GPTQ), so
 * decoding a tile of outputs reads each word once and the packed rows contiguously. */
#define LPX_HFQ_TILE 16
void lpx_hfq_int4_rows(const lpx_hfq_int4 *w, int64_t o0, int64_t n, float *dst);

/* The stored zero (0..15, before zero_offset) of group gi, column o. */
int lpx_hfq_int4_zero(const lpx_hfq_int4 *w, int64_t gi, int64_t o);

#endif

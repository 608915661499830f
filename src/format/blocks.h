/* ggml block layouts (ggml-common.h), the one statement of them in lpx: what
 * the loaders validate, what lpx_dequantize_row decodes and what the quantized
 * product kernels (CPU now, GPU later) read. Little-endian; a block may sit at
 * any address (GGUF aligns tensors, not blocks), so fields are read by memcpy at
 * these byte offsets. Rows never share a block.
 *
 * Blocks of 32 (element j of a 4-bit block is the low nibble of byte j, element
 * j + 16 the high nibble):
 *   Q8_0  f16 d @0, int8 q[32] @2                     x = d * q          34 bytes
 *   Q4_0  f16 d @0, 16 bytes of nibbles @2            x = d * (q - 8)    18 bytes
 *   Q4_1  f16 d @0, f16 m @2, 16 bytes of nibbles @4  x = d * q + m      20 bytes
 *
 * K-quant super-blocks of 256 (8 sub-blocks of 32, or 16 of 16 for Q6_K):
 *   Q4_K  f16 d @0, f16 dmin @2, scales[12] @4, qs[128] @16            144 bytes
 *         sub-block j: x = d * sc_j * q - dmin * m_j, 6-bit sc_j, m_j packed
 *         in scales (lpx_blk_k4_scales); q of sub-blocks 2i, 2i+1 are the
 *         low and high nibbles of qs[32 i .. 32 i + 32)
 *   Q5_K  as Q4_K with qh[32] @16, qs[128] @48; bit 2i / 2i+1 of qh[l] is
 *         bit 4 of element l of sub-block 2i / 2i+1                     176 bytes
 *   Q6_K  ql[128] @0, qh[64] @128, int8 scales[16] @192, f16 d @208    210 bytes
 *         x = d * scales[e / 16] * (q - 32), q 6 bits (lpx_dequantize_row
 *         spells out which bits of ql/qh make element e) */
#ifndef LPX_FORMAT_BLOCKS_H
#define LPX_FORMAT_BLOCKS_H

#include <stdint.h>

#define LPX_QK 32    /* elements of a Q8_0 / Q4_0 / Q4_1 block, and of an activation block */
#define LPX_QK_K 256 /* elements of a K-quant super-block */

#define LPX_Q8_0_BYTES 34
#define LPX_Q4_0_BYTES 18
#define LPX_Q4_1_BYTES 20
#define LPX_Q4_K_BYTES 144
#define LPX_Q5_K_BYTES 176
#define LPX_Q6_K_BYTES 210

/* The eight 6-bit scales and mins of a Q4_K / Q5_K super-block from its 12
 * scale bytes q: sub-block j < 4 has sc = q[j] & 63, m = q[j + 4] & 63; j >= 4
 * has the low 4 bits in q[j + 4] (sc low, m high nibble) and the top 2 in the
 * top bits of q[j - 4] (sc) and q[j] (m) (ggml's get_scale_min_k4). */
static inline void lpx_blk_k4_scales(const uint8_t *q, uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
        sc[j + 4] = (uint8_t)((q[j + 8] & 0xf) | ((q[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
    }
}

/* Activations quantized for integer dot products: 32 values as int8 q with
 * |q| <= 127 and one float scale, value ~ d * q; s = d * sum(q) carries the
 * block sum that the offset (Q4_1's m, K-quant mins) multiplies. ggml's q8_1
 * with float fields. One format serves every weight type, so inputs shared by
 * products of different types (a Q4_K_M file's q/k/v) are quantized once. */
typedef struct lpx_blk_q8 {
    float d, s;
    int8_t q[LPX_QK];
} lpx_blk_q8;

#endif

/* Integer dot products of block-quantized weight rows, as stored, with
 * activations quantized to int8 per block of 32 (lpx_blk_q8, src/format/blocks.h),
 * as llama.cpp's q8 path does: the weights are read once, as 4-bit or 8-bit
 * integers, and multiplied in integer SIMD lanes; only each block's partial sum
 * is scaled in float.
 *
 * Two implementations with one contract: plain C (the reference every SIMD path
 * is tested against, bit for bit on the quantization and to float rounding on
 * the dots) and AVX2 (maddubs/madd; compiled with a target attribute, so one
 * binary runs on every x86-64). A backend instance picks one at create
 * (cpu_qkernels_init) from cpuid; nothing process-wide is chosen or kept. */
#ifndef LPX_BACKEND_CPU_QDOT_H
#define LPX_BACKEND_CPU_QDOT_H

#include "format/blocks.h"
#include "format/dtype.h"

#include <stdbool.h>
#include <stdint.h>

/* A register tile of a product: up to CPU_QT_ROWS weight rows times up to
 * CPU_QT_TOKENS tokens. out[t][r] = row r (w + r * row_bytes) . token t's nb
 * blocks (x + t * nb), for r < R, t < T. Each weight block is decoded once and
 * used for all T tokens, each activation block loaded once for all R rows.
 * Every out[t][r] is bit-identical whatever R and T are (batch invariance:
 * a token's logits alone, in a batch, in prefill and in decode). */
#define CPU_QT_ROWS 8
#define CPU_QT_TOKENS 4
typedef void (*cpu_qtile_fn)(const uint8_t *w, size_t row_bytes, int R, const lpx_blk_q8 *x,
                             int64_t nb, int T, float out[][CPU_QT_ROWS]);

typedef struct cpu_qkernels {
    const char *isa; /* "avx2" or "c" */
    /* x[n] (n a multiple of 32) to n / 32 blocks; every implementation gives the same bytes */
    void (*quantize)(const float *x, lpx_blk_q8 *out, int64_t n);
    cpu_qtile_fn tile[LPX_DT_COUNT]; /* NULL: no integer dot for the type */
} cpu_qkernels;

/* The kernels of isa "avx2" or "c"; NULL or "" = the best this CPU runs (AVX2
 * needs AVX2, FMA and F16C). False when the CPU lacks the asked-for isa or the
 * name is unknown. */
bool cpu_qkernels_init(cpu_qkernels *k, const char *isa);

#endif

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

/* Dot product of one weight row of nb activation blocks' length (w: the row's
 * bytes, x: [nb] blocks). */
typedef float (*cpu_qdot_fn)(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb);
/* The same row against 4 tokens' blocks (x, x + nb, x + 2 nb, x + 3 nb), each
 * out[k] bit-identical to the single dot's: the weights are unpacked once. */
typedef void (*cpu_qdot4_fn)(const uint8_t *w, const lpx_blk_q8 *x, int64_t nb, float out[4]);

typedef struct cpu_qkernels {
    const char *isa; /* "avx2" or "c" */
    /* x[n] (n a multiple of 32) to n / 32 blocks; every implementation gives the same bytes */
    void (*quantize)(const float *x, lpx_blk_q8 *out, int64_t n);
    cpu_qdot_fn dot[LPX_DT_COUNT];   /* NULL: no integer dot for the type */
    cpu_qdot4_fn dot4[LPX_DT_COUNT]; /* NULL: four calls of dot */
} cpu_qkernels;

/* The kernels of isa "avx2" or "c"; NULL or "" = the best this CPU runs (AVX2
 * needs AVX2, FMA and F16C). False when the CPU lacks the asked-for isa or the
 * name is unknown. */
bool cpu_qkernels_init(cpu_qkernels *k, const char *isa);

#endif

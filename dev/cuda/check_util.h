/* Host helpers shared by the workshop checks of dev/cuda (flash_check.cu,
 * matvec_check.cu, gpc_probe.cu): a CUDA call check that exits, a fixed-seed random stream and
 * bf16 <-> float conversion (round to nearest even). */
#ifndef LPX_BENCH_CUDA_CHECK_UTIL_H
#define LPX_BENCH_CUDA_CHECK_UTIL_H

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}
static uint16_t f2bf_h(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf2f_h(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif

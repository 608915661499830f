/* Workshop check of the fp8 KV format (src/format/kv_fp8.h) on the GPU: the header's
 * functions, compiled for the device, against CUDA's own conversions and against the
 * same functions on the host.
 *  - lpx_kv_fp8_encode against __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) for
 *    every one of the 2^32 float bit patterns (NaN in: both must give a NaN code);
 *  - lpx_kv_bf16_bits against __float2bfloat16_rn for every pattern (NaN: both NaN);
 *  - lpx_kv_fp8_decode of the 256 codes against __nv_cvt_fp8_to_halfraw;
 *  - lpx_kv_fp8_quantize of 65,536 random heads of 128 (every magnitude) on the device
 *    against the host: codes and scales bit for bit (the division and the multiply are
 *    LPX_KV_FDIV/FMUL: __fdiv_rn/__fmul_rn there, IEEE ops here).
 * Prints the mismatches and exits 1 when any. Build and run:
 *   dev/cuda/build-kv-fp8-check.sh OUT && OUT/kv_fp8_check */
#include "format/kv_fp8.h"

#include "check_util.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>


struct mismatches {
    unsigned long long fp8, bf16;
    uint32_t first_fp8[4], first_bf16[4];
};

__global__ void every_float(uint64_t begin, uint64_t n, mismatches *m) {
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint32_t u = (uint32_t)(begin + i);
        const float x = __uint_as_float(u);
        const uint8_t mine = lpx_kv_fp8_encode(x);
        const uint8_t hw = (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
        const bool nan_both = (mine & 0x7F) == 0x7F && (hw & 0x7F) == 0x7F;
        if (mine != hw && !nan_both) {
            unsigned long long k = atomicAdd(&m->fp8, 1ull);
            if (k < 4) m->first_fp8[k] = u;
        }
        const uint16_t b = lpx_kv_bf16_bits(x);
        const __nv_bfloat16 hb = __float2bfloat16_rn(x);
        const uint16_t hbits = *(const uint16_t *)&hb;
        const bool bnan = (b & 0x7FFF) > 0x7F80 && (hbits & 0x7FFF) > 0x7F80;
        if (b != hbits && !bnan) {
            unsigned long long k = atomicAdd(&m->bf16, 1ull);
            if (k < 4) m->first_bf16[k] = u;
        }
    }
}

__global__ void decode_codes(float *mine, float *hw) {
    const int c = threadIdx.x;
    mine[c] = lpx_kv_fp8_decode((uint8_t)c);
    __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, __NV_E4M3);
    hw[c] = __half2float(*(const __half *)&h);
}

#define HD 128
__global__ void quantize_heads(const float *x, int n_heads, uint8_t *codes, float *scales) {
    const int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h < n_heads)
        scales[h] = lpx_kv_fp8_quantize(x + (size_t)h * HD, HD, codes + (size_t)h * HD);
}

int main(void) {
    int bad = 0;
    mismatches *m;
    CK(cudaMallocManaged(&m, sizeof *m));
    memset(m, 0, sizeof *m);
    const uint64_t all = (uint64_t)1 << 32, piece = (uint64_t)1 << 30;
    for (uint64_t b = 0; b < all; b += piece)
        every_float<<<132 * 8, 256>>>(b, piece, m);
    CK(cudaDeviceSynchronize());
    printf("encode vs __nv_cvt_float_to_fp8 (satfinite, e4m3), 2^32 floats: %llu differ\n", m->fp8);
    for (unsigned long long i = 0; i < m->fp8 && i < 4; i++) {
        const float x = lpx_kv_bits_f32(m->first_fp8[i]);
        printf("  x = %a (0x%08x): lpx 0x%02x\n", x, m->first_fp8[i], lpx_kv_fp8_encode(x));
    }
    printf("bf16 vs __float2bfloat16_rn, 2^32 floats: %llu differ\n", m->bf16);
    for (unsigned long long i = 0; i < m->bf16 && i < 4; i++)
        printf("  x = 0x%08x: lpx 0x%04x\n", m->first_bf16[i],
               lpx_kv_bf16_bits(lpx_kv_bits_f32(m->first_bf16[i])));
    bad += m->fp8 != 0 || m->bf16 != 0;

    float *dm, *dh;
    CK(cudaMallocManaged(&dm, 256 * sizeof(float)));
    CK(cudaMallocManaged(&dh, 256 * sizeof(float)));
    decode_codes<<<1, 256>>>(dm, dh);
    CK(cudaDeviceSynchronize());
    int dbad = 0;
    for (int c = 0; c < 256; c++) {
        const float host = lpx_kv_fp8_decode((uint8_t)c);
        const bool same = (isnan(dm[c]) && isnan(dh[c]) && isnan(host)) ||
                          (dm[c] == dh[c] && dm[c] == host && signbit(dm[c]) == signbit(dh[c]));
        if (!same)
            printf("  code 0x%02x: device %a, hardware %a, host %a\n", c, dm[c], dh[c], host);
        dbad += !same;
    }
    printf("decode of 256 codes vs __nv_cvt_fp8_to_halfraw and the host: %d differ\n", dbad);
    bad += dbad != 0;

    const int n_heads = 65536;
    float *x;
    uint8_t *codes;
    float *scales;
    CK(cudaMallocManaged(&x, (size_t)n_heads * HD * sizeof(float)));
    CK(cudaMallocManaged(&codes, (size_t)n_heads * HD));
    CK(cudaMallocManaged(&scales, (size_t)n_heads * sizeof(float)));
    for (int h = 0; h < n_heads; h++) {
        const float mag = ldexpf(1.0f, (h % 200) - 100); /* 2^-100 .. 2^99 */
        for (int i = 0; i < HD; i++) {
            const float v = frand() * mag;
            x[(size_t)h * HD + i] = lpx_kv_bf16_f32(lpx_kv_bf16_bits(v));
        }
    }
    x[7] = INFINITY;
    quantize_heads<<<n_heads / 128, 128>>>(x, n_heads, codes, scales);
    CK(cudaDeviceSynchronize());
    int qbad = 0;
    uint8_t hc[HD];
    for (int h = 0; h < n_heads; h++) {
        const float s = lpx_kv_fp8_quantize(x + (size_t)h * HD, HD, hc);
        const bool same = lpx_kv_f32_bits(s) == lpx_kv_f32_bits(scales[h]) &&
                          !memcmp(hc, codes + (size_t)h * HD, HD);
        if (!same && qbad < 4) printf("  head %d: scale host %a device %a\n", h, s, scales[h]);
        qbad += !same;
    }
    printf("quantize of %d heads of %d, device vs host: %d differ\n", n_heads, HD, qbad);
    bad += qbad != 0;
    printf(bad ? "FAIL\n" : "OK\n");
    return bad ? 1 : 0;
}

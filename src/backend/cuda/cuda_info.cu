/* Device facts and the read-bandwidth probe behind `lpx bench`'s bandwidth floor. */
#include "common.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend/cuda/cuda_info.h"
}

#ifndef LPX_CUDA_ARCHS
#define LPX_CUDA_ARCHS "unknown"
#endif

// ----------------------------------------------------------------------------
// CUDA kernels

/* Each thread sums 16-byte words with a grid stride, 4 loads in flight; one
 * partial per block, so the only traffic is the read itself. */
__global__ void read_sum_kernel(uint32_t *__restrict__ out, const uint4 *__restrict__ src,
                                size_t n) {
    uint32_t acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = __ldcs(src + i), b = __ldcs(src + i + stride);
        const uint4 c = __ldcs(src + i + 2 * stride), d = __ldcs(src + i + 3 * stride);
        acc += a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
               d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        const uint4 a = __ldcs(src + i);
        acc += a.x ^ a.y ^ a.z ^ a.w;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out + blockIdx.x, acc);
}

// ----------------------------------------------------------------------------
// host side

extern "C" lpx_status lpx_cuda_device_info_get(int device, lpx_cuda_device_info *out) {
    memset(out, 0, sizeof(*out));
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return lpx_errorf(LPX_ERR_DEVICE, "cuda: no usable GPU: cudaGetDeviceCount: %s (%s)",
                          cudaGetErrorName(e), cudaGetErrorString(e));
    if (device < 0 || device >= n)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: device %d requested, %d present", device, n);
    cudaDeviceProp p;
    LPX_CUDA_TRY(cudaGetDeviceProperties(&p, device));
    snprintf(out->name, sizeof(out->name), "%s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->n_sms = p.multiProcessorCount;
    LPX_CUDA_TRY(cudaDriverGetVersion(&out->driver_version));
    LPX_CUDA_TRY(cudaRuntimeGetVersion(&out->runtime_version));
    LPX_CUDA_TRY(cudaSetDevice(device));
    LPX_CUDA_TRY(cudaMemGetInfo(&out->free_mem, &out->total_mem));
    snprintf(out->archs, sizeof(out->archs), "%s", LPX_CUDA_ARCHS);
    return LPX_OK;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static lpx_status measure(size_t bytes, int reps, double *bps, void *buf, uint32_t *part,
                          cudaEvent_t e0, cudaEvent_t e1, float *ms) {
    const int blocks = 4 * 132 * 8, threads = 256;
    const size_t n = bytes / 16;
    LPX_CUDA_TRY(cudaMemset(buf, 0x5a, bytes));
    LPX_CUDA_TRY(cudaMemset(part, 0, sizeof(uint32_t) * blocks));
    for (int r = -2; r < reps; r++) { /* two warm-up passes */
        LPX_CUDA_TRY(cudaEventRecord(e0));
        read_sum_kernel<<<blocks, threads>>>(part, (const uint4 *)buf, n);
        LPX_CUDA_LAUNCHED();
        LPX_CUDA_TRY(cudaEventRecord(e1));
        LPX_CUDA_TRY(cudaEventSynchronize(e1));
        if (r >= 0) LPX_CUDA_TRY(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    qsort(ms, (size_t)reps, sizeof(float), cmp_float);
    *bps = (double)n * 16 / (ms[reps / 2] * 1e-3);
    return LPX_OK;
}

extern "C" lpx_status lpx_cuda_read_bandwidth(int device, size_t bytes, int reps,
                                              double *bytes_per_s) {
    if (reps < 1) reps = 1;
    LPX_CUDA_TRY(cudaSetDevice(device));
    void *buf = NULL;
    uint32_t *part = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float *ms = (float *)malloc(sizeof(float) * reps);
    if (!ms) return lpx_errorf(LPX_ERR_NOMEM, "cuda: out of host memory");
    lpx_status s = LPX_OK;
    cudaError_t e = cudaMalloc(&buf, bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&part, sizeof(uint32_t) * 4 * 132 * 8);
    if (e == cudaSuccess) e = cudaEventCreate(&e0);
    if (e == cudaSuccess) e = cudaEventCreate(&e1);
    if (e != cudaSuccess)
        s = lpx_errorf(LPX_ERR_DEVICE, "cuda: bandwidth probe: %s", cudaGetErrorString(e));
    else
        s = measure(bytes, reps, bytes_per_s, buf, part, e0, e1, ms);
    if (e1) cudaEventDestroy(e1);
    if (e0) cudaEventDestroy(e0);
    cudaFree(part);
    cudaFree(buf);
    free(ms);
    return s;
}

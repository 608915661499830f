/* Shared pieces of the CUDA backend: the one error-check macro, bf16 helpers and
 * block reductions. Every CUDA call and every launch goes through LPX_CUDA_TRY, so
 * a failure names file, line, the call and the CUDA error. */
#ifndef LPX_BACKEND_CUDA_COMMON_CUH
#define LPX_BACKEND_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "base/error.h"
}

typedef __nv_bfloat16 bf16;

#define LPX_CUDA_TRY(call)                                                                         \
    do {                                                                                           \
        cudaError_t lpx_cu_e_ = (call);                                                            \
        if (lpx_cu_e_ != cudaSuccess)                                                              \
            return lpx_errorf(LPX_ERR_DEVICE, "%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call,     \
                              cudaGetErrorName(lpx_cu_e_), cudaGetErrorString(lpx_cu_e_));         \
    } while (0)

/* After a launch: catches bad configurations (grid, shared memory) at once. */
#define LPX_CUDA_LAUNCHED() LPX_CUDA_TRY(cudaGetLastError())

static __device__ __forceinline__ float bf2f(bf16 v) { return __bfloat162float(v); }
static __device__ __forceinline__ bf16 f2bf(float v) { return __float2bfloat16_rn(v); }

/* Low and high bf16 of a 32-bit word as floats (a bf16 is the top half of a float). */
static __device__ __forceinline__ float bf_lo(uint32_t w) { return __uint_as_float(w << 16); }
static __device__ __forceinline__ float bf_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

/* Dot product of 8 bf16 weights and 8 bf16 activations, each packed in a uint4. */
static __device__ __forceinline__ float dot8(uint4 w, uint4 x) {
    float s = bf_lo(w.x) * bf_lo(x.x);
    s = fmaf(bf_hi(w.x), bf_hi(x.x), s);
    s = fmaf(bf_lo(w.y), bf_lo(x.y), s);
    s = fmaf(bf_hi(w.y), bf_hi(x.y), s);
    s = fmaf(bf_lo(w.z), bf_lo(x.z), s);
    s = fmaf(bf_hi(w.z), bf_hi(x.z), s);
    s = fmaf(bf_lo(w.w), bf_lo(x.w), s);
    s = fmaf(bf_hi(w.w), bf_hi(x.w), s);
    return s;
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* RMSNorm of one head held by a warp, DPL values a lane (lane*DPL ..): v becomes
 * (v·inv)·w[lane*DPL ..], inv = 1/sqrt(mean(v²) + eps) over the hd values; the
 * _regs form takes the lane's weights already loaded. */
template <int DPL>
static __device__ __forceinline__ void head_rmsnorm_regs(float (&v)[DPL], const float (&w)[DPL],
                                                         int hd, float eps) {
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < DPL; e++) ss += v[e] * v[e];
    const float inv = rsqrtf(warp_sum(ss) / (float)hd + eps);
#pragma unroll
    for (int e = 0; e < DPL; e++) v[e] = v[e] * inv * w[e];
}
template <int DPL>
static __device__ __forceinline__ void head_rmsnorm(float (&v)[DPL], const float *w, int hd,
                                                    float eps) {
    const int lane = threadIdx.x & 31;
    float wr[DPL];
#pragma unroll
    for (int e = 0; e < DPL; e++) wr[e] = w[lane * DPL + e];
    head_rmsnorm_regs<DPL>(v, wr, hd, eps);
}

/* RoPE of head dim i (of hd): its frequency index fi, the dim it rotates with, and
 * the sign of that partner's term: r_i = v_i·cos + sign·v_partner·sin. Pairs are
 * (i, i^1) when interleaved, else (i, i ± hd/2). */
static __device__ __forceinline__ void rope_pair(int i, int hd, int interleaved, int *fi,
                                                 int *partner, float *sign) {
    const int half = hd / 2;
    if (interleaved) {
        *fi = i / 2;
        *partner = i ^ 1;
        *sign = (i & 1) ? 1.0f : -1.0f;
    } else {
        *fi = i % half;
        *partner = i < half ? i + half : i - half;
        *sign = i < half ? -1.0f : 1.0f;
    }
}

/* RoPE of one head held by a warp, DPL dims a lane (lane*DPL ..): pairs (d, d^1)
 * within the lane when interleaved, else (d, d±HD/2) in lanes l and l^16.
 * head_rope_angles gives the lane's cos/sin at position pos; head_rope rotates v
 * into rot (every lane of the warp takes part: a shuffle). */
template <int HD, int DPL>
static __device__ __forceinline__ void head_rope_angles(int pos, const float *inv_freq,
                                                        int interleaved, float (&cs)[DPL],
                                                        float (&sn)[DPL]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int e = 0; e < DPL; e++) {
        const int d = lane * DPL + e;
        sincosf((float)pos * inv_freq[interleaved ? d / 2 : d % (HD / 2)], &sn[e], &cs[e]);
    }
}
template <int DPL>
static __device__ __forceinline__ void head_rope(const float (&v)[DPL], const float (&cs)[DPL],
                                                 const float (&sn)[DPL], int interleaved,
                                                 float (&rot)[DPL]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int e = 0; e < DPL; e++) {
        float vp, sign;
        if (interleaved) {
            vp = v[e ^ 1];
            sign = (e & 1) ? 1.0f : -1.0f;
        } else {
            vp = __shfl_xor_sync(0xffffffffu, v[e], 16);
            sign = lane < 16 ? -1.0f : 1.0f;
        }
        rot[e] = v[e] * cs[e] + sign * vp * sn[e];
    }
}

/* Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result. */
static __device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0) part[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < nw; i++) s += part[i];
    return s;
}

/* The GPU's nanosecond clock (coarse steps; for traces across blocks). */
static __device__ __forceinline__ unsigned long long globaltimer_ns(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* The SM a thread runs on. */
static __device__ __forceinline__ unsigned smid(void) {
    unsigned r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}

/* The blk trace (trace.cuh; docs/dev.md): every block of that layer's batch-1
 * kernels writes BT_MARKS values (thread 0's view): its SM, then %globaltimer at its
 * start, when its wait returned, when its input was staged, when its rows were done,
 * at its end (the fused q/k/v + attention kernel: only the start, the wait and the
 * end, the others copy the wait; more marks raised its registers from 92 to 128). */
#define BT_MARKS 6
#define BT_BLOCKS 256
#define BT_MARK(pb, i)                                                                             \
    if (pb) (pb)[i] = (long long)globaltimer_ns()

static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* Programmatic dependent launch (sm_90): a kernel may start while its predecessor
 * in the stream still runs. Every kernel calls grid_wait() in every block before it
 * touches memory a predecessor writes (weights may be read before), and lets its
 * successor start with grid_launch_next(). Without the launch attribute both are
 * no-ops. */
static __device__ __forceinline__ void grid_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void grid_launch_next(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* The stream a launcher queues its kernels on, and whether they go with
 * programmatic stream serialization (the instance's tuning, pdl). */
typedef struct kstream {
    cudaStream_t s;
    bool pdl;
} kstream;

/* Launches kernel k on st, with programmatic stream serialization when st.pdl. */
template <typename... KArgs, typename... Args>
static cudaError_t launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, kstream st,
                          Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st.s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = st.pdl ? 1 : 0;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);
}

#endif

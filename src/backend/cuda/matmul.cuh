/* y = x · Wᵀ for every projection. A few tokens (decode): our own matrix-vector
 * kernels that stream the bf16 weights once, reusing each load for all tokens:
 * matvec_tma_kernel, which requests a block's whole weight slice into shared
 * memory before waiting for its predecessor, where the slice fits with up to 64
 * blocks an SM (the projections and the lm_head of 0.5-1B models), else
 * matvec_kernel (16-byte loads from global memory; long x). More tokens (prefill,
 * large batches): cuBLAS bf16 GEMM
 * with float accumulation on the tensor cores. */
#ifndef LPX_BACKEND_CUDA_MATMUL_CUH
#define LPX_BACKEND_CUDA_MATMUL_CUH

#include "common.cuh"
#include "elementwise.cuh"
#include "tuning.h"
#include "wquant.cuh"

#include <cublas_v2.h>

#define MV_WARPS 8        /* warps per block */
#define MV2_WARPS 12      /* warps per block of matvec_tma_kernel: a warp per row group of gate/up */
/* matmul flags: MM_ADD adds the product to y (the residual); MM_ADD_EARLY too, and
 * y's last writer is two or more kernels back, so the batch-1 kernel may read it
 * before griddepcontrol.wait; MM_NEXT_EARLY lets the next kernel launch at once
 * (before this one's wait), for a successor whose weights take longer to fetch
 * than this kernel runs; only safe where the kernel after that reads nothing
 * before its wait that this kernel's predecessor writes. */
#define MM_ADD 1
#define MM_ADD_EARLY 3
#define MM_NEXT_EARLY 4
#define MM_NEXT_LATE 8 /* the next kernel launches once this block's weights are used */
/* Batch 1, matvec_tma_kernel: at most d of a block's weight pieces in flight (bits
 * 16-19; 0: all at once). The last warp issues the others as earlier ones land,
 * before its wait, so that fewer bulk copies queue ahead of the latency-bound loads
 * (x staging, the hand-overs) of the kernels around it (docs/lab/notebook.md row 33).
 * matvec_any drops it for grids of more blocks than SMs. */
#define MM_PACE(d) ((int)((unsigned)(d) & 15u) << 16)
/* Batch 1, matvec_tma_kernel: the launch asks for enough shared memory that no two of
 * its blocks share an SM (cuda_tuning.mv_solo_smem). With the fused q/k/v + attention kernel on,
 * each 128-block kernel of a layer otherwise lands two blocks an SM on the 64-82 SMs
 * its predecessors left room on, and its issue-bound rows phase runs on half the GPU
 * (docs/lab/notebook.md rows 32b, 34). matvec_any drops it for grids of more blocks than SMs. */
#define MM_SOLO (1 << 20)
#define MV_MAX_TOKENS 8   /* above this, cuBLAS */
#define MV2_ROWS 4        /* rows a warp of matvec_tma_kernel computes at once */
#define MV2_PIECES 4      /* bulk copies (each with its mbarrier) a block of it issues */
/* Dynamic shared memory of a matvec_tma_kernel block (weight slice and staged x):
 * two blocks (this kernel's and the next one's under PDL), with their static
 * shared memory and the 1 KB the system reserves a block, fit the 228 KB of an
 * H100/H200 SM. */
#define MV2_SMEM_MAX (110 * 1024)

// ----------------------------------------------------------------------------
// CUDA kernels

/* A warp owns one row, or 1/ksplit of it when rows are few, so that the grid
 * still gives every SM two blocks or more; each lane reads 8 consecutive bf16 per
 * 256-column chunk, four chunks in flight. The first chunks are loaded before
 * grid_wait(): weights never depend on the previous kernel, so their fetch
 * overlaps its tail (measured: a persistent variant with fewer, longer-lived
 * blocks was 30% slower at batch 1, docs/lab/notebook.md).
 * x is staged in shared memory as bf16 when xs_bytes > 0: with norm_w set, x is
 * the float residual stream and the block applies RMSNorm while staging (so no
 * separate norm kernel); otherwise x is bf16. With xs_bytes == 0, x (bf16) is read
 * from global memory.
 * With act set, rows come in gate/up pairs (2j, 2j+1) and the block writes
 * act[j] = silu(gate)·up instead of y. With accumulate, y += result (the residual). */
template <int B, int F>
__global__ void __launch_bounds__(MV_WARPS * 32)
    matvec_kernel(float *__restrict__ y, bf16 *__restrict__ act, const void *__restrict__ W,
                        const void *__restrict__ x, const float *__restrict__ norm_w,
                        int xs_bytes, int rows, int cols, int ksplit, int accumulate, float eps,
                        int row_bytes, int gshift, int moff) {
    extern __shared__ uint4 xs_raw[];
    constexpr int CH = wf_traits<F>::CH; /* elements a 16-byte chunk of W */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rpb = MV_WARPS / ksplit;
    const int row = blockIdx.x * rpb + warp / ksplit;
    const int kp = warp % ksplit;
    const int cols8 = cols / 8, nq = cols / CH, nchunks = (nq + 31) / 32;
    const int step = 4 * ksplit;
    const bool live = row < rows;
    const uint8_t *wrow = (const uint8_t *)W + (size_t)(live ? row : 0) * row_bytes;
    const uint4 *wr = reinterpret_cast<const uint4 *>(wrow);
    const __half *const sc[1] = {(const __half *)(wrow + wm_code_bytes(F, cols))};
    uint4 w[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
        const int c = kp + u * ksplit, i = c * 32 + lane;
        w[u] = live && c < nchunks && i < nq ? __ldg(wr + i) : make_uint4(0, 0, 0, 0);
    }
    grid_wait();
    grid_launch_next();
    const uint4 *xv = reinterpret_cast<const uint4 *>(x);
    if (xs_bytes > 0) {
        bf16 *xs = reinterpret_cast<bf16 *>(xs_raw);
        if (norm_w) {
            const float *xf = reinterpret_cast<const float *>(x);
            for (int b = 0; b < B; b++) {
                float ss = 0.0f;
                for (int i = threadIdx.x; i < cols; i += blockDim.x)
                    ss += xf[(size_t)b * cols + i] * xf[(size_t)b * cols + i];
                const float inv = rsqrtf(block_sum(ss) / (float)cols + eps);
                for (int i = threadIdx.x; i < cols; i += blockDim.x)
                    xs[b * cols + i] = f2bf(xf[(size_t)b * cols + i] * inv * norm_w[i]);
            }
        } else {
            for (int i = threadIdx.x; i < B * cols8; i += blockDim.x) xs_raw[i] = xv[i];
        }
        __syncthreads();
        xv = xs_raw;
    }
    float acc[1][B];
#pragma unroll
    for (int b = 0; b < B; b++) acc[0][b] = 0.0f;
    if (live) {
        for (int c = kp; c < nchunks; c += step) {
            uint4 nw[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int cc = c + step + u * ksplit, i = cc * 32 + lane;
                nw[u] = cc < nchunks && i < nq ? __ldg(wr + i) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int i = (c + u * ksplit) * 32 + lane;
                if (c + u * ksplit < nchunks && i < nq) {
                    if constexpr (F == WF_BF16) {
#pragma unroll
                        for (int b = 0; b < B; b++) acc[0][b] += dot8(w[u], xv[b * cols8 + i]);
                    } else {
                        const uint4 w1[1] = {w[u]};
                        qdot_chunk<F, 1, B>(w1, sc, i, gshift, moff, xv + i * (CH / 8), cols8,
                                            acc);
                    }
                }
                w[u] = nw[u];
            }
        }
    }
    __shared__ float red[MV_WARPS][B];
#pragma unroll
    for (int b = 0; b < B; b++) {
        const float v = warp_sum(acc[0][b]);
        if (lane == 0) red[warp][b] = v;
    }
    __syncthreads();
    const int t = threadIdx.x;
    if (!act) {
        if (t < rpb * B) {
            const int r = t / B, b = t % B, grow = blockIdx.x * rpb + r;
            if (grow < rows) {
                float s = 0.0f;
                for (int k = 0; k < ksplit; k++) s += red[r * ksplit + k][b];
                float *dst = y + (size_t)b * rows + grow;
                *dst = accumulate ? *dst + s : s;
            }
        }
    } else if (t < rpb / 2 * B) {
        const int p = t / B, b = t % B, grow = blockIdx.x * rpb + 2 * p;
        if (grow + 1 < rows) {
            float g = 0.0f, u = 0.0f;
            for (int k = 0; k < ksplit; k++) {
                g += red[2 * p * ksplit + k][b];
                u += red[(2 * p + 1) * ksplit + k][b];
            }
            act[(size_t)b * (rows / 2) + grow / 2] = f2bf(g / (1.0f + expf(-g)) * u);
        }
    }
}

/* Shared-memory barriers and bulk copies (sm_90 PTX) for matvec_tma_kernel. An
 * mbarrier here is used for one phase per launch: one arrival (the issuing
 * thread's expect_tx) plus the bytes its copy delivers. */
static __device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
static __device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
/* Makes the initialised mbarriers visible to the async proxy (the bulk copies). */
static __device__ __forceinline__ void mbar_fence_init(void) {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
/* Built with -DLPX_CUDA_NO_WEIGHTS=1 (an experiment, never a product build): the bulk
 * copies of weight slices are not issued and their mbarriers complete at once, so
 * a decode step's time is its chain of latencies without the weight stream (the
 * results are garbage). docs/lab/notebook.md row 31. */
#ifndef LPX_CUDA_NO_WEIGHTS
#define LPX_CUDA_NO_WEIGHTS 0
#endif
static __device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    if (LPX_CUDA_NO_WEIGHTS) bytes = 0;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}
/* L2 priority of the weight streams (docs/lab/notebook.md row 48). The model passes
 * through L2 once a step (1.2 GB for Qwen3-0.6B against 50 MB), so with the default
 * policy it evicts everything else: the norm weights, biases, RoPE frequencies and
 * the like that a kernel reads before its grid_wait() then come from HBM, behind
 * the weight streams. LPX_CUDA_L2_HINT 1 marks the weight lines evict_first, so
 * those small reads stay in L2 (batch 1: Qwen3-0.6B -3, Llama-3.2-1B -17,
 * Qwen2.5-0.5B -19 us a step). 0 gives no hint. Keeping 2.5 % of the weight lines
 * evict_last (in L2 from one step to the next) was no better (row 48). */
#ifndef LPX_CUDA_L2_HINT
#define LPX_CUDA_L2_HINT 1
#endif
static __device__ __forceinline__ uint64_t weight_policy(void) {
    uint64_t p;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
/* bytes (a multiple of 16) from global src to shared dst, both 16-byte aligned;
 * completes bytes of bar's transaction count on arrival. */
static __device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes,
                                                 uint32_t bar) {
    if (LPX_CUDA_NO_WEIGHTS) return;
#if LPX_CUDA_L2_HINT
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
                 "[%0], [%1], %2, [%3], %4;" ::"r"(dst),
                 "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(bar), "l"(weight_policy())
                 : "memory");
#else
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(dst),
                 "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(bar)
                 : "memory");
#endif
}
static __device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

/* The same product with the block's whole weight slice in flight before
 * grid_wait(): block b owns rows [b*rpb, b*rpb + rpb), one contiguous range of W,
 * that one thread requests as up to MV2_PIECES bulk copies (TMA, no registers)
 * into shared memory, each completing its own mbarrier. So the weights of a whole
 * kernel stream while its predecessor still runs (matvec_kernel had only its
 * first 16 KB a block in flight there), and every SM holds about one block of each
 * of the two kernels PDL keeps in flight. After grid_wait() the block stages x
 * (with norm_w: the RMSNorm of the float residual stream, the same arithmetic as
 * matvec_kernel) and each warp computes MV2_ROWS rows at once from shared memory
 * (16-byte reads by consecutive lanes, conflict-free; one x load serves all those
 * rows) as soon as the piece that holds them has landed. Few rows a block (o,
 * down): ks warps split each group of rows by columns. act and accumulate as in
 * matvec_kernel; rpb is even with act, so gate/up pairs stay in one group. */
template <int B, int F>
static __device__ __forceinline__ void
matvec_tma_body(float *__restrict__ y, bf16 *__restrict__ act, const void *__restrict__ W,
                const void *__restrict__ x, const float *__restrict__ norm_w, int rows, int cols,
                int rpb, int accumulate, float eps, int row_bytes, int gshift, int moff,
                long long *__restrict__ trace, // (MV_TRACE) or NULL: the mv trace
                long long *__restrict__ bt) {  // (BT_BLOCKS, BT_MARKS) or NULL
    extern __shared__ __align__(128) uint4 mv2_smem[];
    long long *tr = trace && blockIdx.x == 0 && threadIdx.x == 0 ? trace : NULL;
    long long *pb = bt && threadIdx.x == 0 && blockIdx.x < BT_BLOCKS
                        ? bt + (size_t)BT_MARKS * blockIdx.x
                        : NULL;
    if (pb) pb[0] = smid();
    BT_MARK(pb, 1);
    const long long c0 = clock64();
    if (tr) tr[0] = (long long)globaltimer_ns();
    __shared__ __align__(8) uint64_t bars[MV2_PIECES];
    __shared__ float red[MV2_WARPS][MV2_ROWS][B];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = blockIdx.x * rpb, nrows = min(rpb, rows - r0);
    const int cols8 = cols / 8;
    const int ng = (nrows + MV2_ROWS - 1) / MV2_ROWS; /* row groups */
    const int np = min(MV2_PIECES, ng);               /* piece p: groups [p*ng/np, (p+1)*ng/np) */
    const uint8_t *ws = reinterpret_cast<const uint8_t *>(mv2_smem); /* (nrows, row_bytes) */
    uint4 *xs = reinterpret_cast<uint4 *>((uint8_t *)mv2_smem + (size_t)rpb * row_bytes); /* (B, cols8): x as bf16 */
    auto issue_piece = [&](int p) {
        const int rs = p * ng / np * MV2_ROWS;
        const int re = min((p + 1) * ng / np * MV2_ROWS, nrows);
        const uint32_t bytes = (uint32_t)(re - rs) * (uint32_t)row_bytes;
        mbar_expect_tx(smem_addr(&bars[p]), bytes);
        bulk_load(smem_addr(ws + (size_t)rs * row_bytes),
                  (const uint8_t *)W + (size_t)(r0 + rs) * row_bytes, bytes, smem_addr(&bars[p]));
    };
    const int pace = ((unsigned)accumulate >> 16) & 15u; /* MM_PACE */
    const int first = pace > 0 && pace < np ? pace : np;  /* pieces issued at the start */
    if (threadIdx.x == 0) {
        for (int p = 0; p < np; p++) mbar_init(smem_addr(&bars[p]), 1);
        mbar_fence_init();
        for (int p = 0; p < first; p++) issue_piece(p);
    }
    /* With norm_w and x short enough, each thread keeps its x values in registers:
     * one round trip for all of them (a strided loop waited once per value: 2.3-3.3
     * us of the qkv and gate/up kernels, docs/lab/notebook.md), and the norm weights, which
     * no kernel writes, are read before the wait. */
    constexpr int XR = 16 / B > 0 ? 16 / B : 1; /* x values a thread keeps per token */
    const bool x_regs = norm_w && cols <= XR * (int)blockDim.x;
    float nwr[XR];
    if (x_regs)
#pragma unroll
        for (int k = 0; k < XR; k++) {
            const int i = threadIdx.x + k * blockDim.x;
            nwr[k] = i < cols ? norm_w[i] : 0.0f;
        }
    int ks = 1; /* warps per row group: 1 when there are enough groups */
    while (ks < MV2_WARPS && ng * ks * 2 <= MV2_WARPS && MV2_WARPS % (ks * 2) == 0) ks *= 2;
    /* With ks > 1, thread t stores (group, row, token) t below; its residual can be
     * read now when the caller says its last writer is two or more kernels back:
     * under PDL this kernel starts only once every block of its predecessor has
     * passed griddepcontrol.wait, which returns when the kernel before that has
     * completed (measured: o 3.48 -> 1.64 us, down 3.24 -> 1.86 us from the wait to
     * the last block's end, with the 12 warps). */
    float yres = 0.0f;
    if ((accumulate & MM_ADD_EARLY) == MM_ADD_EARLY && ks > 1 && !act &&
        (int)threadIdx.x < ng * MV2_ROWS * B) {
        const int t = threadIdx.x, row = t / (MV2_ROWS * B) * MV2_ROWS + t / B % MV2_ROWS;
        if (row < nrows) yres = __ldcg(&y[(size_t)(t % B) * rows + r0 + row]); /* from L2 */
    }
    __syncthreads(); /* the mbarriers are initialised before anyone waits on them */
    if (accumulate & MM_NEXT_EARLY) grid_launch_next();
    if (first < np && warp == MV2_WARPS - 1) { /* MM_PACE: the whole warp, converged */
        for (int p = first; p < np; p++) {
            mbar_wait(smem_addr(&bars[p - first]), 0);
            if (lane == 0) issue_piece(p);
            __syncwarp();
        }
    }
    grid_wait();
    if (!(accumulate & (MM_NEXT_EARLY | MM_NEXT_LATE))) grid_launch_next();
    long long c1 = 0, c2 = 0, c3 = 0;
    BT_MARK(pb, 2);
    if (tr) {
        c1 = clock64();
        tr[1] = (long long)globaltimer_ns();
    }
    if (norm_w) { /* matvec_kernel's arithmetic, the B block sums done together */
        const float *xf = reinterpret_cast<const float *>(x);
        bf16 *xb = reinterpret_cast<bf16 *>(xs);
        float ss[B], xr[B][XR];
#pragma unroll
        for (int b = 0; b < B; b++) ss[b] = 0.0f;
        if (x_regs) { /* the same sums in the same order, all loads first */
#pragma unroll
            for (int k = 0; k < XR; k++) {
                const int i = threadIdx.x + k * blockDim.x;
#pragma unroll
                for (int b = 0; b < B; b++) xr[b][k] = i < cols ? xf[(size_t)b * cols + i] : 0.0f;
            }
#pragma unroll
            for (int k = 0; k < XR; k++)
                if (threadIdx.x + k * blockDim.x < cols)
#pragma unroll
                    for (int b = 0; b < B; b++) ss[b] += xr[b][k] * xr[b][k];
        } else {
            for (int i = threadIdx.x; i < cols; i += blockDim.x)
#pragma unroll
                for (int b = 0; b < B; b++) ss[b] += xf[(size_t)b * cols + i] * xf[(size_t)b * cols + i];
        }
#pragma unroll
        for (int b = 0; b < B; b++) {
            const float v = warp_sum(ss[b]);
            if (lane == 0) red[warp][0][b] = v;
        }
        __syncthreads();
        float inv[B];
#pragma unroll
        for (int b = 0; b < B; b++) {
            float t = 0.0f;
            for (int w = 0; w < MV2_WARPS; w++) t += red[w][0][b];
            inv[b] = rsqrtf(t / (float)cols + eps);
        }
        if (x_regs) {
#pragma unroll
            for (int k = 0; k < XR; k++) {
                const int i = threadIdx.x + k * blockDim.x;
                if (i < cols)
#pragma unroll
                    for (int b = 0; b < B; b++) xb[b * cols + i] = f2bf(xr[b][k] * inv[b] * nwr[k]);
            }
        } else {
            for (int i = threadIdx.x; i < cols; i += blockDim.x)
#pragma unroll
                for (int b = 0; b < B; b++)
                    xb[b * cols + i] = f2bf(xf[(size_t)b * cols + i] * inv[b] * norm_w[i]);
        }
    } else {
        const uint4 *xv = reinterpret_cast<const uint4 *>(x);
        for (int i = threadIdx.x; i < B * cols8; i += blockDim.x) xs[i] = xv[i];
    }
    __syncthreads();
    BT_MARK(pb, 3);
    if (tr) c2 = clock64();

    const int kp = warp % ks;
    for (int g = warp / ks; g < ng; g += MV2_WARPS / ks) {
        int p = 0;
        while ((p + 1) * ng / np <= g) p++;
        mbar_wait(smem_addr(&bars[p]), 0);
        if (tr && !c3) c3 = clock64();
        const uint4 *wr[MV2_ROWS]; /* rows past the slice repeat its last row, unused */
#pragma unroll
        for (int j = 0; j < MV2_ROWS; j++)
            wr[j] = reinterpret_cast<const uint4 *>(
                ws + (size_t)min(g * MV2_ROWS + j, nrows - 1) * row_bytes);
        float acc[MV2_ROWS][B];
#pragma unroll
        for (int j = 0; j < MV2_ROWS; j++)
#pragma unroll
            for (int b = 0; b < B; b++) acc[j][b] = 0.0f;
        if constexpr (F == WF_BF16) {
            for (int i = kp * 32 + lane; i < cols8; i += 32 * ks) {
                uint4 xv[B];
#pragma unroll
                for (int b = 0; b < B; b++) xv[b] = xs[b * cols8 + i];
#pragma unroll
                for (int j = 0; j < MV2_ROWS; j++) {
                    const uint4 w = wr[j][i];
#pragma unroll
                    for (int b = 0; b < B; b++) acc[j][b] += dot8(w, xv[b]);
                }
            }
        } else { /* a chunk of 16 bytes a lane: CH elements of each of the rows */
            constexpr int CH = wf_traits<F>::CH;
            const __half *sc[MV2_ROWS];
#pragma unroll
            for (int j = 0; j < MV2_ROWS; j++)
                sc[j] = (const __half *)((const uint8_t *)wr[j] + wm_code_bytes(F, cols));
            for (int i = kp * 32 + lane; i < cols / CH; i += 32 * ks) {
                uint4 w[MV2_ROWS];
#pragma unroll
                for (int j = 0; j < MV2_ROWS; j++) w[j] = wr[j][i];
                qdot_chunk<F, MV2_ROWS, B>(w, sc, i, gshift, moff, xs + i * (CH / 8), cols8, acc);
            }
        }
#pragma unroll
        for (int j = 0; j < MV2_ROWS; j++)
#pragma unroll
            for (int b = 0; b < B; b++) acc[j][b] = warp_sum(acc[j][b]);
        if (ks > 1) { /* partial sums: reduced below */
            if (lane == 0)
#pragma unroll
                for (int j = 0; j < MV2_ROWS; j++)
#pragma unroll
                    for (int b = 0; b < B; b++) red[warp][j][b] = acc[j][b];
        } else if (!act) { /* lane j*B + b writes row j, token b */
#pragma unroll
            for (int j = 0; j < MV2_ROWS; j++)
#pragma unroll
                for (int b = 0; b < B; b++)
                    if (lane == j * B + b && g * MV2_ROWS + j < nrows) {
                        float *dst = y + (size_t)b * rows + r0 + g * MV2_ROWS + j;
                        *dst = (accumulate & MM_ADD) ? *dst + acc[j][b] : acc[j][b];
                    }
        } else {
#pragma unroll
            for (int j = 0; j < MV2_ROWS; j += 2)
#pragma unroll
                for (int b = 0; b < B; b++)
                    if (lane == j / 2 * B + b && g * MV2_ROWS + j + 1 < nrows) {
                        const float gt = acc[j][b], up = acc[j + 1][b];
                        act[(size_t)b * (rows / 2) + (r0 + g * MV2_ROWS + j) / 2] =
                            f2bf(gt / (1.0f + expf(-gt)) * up);
                    }
        }
    }
    BT_MARK(pb, 4);
    if (accumulate & MM_NEXT_LATE) grid_launch_next();
    /* the trace: block 0's phases in cycles, every block's end (the last one's counts) */
    auto trace_end = [&]() {
        if (tr) {
            const long long c4 = clock64();
            tr[2] = c1 - c0;
            tr[3] = c2 - c1;
            tr[4] = c3 - c2;
            tr[5] = c4 - c3;
        }
        if (trace && threadIdx.x == 0)
            atomicMax(reinterpret_cast<unsigned long long *>(trace + 6), globaltimer_ns());
        BT_MARK(pb, 5);
    };
    if (ks == 1) { /* ks is the same in every thread of the block */
        trace_end();
        return;
    }
    __syncthreads();
    const int t = threadIdx.x;
    if (!act) {
        if (t < ng * MV2_ROWS * B) {
            const int g = t / (MV2_ROWS * B), j = t / B % MV2_ROWS, b = t % B;
            const int row = g * MV2_ROWS + j;
            if (row < nrows) {
                float s = 0.0f;
                for (int k = 0; k < ks; k++) s += red[g * ks + k][j][b];
                float *dst = y + (size_t)b * rows + r0 + row;
                *dst = (accumulate & MM_ADD_EARLY) == MM_ADD_EARLY ? yres + s
                       : (accumulate & MM_ADD)                    ? *dst + s
                                                                  : s;
            }
        }
    } else if (t < ng * (MV2_ROWS / 2) * B) {
        const int g = t / (MV2_ROWS / 2 * B), j = 2 * (t / B % (MV2_ROWS / 2)), b = t % B;
        const int row = g * MV2_ROWS + j;
        if (row + 1 < nrows) {
            float gt = 0.0f, up = 0.0f;
            for (int k = 0; k < ks; k++) {
                gt += red[g * ks + k][j][b];
                up += red[g * ks + k][j + 1][b];
            }
            act[(size_t)b * (rows / 2) + (r0 + row) / 2] = f2bf(gt / (1.0f + expf(-gt)) * up);
        }
    }
    trace_end();
}

#define MV2_ARGS                                                                                   \
    float *__restrict__ y, bf16 *__restrict__ act, const void *__restrict__ W,                     \
        const void *__restrict__ x, const float *__restrict__ norm_w, int rows, int cols, int rpb,  \
        int accumulate, float eps, int row_bytes, int gshift, int moff,                            \
        long long *__restrict__ trace, long long *__restrict__ bt
template <int B, int F>
__global__ void __launch_bounds__(MV2_WARPS * 32, B <= 2 ? 2 : 1) matvec_tma_kernel(MV2_ARGS) {
    matvec_tma_body<B, F>(y, act, W, x, norm_w, rows, cols, rpb, accumulate, eps, row_bytes,
                          gshift, moff, trace, bt);
}
/* The one-token kernel in MV2_SMALL_REGS registers a thread (72 otherwise): 21.5 K a
 * block instead of 27.6 K, so that a fused q/k/v + attention block (18.4 K at its 72
 * registers) and two of these (o and gate/up, or gate/up and down) fit one SM's 64 K
 * and start without waiting for one another to leave. Used where that is what the
 * cap changes (cuda_tuning.mv_small, tuning.c; the tune key mv_small=0/1 forces it):
 * Qwen3-0.6B -19 us a step; Qwen2.5-0.5B (fused kernel of 154 registers, so no room
 * gained) +21 us when forced (docs/lab/notebook.md row 49). */
#define MV2_SMALL_REGS 56
__global__ void __maxnreg__(MV2_SMALL_REGS) matvec_tma_small_kernel(MV2_ARGS) {
    matvec_tma_body<1, WF_BF16>(y, act, W, x, norm_w, rows, cols, rpb, accumulate, eps, row_bytes,
                                gshift, moff, trace, bt);
}
#undef MV2_ARGS

// ----------------------------------------------------------------------------
// kernel launchers

#define LPX_CUBLAS_TRY(call)                                                                       \
    do {                                                                                           \
        cublasStatus_t lpx_cb_s_ = (call);                                                         \
        if (lpx_cb_s_ != CUBLAS_STATUS_SUCCESS)                                                    \
            return lpx_errorf(LPX_ERR_DEVICE, "%s:%d: %s: %s", __FILE__, __LINE__, #call,          \
                              cublasGetStatusString(lpx_cb_s_));                                   \
    } while (0)

#define MV_SMEM_MAX (64 * 1024) /* x staged in shared memory up to this size */

/* Smallest split of a row over warps that still gives every SM two blocks
 * (chunks: 32-lane passes over a row). */
static int matvec_ksplit(int rows, int nchunks, int n_sms, bool pairs) {
    int ks = 1;
    while (ks < (pairs ? MV_WARPS / 2 : MV_WARPS) && ks * 2 <= nchunks &&
           (int64_t)ceil_div(rows, MV_WARPS / ks) < 2 * (int64_t)n_sms)
        ks *= 2;
    return ks;
}

template <int B, int F>
static cudaError_t matvec_launch(float *y, bf16 *act, const wmat &W, const void *x,
                                 const float *norm_w, int rows, int cols, int n_sms,
                                 bool accumulate, float eps, kstream st) {
    const int xs = B * cols * (int)sizeof(bf16) <= MV_SMEM_MAX ? B * cols * (int)sizeof(bf16) : 0;
    const int nchunks = ceil_div(cols / wf_traits<F>::CH, 32);
    const int ks = matvec_ksplit(rows, nchunks, n_sms, act != NULL);
    return launch(matvec_kernel<B, F>, dim3(ceil_div(rows, MV_WARPS / ks)), dim3(MV_WARPS * 32),
                  (size_t)xs, st, y, act, W.w, x, norm_w, xs, rows, cols, ks, (int)accumulate, eps,
                  W.row_bytes, W.gshift, wm_moff(W, cols));
}

/* The trace hooks of the one-token matvec_tma launches (trace.cuh owns the buffers;
 * the matmul_ctx's pointer is NULL when tracing is off). slots: the first cap of
 * those launches (the batch-1 decode graph's projections, in launch order) each get
 * MV_TRACE values: block 0's %globaltimer at start and after grid_wait, its cycles
 * per phase (before the wait, x staging, the wait for its first weights, the rest),
 * the last block's end. bt_next: the per-block marks (BT_BLOCKS x BT_MARKS) of the
 * next launch, set by forward_layers before each projection of the traced layer and
 * taken by that launch. */
#define MV_TRACE 8
typedef struct mv_probe {
    long long *slots; /* (cap, MV_TRACE) device, or NULL */
    int n, cap;
    long long *bt_next; /* (BT_BLOCKS, BT_MARKS) device, or NULL */
} mv_probe;

/* What the matmul launchers need of their instance: its cuBLAS handle and
 * dequantization tile, the SM
 * count, its tuning (mv_small, mv_solo_smem) and its trace hooks (NULL: off). */
typedef struct matmul_ctx {
    cublasHandle_t blas;
    bf16 *wtile;        /* dequantized rows of a quantized W for the GEMM, or NULL */
    size_t wtile_elems; /* its size */
    int n_sms;
    const cuda_tuning *tune;
    mv_probe *probe;
} matmul_ctx;

/* Rows a block of matvec_tma_kernel owns: ceil(rows / blocks) for 1, 2, 4, ... 64
 * blocks per SM (more than two run in waves: a block fetches its slice when it
 * starts, the first wave before the wait), the first whose slice plus staged x (T
 * tokens) fits MV2_SMEM_MAX; 0 where none does (long x): matvec_kernel then. */
static int matvec_tma_rows(int T, int rows, int cols, int n_sms, bool pairs, const wmat &W) {
    if (((uintptr_t)W.w & 15) || cols % 8 || W.row_bytes % 16) return 0;
    const int64_t xs = (int64_t)T * cols * 2, row_bytes = W.row_bytes;
    for (int64_t m = 1; m <= 64; m *= 2) {
        int64_t rpb = ((int64_t)rows + m * n_sms - 1) / (m * n_sms);
        if (pairs) rpb += rpb & 1;
        if (xs + rpb * row_bytes <= MV2_SMEM_MAX) return (int)rpb;
    }
    return 0;
}

/* matvec_tma_kernel where matvec_tma_rows allows it, else matvec_kernel; F: W's
 * packing. */
template <int B, int F>
static cudaError_t matvec_any_f(const matmul_ctx *mc, float *y, bf16 *act, const wmat &W,
                                const void *x, const float *norm_w, int rows, int cols,
                                int accumulate, float eps, kstream st) {
    const int n_sms = mc->n_sms;
    const int rpb = matvec_tma_rows(B, rows, cols, n_sms, act != NULL, W);
    if (rpb == 0)
        return matvec_launch<B, F>(y, act, W, x, norm_w, rows, cols, n_sms,
                                   (accumulate & MM_ADD) != 0, eps, st);
    /* MM_PACE only where every block is resident from the start (one an SM), as it was
     * measured: in waves, a later block's pieces stream after it starts, on the path */
    if (ceil_div(rows, rpb) > n_sms) accumulate &= ~(MM_PACE(15) | MM_SOLO);
    size_t smem = (size_t)rpb * W.row_bytes + (size_t)B * cols * sizeof(bf16);
    const size_t solo = (size_t)mc->tune->mv_solo_smem;
    if (B == 1 && (accumulate & MM_SOLO) && smem < solo) smem = solo;
    long long *trace = NULL, *bt = NULL;
    mv_probe *pr = B == 1 ? mc->probe : NULL;
    if (pr && pr->slots && pr->n < pr->cap) trace = pr->slots + (size_t)MV_TRACE * pr->n++;
    if (pr) {
        bt = pr->bt_next;
        pr->bt_next = NULL;
    }
    return launch(F == WF_BF16 && B == 1 && mc->tune->mv_small ? matvec_tma_small_kernel
                                                               : matvec_tma_kernel<B, F>,
                  dim3(ceil_div(rows, rpb)), dim3(MV2_WARPS * 32), smem, st, y, act, W.w, x,
                  norm_w, rows, cols, rpb, (int)accumulate, eps, W.row_bytes, W.gshift,
                  wm_moff(W, cols), trace, bt);
}

template <int B>
static cudaError_t matvec_any(const matmul_ctx *mc, float *y, bf16 *act, const wmat &W,
                              const void *x, const float *norm_w, int rows, int cols,
                              int accumulate, float eps, kstream st) {
    switch (W.kind) {
    case WF_Q8:
        return matvec_any_f<B, WF_Q8>(mc, y, act, W, x, norm_w, rows, cols, accumulate, eps, st);
    case WF_Q4:
        return matvec_any_f<B, WF_Q4>(mc, y, act, W, x, norm_w, rows, cols, accumulate, eps, st);
    default:
        return matvec_any_f<B, WF_BF16>(mc, y, act, W, x, norm_w, rows, cols, accumulate, eps, st);
    }
}

/* Called at backend creation: lets every matvec instantiation take its shared
 * memory (MV_SMEM_MAX, MV2_SMEM_MAX; matvec_tma_kernel prefers the largest
 * shared-memory carveout, so that an SM can hold two of its blocks) and finds
 * MM_SOLO's shared memory for this device (*solo_smem: the dynamic shared memory
 * that leaves room for only one matvec_tma_kernel<1, WF_BF16> block an SM: half the SM's,
 * less the block's reserved and static shares, raised until the occupancy
 * calculator agrees; 0 where it cannot be had). */
static lpx_status matvec_init(int *solo_smem) {
#define MV_ATTR_F(B, F)                                                                            \
    LPX_CUDA_TRY(cudaFuncSetAttribute(matvec_kernel<B, F>,                                         \
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, MV_SMEM_MAX));  \
    LPX_CUDA_TRY(cudaFuncSetAttribute(matvec_tma_kernel<B, F>,                                     \
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, MV2_SMEM_MAX)); \
    LPX_CUDA_TRY(cudaFuncSetAttribute(matvec_tma_kernel<B, F>,                                     \
                                      cudaFuncAttributePreferredSharedMemoryCarveout,              \
                                      cudaSharedmemCarveoutMaxShared))
#define MV_ATTR(B) MV_ATTR_F(B, WF_BF16); MV_ATTR_F(B, WF_Q8); MV_ATTR_F(B, WF_Q4)
    MV_ATTR(1); MV_ATTR(2); MV_ATTR(3); MV_ATTR(4); MV_ATTR(5); MV_ATTR(6); MV_ATTR(7); MV_ATTR(8);
#undef MV_ATTR
#undef MV_ATTR_F
    LPX_CUDA_TRY(cudaFuncSetAttribute(matvec_tma_small_kernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, MV2_SMEM_MAX));
    LPX_CUDA_TRY(cudaFuncSetAttribute(matvec_tma_small_kernel,
                                      cudaFuncAttributePreferredSharedMemoryCarveout,
                                      cudaSharedmemCarveoutMaxShared));
    /* MM_SOLO's shared memory: just over half an SM's, checked with the occupancy
     * calculator (the allocation granularity is not documented) */
    int dev = 0, per_sm = 0, optin = 0, reserved = 0;
    cudaFuncAttributes fa;
    LPX_CUDA_TRY(cudaGetDevice(&dev));
    LPX_CUDA_TRY(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    LPX_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    LPX_CUDA_TRY(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    LPX_CUDA_TRY(cudaFuncGetAttributes(&fa, matvec_tma_kernel<1, WF_BF16>));
    const int cap = optin - (int)fa.sharedSizeBytes;
    *solo_smem = 0;
    for (int s = per_sm / 2 - reserved - (int)fa.sharedSizeBytes + 1; s > 0 && s <= cap;
         s += 1024) {
        int n = 0;
        if (s > MV2_SMEM_MAX)
            LPX_CUDA_TRY(cudaFuncSetAttribute(matvec_tma_kernel<1, WF_BF16>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, s));
        LPX_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, matvec_tma_kernel<1, WF_BF16>,
                                                                   MV2_WARPS * 32, s));
        if (n <= 1) { /* 0: no size above this one fits either */
            if (n == 1) *solo_smem = s;
            break;
        }
    }
    /* the same shared memory is a solo size for the small kernel and the quantized
     * packings' one-token kernels too (shared memory, not registers, limits them to
     * one block; their static shares are the bf16 kernel's) */
    if (*solo_smem > MV2_SMEM_MAX) {
        LPX_CUDA_TRY(cudaFuncSetAttribute(matvec_tma_small_kernel,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          *solo_smem));
        LPX_CUDA_TRY(cudaFuncSetAttribute(matvec_tma_kernel<1, WF_Q8>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          *solo_smem));
        LPX_CUDA_TRY(cudaFuncSetAttribute(matvec_tma_kernel<1, WF_Q4>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          *solo_smem));
    }
    return LPX_OK;
}

/* y = x · Wᵀ for T = 1..MV_MAX_TOKENS tokens on the matvec kernels (matmul's path
 * for few tokens, without cuBLAS): matvec_any<T>. */
static cudaError_t matvec_tokens(const matmul_ctx *mc, int T, float *y, bf16 *act, const wmat &W,
                                 const void *x, const float *norm_w, int rows, int cols, int flags,
                                 float eps, kstream st) {
    switch (T) {
    case 1: return matvec_any<1>(mc, y, act, W, x, norm_w, rows, cols, flags, eps, st);
    case 2: return matvec_any<2>(mc, y, act, W, x, norm_w, rows, cols, flags, eps, st);
    case 3: return matvec_any<3>(mc, y, act, W, x, norm_w, rows, cols, flags, eps, st);
    case 4: return matvec_any<4>(mc, y, act, W, x, norm_w, rows, cols, flags, eps, st);
    case 5: return matvec_any<5>(mc, y, act, W, x, norm_w, rows, cols, flags, eps, st);
    case 6: return matvec_any<6>(mc, y, act, W, x, norm_w, rows, cols, flags, eps, st);
    case 7: return matvec_any<7>(mc, y, act, W, x, norm_w, rows, cols, flags, eps, st);
    case 8: return matvec_any<8>(mc, y, act, W, x, norm_w, rows, cols, flags, eps, st);
    default: return cudaErrorInvalidValue;
    }
}

/* y (T, rows) float = x (T, cols) · W (rows, cols)ᵀ; flags (MM_ADD, MM_ADD_EARLY,
 * MM_NEXT_EARLY above: the last two only change the batch-1..8 TMA kernel).
 * x is bf16, or, with norm_w set, the float residual stream that is RMS-normalised
 * (weight norm_w, eps) first (through h (T, cols) bf16 as scratch where not fused).
 * With act set (and W's rows gate/up pairs), writes act (T, rows/2) = silu(g)·u,
 * through gu (T, rows) float as scratch on the GEMM path. cols % 8 == 0. A
 * quantized W meets the GEMM as bf16 tiles of whole rows that dequant_kernel
 * writes into mc->wtile, each tile's product into its rows of the output. */
static lpx_status matmul(const matmul_ctx *mc, float *y, bf16 *act, float *gu, const wmat &W,
                         const void *x, const float *norm_w, bf16 *h, float eps, int T, int rows,
                         int cols, int flags, kstream st) {
    const bool fuse = T <= MV_MAX_TOKENS && T * cols * (int)sizeof(bf16) <= MV_SMEM_MAX;
    if (norm_w && !fuse) {
        LPX_TRY(rmsnorm(h, (const float *)x, norm_w, NULL, T, cols, eps, st));
        x = h;
        norm_w = NULL;
    }
    if (T <= MV_MAX_TOKENS) {
        LPX_CUDA_TRY(matvec_tokens(mc, T, y, act, W, x, norm_w, rows, cols, flags, eps, st));
        return LPX_OK;
    }
    /* Column-major view: Yᵀ (rows × T) = W (rows × cols, stored as cols × rows) · Xᵀ. */
    const float alpha = 1.0f, beta = (flags & MM_ADD) ? 1.0f : 0.0f;
    float *out = act ? gu : y;
    LPX_CUBLAS_TRY(cublasSetStream(mc->blas, st.s));
    if (W.kind == LPX_WP_BF16) {
        LPX_CUBLAS_TRY(cublasGemmEx(mc->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, T, cols, &alpha, W.w,
                                    CUDA_R_16BF, cols, x, CUDA_R_16BF, cols, &beta, out,
                                    CUDA_R_32F, rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
        const int tile = (int)(mc->wtile_elems / (size_t)cols);
        if (tile < 1) return lpx_errorf(LPX_ERR_DEVICE, "cuda: no dequantization tile");
        for (int r0 = 0; r0 < rows; r0 += tile) {
            const int n = rows - r0 < tile ? rows - r0 : tile;
            const int64_t chunks = (int64_t)n * cols / (W.kind == WF_Q8 ? 16 : 32);
            const int blocks = (int)(chunks < (int64_t)256 * 8 * mc->n_sms ? (chunks + 255) / 256
                                                                          : 8 * mc->n_sms);
            LPX_CUDA_TRY(launch(W.kind == WF_Q8 ? dequant_kernel<WF_Q8> : dequant_kernel<WF_Q4>,
                                dim3(blocks), dim3(256), 0, st, mc->wtile, W, (int64_t)r0, n, cols));
            LPX_CUBLAS_TRY(cublasGemmEx(mc->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, T, cols, &alpha,
                                        mc->wtile, CUDA_R_16BF, cols, x, CUDA_R_16BF, cols, &beta,
                                        out + r0, CUDA_R_32F, rows, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
        }
    }
    if (act) return silu_mul(act, gu, T, rows / 2, st);
    return LPX_OK;
}

#endif

/* Sampling on the device: one block per logits row applies the row's penalties
 * and temperature, then takes the argmax (greedy) or the seeded draw, and writes
 * one token id. The result is the host sampler's token for the same logits, bit
 * for bit (src/sample/sampler.c): the same float operations in the same order
 * (no fused multiply-adds), the same exp and fixed-point weights
 * (src/sample/sample_math.h), whose integer sums do not depend on the order of
 * the reduction, and the same ranking (weight descending, then id ascending).
 *
 * The kept set of min_p/top_k/top_p is {t : w[t] >= min_p, key(t) >= K}: K, the
 * rank key of the last kept token, is found bit by bit (the largest K whose kept
 * count, or mass, still reaches top_k, or top_p of the total), over the row until
 * the undecided tokens fit in shared memory, then over those; the draw is a
 * block-wide prefix sum in id order. */
#ifndef LPX_BACKEND_CUDA_SAMPLING_CUH
#define LPX_BACKEND_CUDA_SAMPLING_CUH

#include "common.cuh"

#include <limits.h>
#include <math.h>

extern "C" {
#include "backend/backend.h"
}
#include "sample/sample_math.h"

#define SAMPLE_THREADS 1024
#define AM_BLOCKS 64   /* blocks per row of argmax_kernel */
#define AM_THREADS 256

// CUDA kernels

/* Sum over the block of a 64-bit integer; every thread gets it. */
static __device__ __forceinline__ uint64_t block_sum_u64(uint64_t v) {
    __shared__ uint64_t part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0) part[warp] = v;
    __syncthreads();
    uint64_t s = 0;
    for (int i = 0; i < nw; i++)
        s += part[i];
    return s;
}

/* Exclusive prefix sum over the block in thread order; *total gets the sum. */
static __device__ __forceinline__ uint64_t block_scan_u64(uint64_t v, uint64_t *total) {
    __shared__ uint64_t part[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    uint64_t x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const uint64_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) part[warp] = x;
    __syncthreads();
    uint64_t before = 0, all = 0;
    for (int i = 0; i < nw; i++) {
        if (i < warp) before += part[i];
        all += part[i];
    }
    *total = all;
    return before + x - v;
}

/* a is a better argmax than b: larger, then lower id (the host's first maximum). */
static __device__ __forceinline__ bool arg_better(float av, int ai, float bv, int bi) {
    return av > bv || (av == bv && ai < bi);
}

/* Block argmax; every thread gets (value, id). */
static __device__ __forceinline__ void block_argmax(float *v, int *id) {
    __shared__ float pv[32];
    __shared__ int pi[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, *v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, *id, o);
        if (arg_better(ov, oi, *v, *id)) *v = ov, *id = oi;
    }
    __syncthreads();
    if (lane == 0) pv[warp] = *v, pi[warp] = *id;
    __syncthreads();
    *v = pv[0];
    *id = pi[0];
    for (int i = 1; i < nw; i++)
        if (arg_better(pv[i], pi[i], *v, *id)) *v = pv[i], *id = pi[i];
}

/* Kept-set count (by_mass false) or fixed-point mass over w (V) of the tokens
 * with w >= min_p and rank key >= K. */
static __device__ uint64_t kept_sum(const float *w, int V, float min_p, uint64_t K, bool by_mass) {
    uint64_t s = 0;
    for (int t = threadIdx.x; t < V; t += blockDim.x) {
        const float x = w[t];
        if (x >= min_p && lpx_sample_key(x, t, V) >= K) s += by_mass ? lpx_sample_fix(x) : 1;
    }
    return block_sum_u64(s);
}

/* Sums of three values over the block; every thread gets them. */
static __device__ __forceinline__ void block_sum3_u64(uint64_t *a, uint64_t *b, uint64_t *c) {
    __shared__ uint64_t part[3][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        *a += __shfl_xor_sync(0xffffffffu, *a, o);
        *b += __shfl_xor_sync(0xffffffffu, *b, o);
        *c += __shfl_xor_sync(0xffffffffu, *c, o);
    }
    __syncthreads(); /* part[] may still be read by a previous call */
    if (lane == 0) part[0][warp] = *a, part[1][warp] = *b, part[2][warp] = *c;
    __syncthreads();
    *a = *b = *c = 0;
    for (int i = 0; i < nw; i++)
        *a += part[0][i], *b += part[1][i], *c += part[2][i];
}

#define SELECT_CAP 2048 /* window tokens kept in shared memory */

/* The largest key K >= lo whose kept sum still reaches want (the rank key of the
 * token at which the ranking's running count/mass first reaches want), decided
 * bit by bit. The answer stays inside a window [ans, hi) of keys; the kept sum
 * of the keys at or above hi is carried in `above`, so a pass only sums the
 * window, and once the window holds at most SELECT_CAP tokens they are copied
 * to shared memory and the remaining bits pass over that copy only. Keys are
 * (w bits << 32) | (V-1-id) with w <= 1, so bits 62-63 and the id bits at and
 * above the vocabulary's width are always 0 and are not searched. */
static __device__ uint64_t select_key(const float *w, int V, float min_p, uint64_t lo, bool by_mass,
                                      uint64_t want) {
    __shared__ uint64_t ckey[SELECT_CAP], cval[SELECT_CAP];
    __shared__ int n_copy;
    int id_bits = 0;
    while ((1ll << id_bits) < V)
        id_bits++;
    uint64_t ans = 0, hi = 1ull << 62, above = 0;
    int n = -1; /* tokens in ckey/cval; -1: not copied yet */
    for (int bit = 61; bit >= 0; bit--) {
        if (bit < 32 && bit >= id_bits) continue;
        const uint64_t trial = ans | (1ull << bit);
        uint64_t s = 0, ct = 0, cw = 0; /* sum and count at or above trial, count in window */
        if (n < 0) {
            for (int t = threadIdx.x; t < V; t += blockDim.x) {
                const float x = w[t];
                if (!(x >= min_p)) continue;
                const uint64_t k = lpx_sample_key(x, t, V);
                if (k < lo || k < ans || k >= hi) continue;
                cw++;
                if (k >= trial) {
                    s += by_mass ? lpx_sample_fix(x) : 1;
                    ct++;
                }
            }
        } else {
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                const uint64_t k = ckey[i];
                if (k < ans || k >= hi) continue;
                cw++;
                if (k >= trial) {
                    s += cval[i];
                    ct++;
                }
            }
        }
        block_sum3_u64(&s, &ct, &cw);
        if (above + s >= want) {
            ans = trial;
            cw = ct;
        } else {
            above += s;
            hi = trial;
            cw -= ct;
        }
        if (n < 0 && cw <= SELECT_CAP) {
            if (threadIdx.x == 0) n_copy = 0;
            __syncthreads();
            for (int t = threadIdx.x; t < V; t += blockDim.x) {
                const float x = w[t];
                if (!(x >= min_p)) continue;
                const uint64_t k = lpx_sample_key(x, t, V);
                if (k < lo || k < ans || k >= hi) continue;
                const int i = atomicAdd(&n_copy, 1);
                ckey[i] = k;
                cval[i] = by_mass ? lpx_sample_fix(x) : 1;
            }
            __syncthreads();
            n = n_copy;
        }
    }
    return ans > lo ? ans : lo;
}

/* A greedy row without penalties needs only its argmax: argmax_kernel takes it
 * over many blocks (one block alone, reading 152 K logits, took 61 µs). */
static __device__ __forceinline__ bool plain_greedy(const lpx_sampling_params &p) {
    return p.temperature < 1e-5f && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
           p.frequency_penalty == 0.0f;
}

/* Block (b, row) of a plain greedy row: the argmax of its part of the row into
 * part_v/part_i[row*AM_BLOCKS + b] (arg_better's order: value, then lower id). */
__global__ void __launch_bounds__(AM_THREADS)
    argmax_kernel(const float *__restrict__ logits, int V, const lpx_sample_row *__restrict__ rows,
                  float *__restrict__ part_v, int *__restrict__ part_i) {
    const int row = blockIdx.y;
    if (!plain_greedy(rows[row].p)) return;
    const float *l = logits + (size_t)row * V; /* (V) */
    const int per = ((V + AM_BLOCKS - 1) / AM_BLOCKS + 3) & ~3;
    const int t0 = blockIdx.x * per, t1 = min(V, t0 + per);
    float bv = -INFINITY;
    int bi = INT_MAX;
    if ((V & 3) == 0) { /* rows 16-byte aligned: all of a thread's loads in flight */
        for (int t = t0 + 4 * (int)threadIdx.x; t < t1; t += 4 * AM_THREADS) {
            const float4 v = *reinterpret_cast<const float4 *>(l + t);
            if (arg_better(v.x, t, bv, bi)) bv = v.x, bi = t;
            if (arg_better(v.y, t + 1, bv, bi)) bv = v.y, bi = t + 1;
            if (arg_better(v.z, t + 2, bv, bi)) bv = v.z, bi = t + 2;
            if (arg_better(v.w, t + 3, bv, bi)) bv = v.w, bi = t + 3;
        }
    } else {
        for (int t = t0 + (int)threadIdx.x; t < t1; t += AM_THREADS)
            if (arg_better(l[t], t, bv, bi)) bv = l[t], bi = t;
    }
    block_argmax(&bv, &bi);
    if (threadIdx.x == 0) {
        part_v[(size_t)row * AM_BLOCKS + blockIdx.x] = bv;
        part_i[(size_t)row * AM_BLOCKS + blockIdx.x] = bi;
    }
}

/* One block per row: logits (n, V) are penalised, scaled and turned into weights
 * in place; out[row] gets the token. A plain greedy row combines argmax_kernel's
 * parts instead. */
__global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_kernel(float *logits, int V, const lpx_sample_row *rows, const lpx_token_count *seen,
                  const float *part_v, const int *part_i, int32_t *out) {
    const lpx_sample_row row = rows[blockIdx.x];
    const lpx_sampling_params p = row.p;
    if (plain_greedy(p)) {
        if (threadIdx.x >= 32) return;
        float bv = -INFINITY;
        int bi = INT_MAX;
        for (int k = threadIdx.x; k < AM_BLOCKS; k += 32) {
            const float v = part_v[(size_t)blockIdx.x * AM_BLOCKS + k];
            const int i = part_i[(size_t)blockIdx.x * AM_BLOCKS + k];
            if (arg_better(v, i, bv, bi)) bv = v, bi = i;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (arg_better(ov, oi, bv, bi)) bv = ov, bi = oi;
        }
        if (threadIdx.x == 0) out[blockIdx.x] = bi;
        return;
    }
    float *l = logits + (size_t)blockIdx.x * V; /* (V) */

    const bool rep = p.repetition_penalty != 1.0f;
    const bool freq = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    if (rep || freq) {
        for (int i = threadIdx.x; i < row.n_seen; i += blockDim.x) {
            const lpx_token_count c = seen[row.seen_start + i];
            float v = l[c.id];
            if (rep)
                v = v < 0 ? __fmul_rn(v, p.repetition_penalty) : __fdiv_rn(v, p.repetition_penalty);
            if (freq && c.n_out > 0)
                v = __fsub_rn(v, __fadd_rn(__fmul_rn(p.frequency_penalty, (float)c.n_out),
                                           p.presence_penalty));
            l[c.id] = v;
        }
        __syncthreads();
    }
    const bool greedy = p.temperature < 1e-5f;
    const bool scale = !greedy && p.temperature != 1.0f;
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int t = threadIdx.x; t < V; t += blockDim.x) {
        float v = l[t];
        if (scale) l[t] = v = __fdiv_rn(v, p.temperature);
        if (arg_better(v, t, bv, bi)) bv = v, bi = t;
    }
    block_argmax(&bv, &bi);
    if (greedy) {
        if (threadIdx.x == 0) out[blockIdx.x] = bi;
        return;
    }
    for (int t = threadIdx.x; t < V; t += blockDim.x)
        l[t] = lpx_exp_neg(__fsub_rn(l[t], bv));
    __syncthreads();

    const float *w = l; /* (V) weights, w[bi] == 1 */
    uint64_t K = 0;
    if (p.top_k > 0 && p.top_k < V && (uint64_t)p.top_k < kept_sum(w, V, p.min_p, 0, false))
        K = select_key(w, V, p.min_p, 0, false, (uint64_t)p.top_k);
    if (p.top_p < 1.0f) {
        const uint64_t want = lpx_sample_top_p_want(p.top_p, kept_sum(w, V, p.min_p, K, true));
        K = select_key(w, V, p.min_p, K, true, want);
    }

    /* The draw: the first kept id whose running mass exceeds the target. Each
     * thread takes a contiguous run of ids, so thread order is id order. */
    const int chunk = (V + blockDim.x - 1) / blockDim.x;
    const int t0 = threadIdx.x * chunk, t1 = t0 + chunk < V ? t0 + chunk : V;
    uint64_t mine = 0;
    for (int t = t0; t < t1; t++)
        if (w[t] >= p.min_p && lpx_sample_key(w[t], t, V) >= K) mine += lpx_sample_fix(w[t]);
    uint64_t mass;
    uint64_t cum = block_scan_u64(mine, &mass);
    const uint64_t target = lpx_sample_target(lpx_sample_bits(row.seed, row.index), mass);
    if (cum <= target && target < cum + mine)
        for (int t = t0; t < t1; t++) {
            if (!(w[t] >= p.min_p && lpx_sample_key(w[t], t, V) >= K)) continue;
            cum += lpx_sample_fix(w[t]);
            if (cum > target) {
                out[blockIdx.x] = t;
                break;
            }
        }
}

// kernel launchers

/* Samples n rows of logits (n, V) on st into out (n) (device pointers); part_v and
 * part_i: scratch of n*AM_BLOCKS each. */
static lpx_status sample_rows(float *logits, int V, int n, const lpx_sample_row *rows,
                              const lpx_token_count *seen, float *part_v, int *part_i,
                              int32_t *out, cudaStream_t st) {
    if (n <= 0) return LPX_OK;
    argmax_kernel<<<dim3(AM_BLOCKS, n), AM_THREADS, 0, st>>>(logits, V, rows, part_v, part_i);
    LPX_CUDA_LAUNCHED();
    sample_kernel<<<n, SAMPLE_THREADS, 0, st>>>(logits, V, rows, seen, part_v, part_i, out);
    LPX_CUDA_LAUNCHED();
    return LPX_OK;
}

#endif

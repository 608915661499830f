/* Attention for decode steps (one token per sequence): attn_decode_kernel takes
 * the q/k/v projections, applies bias, q/k RMSNorm and RoPE, writes the token's K
 * and V into the paged cache and attends over the sequence's cache, split over the
 * context (flash-decoding) with the last split block combining. Prefill steps:
 * qkv_rope_kernel (the same preparation, for every token) then flash_prefill.cuh.
 *
 * KV cache layout (bf16): block-major, so that copying a block is one memcpy:
 *   kv[block][layer][k|v][kv_head][slot][head_dim]
 * A token's slot (block*block_size + offset) comes from the host per step. */
#ifndef LPX_BACKEND_CUDA_ATTENTION_CUH
#define LPX_BACKEND_CUDA_ATTENTION_CUH

#include "attn_plan.h"
#include "common.cuh"

#include <cuda_pipeline.h>

#define ATTN_MAX_GROUP 8  /* query heads per KV head */
/* int32s before the items of a step's plan (its item count first) */
#define AP_HDR 8

typedef struct kv_geom {
    int n_heads, n_kv, head_dim, block_size, n_layers;
    int64_t block_stride; /* elements per block: n_layers*2*n_kv*block_size*head_dim */
} kv_geom;

static __device__ __forceinline__ int64_t kv_offset(const kv_geom g, int layer, int which,
                                                    int kvh, int block, int slot) {
    return block * g.block_stride +
           ((((int64_t)layer * 2 + which) * g.n_kv + kvh) * g.block_size + slot) * g.head_dim;
}

// ----------------------------------------------------------------------------
// CUDA kernels

/* One block of head_dim threads per (token, head) over the q, k and v heads of the
 * merged qkv output. q: + bias, RMSNorm (Qwen3), RoPE -> q_out; k: same -> cache;
 * v: + bias -> cache. slot < 0 marks a padding token: nothing is written. */
__global__ void qkv_rope_kernel(float *__restrict__ q_out,         // (T, n_heads*head_dim)
                                bf16 *__restrict__ kv,             // cache
                                const float *__restrict__ qkv,     // (T, (n_heads+2*n_kv)*head_dim)
                                const float *__restrict__ bias,    // (same cols) or NULL
                                const float *__restrict__ q_norm,  // (head_dim) or NULL
                                const float *__restrict__ k_norm,  // (head_dim) or NULL
                                const float *__restrict__ inv_freq, // (head_dim/2)
                                const int32_t *__restrict__ positions, // (T)
                                const int32_t *__restrict__ slots,     // (T)
                                kv_geom g, int layer, float eps, int interleaved) {
    __shared__ float vals[1024];
    grid_wait();
    grid_launch_next();
    const int t = blockIdx.x, head = blockIdx.y, i = threadIdx.x, hd = g.head_dim;
    const int slot = slots[t];
    const int cols = (g.n_heads + 2 * g.n_kv) * hd;
    const int col = head * hd + i;
    float v = qkv[(size_t)t * cols + col] + (bias ? bias[col] : 0.0f);
    const bool is_q = head < g.n_heads, is_k = !is_q && head < g.n_heads + g.n_kv;
    if (!is_q && !is_k) { /* v */
        if (slot >= 0)
            kv[kv_offset(g, layer, 1, head - g.n_heads - g.n_kv, slot / g.block_size,
                         slot % g.block_size) + i] = f2bf(v);
        return;
    }
    const float *nw = is_q ? q_norm : k_norm;
    if (nw) v = v * rsqrtf(block_sum(v * v) / (float)hd + eps) * nw[i];
    vals[i] = v;
    __syncthreads();
    int fi, partner;
    float sign;
    rope_pair(i, hd, interleaved, &fi, &partner, &sign);
    float s, c;
    sincosf((float)positions[t] * inv_freq[fi], &s, &c);
    const float r = v * c + sign * vals[partner] * s;
    if (is_q) {
        q_out[(size_t)t * g.n_heads * hd + head * hd + i] = r;
    } else if (slot >= 0) {
        kv[kv_offset(g, layer, 0, head - g.n_heads, slot / g.block_size, slot % g.block_size) + i] =
            f2bf(r);
    }
}

#define AD_KEYS 256 /* keys per tile; TPK threads a key, so a warp holds 32/TPK keys */
#define AD_LOG2E 1.4426950408889634f
/* per layer: clock64 at 8 marks, %globaltimer at the first and last; qkv_attn_kernel
 * adds the latest %globaltimer over its blocks at three points (10-12) */
#define AD_TRACE 13

/* Shared memory of attn_decode_kernel<HD, RM, TPK>. vs holds the tile's value rows,
 * at the end of an item each warp's partial outputs (acc, 8*TPK*RM*HD floats, at
 * most half of vs), and in the combine the splits' maxima and sums (mls). */
template <int HD, int RM, int TPK> struct ad_smem {
    alignas(16) float qs[RM][HD];      /* queries after norm and RoPE, times scale·log2 e */
    alignas(16) bf16 kcur[HD];         /* the token's own key and value, as cached */
    alignas(16) bf16 vcur[HD];
    alignas(16) union {
        bf16 vs[AD_KEYS][HD];
        float acc[8 * TPK][RM][HD];
        float mls[AP_MAX_SPLITS][RM][2];
    } u;
    float wm[8 * TPK][RM], wl[8 * TPK][RM];
    int is_last;
};

/* Decode attention (one token per sequence; prefill steps use qkv_rope_kernel and
 * flash_prefill.cuh), with the token's q/k/v preparation fused in. A persistent
 * grid (as many blocks as fit the GPU at once) walks the step's plan
 * (attn_plan.h): block b takes items b, b + gridDim.x, ..., each one split of one
 * (token, kv head)'s keys [k0, k1); the host cut every sequence's keys so the
 * items fill the grid whatever the batch and the context. A block's rows are the
 * G <= RM query heads of the kv head's group (RM, a template bound, keeps unused
 * rows out of the code: a kernel for 8 rows run with G = 2 issued 3x the
 * instructions, latency-bound, docs/lab/notebook.md). For each item the block
 *  1. issues the loads of its first tile (lane j of warp w: key w*32+j whole into
 *     registers, its value row into shared memory by cp.async), all in flight;
 *  2. meanwhile turns the token's projections into queries (bias, RMSNorm, RoPE)
 *     and, in the item that holds the token's own position, its key and value,
 *     which it writes to the cache (rounded to bf16 as every cached key is);
 *  3. scores each key against every row (the keys of a split are all visible),
 *     softmax per warp over its 32 keys (online across tiles), P·V with the warp's
 *     lanes over the head dims;
 *  4. combines its warps through shared memory; with n_split > 1 the block that
 *     ends the last split of its (token, kv head) (atomic counter) combines them:
 *     out = Σ 2^(m_s-M) o_s / Σ 2^(m_s-M) l_s (scores are in log2 units).
 * Only the first item's first tile is loaded before grid_wait(). Padding tokens
 * (sequence -1) get zeros and write nothing. */
template <int HD, int RM, int TPK>
__global__ void __launch_bounds__(AD_KEYS * TPK)
    attn_decode_kernel(bf16 *__restrict__ out,          // (T, n_heads*HD)
                       float *__restrict__ part_o,      // (items, G, HD)
                       float *__restrict__ part_ml,     // (items, G, 2)
                       int *__restrict__ done,          // (T, n_kv) split counters, left at 0
                       bf16 *__restrict__ kv,           // cache
                       const float *__restrict__ qkv,   // (T, (n_heads+2*n_kv)*HD)
                       const float *__restrict__ bias,  // (same cols) or NULL
                       const float *__restrict__ q_norm, // (HD) or NULL
                       const float *__restrict__ k_norm, // (HD) or NULL
                       const float *__restrict__ inv_freq, // (HD/2)
                       const int32_t *__restrict__ tok_seq,     // (T), -1 = padding
                       const int32_t *__restrict__ positions,   // (T)
                       const int32_t *__restrict__ slots,       // (T)
                       const int32_t *__restrict__ block_table, // (n_seqs, max_blocks)
                       int max_blocks,
                       const int32_t *__restrict__ plan, // count, then lpx_attn_items at AP_HDR
                       kv_geom g, int layer, float scale, float eps, int interleaved,
                       long long *__restrict__ trace) { // (n_layers, AD_TRACE) or NULL
    /* threads, warps; head dims of a thread's key part, K uint4s in registers; keys a
     * warp; head dims a lane in P·V */
    constexpr int NT = AD_KEYS * TPK, NW = NT / 32, DH = HD / TPK;
    constexpr int KC = DH / 8 > 16 ? 16 : DH / 8, KPW = 32 / TPK, DPL = HD / 32;
    extern __shared__ uint4 smem_raw[];
    ad_smem<HD, RM, TPK> &sm = *reinterpret_cast<ad_smem<HD, RM, TPK> *>(smem_raw);
    /* Until grid_wait() only memory no kernel of this step writes is read: the step
     * inputs and the cached keys and values of earlier positions, so their round
     * trips overlap the qkv projection still running before us. */
    const int G = g.n_heads / g.n_kv, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int kt = tid / TPK, hp = tid % TPK; /* the thread's key in the tile, its part */
    const int n_items = plan[0];
    const lpx_attn_item *items = reinterpret_cast<const lpx_attn_item *>(plan + AP_HDR);
    bool waited = false; /* grid_wait() done: once, before the first item reads qkv */
    auto wait_once = [&]() {
        if (!waited) {
            grid_wait();
            grid_launch_next();
            waited = true;
        }
    };
    /* LPX_CUDA_ATTN_TRACE: thread 0 of block 0 times the phases of its first item */
    long long *tr = trace && !blockIdx.x && !tid ? trace + (size_t)layer * AD_TRACE : NULL;
#define AD_MARK(i)                                                                                 \
    if (tr) tr[i] = clock64()
  for (int it = blockIdx.x; it < n_items; it += gridDim.x) {
    if (it != (int)blockIdx.x) {
        __syncthreads(); /* every thread is done with the item before's shared memory */
        tr = NULL;
    }
    AD_MARK(0);
    const lpx_attn_item wi = items[it];
    const int t0 = wi.t, kvh = wi.kvh, S = wi.n_split, k0 = wi.k0, k1 = wi.k1;
    const int seq = tok_seq[t0];
    bf16 *o_tok = out + (size_t)t0 * g.n_heads * HD + (size_t)kvh * G * HD;
    if (seq < 0) {
        wait_once();
        for (int e = tid; e < G * HD; e += NT) o_tok[e] = f2bf(0.0f);
        continue;
    }
    const int p0 = positions[t0];
    const bool own = k0 <= p0 && p0 < k1; /* holds key p0, the token itself */
    AD_MARK(1);
    const int32_t *bt = block_table + (size_t)seq * max_blocks;

    uint4 k8[KC];
    /* loads of the tile at base: this thread's part of its key (not p0: it is made
     * below), dims hp*DH .. +DH of K into registers and of V into shared memory */
    auto issue = [&](int base) {
        const int key = base + kt;
        uint4 *vs = reinterpret_cast<uint4 *>(&sm.u.vs[kt][hp * DH]);
        if (key < k1 && key != p0) {
            const int64_t kb = bt[key / g.block_size], slot = key % g.block_size;
            const uint4 *kr = reinterpret_cast<const uint4 *>(kv + kv_offset(g, layer, 0, kvh, kb, slot) + hp * DH);
            const uint4 *vr = reinterpret_cast<const uint4 *>(kv + kv_offset(g, layer, 1, kvh, kb, slot) + hp * DH);
#pragma unroll
            for (int c = 0; c < KC; c++) k8[c] = kr[c];
#pragma unroll
            for (int c = 0; c < DH / 8; c++) __pipeline_memcpy_async(vs + c, vr + c, 16);
        } else if (key >= k1) { /* no key: zeros, so P·V may run over every key slot */
#pragma unroll
            for (int c = 0; c < DH / 8; c++) vs[c] = make_uint4(0, 0, 0, 0);
        }
        __pipeline_commit();
    };
    issue(k0);
    /* the rotation of the lane's head dims lane*DPL .. */
    const int slot = slots[t0];
    float cs[DPL], sn[DPL];
    head_rope_angles<HD, DPL>(p0, inv_freq, interleaved, cs, sn);
    AD_MARK(2);
    wait_once();
    AD_MARK(3);
    if (tr) tr[8] = (long long)globaltimer_ns();

    /* 2. the token's q rows (heads kvh*G + r), k row and v row: a warp a row, lane
     * over dims (same arithmetic as qkv_rope_kernel: (x·inv)·w, then the rotation) */
    const int cols = (g.n_heads + 2 * g.n_kv) * HD;
    const float qscale = scale * AD_LOG2E;
    for (int r = warp; r < G + 2; r += NW) {
        const int head = r < G ? kvh * G + r : r == G ? g.n_heads + kvh : g.n_heads + g.n_kv + kvh;
        const int c0 = head * HD + lane * DPL;
        float v[DPL];
#pragma unroll
        for (int e = 0; e < DPL; e++) v[e] = qkv[(size_t)t0 * cols + c0 + e] + (bias ? bias[c0 + e] : 0.0f);
        const int64_t cache = kv_offset(g, layer, r == G ? 0 : 1, kvh, slot / g.block_size,
                                        slot % g.block_size) + lane * DPL;
        if (r == G + 1) { /* v */
#pragma unroll
            for (int e = 0; e < DPL; e++) {
                const bf16 vb = f2bf(v[e]);
                sm.vcur[lane * DPL + e] = vb;
                if (own && slot >= 0) kv[cache + e] = vb;
            }
            continue;
        }
        const float *nw = r < G ? q_norm : k_norm;
        if (nw) head_rmsnorm<DPL>(v, nw, HD, eps);
        float rot[DPL];
        head_rope<DPL>(v, cs, sn, interleaved, rot);
#pragma unroll
        for (int e = 0; e < DPL; e++) {
            if (r < G) {
                sm.qs[r][lane * DPL + e] = rot[e] * qscale;
            } else {
                const bf16 kb = f2bf(rot[e]);
                sm.kcur[lane * DPL + e] = kb;
                if (own && slot >= 0) kv[cache + e] = kb;
            }
        }
    }
    __syncthreads();
    AD_MARK(4);

    /* 3. the keys, a tile at a time */
    float m[RM], l[RM], acc[RM][DPL];
#pragma unroll
    for (int r = 0; r < RM; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < DPL; e++) acc[r][e] = 0.0f;
    }
    for (int base = k0; base < k1; base += AD_KEYS) {
        if (base != k0) {
            __syncthreads(); /* every warp is done with the previous tile's vs */
            issue(base);
        }
        const int key = base + kt;
        const bool live = key < k1;
        if (key == p0) { /* the token itself, made above */
#pragma unroll
            for (int c = 0; c < KC; c++) k8[c] = reinterpret_cast<const uint4 *>(sm.kcur + hp * DH)[c];
#pragma unroll
            for (int c = 0; c < DH / 8; c++)
                reinterpret_cast<uint4 *>(&sm.u.vs[kt][hp * DH])[c] = reinterpret_cast<const uint4 *>(sm.vcur + hp * DH)[c];
        }
        float dot[RM], dot2[RM]; /* even and odd 8-dim chunks: two FMA chains a row */
#pragma unroll
        for (int r = 0; r < RM; r++) dot[r] = dot2[r] = 0.0f;
#pragma unroll
        for (int h = 0; h < DH / 8; h += KC) {
            if (h > 0 && live) { /* head dims past what the registers hold (HD 256) */
                const int64_t kb = bt[key / g.block_size], sl = key % g.block_size;
                const uint4 *kr = key == p0 ? reinterpret_cast<const uint4 *>(sm.kcur + hp * DH)
                                            : reinterpret_cast<const uint4 *>(kv + kv_offset(g, layer, 0, kvh, kb, sl) + hp * DH);
#pragma unroll
                for (int c = 0; c < KC; c++) k8[c] = kr[h + c];
            }
#pragma unroll
            for (int c = 0; c < KC; c++) {
                const float kf[8] = {bf_lo(k8[c].x), bf_hi(k8[c].x), bf_lo(k8[c].y),
                                     bf_hi(k8[c].y), bf_lo(k8[c].z), bf_hi(k8[c].z),
                                     bf_lo(k8[c].w), bf_hi(k8[c].w)};
#pragma unroll
                for (int r = 0; r < RM; r++) {
                    if (r < G) {
                        const float *qr = &sm.qs[r][hp * DH + (h + c) * 8];
                        const float4 qa = *reinterpret_cast<const float4 *>(qr);
                        const float4 qb = *reinterpret_cast<const float4 *>(qr + 4);
                        float &d = c & 1 ? dot2[r] : dot[r];
                        d = fmaf(qa.x, kf[0], d);
                        d = fmaf(qa.y, kf[1], d);
                        d = fmaf(qa.z, kf[2], d);
                        d = fmaf(qa.w, kf[3], d);
                        d = fmaf(qb.x, kf[4], d);
                        d = fmaf(qb.y, kf[5], d);
                        d = fmaf(qb.z, kf[6], d);
                        d = fmaf(qb.w, kf[7], d);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < RM; r++) {
            dot[r] += dot2[r];
            if (TPK == 2) dot[r] += __shfl_xor_sync(0xffffffffu, dot[r], 1); /* the key's two parts */
        }
        if (base == k0) AD_MARK(5);
        /* softmax over the warp's keys (lanes), online across tiles */
        float p[RM];
#pragma unroll
        for (int r = 0; r < RM; r++) {
            if (r < G) {
                const float sc = live ? dot[r] : -INFINITY;
                float mt = sc;
                for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
                const float nm = fmaxf(m[r], mt);
                const float ref = nm == -INFINITY ? 0.0f : nm; /* no key yet */
                p[r] = live ? exp2f(sc - ref) : 0.0f;
                const float alpha = exp2f(m[r] - ref);
                m[r] = nm;
                l[r] = l[r] * alpha + warp_sum(hp == 0 ? p[r] : 0.0f);
#pragma unroll
                for (int e = 0; e < DPL; e++) acc[r][e] *= alpha;
            }
        }
        __pipeline_wait_prior(0);
        __syncwarp(); /* the warp's value rows (each lane copied its part) */
#pragma unroll 8
        for (int j = 0; j < KPW; j++) {
            const bf16 *vr = &sm.u.vs[warp * KPW + j][lane * DPL];
            float vf[DPL];
            if constexpr (DPL == 4) {
                const uint2 v4 = *reinterpret_cast<const uint2 *>(vr);
                vf[0] = bf_lo(v4.x); vf[1] = bf_hi(v4.x); vf[2] = bf_lo(v4.y); vf[3] = bf_hi(v4.y);
            } else if constexpr (DPL == 2) {
                const uint32_t v2 = *reinterpret_cast<const uint32_t *>(vr);
                vf[0] = bf_lo(v2); vf[1] = bf_hi(v2);
            } else {
#pragma unroll
                for (int e = 0; e < DPL; e++) vf[e] = bf2f(vr[e]);
            }
#pragma unroll
            for (int r = 0; r < RM; r++) {
                if (r < G) {
                    const float pj = __shfl_sync(0xffffffffu, p[r], j * TPK);
#pragma unroll
                    for (int e = 0; e < DPL; e++) acc[r][e] = fmaf(pj, vf[e], acc[r][e]);
                }
            }
        }
        if (base == k0) AD_MARK(6);
    }

    /* 4. combine the warps (vs is free once every warp is past its last tile) */
    __syncthreads();
#pragma unroll
    for (int r = 0; r < RM; r++) {
        if (r < G) {
#pragma unroll
            for (int e = 0; e < DPL; e++) sm.u.acc[warp][r][lane * DPL + e] = acc[r][e];
            if (lane == 0) {
                sm.wm[warp][r] = m[r];
                sm.wl[warp][r] = l[r];
            }
        }
    }
    __syncthreads();
    float *po = part_o + (size_t)wi.self * G * HD, *pml = part_ml + (size_t)wi.self * G * 2;
    for (int e = tid; e < G * HD; e += NT) {
        const int r = e / HD, d = e % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; w++) M = fmaxf(M, sm.wm[w][r]);
        float num = 0.0f, den = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) {
            if (sm.wl[w][r] > 0.0f) {
                const float f = exp2f(sm.wm[w][r] - M);
                num += f * sm.u.acc[w][r][d];
                den += f * sm.wl[w][r];
            }
        }
        if (S == 1) {
            o_tok[e] = f2bf(den > 0.0f ? num / den : 0.0f);
        } else {
            po[e] = num;
            if (d == 0) {
                pml[r * 2] = M;
                pml[r * 2 + 1] = den;
            }
        }
    }
    AD_MARK(7);
    if (tr) tr[9] = (long long)globaltimer_ns();
    if (S == 1) continue;
    /* the block that ends the last split of this (token, kv head) combines them */
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        const int prev = atomicAdd(&done[t0 * g.n_kv + kvh], 1);
        sm.is_last = prev == S - 1;
        if (sm.is_last) done[t0 * g.n_kv + kvh] = 0;
    }
    __syncthreads();
    if (!sm.is_last) continue;
    __threadfence();
    const size_t f0 = (size_t)wi.first * G; /* the first split's row 0 */
    for (int i = tid; i < S * G; i += NT) {
        sm.u.mls[i / G][i % G][0] = __ldcg(&part_ml[(f0 + i) * 2]);
        sm.u.mls[i / G][i % G][1] = __ldcg(&part_ml[(f0 + i) * 2 + 1]);
    }
    __syncthreads();
    for (int e = tid; e < G * HD; e += NT) {
        const int r = e / HD;
        float M = -INFINITY;
        for (int s2 = 0; s2 < S; s2++)
            if (sm.u.mls[s2][r][1] > 0.0f) M = fmaxf(M, sm.u.mls[s2][r][0]);
        float num = 0.0f, den = 0.0f;
        for (int s0 = 0; s0 < S; s0 += 8) {
            float pv[8];
#pragma unroll
            for (int k = 0; k < 8; k++) /* eight loads in flight at once */
                pv[k] = s0 + k < S ? __ldcg(&part_o[(f0 + (size_t)(s0 + k) * G) * HD + e]) : 0.0f;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                if (s0 + k < S && sm.u.mls[s0 + k][r][1] > 0.0f) {
                    const float f = exp2f(sm.u.mls[s0 + k][r][0] - M);
                    num += f * pv[k];
                    den += f * sm.u.mls[s0 + k][r][1];
                }
            }
        }
        o_tok[e] = f2bf(den > 0.0f ? num / den : 0.0f);
    }
  }
#undef AD_MARK
    wait_once(); /* a block with no item still orders the kernel after us */
}

// ----------------------------------------------------------------------------
// kernel launchers

static lpx_status qkv_rope(float *q_out, bf16 *kv, const float *qkv, const float *bias,
                           const float *q_norm, const float *k_norm, const float *inv_freq,
                           const int32_t *positions, const int32_t *slots, int T, kv_geom g,
                           int layer, float eps, bool interleaved, kstream st) {
    const dim3 grid(T, g.n_heads + 2 * g.n_kv);
    LPX_CUDA_TRY(launch(qkv_rope_kernel, grid, dim3(g.head_dim), 0, st, q_out, kv, qkv, bias,
                        q_norm, k_norm, inv_freq, positions, slots, g, layer, eps,
                        (int)interleaved));
    return LPX_OK;
}

/* (head_dim, rows bound, threads a key): G query heads per kv head run the kernel
 * for the smallest bound >= G, with one or two threads a key (attn_tpk). */
#define ATTN_VARIANTS(X)                                                                           \
    X(64, 2, 1) X(64, 2, 2) X(64, 4, 1) X(64, 4, 2) X(64, 8, 1) X(128, 2, 1) X(128, 2, 2)          \
    X(128, 4, 1) X(128, 4, 2) X(128, 8, 1) X(256, 2, 1) X(256, 2, 2) X(256, 4, 1) X(256, 4, 2)     \
    X(256, 8, 1)

/* The decode attention grid of one instance: its shape's rows bound, and for one
 * and two threads a key the blocks resident on the whole GPU at once (the
 * persistent grid, and the slots the plan fills). */
typedef struct attn_ctx {
    int rm, n_sms;
    int blocks[2];
} attn_ctx;

/* Threads a key for a step of T tokens: two (half the dependent chain of each
 * score, twice the warps to hide latency) while T * n_kv pairs leave SMs without
 * one, where the registers allow it (batch 1: 4.2 -> 2.6 K cycles for scores and
 * P·V); with many pairs one thread a key keeps more blocks on an SM. */
static int attn_tpk(const attn_ctx *a, int T, int n_kv) {
    return a->rm <= 4 && T * n_kv < a->n_sms ? 2 : 1;
}

/* Blocks of the persistent grid of a step of T tokens (the plan's slots). */
static int attn_blocks(const attn_ctx *a, int T, int n_kv) {
    return a->blocks[attn_tpk(a, T, n_kv) - 1];
}

/* Lets each attn_decode_kernel instantiation take its shared memory (over 48 KB),
 * and sizes this shape's grids from the occupancy of its variants. */
static lpx_status attention_init(const kv_geom *g, int n_sms, attn_ctx *a) {
#define ATTN_ATTR(HD, RM, TPK)                                                                     \
    LPX_CUDA_TRY(cudaFuncSetAttribute(attn_decode_kernel<HD, RM, TPK>,                             \
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,                 \
                                      (int)sizeof(ad_smem<HD, RM, TPK>)));
    ATTN_VARIANTS(ATTN_ATTR)
#undef ATTN_ATTR
    const int G = g->n_heads / g->n_kv;
    a->rm = G <= 2 ? 2 : G <= 4 ? 4 : 8;
    a->n_sms = n_sms;
    a->blocks[0] = a->blocks[1] = 0;
#define ATTN_OCC(HD, RM, TPK)                                                                      \
    if (g->head_dim == HD && a->rm == RM) {                                                        \
        int n = 0;                                                                                 \
        LPX_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(                                \
            &n, attn_decode_kernel<HD, RM, TPK>, AD_KEYS * TPK, sizeof(ad_smem<HD, RM, TPK>)));    \
        a->blocks[TPK - 1] = (n > 0 ? n : 1) * n_sms;                                              \
    }
    ATTN_VARIANTS(ATTN_OCC)
#undef ATTN_OCC
    if (!a->blocks[1]) a->blocks[1] = a->blocks[0]; /* no two-thread variant: rm 8 */
    if (!a->blocks[0])
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "cuda: no decode attention kernel for head_dim %d",
                          g->head_dim);
    return LPX_OK;
}

/* One token per sequence, T tokens: q/k/v from the projections qkv (with bias,
 * q/k norms and RoPE applied here), the token's key and value into the cache,
 * attention into out, over the items of plan (device; made by lpx_cuda_attn_plan
 * with attn_blocks(a, T) slots). */
static lpx_status attention(const attn_ctx *a, bf16 *out, float *part_o, float *part_ml,
                            int *done, bf16 *kv, const float *qkv, const float *bias,
                            const float *q_norm, const float *k_norm, const float *inv_freq,
                            int T, const int32_t *tok_seq, const int32_t *positions,
                            const int32_t *slots, const int32_t *block_table, int max_blocks,
                            const int32_t *plan, kv_geom g, int layer, float eps,
                            bool interleaved, long long *trace, kstream st) {
    const dim3 grid(attn_blocks(a, T, g.n_kv));
    const float scale = 1.0f / sqrtf((float)g.head_dim);
    const int tpk = attn_tpk(a, T, g.n_kv);
    cudaError_t e = cudaErrorInvalidValue;
#define ATTN_LAUNCH(HD, RM, TPK)                                                                   \
    if (g.head_dim == HD && a->rm == RM && tpk == TPK)                                             \
        e = launch(attn_decode_kernel<HD, RM, TPK>, grid, dim3(AD_KEYS * TPK),                     \
                   sizeof(ad_smem<HD, RM, TPK>), st, out, part_o, part_ml, done, kv, qkv, bias,    \
                   q_norm, k_norm, inv_freq, tok_seq, positions, slots, block_table, max_blocks,   \
                   plan, g, layer, scale, eps, (int)interleaved, trace);
    ATTN_VARIANTS(ATTN_LAUNCH)
#undef ATTN_LAUNCH
    LPX_CUDA_TRY(e);
    return LPX_OK;
}

#endif

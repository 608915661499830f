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
#include "kv_cache.cuh"

#include <cuda_pipeline.h>

#define ATTN_MAX_GROUP 8  /* query heads per KV head */
/* int32s before the items of a step's plan (its item count first) */
#define AP_HDR 8

// ----------------------------------------------------------------------------
// CUDA kernels

/* One block of head_dim threads per (token, head) over the q, k and v heads of the
 * merged qkv output. q: + bias, RMSNorm (Qwen3), RoPE -> q_out; k: same -> cache;
 * v: + bias -> cache (F8: each head quantized to codes and a scale, kv_cache.cuh).
 * slot < 0 marks a padding token: nothing is written. */
template <bool F8>
__global__ void qkv_rope_kernel(float *__restrict__ q_out,         // (T, n_heads*head_dim)
                                kv_elem<F8> *__restrict__ kv,      // cache
                                float *__restrict__ kvs,           // F8: its scales
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
    /* the cached value r of this thread's dim in K (which 0) or V (1) */
    auto store = [&](int which, int kvh, float r) {
        if constexpr (F8) {
            float sc;
            const uint8_t code = block_fp8_quantize(bf2f(f2bf(r)), &sc);
            if (slot < 0) return;
            const int blk = slot / g.block_size, sl = slot % g.block_size;
            kv[kv_offset(g, layer, which, kvh, blk, sl) + i] = code;
            if (i == 0) kvs[kv_scale_at(g, layer, which, kvh, blk, sl)] = sc;
        } else if (slot >= 0) {
            kv[kv_offset(g, layer, which, kvh, slot / g.block_size, slot % g.block_size) + i] =
                f2bf(r);
        }
    };
    if (!is_q && !is_k) { /* v */
        store(1, head - g.n_heads - g.n_kv, v);
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
    if (is_q)
        q_out[(size_t)t * g.n_heads * hd + head * hd + i] = r;
    else
        store(0, head - g.n_heads, r);
}

#define AD_LOG2E 1.4426950408889634f
/* per layer: clock64 at 8 marks, %globaltimer at the first and last; qkv_attn_kernel
 * adds the latest %globaltimer over its blocks at three points (10-12) */
#define AD_TRACE 13
/* The decode attention kernel's geometry: 4 warps; a tile is AD_TK keys, AD_KW a
 * warp (4 lanes a key: each a quarter of its head dims); AD_STAGES tiles a block
 * in shared memory, AD_STAGES - 1 of them loading while one is used. A lane's
 * quarter of a key is the 16-byte chunks c*4 + part, so that the four lanes of a
 * key read 64 contiguous bytes at a time. */
#define AD_WARPS 4
#define AD_THREADS (32 * AD_WARPS)
#define AD_KW 8
#define AD_TK (AD_KW * AD_WARPS)
#define AD_STAGES 3

/* Where logical 16-byte chunk c of a tile's key row goes, for rows of NCH chunks:
 * with NCH >= 8 odd rows swap the halves of each 128 bytes, so a quarter warp's
 * reads (two rows, four chunks each) hit all 32 banks once, with no padding (four
 * blocks an SM fit, not three); rows of 64 bytes (fp8, head_dim 64) need none. */
template <int NCH> static __device__ __forceinline__ int ad_kswz(int row, int c) {
    if constexpr (NCH >= 8)
        return c ^ ((row & 1) << 2);
    else
        return c;
}

/* The scales of a tile's keys and values (fp8; none for bf16, so that its shared
 * memory is laid out as without fp8), and of the token's own key and value. The
 * ring and each tile's rows start on 128 bytes: a warp's 16-byte chunk reads and
 * its value rows (8 bytes a lane, bf16) then take the fewest shared-memory
 * wavefronts; shifted by 16 bytes (scales placed before them) the bf16 kernel ran
 * 10-16% slower at depth (docs/PERF.md, "fp8 KV cache"). */
template <bool F8> struct ad_tile_scales {
    float ks[AD_TK], vs[AD_TK];
};
template <> struct ad_tile_scales<false> {};
template <bool F8> struct ad_cur_scales {
    float kcs, vcs;
};
template <> struct ad_cur_scales<false> {};

/* One tile in shared memory: its keys and values (and, fp8, their scales). */
template <int HD, bool F8> struct ad_tile : ad_tile_scales<F8> {
    alignas(128) kv_elem<F8> k[AD_TK][HD]; /* chunks placed by ad_kswz */
    alignas(128) kv_elem<F8> v[AD_TK][HD];
};

/* Shared memory of attn_decode_kernel<HD, RM, F8>: the item's queries, the token's
 * own key and value, the tile ring; after an item's keys, the ring holds each
 * warp's partial output (acc), and in the combine the splits' maxima and sums (mls). */
template <int HD, int RM, bool F8> struct ad_smem : ad_cur_scales<F8> {
    alignas(16) float qs[RM][HD];    /* queries after norm and RoPE, times scale·log2 e */
    alignas(16) kv_elem<F8> kcur[HD]; /* the token's own key and value, as cached */
    alignas(16) kv_elem<F8> vcur[HD];
    alignas(128) union {
        ad_tile<HD, F8> st[AD_STAGES];
        float acc[AD_WARPS][RM][HD];
        float mls[AP_MAX_SPLITS][RM][2];
    } u;
    float wm[AD_WARPS][RM], wl[AD_WARPS][RM];
    int is_last;
};

/* Decode attention (one token per sequence; prefill steps use qkv_rope_kernel and
 * flash_prefill.cuh), with the token's q/k/v preparation fused in. A persistent
 * grid (as many blocks as fit the GPU at once) walks the step's plan
 * (attn_plan.h): block b takes items b, b + gridDim.x, ..., each one split of one
 * (token, kv head)'s keys [k0, k1); the host cut every sequence's keys so the
 * items fill the grid whatever the batch and the context. A block's rows are the
 * G <= RM query heads of the kv head's group (RM, a template bound, keeps unused
 * rows out of the code). For each item the block
 *  1. starts the cp.async copies of its first AD_STAGES - 1 tiles: lane l of warp
 *     w copies a quarter of key w*AD_KW + l/4's K row and V row, so each warp
 *     loads exactly the keys it uses and the tile loop needs no block barrier;
 *  2. meanwhile turns the token's projections into queries (bias, RMSNorm, RoPE)
 *     and, in the item that holds the token's own position p0, its key and value,
 *     which it writes to the cache (rounded to bf16 as every cached key is; F8:
 *     then quantized, kv_cache.cuh; key p0 is read from kcur/vcur, never from the
 *     ring);
 *  3. each warp streams its keys: tile i + AD_STAGES - 1 is requested while tile i
 *     is scored (4 lanes a key, two shuffles), softmaxed online over the warp's
 *     keys and multiplied into the warp's output (lanes over the head dims);
 *  4. combines its warps through shared memory; with n_split > 1 the block that
 *     ends the last split of its (token, kv head) (atomic counter) combines them:
 *     out = Σ 2^(m_s-M) o_s / Σ 2^(m_s-M) l_s (scores are in log2 units).
 * Only the first item's first tiles are requested before grid_wait(). Padding
 * tokens (sequence -1) get zeros and write nothing. F8: the cache holds fp8 codes
 * (kvs their scales); a key's scale multiplies its score, a value's its weight. */
template <int HD, int RM, bool F8>
__global__ void __launch_bounds__(AD_THREADS)
    attn_decode_kernel(bf16 *__restrict__ out,          // (T, n_heads*HD)
                       float *__restrict__ part_o,      // (items, G, HD)
                       float *__restrict__ part_ml,     // (items, G, 2)
                       int *__restrict__ done,          // (T, n_kv) split counters, left at 0
                       kv_elem<F8> *__restrict__ kv,    // cache
                       float *__restrict__ kvs,         // F8: its scales
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
    /* head dims a lane in P·V; elements a 16-byte chunk, chunks a key row, chunks
     * of a key's quarter */
    constexpr int NT = AD_THREADS, NW = AD_WARPS, DPL = HD / 32;
    constexpr int VPC = 16 / sizeof(kv_elem<F8>), NCH = HD / VPC, CQ = NCH / 4;
    extern __shared__ __align__(128) uint4 ad_raw[];
    ad_smem<HD, RM, F8> &sm = *reinterpret_cast<ad_smem<HD, RM, F8> *>(ad_raw);
    /* Until grid_wait() only memory no kernel of this step writes is read: the step
     * inputs and the cached keys and values of earlier positions, so their round
     * trips overlap the qkv projection still running before us. */
    const int G = g.n_heads / g.n_kv, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int kq = lane >> 2, part = lane & 3; /* the lane's key in the warp's part of a tile, quarter */
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
    const int n_tiles = (k1 - k0 + AD_TK - 1) / AD_TK;
    AD_MARK(1);
    const int32_t *bt = block_table + (size_t)seq * max_blocks;

    /* tile i into ring slot i % AD_STAGES: the lane's quarter of its key's K and V
     * rows (none past k1, none for p0); one commit group a tile, empty or not */
    auto issue = [&](int i) {
        const int key = k0 + i * AD_TK + warp * AD_KW + kq;
        if (i < n_tiles && key < k1 && key != p0) {
            ad_tile<HD, F8> &st = sm.u.st[i % AD_STAGES];
            const int kb = bt[key >> g.bs_shift], sl = key & (g.block_size - 1);
            const uint4 *kr = reinterpret_cast<const uint4 *>(kv + kv_offset(g, layer, 0, kvh, kb, sl));
            const uint4 *vr = reinterpret_cast<const uint4 *>(kv + kv_offset(g, layer, 1, kvh, kb, sl));
            uint4 *kd = reinterpret_cast<uint4 *>(&st.k[warp * AD_KW + kq][0]);
            uint4 *vd = reinterpret_cast<uint4 *>(&st.v[warp * AD_KW + kq][0]);
#pragma unroll
            for (int c = 0; c < CQ; c++) {
                __pipeline_memcpy_async(kd + ad_kswz<NCH>(kq, c * 4 + part), kr + c * 4 + part, 16);
                __pipeline_memcpy_async(vd + c * 4 + part, vr + c * 4 + part, 16);
            }
            if constexpr (F8) { /* the key's two scales: lanes of quarters 0 and 1 */
                if (part < 2)
                    __pipeline_memcpy_async(part ? &st.vs[warp * AD_KW + kq] : &st.ks[warp * AD_KW + kq],
                                            kvs + kv_scale_at(g, layer, part, kvh, kb, sl), 4);
            }
        }
        __pipeline_commit();
    };
#pragma unroll
    for (int i = 0; i < AD_STAGES - 1; i++) issue(i);
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
        const int which = r == G ? 0 : 1, cb = slot / g.block_size, cs_ = slot % g.block_size;
        const int64_t cache = kv_offset(g, layer, which, kvh, cb, cs_) + lane * DPL;
        /* the token's key (which 0) or value as cached: into kcur/vcur, and by the
         * item that holds p0 into the cache */
        auto put = [&](const float (&x)[DPL]) {
            float *cur_s = nullptr, *dst_s = nullptr;
            if constexpr (F8) {
                cur_s = which ? &sm.vcs : &sm.kcs;
                dst_s = kvs + kv_scale_at(g, layer, which, kvh, cb, cs_);
            }
            kv_put_head<F8, DPL>(x, which ? sm.vcur : sm.kcur, cur_s, kv + cache, dst_s,
                                 own && slot >= 0);
        };
        if (r == G + 1) { /* v */
            put(v);
            continue;
        }
        const float *nw = r < G ? q_norm : k_norm;
        if (nw) head_rmsnorm<DPL>(v, nw, HD, eps);
        float rot[DPL];
        head_rope<DPL>(v, cs, sn, interleaved, rot);
        if (r < G) {
#pragma unroll
            for (int e = 0; e < DPL; e++) sm.qs[r][lane * DPL + e] = rot[e] * qscale;
        } else {
            put(rot);
        }
    }
    __syncthreads();
    AD_MARK(4);

    /* 3. the warp's keys, a tile at a time, AD_STAGES - 1 tiles ahead */
    float m[RM], l[RM], acc[RM][DPL];
#pragma unroll
    for (int r = 0; r < RM; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < DPL; e++) acc[r][e] = 0.0f;
    }
    for (int i = 0; i < n_tiles; i++) {
        issue(i + AD_STAGES - 1); /* its slot was tile i-1's: the warp is past it */
        __pipeline_wait_prior(AD_STAGES - 1);
        __syncwarp(); /* tile i's rows of this warp, every lane's copies */
        const ad_tile<HD, F8> &st = sm.u.st[i % AD_STAGES];
        const int base = k0 + i * AD_TK + warp * AD_KW; /* the warp's first key */
        const int key = base + kq;
        const bool live = key < k1;
        const kv_elem<F8> *kr = key == p0 ? sm.kcur : &st.k[warp * AD_KW + kq][0];
        float dot[RM], dot2[RM]; /* alternate 8-dim groups: two FMA chains a row */
#pragma unroll
        for (int r = 0; r < RM; r++) dot[r] = dot2[r] = 0.0f;
        if (live) {
#pragma unroll
            for (int c = 0; c < CQ; c++) {
                const uint4 k8 = reinterpret_cast<const uint4 *>(kr)[key == p0 ? c * 4 + part : ad_kswz<NCH>(kq, c * 4 + part)];
                float kf[VPC];
                kv_chunk<F8>(k8, kf);
#pragma unroll
                for (int r = 0; r < RM; r++) {
                    if (r < G) {
#pragma unroll
                        for (int h = 0; h < VPC / 8; h++) {
                            const float *qr = &sm.qs[r][(c * 4 + part) * VPC + h * 8];
                            const float4 qa = *reinterpret_cast<const float4 *>(qr);
                            const float4 qb = *reinterpret_cast<const float4 *>(qr + 4);
                            float &d = (c * (VPC / 8) + h) & 1 ? dot2[r] : dot[r];
                            const float *k = kf + h * 8;
                            d = fmaf(qa.x, k[0], d);
                            d = fmaf(qa.y, k[1], d);
                            d = fmaf(qa.z, k[2], d);
                            d = fmaf(qa.w, k[3], d);
                            d = fmaf(qb.x, k[4], d);
                            d = fmaf(qb.y, k[5], d);
                            d = fmaf(qb.z, k[6], d);
                            d = fmaf(qb.w, k[7], d);
                        }
                    }
                }
            }
        }
        float ksc = 1.0f; /* F8: the key's scale */
        if constexpr (F8) ksc = live ? (key == p0 ? sm.kcs : st.ks[warp * AD_KW + kq]) : 0.0f;
        if (i == 0) AD_MARK(5);
        /* the key's four quarters, then softmax over the warp's keys, online */
        float p[RM];
#pragma unroll
        for (int r = 0; r < RM; r++) {
            if (r < G) {
                float sc = dot[r] + dot2[r];
                sc += __shfl_xor_sync(0xffffffffu, sc, 1);
                sc += __shfl_xor_sync(0xffffffffu, sc, 2);
                if (F8) sc *= ksc;
                sc = live ? sc : -INFINITY;
                float mt = sc;
                for (int o = 4; o < 32; o <<= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
                const float nm = fmaxf(m[r], mt);
                const float ref = nm == -INFINITY ? 0.0f : nm; /* no key yet */
                p[r] = live ? exp2f(sc - ref) : 0.0f;
                float ps = p[r]; /* the warp's keys once each: lanes of one quarter */
                for (int o = 4; o < 32; o <<= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
                const float alpha = exp2f(m[r] - ref);
                m[r] = nm;
                l[r] = l[r] * alpha + ps;
#pragma unroll
                for (int e = 0; e < DPL; e++) acc[r][e] *= alpha;
            }
        }
        /* P·V over the warp's live keys, lanes over the head dims */
#pragma unroll
        for (int j = 0; j < AD_KW; j++) {
            if (base + j >= k1) break;
            const kv_elem<F8> *vr = base + j == p0 ? sm.vcur + lane * DPL : &st.v[warp * AD_KW + j][lane * DPL];
            float vf[DPL];
            kv_load<F8, DPL>(vr, vf);
            float vsc = 1.0f; /* F8: the value's scale, folded into its weight */
            if constexpr (F8) vsc = base + j == p0 ? sm.vcs : st.vs[warp * AD_KW + j];
#pragma unroll
            for (int r = 0; r < RM; r++) {
                if (r < G) {
                    float pj = __shfl_sync(0xffffffffu, p[r], j * 4);
                    if (F8) pj *= vsc;
#pragma unroll
                    for (int e = 0; e < DPL; e++) acc[r][e] = fmaf(pj, vf[e], acc[r][e]);
                }
            }
        }
        if (i == 0) AD_MARK(6);
        __syncwarp(); /* every lane is done with this slot before it is refilled */
    }
    __pipeline_wait_prior(0); /* the ring's last groups (empty) before it is reused */

    /* 4. combine the warps (the ring is free once every warp is past its last tile) */
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

static lpx_status qkv_rope(float *q_out, void *kv, float *kvs, const float *qkv,
                           const float *bias, const float *q_norm, const float *k_norm,
                           const float *inv_freq, const int32_t *positions, const int32_t *slots,
                           int T, kv_geom g, int layer, float eps, bool interleaved, kstream st) {
    const dim3 grid(T, g.n_heads + 2 * g.n_kv);
    if (g.fp8)
        LPX_CUDA_TRY(launch(qkv_rope_kernel<true>, grid, dim3(g.head_dim), 0, st, q_out,
                            (uint8_t *)kv, kvs, qkv, bias, q_norm, k_norm, inv_freq, positions,
                            slots, g, layer, eps, (int)interleaved));
    else
        LPX_CUDA_TRY(launch(qkv_rope_kernel<false>, grid, dim3(g.head_dim), 0, st, q_out,
                            (bf16 *)kv, kvs, qkv, bias, q_norm, k_norm, inv_freq, positions,
                            slots, g, layer, eps, (int)interleaved));
    return LPX_OK;
}

/* (head_dim, rows bound, fp8 cache): G query heads per kv head run the kernel for
 * the smallest bound >= G. */
#define ATTN_VARIANTS(X)                                                                           \
    X(64, 2, false) X(64, 4, false) X(64, 8, false) X(128, 2, false) X(128, 4, false)              \
    X(128, 8, false) X(256, 2, false) X(256, 4, false) X(256, 8, false) X(64, 2, true)             \
    X(64, 4, true) X(64, 8, true) X(128, 2, true) X(128, 4, true) X(128, 8, true) X(256, 2, true)  \
    X(256, 4, true) X(256, 8, true)

/* The decode attention grid of one instance: its shape's rows bound, and the
 * blocks resident on the whole GPU at once (the persistent grid, and the slots
 * the plan fills). */
typedef struct attn_ctx {
    int rm, blocks;
} attn_ctx;

/* Lets each attn_decode_kernel instantiation take its shared memory (over 48 KB),
 * and sizes this shape's grid from the occupancy of its variant. */
static lpx_status attention_init(const kv_geom *g, int n_sms, attn_ctx *a) {
#define ATTN_ATTR(HD, RM, F8)                                                                      \
    LPX_CUDA_TRY(cudaFuncSetAttribute(attn_decode_kernel<HD, RM, F8>,                              \
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,                 \
                                      (int)sizeof(ad_smem<HD, RM, F8>)));
    ATTN_VARIANTS(ATTN_ATTR)
#undef ATTN_ATTR
    const int G = g->n_heads / g->n_kv;
    a->rm = G <= 2 ? 2 : G <= 4 ? 4 : 8;
    a->blocks = 0;
#define ATTN_OCC(HD, RM, F8)                                                                       \
    if (g->head_dim == HD && a->rm == RM && (g->fp8 != 0) == F8) {                                 \
        int n = 0;                                                                                 \
        LPX_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(                                \
            &n, attn_decode_kernel<HD, RM, F8>, AD_THREADS, sizeof(ad_smem<HD, RM, F8>)));         \
        a->blocks = (n > 0 ? n : 1) * n_sms;                                                       \
    }
    ATTN_VARIANTS(ATTN_OCC)
#undef ATTN_OCC
    if (!a->blocks)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "cuda: no decode attention kernel for head_dim %d",
                          g->head_dim);
    return LPX_OK;
}

/* One token per sequence, T tokens: q/k/v from the projections qkv (with bias,
 * q/k norms and RoPE applied here), the token's key and value into the cache
 * (kv, and with g.fp8 its scales kvs), attention into out, over the items of plan
 * (device; made by lpx_cuda_attn_plan with a->blocks slots). */
static lpx_status attention(const attn_ctx *a, bf16 *out, float *part_o, float *part_ml,
                            int *done, void *kv, float *kvs, const float *qkv, const float *bias,
                            const float *q_norm, const float *k_norm, const float *inv_freq,
                            const int32_t *tok_seq, const int32_t *positions,
                            const int32_t *slots, const int32_t *block_table, int max_blocks,
                            const int32_t *plan, kv_geom g, int layer, float eps,
                            bool interleaved, long long *trace, kstream st) {
    const float scale = 1.0f / sqrtf((float)g.head_dim);
    cudaError_t e = cudaErrorInvalidValue;
#define ATTN_LAUNCH(HD, RM, F8)                                                                    \
    if (g.head_dim == HD && a->rm == RM && (g.fp8 != 0) == F8)                                     \
        e = launch(attn_decode_kernel<HD, RM, F8>, dim3(a->blocks), dim3(AD_THREADS),              \
                   sizeof(ad_smem<HD, RM, F8>), st, out, part_o, part_ml, done,                    \
                   (kv_elem<F8> *)kv, kvs, qkv, bias, q_norm, k_norm, inv_freq, tok_seq,           \
                   positions, slots, block_table, max_blocks, plan, g, layer, scale, eps,          \
                   (int)interleaved, trace);
    ATTN_VARIANTS(ATTN_LAUNCH)
#undef ATTN_LAUNCH
    LPX_CUDA_TRY(e);
    return LPX_OK;
}

#endif

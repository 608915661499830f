/* Batch-1 decode: the q/k/v projection and the attention of one token in one
 * kernel, a thread-block cluster per KV head (sm_90 distributed shared memory).
 * The two-kernel path (matvec_tma_kernel for the projection, then
 * attn_decode_kernel on 8 blocks) paid a kernel boundary and ran the attention of
 * a head on one SM; here the C blocks of a head's cluster each
 *  1. request their rb = (G+2)·HD/C rows of the head's projection (G query heads,
 *     its key and value head: up to three contiguous row ranges of W) into shared
 *     memory by bulk copies before griddepcontrol.wait, and after it their slice
 *     of the cached keys and values (the earlier positions, split over the
 *     cluster) by cp.async;
 *  2. apply RMSNorm to the residual stream and compute their rows (the
 *     arithmetic of matvec_tma_kernel, for each weight packing of wquant.cuh: F);
 *  3. after a cluster barrier, read the head's projections from the blocks that
 *     own them (DSMEM) and each prepare the queries, key and value (bias, q/k
 *     RMSNorm, RoPE: attn_decode_kernel's arithmetic); the last block also writes
 *     the token's key and value to the cache and takes the token's own key;
 *  4. attend over their keys (scores a warp a key, softmax and P·V a tile at a
 *     time, online across tiles);
 *  5. after a second cluster barrier, combine the C partial results, each block a
 *     slice of the output dims: out = Σ 2^(m_b-M) o_b / Σ 2^(m_b-M) l_b.
 * Used where it fits (qkv_attn_plan); other steps keep the two kernels. F8: the
 * cache holds fp8 codes and scales (kv_cache.cuh): the token's key and value are
 * quantized as attn_decode_kernel does, a key's scale multiplies its score and a
 * value's its softmax weight. */
#ifndef LPX_BACKEND_CUDA_QKV_ATTN_CUH
#define LPX_BACKEND_CUDA_QKV_ATTN_CUH

#include "attention.cuh"
#include "common.cuh"
#include "matmul.cuh"
#include "tuning.h"

#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#define QA_THREADS 256 /* 8 warps */
#define QA_MAX_CLUSTER 16
/* Registers a thread of the fused kernel may use, by group bound GM (query heads a
 * KV head): QA_MAXNREG for GM 2, 80 for GM 4, 255 (no cap) for GM 8. Uncapped, ptxas
 * gives GM 2 98 registers; at 72 (no spill) the step is 2-6 us shorter (docs/lab/notebook.md
 * rows 46-47). GM 4 at 80 has no spill (75 for HD 64, 80 for HD 128; was 99 / 114);
 * GM 8 spills even at 128, so it stays at the 154-156 ptxas picks. __maxnreg__
 * replaces __launch_bounds__ (the two cannot be combined). */
#ifndef QA_MAXNREG
#define QA_MAXNREG 72
#endif
/* When the kernel lets the next one (o) launch: at its start, after its wait, or
 * once its rows are done (its weights read: o's and gate/up's weight streams then
 * no longer compete with its own). */
enum { QA_NEXT_START, QA_NEXT_WAIT, QA_NEXT_ROWS };
#define QA_SMEM_MAX MV2_SMEM_MAX

/* The fixed part of the shared memory; the weight slice, x and the block's
 * projections follow it. Keys per tile: 4096 / HD (a 16 KB K and V tile in bf16). */
/* fp8: the scales of a tile's keys and values and of the token's own (none for
 * bf16, whose layout stays as without fp8) */
template <int KT, bool F8> struct qa_scales {
    float kts[KT], vts[KT], kns, vns;
};
template <int KT> struct qa_scales<KT, false> {};

template <int HD, int GM, bool F8> struct qa_smem : qa_scales<4096 / HD, F8> {
    static constexpr int KT = 4096 / HD;
    alignas(128) kv_elem<F8> kt[KT][HD]; /* the tile's cached keys (128-byte rows' start */
    alignas(128) kv_elem<F8> vt[KT][HD]; /* and values: attention.cuh's ad_tile) */
    alignas(16) float qf[GM][HD];  /* queries after norm and RoPE, times scale·log2 e */
    alignas(16) float pacc[GM][HD]; /* the block's unnormalised output, read by the cluster */
    alignas(16) kv_elem<F8> kn[HD]; /* the token's key and value, as cached */
    alignas(16) kv_elem<F8> vn[HD];
    alignas(16) float wacc[QA_THREADS / 32][GM][HD]; /* each warp's unnormalised output */
    float wm[QA_THREADS / 32][GM], wl[QA_THREADS / 32][GM]; /* and its max and sum */
    float m[GM], l[GM];            /* the block's max and sum (log2 units) */
    float red[QA_THREADS / 32];
    uint64_t bar;                  /* the weight slice's mbarrier */
};

template <int HD, int GM, bool F8> static constexpr size_t qa_fixed_bytes() {
    return (sizeof(qa_smem<HD, GM, F8>) + 127) / 128 * 128;
}

template <int HD, int GM, int F, bool F8>
__global__ void __maxnreg__(GM <= 2 ? QA_MAXNREG : GM <= 4 ? 80 : 255) /* see QA_MAXNREG */
    qkv_attn_kernel(bf16 *__restrict__ out,               // (n_heads*HD)
                    kv_elem<F8> *__restrict__ kv,         // cache
                    float *__restrict__ kvs,              // F8: its scales
                    const void *__restrict__ W,           // (qkv rows) of row_bytes
                    const float *__restrict__ x,          // (cols) residual stream
                    const float *__restrict__ norm_w,     // (cols)
                    const float *__restrict__ bias,       // (qkv rows) or NULL
                    const float *__restrict__ q_norm,     // (HD) or NULL
                    const float *__restrict__ k_norm,     // (HD) or NULL
                    const float *__restrict__ inv_freq,   // (HD/2)
                    const int32_t *__restrict__ tok_seq,  // (1), -1 = padding
                    const int32_t *__restrict__ positions, // (1)
                    const int32_t *__restrict__ slots,    // (1)
                    const int32_t *__restrict__ block_table, // (n_seqs, max_blocks)
                    int max_blocks, kv_geom g, int layer, int cols, int rb, int row_bytes,
                    int gshift, int moff, float scale, float eps, int interleaved, int window,
                    int next_at, // when the next kernel may launch: QA_NEXT_*
                    long long *__restrict__ trace, // (n_layers, AD_TRACE) or NULL
                    long long *__restrict__ btrace) { // (BT_BLOCKS, BT_MARKS) or NULL
    namespace cg = cooperative_groups;
    constexpr int KT = qa_smem<HD, GM, F8>::KT, DPL = HD / 32, NW = QA_THREADS / 32;
    constexpr int RC = HD * (int)sizeof(kv_elem<F8>) / 16; /* 16-byte chunks a cached row */
    constexpr int XR = 8; /* x values a thread keeps: cols <= XR * QA_THREADS */
    extern __shared__ __align__(128) uint4 qa_raw[];
    qa_smem<HD, GM, F8> &sm = *reinterpret_cast<qa_smem<HD, GM, F8> *>(qa_raw);
    uint8_t *ws = reinterpret_cast<uint8_t *>(qa_raw) + qa_fixed_bytes<HD, GM, F8>();
    bf16 *xs = reinterpret_cast<bf16 *>(ws + (size_t)rb * row_bytes);
    float *proj = reinterpret_cast<float *>(xs + cols); /* cols % 8 == 0: 16-byte aligned */
    cg::cluster_group cl = cg::this_cluster();
    const int C = (int)cl.num_blocks(), rank = (int)cl.block_rank();
    const int kvh = blockIdx.x / C, G = g.n_heads / g.n_kv, R = (G + 2) * HD;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int cols8 = cols / 8;
    long long *tr = trace && blockIdx.x == 0 && tid == 0 ? trace + (size_t)layer * AD_TRACE : NULL;
#define QA_MARK(i)                                                                                 \
    if (tr) tr[i] = clock64()
    QA_MARK(0);
    if (btrace && tid == 0 && blockIdx.x < BT_BLOCKS)
        btrace[(size_t)BT_MARKS * blockIdx.x + 1] = (long long)globaltimer_ns();
    /* row v of the head's (G+2)·HD rows -> row of W (q heads, then k, then v) */
    auto wrow = [&](int v) {
        return v < G * HD         ? kvh * G * HD + v
               : v < (G + 1) * HD ? g.n_heads * HD + kvh * HD + (v - G * HD)
                                  : (g.n_heads + g.n_kv) * HD + kvh * HD + (v - (G + 1) * HD);
    };

    /* 1. the weight slice (at most three bulk copies: a range crosses at most two
     * of the q/k/v boundaries), then the cached keys and values of the block */
    const uint32_t bar = smem_addr(&sm.bar);
    if (tid == 0) {
        mbar_init(bar, 1);
        mbar_fence_init();
        mbar_expect_tx(bar, (uint32_t)rb * (uint32_t)row_bytes);
        for (int v = rank * rb, end = v + rb; v < end;) {
            const int seg_end = v < G * HD ? G * HD : v < (G + 1) * HD ? (G + 1) * HD : R;
            const int n = min(end, seg_end) - v;
            bulk_load(smem_addr(ws + (size_t)(v - rank * rb) * row_bytes),
                      (const uint8_t *)W + (size_t)wrow(v) * row_bytes,
                      (uint32_t)n * (uint32_t)row_bytes, bar);
            v += n;
        }
    }
    const int seq = tok_seq[0];
    const int p0 = positions[0], len = p0 + 1;
    const int lo = window > 0 && len > window ? len - window : 0;
    const int chunk = (p0 - lo + C - 1) / C;
    const int k0 = min(p0, lo + rank * chunk), k1 = min(p0, k0 + chunk);
    const bool own = rank == C - 1; /* also holds key p0, the token itself */
    const int nkb = seq < 0 ? 0 : k1 - k0 + (own ? 1 : 0);
    const int32_t *bt = block_table + (size_t)(seq < 0 ? 0 : seq) * max_blocks;
    /* the old keys of tile [base, base + KT) of the block's list, K and V rows by
     * 16-byte cp.async, F8 with their scales (the token's own key, last in the
     * list, is added later) */
    auto issue = [&](int base) {
        const int n = min(KT, k1 - k0 - base);
        for (int i = tid; i < n * RC; i += QA_THREADS) {
            const int j = i / RC, c = i % RC, key = k0 + base + j;
            const int kb = bt[key / g.block_size], sl = key % g.block_size;
            __pipeline_memcpy_async(reinterpret_cast<uint4 *>(&sm.kt[j][0]) + c,
                                    reinterpret_cast<const uint4 *>(kv + kv_offset(g, layer, 0, kvh, kb, sl)) + c, 16);
            __pipeline_memcpy_async(reinterpret_cast<uint4 *>(&sm.vt[j][0]) + c,
                                    reinterpret_cast<const uint4 *>(kv + kv_offset(g, layer, 1, kvh, kb, sl)) + c, 16);
            if constexpr (F8) {
                if (c < 2) /* RC >= 4 for fp8 rows */
                    __pipeline_memcpy_async(c ? &sm.vts[j] : &sm.kts[j],
                                            kvs + kv_scale_at(g, layer, c, kvh, kb, sl), 4);
            }
        }
        __pipeline_commit();
    };
    float nwr[XR];
#pragma unroll
    for (int k = 0; k < XR; k++) {
        const int i = tid + k * QA_THREADS;
        nwr[k] = i < cols ? norm_w[i] : 0.0f;
    }
    /* the norm weights and bias of the q/k/v row a warp prepares in step 3 (row
     * warp; rows past the 8 warps, G > 6, load theirs there) */
    float nwv[DPL], bv[DPL];
    auto row_consts = [&](int r) {
        const float *nw = r < G ? q_norm : r == G ? k_norm : NULL;
#pragma unroll
        for (int e = 0; e < DPL; e++) {
            nwv[e] = nw ? nw[lane * DPL + e] : 1.0f;
            bv[e] = bias ? bias[wrow(r * HD + lane * DPL + e)] : 0.0f;
        }
    };
    if (warp < G + 2) row_consts(warp);
    const int slot = slots[0];
    float cs[DPL], sn[DPL];
    head_rope_angles<HD, DPL>(p0, inv_freq, interleaved, cs, sn);
    QA_MARK(1);
    __syncthreads(); /* the mbarrier is initialised before anyone waits on it */
    if (next_at == QA_NEXT_START) grid_launch_next();
    grid_wait();
    if (next_at == QA_NEXT_WAIT) grid_launch_next();
    /* The first key tile is requested only now: its block-table lookups are a
     * round trip that, before the wait, delayed the block's arrival there (the
     * setup took 3.5-3.7 µs under the weight streams, longer than down, trace of
     * docs/lab/notebook.md row 32b); the tile is needed only after the rows. */
    if (seq >= 0) issue(0);
    QA_MARK(2);
    /* LPX_CUDA_BLK_TRACE marks only the start, the wait and the end here: more
     * marks raised the kernel's registers from 92 to 128 */
    if (btrace && tid == 0 && blockIdx.x < BT_BLOCKS)
        btrace[(size_t)BT_MARKS * blockIdx.x + 2] = (long long)globaltimer_ns();
    if (tr) tr[8] = (long long)globaltimer_ns();

    /* 2. RMSNorm of x into xs (matvec_tma_kernel's arithmetic), then the rows */
    {
        float xr[XR], ss = 0.0f;
#pragma unroll
        for (int k = 0; k < XR; k++) {
            const int i = tid + k * QA_THREADS;
            xr[k] = i < cols ? x[i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < XR; k++)
            if (tid + k * QA_THREADS < cols) ss += xr[k] * xr[k];
        const float v = warp_sum(ss);
        if (lane == 0) sm.red[warp] = v;
        __syncthreads();
        float t = 0.0f;
        for (int w = 0; w < NW; w++) t += sm.red[w];
        const float inv = rsqrtf(t / (float)cols + eps);
#pragma unroll
        for (int k = 0; k < XR; k++) {
            const int i = tid + k * QA_THREADS;
            if (i < cols) xs[i] = f2bf(xr[k] * inv * nwr[k]);
        }
    }
    __syncthreads();
    QA_MARK(3);
    mbar_wait(bar, 0);
    /* LPX_CUDA_ATTN_TRACE: the last block's times (weights landed, rows done, end) */
    auto trace_last = [&](int i) {
        if (trace && tid == 0)
            atomicMax(reinterpret_cast<unsigned long long *>(trace + (size_t)layer * AD_TRACE + i),
                      globaltimer_ns());
    };
    trace_last(10);
    {
        const uint4 *xv = reinterpret_cast<const uint4 *>(xs);
        for (int gi = warp; gi * MV2_ROWS < rb; gi += NW) {
            const uint4 *wr[MV2_ROWS];
#pragma unroll
            for (int j = 0; j < MV2_ROWS; j++)
                wr[j] = reinterpret_cast<const uint4 *>(
                    ws + (size_t)min(gi * MV2_ROWS + j, rb - 1) * row_bytes);
            float acc[MV2_ROWS][1];
#pragma unroll
            for (int j = 0; j < MV2_ROWS; j++) acc[j][0] = 0.0f;
            if constexpr (F == WF_BF16) {
                for (int i = lane; i < cols8; i += 32) {
                    const uint4 xq = xv[i];
#pragma unroll
                    for (int j = 0; j < MV2_ROWS; j++) acc[j][0] += dot8(wr[j][i], xq);
                }
            } else {
                constexpr int CH = wf_traits<F>::CH;
                const __half *sc[MV2_ROWS];
#pragma unroll
                for (int j = 0; j < MV2_ROWS; j++)
                    sc[j] = (const __half *)((const uint8_t *)wr[j] + wm_code_bytes(F, cols));
                for (int i = lane; i < cols / CH; i += 32) {
                    uint4 w[MV2_ROWS];
#pragma unroll
                    for (int j = 0; j < MV2_ROWS; j++) w[j] = wr[j][i];
                    qdot_chunk<F, MV2_ROWS, 1>(w, sc, i, gshift, moff, xv + i * (CH / 8), cols8,
                                               acc);
                }
            }
#pragma unroll
            for (int j = 0; j < MV2_ROWS; j++) {
                acc[j][0] = warp_sum(acc[j][0]);
                if (lane == j && gi * MV2_ROWS + j < rb) proj[gi * MV2_ROWS + j] = acc[j][0];
            }
        }
    }
    QA_MARK(4);
    trace_last(11);
    if (next_at == QA_NEXT_ROWS) grid_launch_next(); /* the weight slice is used */
    cl.sync(); /* every block's rows are in its shared memory */

    /* 3. the head's queries, key and value: a warp a row (attn_decode_kernel's
     * arithmetic), the values from the blocks that computed them */
    const float qscale = scale * AD_LOG2E;
    for (int r = warp; r < G + 2; r += NW) {
        if (r != warp) row_consts(r);
        float v[DPL];
#pragma unroll
        for (int e = 0; e < DPL; e++) {
            const int i = r * HD + lane * DPL + e;
            const float *src = cl.map_shared_rank(proj, i / rb);
            v[e] = src[i % rb] + bv[e];
        }
        const int which = r == G ? 0 : 1, cb = slot / g.block_size, cs_ = slot % g.block_size;
        const int64_t cache = kv_offset(g, layer, which, kvh, cb, cs_) + lane * DPL;
        const bool store = own && seq >= 0 && slot >= 0;
        /* the token's key (which 0) or value as cached: into kn/vn, and by the
         * cluster's last block into the cache */
        auto put = [&](const float (&x)[DPL]) {
            float *cur_s = nullptr, *dst_s = nullptr;
            if constexpr (F8) {
                cur_s = which ? &sm.vns : &sm.kns;
                dst_s = kvs + kv_scale_at(g, layer, which, kvh, cb, cs_);
            }
            kv_put_head<F8, DPL>(x, which ? sm.vn : sm.kn, cur_s, kv + cache, dst_s, store);
        };
        if (r == G + 1) { /* v */
            put(v);
            continue;
        }
        if (r < G ? q_norm != NULL : k_norm != NULL) head_rmsnorm_regs<DPL>(v, nwv, HD, eps);
        float rot[DPL];
        head_rope<DPL>(v, cs, sn, interleaved, rot);
        if (r < G) {
#pragma unroll
            for (int e = 0; e < DPL; e++) sm.qf[r][lane * DPL + e] = rot[e] * qscale;
        } else {
            put(rot);
        }
    }
    __syncthreads();
    QA_MARK(5);

    /* 4. the block's keys, a tile at a time: warp w takes keys w, w+8, ... of each
     * tile, one after another (online softmax in log2 units; every lane holds the
     * row's running max and sum, and its head dims of the output); then the block
     * combines its warps (scores computed lane-parallel over the dims need no
     * block barrier between scores, softmax and P·V) */
    float qr[GM][DPL], m[GM], l[GM], acc[GM][DPL];
#pragma unroll
    for (int r = 0; r < GM; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int e = 0; e < DPL; e++) {
            qr[r][e] = r < G ? sm.qf[r][lane * DPL + e] : 0.0f;
            acc[r][e] = 0.0f;
        }
    }
    for (int base = 0; base < nkb; base += KT) {
        const int nt = min(KT, nkb - base);
        if (base > 0) {
            __syncthreads(); /* everyone is done with the previous tile */
            issue(base);
        }
        __pipeline_wait_prior(0);
        __syncthreads();
        for (int j = warp; j < nt; j += NW) {
            const bool mine = own && base + j == nkb - 1;
            const kv_elem<F8> *kr = mine ? sm.kn : &sm.kt[j][0];
            const kv_elem<F8> *vr = mine ? sm.vn : &sm.vt[j][0];
            float kf[DPL], vf[DPL];
            kv_load<F8, DPL>(kr + lane * DPL, kf);
            kv_load<F8, DPL>(vr + lane * DPL, vf);
            /* F8: the key's scale (on its score) and the value's (on its weight) */
            float ksc = 1.0f, vsc = 1.0f;
            if constexpr (F8) {
                ksc = mine ? sm.kns : sm.kts[j];
                vsc = mine ? sm.vns : sm.vts[j];
            }
#pragma unroll
            for (int r = 0; r < GM; r++) {
                if (r < G) {
                    float d = 0.0f;
#pragma unroll
                    for (int e = 0; e < DPL; e++) d = fmaf(qr[r][e], kf[e], d);
                    d = warp_sum(d);
                    if (F8) d *= ksc;
                    const float nm = fmaxf(m[r], d);
                    const float a = exp2f(m[r] - nm), p = exp2f(d - nm); /* m = -inf: a = 0 */
                    m[r] = nm;
                    l[r] = l[r] * a + p;
                    const float pv = F8 ? p * vsc : p;
#pragma unroll
                    for (int e = 0; e < DPL; e++) acc[r][e] = fmaf(pv, vf[e], acc[r][e] * a);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < GM; r++) {
        if (r < G) {
#pragma unroll
            for (int e = 0; e < DPL; e++) sm.wacc[warp][r][lane * DPL + e] = acc[r][e];
            if (lane == 0) {
                sm.wm[warp][r] = m[r];
                sm.wl[warp][r] = l[r];
            }
        }
    }
    __syncthreads();
    for (int e = tid; e < G * HD; e += QA_THREADS) { /* the block's partial result */
        const int r = e / HD, d = e % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; w++)
            if (sm.wl[w][r] > 0.0f) M = fmaxf(M, sm.wm[w][r]);
        float num = 0.0f, den = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) {
            if (sm.wl[w][r] > 0.0f) {
                const float f = exp2f(sm.wm[w][r] - M);
                num += f * sm.wacc[w][r][d];
                den += f * sm.wl[w][r];
            }
        }
        sm.pacc[r][d] = num;
        if (d == 0) {
            sm.m[r] = M;
            sm.l[r] = den;
        }
    }
    QA_MARK(6);
    cl.sync(); /* every block's partial result is in its shared memory */

    /* 5. combine: block rank takes output dims [rank·per, +per) of the head's G·HD */
    const int per = (G * HD + C - 1) / C;
    if (tid < per && rank * per + tid < G * HD) {
        const int e = rank * per + tid, r = e / HD, d = e % HD;
        float mb[QA_MAX_CLUSTER], lb[QA_MAX_CLUSTER], ob[QA_MAX_CLUSTER];
#pragma unroll
        for (int b = 0; b < QA_MAX_CLUSTER; b++) { /* all remote loads in flight */
            if (b < C) {
                const qa_smem<HD, GM, F8> *rs = cl.map_shared_rank(&sm, b);
                mb[b] = rs->m[r];
                lb[b] = rs->l[r];
                ob[b] = rs->pacc[r][d];
            }
        }
        float M = -INFINITY;
#pragma unroll
        for (int b = 0; b < QA_MAX_CLUSTER; b++)
            if (b < C && lb[b] > 0.0f) M = fmaxf(M, mb[b]);
        float num = 0.0f, den = 0.0f;
#pragma unroll
        for (int b = 0; b < QA_MAX_CLUSTER; b++) {
            if (b < C && lb[b] > 0.0f) {
                const float f = exp2f(mb[b] - M);
                num += f * ob[b];
                den += f * lb[b];
            }
        }
        out[(size_t)(kvh * G + r) * HD + d] = f2bf(den > 0.0f ? num / den : 0.0f);
    }
    QA_MARK(7);
    if (tr) tr[9] = (long long)globaltimer_ns();
    trace_last(12);
#undef QA_MARK
    cl.sync(); /* no block leaves while another may still read its shared memory */
    if (btrace && tid == 0 && blockIdx.x < BT_BLOCKS) {
        long long *pb = btrace + (size_t)BT_MARKS * blockIdx.x;
        pb[0] = smid();
        pb[3] = pb[4] = pb[2]; /* not marked */
        pb[5] = (long long)globaltimer_ns();
    }
}

// ----------------------------------------------------------------------------
// kernel launcher

/* (head_dim, group bound) instantiations. */
#define QA_VARIANTS(X) X(64, 2) X(64, 4) X(64, 8) X(128, 2) X(128, 4) X(128, 8)

typedef struct qa_plan {
    int cluster; /* blocks per KV head, 0: the path does not apply */
    int rb;      /* projection rows a block */
    size_t smem; /* dynamic shared memory a block at most (the widest packing's rows) */
    size_t fixed; /* of which the fixed part (qa_smem) */
    int regs;    /* registers a thread of the kernel (the bf16 one where it is used) */
} qa_plan;

static int qa_gm(int G) { return G <= 2 ? 2 : G <= 4 ? 4 : 8; }

template <int HD, int GM, bool F8> static const void *qa_func(int F) {
    return F == WF_Q8   ? reinterpret_cast<const void *>(qkv_attn_kernel<HD, GM, WF_Q8, F8>)
           : F == WF_Q4 ? reinterpret_cast<const void *>(qkv_attn_kernel<HD, GM, WF_Q4, F8>)
                        : reinterpret_cast<const void *>(qkv_attn_kernel<HD, GM, WF_BF16, F8>);
}

/* Whether the fused path applies to this model on this GPU, and its shape: the
 * largest cluster (16, 8 or 4 blocks) whose rows a block split evenly in groups of
 * MV2_ROWS, whose shared memory fits QA_SMEM_MAX and of which n_kv clusters can be
 * resident at once (the tune key qa=0 leaves it unplanned: cuda_backend.cu).
 * kinds: the bit (1 << lpx_wp_kind) of every packing the layers' q/k/v take,
 * row_bytes the widest of their rows: every kernel those need must fit; fp8: the
 * kernels for an fp8 cache. */
static qa_plan qkv_attn_plan(const cuda_shape *sh, unsigned kinds, int row_bytes, bool fp8) {
    qa_plan p = {0, 0, 0, 0, 0};
    if (!lpx_cuda_qa_shape_fits(sh, 8 * QA_THREADS)) return p;
    const int n_kv = sh->n_kv, hd = sh->head_dim, cols = sh->d_model;
    const int G = sh->n_heads / n_kv;
    const int gm = qa_gm(G), R = (G + 2) * hd;
    const void *fs[3] = {NULL, NULL, NULL};
    size_t fixed = 0;
#define QA_PICK(HD, GM)                                                                            \
    if (hd == HD && gm == GM) {                                                                    \
        for (int k = 0; k < 3; k++)                                                                \
            fs[k] = fp8 ? qa_func<HD, GM, true>(k) : qa_func<HD, GM, false>(k);                    \
        fixed = fp8 ? qa_fixed_bytes<HD, GM, true>() : qa_fixed_bytes<HD, GM, false>();            \
    }
    QA_VARIANTS(QA_PICK)
#undef QA_PICK
    if (!fs[0] || !kinds) return p;
    for (int c = QA_MAX_CLUSTER; c >= 4; c /= 2) {
        if (R % c || (R / c) % MV2_ROWS) continue;
        const int rb = R / c;
        const size_t smem = fixed + (size_t)rb * row_bytes + (size_t)cols * 2 + (size_t)rb * 4;
        if (smem > QA_SMEM_MAX) continue;
        bool all = true;
        for (int k = 0; k < 3 && all; k++) {
            if (!(kinds & (1u << k))) continue;
            const void *f = fs[k];
            if (cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) ||
                cudaFuncSetAttribute(f, cudaFuncAttributeNonPortableClusterSizeAllowed, 1)) {
                cudaGetLastError();
                return p;
            }
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(n_kv * c);
        cfg.blockDim = dim3(QA_THREADS);
        cfg.dynamicSmemBytes = smem;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = c;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
            int n = 0;
            if (cudaOccupancyMaxActiveClusters(&n, f, &cfg) != cudaSuccess) {
                cudaGetLastError();
                all = false;
            } else if (n < n_kv) {
                all = false;
            }
        }
        if (!all) continue;
        cudaFuncAttributes fa;
        const int k0 = kinds & 1u ? 0 : kinds & 2u ? 1 : 2;
        if (cudaFuncGetAttributes(&fa, fs[k0]) != cudaSuccess) {
            cudaGetLastError();
            return p;
        }
        p.regs = fa.numRegs;
        p.cluster = c;
        p.rb = rb;
        p.smem = smem;
        p.fixed = fixed;
        return p;
    }
    return p;
}

/* One token: out = attention of its q/k/v projection (RMSNorm(x; norm_w) · Wᵀ +
 * bias), the token's key and value into the cache. */
static lpx_status qkv_attn(const qa_plan *p, bf16 *out, void *kv, float *kvs, const wmat &W,
                           const float *x,
                           const float *norm_w, const float *bias, const float *q_norm,
                           const float *k_norm, const float *inv_freq, const int32_t *tok_seq,
                           const int32_t *positions, const int32_t *slots,
                           const int32_t *block_table, int max_blocks, kv_geom g, int layer,
                           int cols, float eps, bool interleaved, int window, int next_at,
                           long long *trace, long long *bt, kstream st) {
    const float scale = 1.0f / sqrtf((float)g.head_dim);
    const int gm = qa_gm(g.n_heads / g.n_kv);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(g.n_kv * p->cluster);
    cfg.blockDim = dim3(QA_THREADS);
    cfg.dynamicSmemBytes = p->fixed + (size_t)p->rb * W.row_bytes + (size_t)cols * 2 + (size_t)p->rb * 4;
    cfg.stream = st.s;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = p->cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = st.pdl ? 1 : 0;
    cfg.attrs = attr;
    cfg.numAttrs = 2;
    cudaError_t e = cudaErrorInvalidValue;
    const int moff = wm_moff(W, cols);
#define QA_LAUNCH_F(HD, GM, F, F8)                                                                 \
    e = cudaLaunchKernelEx(&cfg, qkv_attn_kernel<HD, GM, F, F8>, out, (kv_elem<F8> *)kv, kvs, W.w, \
                           x, norm_w, bias, q_norm, k_norm, inv_freq, tok_seq, positions, slots,   \
                           block_table, max_blocks, g, layer, cols, p->rb, W.row_bytes, W.gshift,  \
                           moff, scale, eps, (int)interleaved, window, next_at, trace, bt)
#define QA_LAUNCH_K(HD, GM, F8)                                                                    \
    if (W.kind == WF_Q8)                                                                           \
        QA_LAUNCH_F(HD, GM, WF_Q8, F8);                                                            \
    else if (W.kind == WF_Q4)                                                                      \
        QA_LAUNCH_F(HD, GM, WF_Q4, F8);                                                            \
    else                                                                                           \
        QA_LAUNCH_F(HD, GM, WF_BF16, F8);
#define QA_LAUNCH(HD, GM)                                                                          \
    if (g.head_dim == HD && gm == GM) {                                                            \
        if (g.fp8) {                                                                               \
            QA_LAUNCH_K(HD, GM, true)                                                              \
        } else {                                                                                   \
            QA_LAUNCH_K(HD, GM, false)                                                             \
        }                                                                                          \
    }
    QA_VARIANTS(QA_LAUNCH)
#undef QA_LAUNCH
#undef QA_LAUNCH_K
#undef QA_LAUNCH_F
    LPX_CUDA_TRY(e);
    return LPX_OK;
}

#endif

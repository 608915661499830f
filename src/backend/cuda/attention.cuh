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
#include "mma.cuh"

#include <type_traits>

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
 * warp (the 8 columns of an S = Q·Kᵀ product, the depth of a k8 P·V product);
 * AD_STAGES tiles a block in shared memory, AD_STAGES - 1 of them loading while
 * one is used. 8 keys a warp, not 16: at head_dim 128 a block then takes 53 KB and
 * four fit an SM, as many slots as 64 sequences have (token, kv head) pairs (with
 * 16 keys a warp and two blocks an SM, 64 sequences at depth 128 ran 23% slower:
 * more items than slots, docs/PERF.md "Decode attention on the tensor cores"). */
#define AD_WARPS 4
#define AD_THREADS (32 * AD_WARPS)
#define AD_KW 8
#define AD_TK (AD_KW * AD_WARPS)
#define AD_STAGES 3
/* blocks an SM the registers must allow (128 a thread at four): shared memory
 * allows four up to head_dim 128 */
#define AD_BLOCKS_SM(HD) ((HD) <= 128 ? 4 : 1)

/* Where 16-byte chunk c of row r (of a warp's AD_KW key rows) is kept: the 8 rows
 * one ldmatrix tile reads then fall in 8 distinct bank groups. */
static __device__ __forceinline__ int ad_swz(int r, int c) { return c ^ (r & 7); }

/* The scales of a tile's keys and values (fp8; none for bf16), and of the token's
 * own key and value. */
template <bool F8> struct ad_tile_scales {
    float ks[AD_TK], vs[AD_TK];
};
template <> struct ad_tile_scales<false> {};
template <bool F8> struct ad_cur_scales {
    float kcs, vcs;
};
template <> struct ad_cur_scales<false> {};

/* One tile in shared memory: its keys and values as cached (bf16 rows with chunks
 * placed by ad_swz; fp8 codes in order) and, fp8, their scales. */
template <int HD, bool F8> struct ad_tile : ad_tile_scales<F8> {
    alignas(128) kv_elem<F8> k[AD_TK][HD];
    alignas(128) kv_elem<F8> v[AD_TK][HD];
};
/* fp8: each warp's keys and values of the tile it computes, its codes as f16
 * (exact), chunks placed by ad_swz: the tensor cores' operands. */
template <int HD, bool F8> struct ad_conv {
    alignas(128) __half k[AD_WARPS][AD_KW][HD];
    alignas(128) __half v[AD_WARPS][AD_KW][HD];
};
template <int HD> struct ad_conv<HD, false> {};
template <int HD, bool F8> struct ad_ring : ad_conv<HD, F8> {
    ad_tile<HD, F8> st[AD_STAGES];
};

/* Shared memory of attn_decode_kernel<HD, F8>: the item's queries, the token's own
 * key and value, the tile ring; after an item's keys, the ring holds each warp's
 * partial output (acc), and in the combine the splits' maxima and sums (mls). */
template <int HD, bool F8> struct ad_smem : ad_cur_scales<F8> {
    /* the A operand of S = Q·Kᵀ as lane l holds it: row l/4 of the queries (after
     * norm and RoPE, times scale·log2 e), [j][l] = k-steps 2j, 2j+1 × columns
     * 2(l%4)..+1 and +8, packed; rows past G stay zero */
    alignas(16) uint32_t qf[HD / 32][32][4];
    alignas(16) kv_elem<F8> kcur[HD];         /* the token's own key and value, as cached */
    alignas(16) kv_elem<F8> vcur[HD];
    alignas(128) union {
        ad_ring<HD, F8> r;
        float acc[AD_WARPS][ATTN_MAX_GROUP][HD];
        float mls[AP_MAX_SPLITS][ATTN_MAX_GROUP][2];
    } u;
    float wm[AD_WARPS][ATTN_MAX_GROUP], wl[AD_WARPS][ATTN_MAX_GROUP];
    int is_last;
};

/* Sixteen e4m3 codes as f16 values (exact): codes 0-7 into h[0], 8-15 into h[1]. */
static __device__ __forceinline__ void fp8x16_h(uint4 c, uint4 (&h)[2]) {
    const uint32_t w[4] = {c.x, c.y, c.z, c.w};
    uint32_t *o = reinterpret_cast<uint32_t *>(h);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const __half2_raw lo =
            __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w[i] & 0xffffu), __NV_E4M3);
        const __half2_raw hi =
            __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w[i] >> 16), __NV_E4M3);
        o[2 * i] = (uint32_t)lo.x | (uint32_t)lo.y << 16;
        o[2 * i + 1] = (uint32_t)hi.x | (uint32_t)hi.y << 16;
    }
}

/* Decode attention (one token per sequence; prefill steps use qkv_rope_kernel and
 * flash_prefill.cuh), with the token's q/k/v preparation fused in. A persistent
 * grid (as many blocks as fit the GPU at once) walks the step's plan
 * (attn_plan.h): block b takes items b, b + gridDim.x, ..., each one split of one
 * (token, kv head)'s keys [k0, k1); the host cut every sequence's keys so the
 * items fill the grid whatever the batch and the context. A block's rows are the
 * G <= ATTN_MAX_GROUP query heads of the kv head's group. For each item the block
 *  1. starts the cp.async copies of its first AD_STAGES - 1 tiles: warp w copies
 *     keys w*AD_KW .. +AD_KW of each tile (K and V rows; keys past k1 zero-filled),
 *     the keys it computes, so the tile loop needs no block barrier;
 *  2. meanwhile turns the token's projections into queries (bias, RMSNorm, RoPE)
 *     and, in the item that holds the token's own position p0, its key and value,
 *     which it writes to the cache (rounded to bf16 as every cached key is; F8:
 *     then quantized, kv_cache.cuh; key p0 is read from kcur/vcur, never from the
 *     ring);
 *  3. each warp computes its keys of a tile on the tensor cores while tile
 *     i + AD_STAGES - 1 loads: S = Q·Kᵀ (m16n8k16: the group's query rows padded
 *     to 16, the warp's 8 keys the columns), online softmax in the exp2 domain,
 *     then O += P·V (m16n8k8) with P taken from S's accumulators as the A operand
 *     (FlashAttention-2's register reuse). F8: the warp first turns its codes into
 *     f16 (exact) and the products are f16 ones; a key's scale multiplies its
 *     score, a value's its weight (times 448, so that f16 weights keep their
 *     precision; the output is divided by 448 again);
 *  4. combines its warps through shared memory; with n_split > 1 the block that
 *     ends the last split of its (token, kv head) (atomic counter) combines them:
 *     out = Σ 2^(m_s-M) o_s / Σ 2^(m_s-M) l_s (scores are in log2 units).
 * Only the first item's first tiles are requested before grid_wait(). Padding
 * tokens (sequence -1) get zeros and write nothing. */
template <int HD, bool F8>
__global__ void __launch_bounds__(AD_THREADS, AD_BLOCKS_SM(HD))
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
    /* head dims a lane in the preparation; cached elements a 16-byte chunk, chunks
     * a cached row; column tiles of O */
    constexpr int NT = AD_THREADS, NW = AD_WARPS, DPL = HD / 32;
    constexpr int VPC = 16 / sizeof(kv_elem<F8>), NCH = HD / VPC, NO = HD / 8;
    static_assert(HD / 8 >= 8 && AD_KW == 8, "a warp's keys: the 8 columns of one S tile, 8 rows for ad_swz");
    static_assert(AD_KW * NCH % 32 == 0, "a warp's copies: whole chunks a lane");
    static_assert(ATTN_MAX_GROUP <= 8, "a group's rows are the first 8 of the 16 an mma computes");
    extern __shared__ __align__(128) uint4 ad_raw[];
    ad_smem<HD, F8> &sm = *reinterpret_cast<ad_smem<HD, F8> *>(ad_raw);
    /* Until grid_wait() only memory no kernel of this step writes is read: the step
     * inputs and the cached keys and values of earlier positions, so their round
     * trips overlap the qkv projection still running before us. */
    const int G = g.n_heads / g.n_kv, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int qr = lane >> 2, q4 = lane & 3; /* the lane's row of S and O, its quad lane */
    /* the operands' element type: f16 for fp8 codes (exact), else bf16 */
    auto pack2 = [](float lo, float hi) { return F8 ? pack_h2(lo, hi) : pack_bf2(lo, hi); };
    for (int e = tid; e < HD / 32 * 32; e += NT) /* the rows past G, never written */
        if ((e % 32) / 4 >= G) *reinterpret_cast<uint4 *>(sm.qf[e / 32][e % 32]) = make_uint4(0, 0, 0, 0);
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

    /* tile i into ring slot i % AD_STAGES: the warp's AD_KW keys (none for p0; past
     * k1 zeros, from key k0's mapped address); one commit group a tile, empty or not */
    auto issue = [&](int i) {
        const int kbase = k0 + i * AD_TK + warp * AD_KW;
        if (i < n_tiles && kbase < k1) {
            ad_tile<HD, F8> &st = sm.u.r.st[i % AD_STAGES];
            /* lane l < AD_KW looks up key kbase + l's block once */
            const int lk = kbase + (lane & (AD_KW - 1));
            const int my_kb = bt[(lk < k1 ? lk : k0) >> g.bs_shift];
#pragma unroll
            for (int j = 0; j < AD_KW * NCH / 32; j++) {
                const int idx = j * 32 + lane, kl = idx / NCH, c = idx % NCH, key = kbase + kl;
                const bool ok = key < k1 && key != p0;
                const int kb = __shfl_sync(0xffffffffu, my_kb, kl);
                const int sl = (key < k1 ? key : k0) & (g.block_size - 1);
                const int pc = F8 ? c : ad_swz(kl, c), row = warp * AD_KW + kl;
                cp_async16(&st.k[row][pc * VPC], kv + kv_offset(g, layer, 0, kvh, kb, sl) + c * VPC, ok);
                cp_async16(&st.v[row][pc * VPC], kv + kv_offset(g, layer, 1, kvh, kb, sl) + c * VPC, ok);
            }
            if constexpr (F8) { /* lanes 0-7 the keys' scales, 8-15 the values' */
                const int kl = lane & (AD_KW - 1), key = kbase + kl, which = (lane / AD_KW) & 1;
                const int kb = __shfl_sync(0xffffffffu, my_kb, kl);
                if (lane < 2 * AD_KW && key < k1 && key != p0)
                    cp_async4(which ? &st.vs[warp * AD_KW + kl] : &st.ks[warp * AD_KW + kl],
                              kvs + kv_scale_at(g, layer, which, kvh, kb, key & (g.block_size - 1)));
            }
        }
        cp_async_commit();
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
            for (int e = 0; e < DPL; e += 2) { /* dims d, d+1 go to lane 4r + (d%8)/2 */
                const int d = lane * DPL + e, k = (d / 16) * 2 + (d % 16) / 8;
                sm.qf[k / 4][4 * r + (d % 8) / 2][k % 4] = pack2(rot[e] * qscale, rot[e + 1] * qscale);
            }
        } else {
            put(rot);
        }
    }
    __syncthreads();
    AD_MARK(4);

    /* 3. the warp's keys, a tile at a time, AD_STAGES - 1 tiles ahead. The A
     * operand of S: sm.qf (rows 8-15 are padding, zero). */
    auto mma = [](float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
        if constexpr (F8)
            mma_f16(c, a, b0, b1);
        else
            mma_bf16(c, a, b0, b1);
    };
    auto mma8 = [](float c[4], const uint32_t a[2], uint32_t b) {
        if constexpr (F8)
            mma_f16_k8(c, a, b);
        else
            mma_bf16_k8(c, a, b);
    };
    float o[NO][4], m = -INFINITY, l = 0.0f; /* l: this lane's part of row qr's sum */
#pragma unroll
    for (int n = 0; n < NO; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    using op_t = typename std::conditional<F8, __half, bf16>::type;
    for (int i = 0; i < n_tiles; i++) {
        issue(i + AD_STAGES - 1); /* its slot was tile i-1's: the warp is past it */
        cp_async_wait<AD_STAGES - 1>();
        __syncwarp(); /* tile i's rows of this warp, every lane's copies */
        const ad_tile<HD, F8> &st = sm.u.r.st[i % AD_STAGES];
        const int base = k0 + i * AD_TK + warp * AD_KW; /* the warp's first key */
        if (base < k1) {
            const op_t(*kt)[HD];
            const op_t(*vt)[HD];
            if constexpr (F8) { /* codes -> f16, p0's from kcur/vcur */
                __half(*ck)[HD] = sm.u.r.k[warp];
                __half(*cv)[HD] = sm.u.r.v[warp];
#pragma unroll
                for (int j = 0; j < AD_KW * NCH / 32; j++) {
                    const int idx = j * 32 + lane, kl = idx / NCH, c = idx % NCH;
                    const bool cur = base + kl == p0;
                    uint4 h[2];
                    fp8x16_h(*reinterpret_cast<const uint4 *>(cur ? &sm.kcur[c * 16] : &st.k[warp * AD_KW + kl][c * 16]), h);
                    *reinterpret_cast<uint4 *>(&ck[kl][ad_swz(kl, 2 * c) * 8]) = h[0];
                    *reinterpret_cast<uint4 *>(&ck[kl][ad_swz(kl, 2 * c + 1) * 8]) = h[1];
                    fp8x16_h(*reinterpret_cast<const uint4 *>(cur ? &sm.vcur[c * 16] : &st.v[warp * AD_KW + kl][c * 16]), h);
                    *reinterpret_cast<uint4 *>(&cv[kl][ad_swz(kl, 2 * c) * 8]) = h[0];
                    *reinterpret_cast<uint4 *>(&cv[kl][ad_swz(kl, 2 * c + 1) * 8]) = h[1];
                }
                __syncwarp();
                kt = ck;
                vt = cv;
            } else {
                kt = &st.k[warp * AD_KW];
                vt = &st.v[warp * AD_KW];
            }
            /* S (row qr, keys base + 2·q4 + e in s[e], e < 2): k-steps alternate
             * between two accumulators, two chains of mma latency */
            float s[4], s2[4];
#pragma unroll
            for (int e = 0; e < 4; e++) s[e] = s2[e] = 0.0f;
            const int kl = lane & 7;
            const bool kcur = !F8 && base + kl == p0;
#pragma unroll
            for (int j = 0; j < HD / 32; j++) { /* chunks 4j..4j+3: k-steps 2j, 2j+1 */
                const int c = 4 * j + (lane >> 3);
                uint32_t b[4];
                ldsm_x4(b, kcur ? (const void *)&sm.kcur[c * 8] : (const void *)&kt[kl][ad_swz(kl, c) * 8]);
                const uint4 q = *reinterpret_cast<const uint4 *>(sm.qf[j][lane]);
                const uint32_t a0[4] = {q.x, 0u, q.y, 0u}, a1[4] = {q.z, 0u, q.w, 0u};
                mma(j & 1 ? s2 : s, a0, b[0], b[1]);
                mma(j & 1 ? s2 : s, a1, b[2], b[3]);
            }
            if (i == 0) AD_MARK(5);
            /* mask, F8 key scales; the row's maximum over the quad's keys, online softmax */
            float vsc[2] = {1.0f, 1.0f}; /* F8: the values' scales × 448 */
            float mx = -INFINITY;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int ke = 2 * q4 + e, key = base + ke;
                float sc = s[e] + s2[e];
                if constexpr (F8) {
                    const bool cur = key == p0, live = key < k1;
                    sc *= cur ? sm.kcs : st.ks[warp * AD_KW + ke];
                    vsc[e] = live ? (cur ? sm.vcs : st.vs[warp * AD_KW + ke]) * LPX_KV_FP8_MAX : 0.0f;
                }
                s[e] = key < k1 ? sc : -INFINITY;
                mx = fmaxf(mx, s[e]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float nm = fmaxf(m, mx);
            const float ref = nm == -INFINITY ? 0.0f : nm; /* no key yet */
            const float alpha = exp2f(m - ref);
            m = nm;
            const float p0_ = exp2f(s[0] - ref), p1_ = exp2f(s[1] - ref);
            l = l * alpha + p0_ + p1_;
#pragma unroll
            for (int n = 0; n < NO; n++) {
                o[n][0] *= alpha;
                o[n][1] *= alpha;
            }
            /* O += P·V (k8): keys base + 2·q4 + e in a[0]; V by 8x8 transposed tiles,
             * chunks 4u..4u+3 for O's tiles 4u..4u+3 */
            const uint32_t pa[2] = {pack2(p0_ * vsc[0], p1_ * vsc[1]), 0u};
#pragma unroll
            for (int u = 0; u < HD / 32; u++) {
                const int c = 4 * u + (lane >> 3);
                uint32_t b[4];
                ldsm_x4_t(b, kcur ? (const void *)&sm.vcur[c * 8] : (const void *)&vt[kl][ad_swz(kl, c) * 8]);
#pragma unroll
                for (int q = 0; q < 4; q++) mma8(o[4 * u + q], pa, b[q]);
            }
            if (i == 0) AD_MARK(6);
        }
        __syncwarp(); /* every lane is done with this slot before it is refilled */
    }
    cp_async_wait<0>(); /* the ring's last groups (empty) before it is reused */
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);

    /* 4. combine the warps (the ring is free once every warp is past its last tile) */
    __syncthreads();
    if (qr < G) {
        const float f = F8 ? 1.0f / LPX_KV_FP8_MAX : 1.0f;
#pragma unroll
        for (int n = 0; n < NO; n++)
            *reinterpret_cast<float2 *>(&sm.u.acc[warp][qr][n * 8 + 2 * q4]) =
                make_float2(o[n][0] * f, o[n][1] * f);
        if (q4 == 0) {
            sm.wm[warp][qr] = m;
            sm.wl[warp][qr] = l;
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

/* (head_dim, fp8 cache) */
#define ATTN_VARIANTS(X) X(64, false) X(128, false) X(256, false) X(64, true) X(128, true) X(256, true)

/* The decode attention grid of one instance: the blocks resident on the whole GPU
 * at once (the persistent grid, and the slots the plan fills). */
typedef struct attn_ctx {
    int blocks;
} attn_ctx;

/* Lets each attn_decode_kernel instantiation take its shared memory (over 48 KB),
 * and sizes this shape's grid from the occupancy of its variant. */
static lpx_status attention_init(const kv_geom *g, int n_sms, attn_ctx *a) {
#define ATTN_ATTR(HD, F8)                                                                          \
    LPX_CUDA_TRY(cudaFuncSetAttribute(attn_decode_kernel<HD, F8>,                                  \
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,                 \
                                      (int)sizeof(ad_smem<HD, F8>)));
    ATTN_VARIANTS(ATTN_ATTR)
#undef ATTN_ATTR
    a->blocks = 0;
#define ATTN_OCC(HD, F8)                                                                           \
    if (g->head_dim == HD && (g->fp8 != 0) == F8) {                                                \
        int n = 0;                                                                                 \
        LPX_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(                                \
            &n, attn_decode_kernel<HD, F8>, AD_THREADS, sizeof(ad_smem<HD, F8>)));                 \
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
#define ATTN_LAUNCH(HD, F8)                                                                        \
    if (g.head_dim == HD && (g.fp8 != 0) == F8)                                                    \
        e = launch(attn_decode_kernel<HD, F8>, dim3(a->blocks), dim3(AD_THREADS),                  \
                   sizeof(ad_smem<HD, F8>), st, out, part_o, part_ml, done,                        \
                   (kv_elem<F8> *)kv, kvs, qkv, bias, q_norm, k_norm, inv_freq, tok_seq,           \
                   positions, slots, block_table, max_blocks, plan, g, layer, scale, eps,          \
                   (int)interleaved, trace);
    ATTN_VARIANTS(ATTN_LAUNCH)
#undef ATTN_LAUNCH
    LPX_CUDA_TRY(e);
    return LPX_OK;
}

#endif

/* Attention: q/k bias + RMSNorm + RoPE fused with the write of K and V into the
 * paged cache, then attention of every token over its sequence's cache, split
 * over the context (flash-decoding) and combined by a reduce kernel.
 *
 * KV cache layout (bf16): block-major, so that copying a block is one memcpy:
 *   kv[block][layer][k|v][kv_head][slot][head_dim]
 * A token's slot (block*block_size + offset) comes from the host per step. */
#ifndef LPX_BACKEND_CUDA_ATTENTION_CUH
#define LPX_BACKEND_CUDA_ATTENTION_CUH

#include "common.cuh"

#include <cuda_pipeline.h>

#define ATTN_MAX_GROUP 8  /* query heads per KV head */
#define ATTN_MAX_SPLITS 16

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
    const int half = hd / 2;
    int fi, partner;
    float sign;
    if (interleaved) {
        fi = i / 2;
        partner = i ^ 1;
        sign = (i & 1) ? 1.0f : -1.0f;
    } else {
        fi = i % half;
        partner = i < half ? i + half : i - half;
        sign = i < half ? -1.0f : 1.0f;
    }
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

#define ATTN_THREADS 128 /* keys per tile: thread j loads key j */
#define ATTN_WARPS (ATTN_THREADS / 32)

/* Shared memory of attn_kernel<HD, RMAX>: queries, scores, a V tile, reduce scratch. */
template <int HD, int RMAX> struct attn_smem {
    float qs[RMAX][HD];
    float sc[RMAX][ATTN_THREADS];
    bf16 vs[ATTN_THREADS][HD];
    float mls[ATTN_MAX_SPLITS][2];
    int is_last;
};

/* Decode (one token per sequence; prefill steps use flash_prefill.cuh). Block per
 * (token, kv head, split); its rows are the query heads of the kv head's group.
 * The token's context is cut into
 * S_eff = min(S, ceil(len / ATTN_THREADS)) splits (blocks beyond exit), so a short
 * context takes one block and no reduce. A split walks its keys a tile of
 * ATTN_THREADS at a time: thread j loads key j whole into registers and its value
 * row into shared memory (cp.async), all in flight together, and scores key j
 * against every row (causal: key > the row's position, or outside the sliding
 * window, scores -inf). Warp w owns rows w, w+4, ...: online softmax over the keys,
 * and output dims lane*HD/32.. of those rows. With S_eff > 1 the last split block
 * (atomic counter) combines the splits: out = Σ e^(m_s-M) o_s / Σ e^(m_s-M) l_s.
 * Padding tokens (sequence -1) get zeros. */
template <int HD, int RMAX>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_kernel(bf16 *__restrict__ out,          // (T, n_heads*HD)
                float *__restrict__ part_o,      // (T, n_heads, S, HD)
                float *__restrict__ part_ml,     // (T, n_heads, S, 2)
                int *__restrict__ done,          // (T, n_kv) split counters, left at 0
                const float *__restrict__ q,     // (T, n_heads*HD)
                const bf16 *__restrict__ kv,
                const int32_t *__restrict__ tok_seq,     // (T), -1 = padding
                const int32_t *__restrict__ positions,   // (T)
                const int32_t *__restrict__ block_table, // (n_seqs, max_blocks)
                int max_blocks, kv_geom g, int layer, float scale, int window) {
    constexpr int DPL = HD / 32, RPW = (RMAX + ATTN_WARPS - 1) / ATTN_WARPS; /* rows per warp */
    extern __shared__ uint4 smem_raw[];
    attn_smem<HD, RMAX> &sm = *reinterpret_cast<attn_smem<HD, RMAX> *>(smem_raw);
    grid_wait();
    grid_launch_next();
    const int kvh = blockIdx.y, split = blockIdx.z, Sm = gridDim.z;
    const int G = g.n_heads / g.n_kv, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int t0 = blockIdx.x, nq = 1;
    const int R = nq * G;
    const int seq = tok_seq[t0];
    const int p0 = positions[t0];                   /* positions of the tile: p0 .. p0+nq-1 */
    const int len = seq >= 0 ? p0 + nq : 0;         /* context of the tile's last token */
    const int lo = window > 0 && p0 + 1 > window ? p0 + 1 - window : 0; /* first row's window */
    const int S = max(1, min(Sm, (len - lo + ATTN_THREADS - 1) / ATTN_THREADS));
    if (split >= S) return;
    const int chunk = (len - lo + S - 1) / S;
    const int k0 = lo + split * chunk, k1 = min(len, k0 + chunk);
    for (int e = tid; e < R * HD; e += ATTN_THREADS) {
        const int r = e / HD, d = e % HD;
        sm.qs[r][d] = q[(size_t)(t0 + r / G) * g.n_heads * HD + (size_t)(kvh * G + r % G) * HD + d] *
                      scale;
    }
    const int32_t *bt = block_table + (size_t)(seq >= 0 ? seq : 0) * max_blocks;
    float m[RPW], l[RPW], acc[RPW][DPL];
#pragma unroll
    for (int i = 0; i < RPW; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int e = 0; e < DPL; e++) acc[i][e] = 0.0f;
    }
    for (int base = k0; base < k1; base += ATTN_THREADS) {
        const int n = min(ATTN_THREADS, k1 - base);
        uint4 k8[HD / 8];
        const int key = base + tid;
        if (tid < n) {
            const int64_t kb = bt[key / g.block_size], slot = key % g.block_size;
            const uint4 *kr = reinterpret_cast<const uint4 *>(kv + kv_offset(g, layer, 0, kvh, kb, slot));
            const uint4 *vr = reinterpret_cast<const uint4 *>(kv + kv_offset(g, layer, 1, kvh, kb, slot));
#pragma unroll
            for (int c = 0; c < HD / 8; c++) {
                k8[c] = kr[c];
                __pipeline_memcpy_async(reinterpret_cast<uint4 *>(&sm.vs[tid][0]) + c, vr + c, 16);
            }
        }
        __pipeline_commit();
        __syncthreads(); /* qs written (first tile); sc, vs free (later tiles) */
        if (tid < n) {
            float dot[RMAX];
#pragma unroll
            for (int r = 0; r < RMAX; r++) dot[r] = 0.0f;
#pragma unroll
            for (int c = 0; c < HD / 8; c++) {
                const float kf[8] = {bf_lo(k8[c].x), bf_hi(k8[c].x), bf_lo(k8[c].y),
                                     bf_hi(k8[c].y), bf_lo(k8[c].z), bf_hi(k8[c].z),
                                     bf_lo(k8[c].w), bf_hi(k8[c].w)};
#pragma unroll
                for (int r = 0; r < RMAX; r++) {
                    if (r < R) {
                        const float4 qa = *reinterpret_cast<const float4 *>(&sm.qs[r][c * 8]);
                        const float4 qb = *reinterpret_cast<const float4 *>(&sm.qs[r][c * 8 + 4]);
                        dot[r] = fmaf(qa.x, kf[0], dot[r]);
                        dot[r] = fmaf(qa.y, kf[1], dot[r]);
                        dot[r] = fmaf(qa.z, kf[2], dot[r]);
                        dot[r] = fmaf(qa.w, kf[3], dot[r]);
                        dot[r] = fmaf(qb.x, kf[4], dot[r]);
                        dot[r] = fmaf(qb.y, kf[5], dot[r]);
                        dot[r] = fmaf(qb.z, kf[6], dot[r]);
                        dot[r] = fmaf(qb.w, kf[7], dot[r]);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < RMAX; r++) {
                if (r < R) {
                    const int pr = p0 + r / G; /* the row's position */
                    const bool vis = key <= pr && (window <= 0 || key > pr - window);
                    sm.sc[r][tid] = vis ? dot[r] : -INFINITY;
                }
            }
        }
        __pipeline_wait_prior(0);
        __syncthreads();
        /* warp w: softmax over this tile for its rows, scores -> probabilities */
#pragma unroll
        for (int i = 0; i < RPW; i++) {
            const int r = warp + i * ATTN_WARPS;
            if (r < R) {
                float mt = -INFINITY;
                for (int j = lane; j < n; j += 32) mt = fmaxf(mt, sm.sc[r][j]);
                for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
                const float nm = fmaxf(m[i], mt);
                const float ref = nm == -INFINITY ? 0.0f : nm; /* all masked so far */
                float ps = 0.0f;
                for (int j = lane; j < n; j += 32) {
                    const float p = expf(sm.sc[r][j] - ref);
                    sm.sc[r][j] = p;
                    ps += p;
                }
                const float alpha = expf(m[i] - ref);
                m[i] = nm;
                l[i] = l[i] * alpha + warp_sum(ps);
#pragma unroll
                for (int e = 0; e < DPL; e++) acc[i][e] *= alpha;
            }
        }
        __syncwarp();
        for (int j = 0; j < n; j++) {
            const bf16 *vr = &sm.vs[j][lane * DPL];
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
            for (int i = 0; i < RPW; i++) {
                const int r = warp + i * ATTN_WARPS;
                if (r < R) {
                    const float p = sm.sc[r][j];
#pragma unroll
                    for (int e = 0; e < DPL; e++) acc[i][e] = fmaf(p, vf[e], acc[i][e]);
                }
            }
        }
        __syncthreads();
    }
    if (S == 1) {
#pragma unroll
        for (int i = 0; i < RPW; i++) {
            const int r = warp + i * ATTN_WARPS;
            if (r < R) {
                bf16 *o = out + (size_t)(t0 + r / G) * g.n_heads * HD + (size_t)(kvh * G + r % G) * HD;
#pragma unroll
                for (int e = 0; e < DPL; e++)
                    o[lane * DPL + e] = f2bf(l[i] > 0.0f ? acc[i][e] / l[i] : 0.0f);
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < RPW; i++) {
        const int r = warp + i * ATTN_WARPS;
        if (r < R) {
            const size_t pb = ((size_t)(t0 + r / G) * g.n_heads + kvh * G + r % G) * Sm + split;
#pragma unroll
            for (int e = 0; e < DPL; e++) part_o[pb * HD + lane * DPL + e] = acc[i][e];
            if (lane == 0) {
                part_ml[pb * 2] = m[i];
                part_ml[pb * 2 + 1] = l[i];
            }
        }
    }
    /* last block of this (tile, kv head) combines the splits */
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        const int prev = atomicAdd(&done[t0 * g.n_kv + kvh], 1);
        sm.is_last = prev == S - 1;
        if (sm.is_last) done[t0 * g.n_kv + kvh] = 0;
    }
    __syncthreads();
    if (!sm.is_last) return;
    __threadfence();
    for (int r = 0; r < R; r++) {
        const size_t pb = ((size_t)(t0 + r / G) * g.n_heads + kvh * G + r % G) * Sm;
        for (int s2 = tid; s2 < S; s2 += ATTN_THREADS) {
            sm.mls[s2][0] = __ldcg(&part_ml[(pb + s2) * 2]);
            sm.mls[s2][1] = __ldcg(&part_ml[(pb + s2) * 2 + 1]);
        }
        __syncthreads();
        float M = -INFINITY;
#pragma unroll
        for (int s2 = 0; s2 < ATTN_MAX_SPLITS; s2++)
            if (s2 < S && sm.mls[s2][1] > 0.0f) M = fmaxf(M, sm.mls[s2][0]);
        for (int d = tid; d < HD; d += ATTN_THREADS) {
            float po[ATTN_MAX_SPLITS];
#pragma unroll
            for (int s2 = 0; s2 < ATTN_MAX_SPLITS; s2++) /* all loads in flight at once */
                po[s2] = s2 < S ? __ldcg(&part_o[(pb + s2) * HD + d]) : 0.0f;
            float num = 0.0f, den = 0.0f;
#pragma unroll
            for (int s2 = 0; s2 < ATTN_MAX_SPLITS; s2++) {
                if (s2 < S && sm.mls[s2][1] > 0.0f) {
                    const float w = expf(sm.mls[s2][0] - M);
                    num += w * po[s2];
                    den += w * sm.mls[s2][1];
                }
            }
            out[(size_t)(t0 + r / G) * g.n_heads * HD + (size_t)(kvh * G + r % G) * HD + d] =
                f2bf(den > 0.0f ? num / den : 0.0f);
        }
        __syncthreads();
    }
}

// ----------------------------------------------------------------------------
// kernel launchers

static lpx_status qkv_rope(float *q_out, bf16 *kv, const float *qkv, const float *bias,
                           const float *q_norm, const float *k_norm, const float *inv_freq,
                           const int32_t *positions, const int32_t *slots, int T, kv_geom g,
                           int layer, float eps, bool interleaved, cudaStream_t st) {
    const dim3 grid(T, g.n_heads + 2 * g.n_kv);
    LPX_CUDA_TRY(launch(qkv_rope_kernel, grid, dim3(g.head_dim), 0, st, q_out, kv, qkv, bias,
                        q_norm, k_norm, inv_freq, positions, slots, g, layer, eps,
                        (int)interleaved));
    return LPX_OK;
}

/* Splits per token so that T * n_kv * S blocks give each SM about two. */
static int attn_splits(int T, int n_kv, int n_sms) {
    int s = ceil_div(n_sms, T * n_kv);
    return s < 1 ? 1 : s > ATTN_MAX_SPLITS ? ATTN_MAX_SPLITS : s;
}

#define ATTN_VARIANTS(X) X(64, ATTN_MAX_GROUP) X(128, ATTN_MAX_GROUP) X(256, ATTN_MAX_GROUP)

/* Lets each attn_kernel instantiation take its shared memory (over 48 KB). */
static lpx_status attention_init(void) {
#define ATTN_ATTR(HD, RMAX)                                                                        \
    LPX_CUDA_TRY(cudaFuncSetAttribute(attn_kernel<HD, RMAX>,                                       \
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,                 \
                                      (int)sizeof(attn_smem<HD, RMAX>)));
    ATTN_VARIANTS(ATTN_ATTR)
#undef ATTN_ATTR
    return LPX_OK;
}

/* One token per sequence, T tokens. */
static lpx_status attention(bf16 *out, float *part_o, float *part_ml, int *done, const float *q,
                            const bf16 *kv, int T, const int32_t *tok_seq, const int32_t *positions,
                            const int32_t *block_table, int max_blocks, int S, kv_geom g,
                            int layer, int window, cudaStream_t st) {
    const dim3 grid(T, g.n_kv, S);
    const float scale = 1.0f / sqrtf((float)g.head_dim);
    cudaError_t e = cudaErrorInvalidValue;
#define ATTN_LAUNCH(HD, RMAX)                                                                      \
    if (g.head_dim == HD)                                                                          \
        e = launch(attn_kernel<HD, RMAX>, grid, dim3(ATTN_THREADS), sizeof(attn_smem<HD, RMAX>),   \
                   st, out, part_o, part_ml, done, q, kv, tok_seq, positions, block_table,         \
                   max_blocks, g, layer, scale, window);
    ATTN_VARIANTS(ATTN_LAUNCH)
#undef ATTN_LAUNCH
    LPX_CUDA_TRY(e);
    return LPX_OK;
}

#endif

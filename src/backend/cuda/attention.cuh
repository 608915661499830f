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

#define ATTN_THREADS 128 /* keys per tile: thread j scores key j */

/* Block per (token, kv head, split). Each split covers a contiguous range of the
 * token's context, a tile of ATTN_THREADS keys at a time: thread j loads key j
 * whole (HD/8 16-byte loads in flight) and scores it against the group's query
 * heads; then warp w accumulates the values of keys j ≡ w (mod 4), each lane
 * owning HD/32 dimensions, with an online softmax across tiles. The last split
 * block of a (token, kv head) to finish (atomic counter) combines the splits:
 * out = Σ e^(m_s-M) o_s / Σ e^(m_s-M) l_s. A token with no keys (padding) gets 0. */
template <int HD>
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
    constexpr int NW = ATTN_THREADS / 32, DPL = HD / 32; /* dims per lane */
    __shared__ float qs[ATTN_MAX_GROUP][HD];
    __shared__ float sc[ATTN_MAX_GROUP][ATTN_THREADS];
    __shared__ float red[NW][ATTN_MAX_GROUP][HD];
    __shared__ float mls[ATTN_MAX_SPLITS][2];
    __shared__ int is_last;
    grid_wait();
    grid_launch_next();
    const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z, S = gridDim.z;
    const int G = g.n_heads / g.n_kv, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int seq = tok_seq[t];
    const int len = seq >= 0 ? positions[t] + 1 : 0;
    const int lo = window > 0 && len > window ? len - window : 0;
    const int chunk = (len - lo + S - 1) / S;
    const int k0 = lo + split * chunk, k1 = min(len, k0 + chunk);
    for (int e = tid; e < G * HD; e += ATTN_THREADS)
        qs[e / HD][e % HD] = q[(size_t)t * g.n_heads * HD + (size_t)kvh * G * HD + e] * scale;
    const int32_t *bt = block_table + (size_t)(seq >= 0 ? seq : 0) * max_blocks;
    float m[ATTN_MAX_GROUP], l[ATTN_MAX_GROUP], acc[ATTN_MAX_GROUP][DPL];
#pragma unroll
    for (int h = 0; h < ATTN_MAX_GROUP; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (int e = 0; e < DPL; e++) acc[h][e] = 0.0f;
    }
    __syncthreads();
    for (int base = k0; base < k1; base += ATTN_THREADS) {
        const int n = min(ATTN_THREADS, k1 - base);
        if (tid < n) {
            const int key = base + tid;
            const uint4 *kr = reinterpret_cast<const uint4 *>(
                kv + kv_offset(g, layer, 0, kvh, bt[key / g.block_size], key % g.block_size));
            uint4 k8[HD / 8];
#pragma unroll
            for (int c = 0; c < HD / 8; c++) k8[c] = kr[c];
            float dot[ATTN_MAX_GROUP];
#pragma unroll
            for (int h = 0; h < ATTN_MAX_GROUP; h++) dot[h] = 0.0f;
#pragma unroll
            for (int c = 0; c < HD / 8; c++) {
                const float kf[8] = {bf_lo(k8[c].x), bf_hi(k8[c].x), bf_lo(k8[c].y),
                                     bf_hi(k8[c].y), bf_lo(k8[c].z), bf_hi(k8[c].z),
                                     bf_lo(k8[c].w), bf_hi(k8[c].w)};
#pragma unroll
                for (int h = 0; h < ATTN_MAX_GROUP; h++) {
                    if (h < G) {
#pragma unroll
                        for (int e = 0; e < 8; e++) dot[h] = fmaf(qs[h][c * 8 + e], kf[e], dot[h]);
                    }
                }
            }
#pragma unroll
            for (int h = 0; h < ATTN_MAX_GROUP; h++)
                if (h < G) sc[h][tid] = dot[h];
        }
        __syncthreads();
        float newm[ATTN_MAX_GROUP];
#pragma unroll
        for (int h = 0; h < ATTN_MAX_GROUP; h++) {
            if (h < G) {
                float mt = -INFINITY;
                for (int j = lane; j < n; j += 32) mt = fmaxf(mt, sc[h][j]);
                for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
                newm[h] = fmaxf(m[h], mt);
            }
        }
        __syncthreads();
        if (tid < n) {
#pragma unroll
            for (int h = 0; h < ATTN_MAX_GROUP; h++)
                if (h < G) sc[h][tid] = expf(sc[h][tid] - newm[h]);
        }
        __syncthreads();
#pragma unroll
        for (int h = 0; h < ATTN_MAX_GROUP; h++) {
            if (h < G) {
                const float alpha = expf(m[h] - newm[h]); /* 0 on the first tile */
                float ps = 0.0f;
                for (int j = lane; j < n; j += 32) ps += sc[h][j];
                m[h] = newm[h];
                l[h] = l[h] * alpha + warp_sum(ps);
#pragma unroll
                for (int e = 0; e < DPL; e++) acc[h][e] *= alpha;
            }
        }
#pragma unroll 4
        for (int j = warp; j < n; j += NW) {
            const int key = base + j;
            const bf16 *vr =
                kv + kv_offset(g, layer, 1, kvh, bt[key / g.block_size], key % g.block_size) +
                lane * DPL;
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
            for (int h = 0; h < ATTN_MAX_GROUP; h++) {
                if (h < G) {
                    const float p = sc[h][j];
#pragma unroll
                    for (int e = 0; e < DPL; e++) acc[h][e] = fmaf(p, vf[e], acc[h][e]);
                }
            }
        }
        __syncthreads();
    }
    /* the warps' partial sums over their keys */
#pragma unroll
    for (int h = 0; h < ATTN_MAX_GROUP; h++)
        if (h < G)
#pragma unroll
            for (int e = 0; e < DPL; e++) red[warp][h][lane * DPL + e] = acc[h][e];
    __syncthreads();
    if (S == 1) {
        for (int e = tid; e < G * HD; e += ATTN_THREADS) {
            const int h = e / HD, d = e % HD;
            float o = 0.0f;
#pragma unroll
            for (int w = 0; w < NW; w++) o += red[w][h][d];
            /* m, l are uniform across threads: pick head h's from registers */
            float lh = 0.0f;
#pragma unroll
            for (int hh = 0; hh < ATTN_MAX_GROUP; hh++)
                if (hh == h) lh = l[hh];
            out[(size_t)t * g.n_heads * HD + (size_t)(kvh * G + h) * HD + d] =
                f2bf(lh > 0.0f ? o / lh : 0.0f);
        }
        return;
    }
    const size_t pbase = ((size_t)t * g.n_heads + kvh * G) * S; /* + h*S + split */
    for (int e = tid; e < G * HD; e += ATTN_THREADS) {
        const int h = e / HD, d = e % HD;
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) o += red[w][h][d];
        part_o[(pbase + (size_t)h * S + split) * HD + d] = o;
    }
    if (tid == 0) {
#pragma unroll
        for (int h = 0; h < ATTN_MAX_GROUP; h++) {
            if (h < G) {
                part_ml[(pbase + (size_t)h * S + split) * 2] = m[h];
                part_ml[(pbase + (size_t)h * S + split) * 2 + 1] = l[h];
            }
        }
    }
    /* last block of this (token, kv head) combines the splits */
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        const int prev = atomicAdd(&done[t * g.n_kv + kvh], 1);
        is_last = prev == S - 1;
        if (is_last) done[t * g.n_kv + kvh] = 0;
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    for (int h = 0; h < G; h++) {
        for (int s = tid; s < S; s += ATTN_THREADS) {
            mls[s][0] = __ldcg(&part_ml[(pbase + (size_t)h * S + s) * 2]);
            mls[s][1] = __ldcg(&part_ml[(pbase + (size_t)h * S + s) * 2 + 1]);
        }
        __syncthreads();
        float M = -INFINITY;
#pragma unroll
        for (int s = 0; s < ATTN_MAX_SPLITS; s++)
            if (s < S && mls[s][1] > 0.0f) M = fmaxf(M, mls[s][0]);
        for (int d = tid; d < HD; d += ATTN_THREADS) {
            float po[ATTN_MAX_SPLITS];
#pragma unroll
            for (int s = 0; s < ATTN_MAX_SPLITS; s++) /* all loads in flight at once */
                po[s] = s < S ? __ldcg(&part_o[(pbase + (size_t)h * S + s) * HD + d]) : 0.0f;
            float num = 0.0f, den = 0.0f;
#pragma unroll
            for (int s = 0; s < ATTN_MAX_SPLITS; s++) {
                if (s < S && mls[s][1] > 0.0f) {
                    const float w = expf(mls[s][0] - M);
                    num += w * po[s];
                    den += w * mls[s][1];
                }
            }
            out[(size_t)t * g.n_heads * HD + (size_t)(kvh * G + h) * HD + d] =
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

static lpx_status attention(bf16 *out, float *part_o, float *part_ml, int *done, const float *q,
                            const bf16 *kv, const int32_t *tok_seq, const int32_t *positions,
                            const int32_t *block_table, int max_blocks, int T, int S, kv_geom g,
                            int layer, int window, cudaStream_t st) {
    const dim3 grid(T, g.n_kv, S);
    const float scale = 1.0f / sqrtf((float)g.head_dim);
#define ATTN_LAUNCH(HD)                                                                            \
    launch(attn_kernel<HD>, grid, dim3(ATTN_THREADS), 0, st, out, part_o, part_ml, done, q, kv,    \
           tok_seq, positions, block_table, max_blocks, g, layer, scale, window)
    cudaError_t e;
    switch (g.head_dim) {
    case 64: e = ATTN_LAUNCH(64); break;
    case 128: e = ATTN_LAUNCH(128); break;
    default: e = ATTN_LAUNCH(256); break;
    }
#undef ATTN_LAUNCH
    LPX_CUDA_TRY(e);
    return LPX_OK;
}

#endif

/* Causal flash attention for prefill (and any step that is not pure decode) on the
 * tensor cores: mma.sync m16n8k16, bf16 operands, float accumulation, online
 * softmax, K/V read from the paged cache a tile of keys at a time by cp.async into
 * shared memory, double-buffered so the next tile loads while this one computes.
 *
 * A block owns one KV head and a query tile of FP_ROWS rows, a row being one
 * (token, query head of the KV head's group) pair of one sequence: the G heads that
 * share a KV head share every K/V tile the block loads (GQA). Row r of the batch
 * is token r / G, head kv_head*G + r % G, so a tile need not start or end on a
 * token. Warp w owns rows 16w..16w+15: S = Q·Kᵀ and O += P·V are m16n8k16 products,
 * P goes from the S accumulators to the A operand in registers (FlashAttention-2).
 * Keys: from the window start of the tile's first token (0 without a sliding
 * window) to the position of its last token; each row masks keys after its own
 * position and outside its window.
 *
 * An fp8 cache (kv_cache.cuh): a tile's codes go by cp.async into a staging area;
 * each thread turns the chunks it copied into bf16 values (code times its head's
 * scale) in the tile's buffer once the tile before is computed, so the tensor-core
 * loop is the bf16 one. */
#ifndef LPX_BACKEND_CUDA_FLASH_PREFILL_CUH
#define LPX_BACKEND_CUDA_FLASH_PREFILL_CUH

#include "attention.cuh"
#include "common.cuh"
#include "mma.cuh"

#define FP_WARPS 4
#define FP_THREADS (FP_WARPS * 32)
#define FP_ROWS (FP_WARPS * 16) /* query rows per block */
#define FP_ROW_BITS 7           /* tiles[i] = first row << FP_ROW_BITS | rows */

/* Keys per tile: 64, or 32 for head_dim 256 (its O accumulators take 128
 * registers a thread). Q stays in registers up to head_dim 128, else it is
 * re-read from shared memory for each key tile. Shared-memory rows are padded by
 * 16 bytes so the 8 rows an ldmatrix reads fall in distinct banks. */
template <int HD> struct fp_cfg {
    static constexpr int BN = HD <= 128 ? 64 : 32;
    static constexpr int LD = HD + 8;
    static constexpr bool QREG = HD <= 128;
};

template <int HD> struct fp_smem {
    bf16 q[FP_ROWS][fp_cfg<HD>::LD];
    bf16 k[2][fp_cfg<HD>::BN][fp_cfg<HD>::LD];
    bf16 v[2][fp_cfg<HD>::BN][fp_cfg<HD>::LD];
};
/* fp8 caches: the next tile's codes, after fp_smem */
template <int HD> struct fp_stage {
    alignas(16) uint8_t k[fp_cfg<HD>::BN][HD];
    alignas(16) uint8_t v[fp_cfg<HD>::BN][HD];
};
template <int HD, bool F8> static constexpr size_t fp_smem_bytes() {
    return sizeof(fp_smem<HD>) + (F8 ? sizeof(fp_stage<HD>) : 0);
}

// ----------------------------------------------------------------------------
// CUDA kernel

/* Grid (n_tiles, n_kv). tiles[i] = first row << FP_ROW_BITS | rows (rows of one
 * sequence, 1..FP_ROWS). scale_log2 = log2(e)/sqrt(HD): scores live in the exp2
 * domain. */
template <int HD, bool F8>
__global__ void __launch_bounds__(FP_THREADS)
    flash_prefill_kernel(bf16 *__restrict__ out,                  // (T, n_heads*HD)
                         const float *__restrict__ q,             // (T, n_heads*HD)
                         const kv_elem<F8> *__restrict__ kv,      // paged cache
                         const float *__restrict__ kvs,           // F8: its scales
                         const int32_t *__restrict__ tiles,       // (n_tiles)
                         const int32_t *__restrict__ tok_seq,     // (T)
                         const int32_t *__restrict__ positions,   // (T)
                         const int32_t *__restrict__ block_table, // (n_seqs, max_blocks)
                         int max_blocks, kv_geom g, int layer, float scale_log2, int window) {
    using C = fp_cfg<HD>;
    constexpr int BN = C::BN, NT = BN / 8 /* S column tiles */, KD = HD / 16 /* k-steps */,
                  DT = HD / 8 /* O column tiles */, CH = HD / 8 /* 16-byte chunks a row */;
    extern __shared__ uint4 smem_raw[];
    fp_smem<HD> &sm = *reinterpret_cast<fp_smem<HD> *>(smem_raw);
    fp_stage<HD> &stg = *reinterpret_cast<fp_stage<HD> *>(reinterpret_cast<uint8_t *>(smem_raw) +
                                                          sizeof(fp_smem<HD>));
    grid_wait();
    grid_launch_next();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int kvh = blockIdx.y, G = g.n_heads / g.n_kv, qstride = g.n_heads * HD;
    const int tile = tiles[blockIdx.x];
    const int r0 = tile >> FP_ROW_BITS, nr = tile & ((1 << FP_ROW_BITS) - 1);
    const int t_first = r0 / G, t_last = (r0 + nr - 1) / G;
    const int seq = tok_seq[t_first];
    const int p_first = positions[t_first];
    const int k_lo = window > 0 && p_first + 1 > window ? p_first + 1 - window : 0;
    const int k_hi = positions[t_last] + 1; /* keys k_lo .. k_hi-1 */
    const int32_t *bt = block_table + (size_t)seq * max_blocks;

    /* Q rows -> shared memory as bf16 (rows past nr: zeros) */
    for (int e = tid; e < FP_ROWS * (HD / 4); e += FP_THREADS) {
        const int r = e / (HD / 4), d = (e % (HD / 4)) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < nr) {
            const int gr = r0 + r;
            v = *reinterpret_cast<const float4 *>(q + (size_t)(gr / G) * qstride +
                                                  (size_t)(kvh * G + gr % G) * HD + d);
        }
        uint2 p;
        p.x = pack_bf2(v.x, v.y);
        p.y = pack_bf2(v.z, v.w);
        *reinterpret_cast<uint2 *>(&sm.q[r][d]) = p;
    }

    /* K/V tile loads. Thread tid copies 16-byte chunk tid % CH of rows tid / CH +
     * i*RSTEP (F8: chunks of 16 codes, CH8 a row). The block ids of a tile's keys
     * are fetched one tile ahead (fetch), so the cp.async of the next tile (issue)
     * never waits on a block-table load; keys >= k_hi are zero-filled (their block
     * id: that of k_lo, a mapped one). */
    constexpr int CH8 = HD / 16, CHL = F8 ? CH8 : CH;
    constexpr int RSTEP = FP_THREADS / CHL, RPT = BN / RSTEP;
    const int lc = tid % CHL, lr = tid / CHL;
    int blk[RPT];
    float ksc[F8 ? RPT : 1], vsc[F8 ? RPT : 1]; /* F8: the scales of the staged rows */
    auto fetch = [&](int kbase) {
#pragma unroll
        for (int i = 0; i < RPT; i++) {
            const int key = kbase + lr + i * RSTEP;
            blk[i] = bt[(key < k_hi ? key : k_lo) / g.block_size];
        }
    };
    /* bf16: tile kbase into buffer buf; F8: its codes into the staging area and
     * its scales into ksc/vsc (0 past k_hi) */
    auto issue = [&](int buf, int kbase) {
#pragma unroll
        for (int i = 0; i < RPT; i++) {
            const int r = lr + i * RSTEP, key = kbase + r;
            const bool ok = key < k_hi;
            const int slot = (ok ? key : k_lo) % g.block_size;
            if constexpr (F8) {
                cp_async16(&stg.k[r][lc * 16], kv + kv_offset(g, layer, 0, kvh, blk[i], slot) + lc * 16, ok);
                cp_async16(&stg.v[r][lc * 16], kv + kv_offset(g, layer, 1, kvh, blk[i], slot) + lc * 16, ok);
                ksc[i] = ok ? kvs[kv_scale_at(g, layer, 0, kvh, blk[i], slot)] : 0.0f;
                vsc[i] = ok ? kvs[kv_scale_at(g, layer, 1, kvh, blk[i], slot)] : 0.0f;
            } else {
                cp_async16(&sm.k[buf][r][lc * 8], kv + kv_offset(g, layer, 0, kvh, blk[i], slot) + lc * 8, ok);
                cp_async16(&sm.v[buf][r][lc * 8], kv + kv_offset(g, layer, 1, kvh, blk[i], slot) + lc * 8, ok);
            }
        }
        cp_async_commit();
    };
    /* F8: the staged codes this thread copied -> bf16 values in buffer buf */
    auto convert = [&](int buf) {
        if constexpr (F8) {
            cp_async_wait<0>();
#pragma unroll
            for (int i = 0; i < RPT; i++) {
                const int r = lr + i * RSTEP;
#pragma unroll
                for (int w = 0; w < 2; w++) {
                    const uint4 c = *reinterpret_cast<const uint4 *>(w ? &stg.v[r][lc * 16] : &stg.k[r][lc * 16]);
                    float f[16];
                    kv_chunk<true>(c, f);
                    const float sc = w ? vsc[i] : ksc[i];
                    uint4 o[2];
                    uint32_t *ow = reinterpret_cast<uint32_t *>(o);
#pragma unroll
                    for (int e = 0; e < 8; e++) ow[e] = pack_bf2(f[2 * e] * sc, f[2 * e + 1] * sc);
                    uint4 *dst = reinterpret_cast<uint4 *>(w ? &sm.v[buf][r][lc * 16] : &sm.k[buf][r][lc * 16]);
                    dst[0] = o[0];
                    dst[1] = o[1];
                }
            }
        }
    };

    const int n_kt = (k_hi - k_lo + BN - 1) / BN;
    fetch(k_lo);
    issue(0, k_lo);
    if (n_kt > 1) fetch(k_lo + BN);
    convert(0);
    __syncthreads(); /* sm.q written (F8: and tile 0) */

    /* this thread's two rows: warp*16 + lane/4 (A) and +8 (B); position -1 = no row */
    const int rA = warp * 16 + (lane >> 2), rB = rA + 8;
    const int posA = rA < nr ? positions[(r0 + rA) / G] : -1;
    const int posB = rB < nr ? positions[(r0 + rB) / G] : -1;
    const bool active = warp * 16 < nr; /* warps without rows only help load */

    uint32_t qf[C::QREG ? KD : 1][4];
    if constexpr (C::QREG) {
#pragma unroll
        for (int kk = 0; kk < KD; kk++)
            ldsm_x4(qf[kk], &sm.q[warp * 16 + (lane & 15)][kk * 16 + (lane >> 4) * 8]);
    }
    float o[DT][4];
#pragma unroll
    for (int j = 0; j < DT; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float mA = -INFINITY, mB = -INFINITY, lA = 0.0f, lB = 0.0f;

    for (int it = 0; it < n_kt; it++) {
        const int kbase = k_lo + it * BN, buf = it & 1;
        if (it + 1 < n_kt) {
            issue(buf ^ 1, kbase + BN);
            if (it + 2 < n_kt) fetch(kbase + 2 * BN); /* in flight during this tile's math */
            if (!F8) cp_async_wait<1>();
        } else if (!F8) {
            cp_async_wait<0>();
        }
        __syncthreads(); /* tile it visible to all warps */
        if (active) {
            float s[NT][4];
#pragma unroll
            for (int j = 0; j < NT; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                uint32_t a[4];
                if constexpr (C::QREG) {
#pragma unroll
                    for (int i = 0; i < 4; i++) a[i] = qf[kk][i];
                } else {
                    ldsm_x4(a, &sm.q[warp * 16 + (lane & 15)][kk * 16 + (lane >> 4) * 8]);
                }
#pragma unroll
                for (int j = 0; j < NT / 2; j++) {
                    uint32_t b[4];
                    ldsm_x4(b, &sm.k[buf][j * 16 + (lane & 7) + (lane >> 4) * 8]
                                    [kk * 16 + ((lane >> 3) & 1) * 8]);
                    mma_bf16(s[2 * j], a, b[0], b[1]);
                    mma_bf16(s[2 * j + 1], a, b[2], b[3]);
                }
            }
            /* causal / window mask, scale, row maxima (a row spans the 4 lanes of a quad) */
            float mxA = -INFINITY, mxB = -INFINITY;
#pragma unroll
            for (int j = 0; j < NT; j++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = kbase + j * 8 + (lane & 3) * 2 + (e & 1);
                    const int pos = e < 2 ? posA : posB;
                    const bool vis = key <= pos && (window <= 0 || key > pos - window);
                    s[j][e] = vis ? s[j][e] * scale_log2 : -INFINITY;
                }
                mxA = fmaxf(mxA, fmaxf(s[j][0], s[j][1]));
                mxB = fmaxf(mxB, fmaxf(s[j][2], s[j][3]));
            }
#pragma unroll
            for (int o2 = 1; o2 <= 2; o2 <<= 1) {
                mxA = fmaxf(mxA, __shfl_xor_sync(0xffffffffu, mxA, o2));
                mxB = fmaxf(mxB, __shfl_xor_sync(0xffffffffu, mxB, o2));
            }
            const float nA = fmaxf(mA, mxA), nB = fmaxf(mB, mxB);
            const float refA = nA == -INFINITY ? 0.0f : nA, refB = nB == -INFINITY ? 0.0f : nB;
            const float alA = exp2f(mA - refA), alB = exp2f(mB - refB);
            mA = nA;
            mB = nB;
            float sumA = 0.0f, sumB = 0.0f;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                s[j][0] = exp2f(s[j][0] - refA);
                s[j][1] = exp2f(s[j][1] - refA);
                s[j][2] = exp2f(s[j][2] - refB);
                s[j][3] = exp2f(s[j][3] - refB);
                sumA += s[j][0] + s[j][1];
                sumB += s[j][2] + s[j][3];
            }
            lA = lA * alA + sumA; /* this thread's part of the row sum; quad-reduced at the end */
            lB = lB * alB + sumB;
#pragma unroll
            for (int j = 0; j < DT; j++) {
                o[j][0] *= alA;
                o[j][1] *= alA;
                o[j][2] *= alB;
                o[j][3] *= alB;
            }
            /* O += P·V: the S accumulators of key columns 16kk.. are the A operand */
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                const uint32_t a[4] = {pack_bf2(s[2 * kk][0], s[2 * kk][1]),
                                       pack_bf2(s[2 * kk][2], s[2 * kk][3]),
                                       pack_bf2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                       pack_bf2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                for (int j = 0; j < DT / 2; j++) {
                    uint32_t b[4];
                    ldsm_x4_t(b, &sm.v[buf][kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8]
                                      [j * 16 + (lane >> 4) * 8]);
                    mma_bf16(o[2 * j], a, b[0], b[1]);
                    mma_bf16(o[2 * j + 1], a, b[2], b[3]);
                }
            }
        }
        if (it + 1 < n_kt) convert(buf ^ 1); /* F8: tile it+1's values, for the next pass */
        __syncthreads(); /* buffer buf free for the load of tile it+2 */
    }

#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
        lA += __shfl_xor_sync(0xffffffffu, lA, o2);
        lB += __shfl_xor_sync(0xffffffffu, lB, o2);
    }
    const float iA = lA > 0.0f ? 1.0f / lA : 0.0f, iB = lB > 0.0f ? 1.0f / lB : 0.0f;
    const int c0 = (lane & 3) * 2;
    if (rA < nr) {
        const int gr = r0 + rA;
        bf16 *dst = out + (size_t)(gr / G) * qstride + (size_t)(kvh * G + gr % G) * HD + c0;
#pragma unroll
        for (int j = 0; j < DT; j++)
            *reinterpret_cast<uint32_t *>(dst + j * 8) = pack_bf2(o[j][0] * iA, o[j][1] * iA);
    }
    if (rB < nr) {
        const int gr = r0 + rB;
        bf16 *dst = out + (size_t)(gr / G) * qstride + (size_t)(kvh * G + gr % G) * HD + c0;
#pragma unroll
        for (int j = 0; j < DT; j++)
            *reinterpret_cast<uint32_t *>(dst + j * 8) = pack_bf2(o[j][2] * iB, o[j][3] * iB);
    }
}

// ----------------------------------------------------------------------------
// launchers

#define FP_VARIANTS(X) X(64, false) X(128, false) X(256, false) X(64, true) X(128, true) X(256, true)

/* Lets each instantiation take its shared memory (over 48 KB). */
static lpx_status flash_prefill_init(void) {
#define FP_ATTR(HD, F8)                                                                            \
    LPX_CUDA_TRY(cudaFuncSetAttribute(flash_prefill_kernel<HD, F8>,                                \
                                      cudaFuncAttributeMaxDynamicSharedMemorySize,                 \
                                      (int)fp_smem_bytes<HD, F8>()));
    FP_VARIANTS(FP_ATTR)
#undef FP_ATTR
    return LPX_OK;
}

/* Query tiles of up to FP_ROWS rows within each sequence (rows = token*G + head of
 * the group, counted over the batch), each sequence's last tile first: later
 * tiles see more keys, and starting them first shortens the tail of the grid.
 * Returns the number of tiles: per sequence ceil(n_s*G/FP_ROWS) <= n_s*G/FP_ROWS
 * + 1, so at most T*ATTN_MAX_GROUP/FP_ROWS + T = 1.125 T in all. */
static int flash_tiles(const int32_t *seq_start, int n_seqs, int G, int32_t *tiles) {
    int n = 0;
    for (int s = 0; s < n_seqs; s++) {
        const int begin = seq_start[s] * G;
        for (int r = seq_start[s + 1] * G; r > begin; r -= FP_ROWS) {
            const int c = r - begin < FP_ROWS ? r - begin : FP_ROWS;
            tiles[n++] = (r - c) << FP_ROW_BITS | c;
        }
    }
    return n;
}

static lpx_status flash_prefill(bf16 *out, const float *q, const void *kv, const float *kvs,
                                const int32_t *tiles,
                                int n_tiles, const int32_t *tok_seq, const int32_t *positions,
                                const int32_t *block_table, int max_blocks, kv_geom g, int layer,
                                int window, kstream st) {
    const dim3 grid(n_tiles, g.n_kv);
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)g.head_dim);
    cudaError_t e = cudaErrorInvalidValue;
#define FP_LAUNCH(HD, F8)                                                                          \
    if (g.head_dim == HD && (g.fp8 != 0) == F8)                                                    \
        e = launch(flash_prefill_kernel<HD, F8>, grid, dim3(FP_THREADS), fp_smem_bytes<HD, F8>(),  \
                   st, out, q, (const kv_elem<F8> *)kv, kvs, tiles, tok_seq, positions,            \
                   block_table, max_blocks, g, layer, scale_log2, window);
    FP_VARIANTS(FP_LAUNCH)
#undef FP_LAUNCH
    LPX_CUDA_TRY(e);
    return LPX_OK;
}

#endif

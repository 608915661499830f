/* The batch-1 decode step as one persistent kernel (a "megakernel").
 *
 * At batch 1 a step reads ~1.2 GB of weights in ~7 matrices per layer; as separate
 * kernels each costs ~5 µs from launch to drain although its weights stream in 1-3 µs
 * (docs/lab/notebook.md). Here one cooperative launch of one block per SM runs the whole
 * step as phases separated by grid-wide barriers:
 *
 *   per layer: [norm + qkv matvec] | [q/k norm, RoPE, KV write, attention] |
 *              [o matvec + residual] | [norm + gate/up matvec + SiLU·mul] |
 *              [down matvec + residual] |   then: [final norm + lm_head]
 *
 * Weights never depend on earlier phases, so each warp loads its first D1_BATCH
 * weight vectors of the next phase into registers before it waits at the barrier:
 * the barrier's latency overlaps the weight stream.
 *
 * Data written by one block and read by another in a later phase (residual x, qkv,
 * attention output, activations, split partials, KV rows) is read with __ldcg or
 * cp.async.cg (L2), never through the non-coherent L1.
 *
 * Only a batch-1 step would take this path: larger batches keep the per-kernel
 * graphs of cuda_backend.cu. Measured slower than those graphs (docs/lab/notebook.md, rows
 * 7a/7b: the weight stream reaches ~1.8 TB/s, the attention phase ~22 µs), so it
 * left the product: this is the workshop's copy (docs/dev.md), built as an object
 * by dev/cuda/build-decode1.sh. The backend of 3a42aba ran it under LPX_CUDA_MEGA=1
 * (decode1_setup, enqueue_step), with per-phase times from d1_params.trace. */
#include "decode1.h"

#include "backend/cuda/common.cuh"

#define D1_THREADS 256
#define D1_WARPS (D1_THREADS / 32)
#define D1_BATCH 16        /* 16-byte weight loads per lane in flight */
#define D1_TILE D1_THREADS /* keys per attention tile: thread j takes key j */

typedef d1_kv kv_geom;

static __device__ __forceinline__ int64_t kv_offset(const kv_geom g, int layer, int which,
                                                    int kvh, int block, int slot) {
    return block * g.block_stride +
           ((((int64_t)layer * 2 + which) * g.n_kv + kvh) * g.block_size + slot) * g.head_dim;
}

// ----------------------------------------------------------------------------
// device helpers

static __device__ __forceinline__ unsigned long long globaltimer(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}

/* Grid-wide barrier (all blocks are resident: cooperative launch), as cooperative
 * groups does it: one atomic per block on one counter, block 0 adding
 * 0x80000000 - (blocks - 1) and the others 1, so the top bit flips when all have
 * arrived. With trace, block 0 records when it arrived and left (barrier k). */
static __device__ __forceinline__ void d1_sync(unsigned *bar, unsigned long long *trace, int &k) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const bool master = blockIdx.x == 0;
        if (trace && master) trace[1 + 2 * k] = globaltimer();
        const unsigned nb = master ? 0x80000000u - (gridDim.x - 1) : 1u;
        __threadfence();
        const unsigned old = atomicAdd(bar, nb);
        const volatile unsigned *v = bar;
        while (((old ^ *v) & 0x80000000u) == 0) {
        }
        __threadfence();
        if (trace && master) trace[2 + 2 * k] = globaltimer();
    }
    k++;
    __syncthreads();
}

static __device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

/* Rows of a matvec phase are dealt to warps: warp gw takes row groups gw, gw+NW, ...
 * (a group is one row, or a gate/up pair), each lane the 16-byte column chunks
 * lane, lane+32, ... of each row. Item j of a lane = (its row j / cpr, chunk
 * j % cpr). */
struct d1_mv {
    const uint4 *W; /* (rows, cols/8) */
    int rows, cols8, cpr, grp, n, gw, nw;
};

static __device__ __forceinline__ d1_mv mv_plan(const bf16 *W, int rows, int cols, int grp) {
    d1_mv m;
    m.W = reinterpret_cast<const uint4 *>(W);
    m.rows = rows;
    m.cols8 = cols / 8;
    m.cpr = (m.cols8 + 31) / 32;
    m.grp = grp;
    m.gw = blockIdx.x * D1_WARPS + (threadIdx.x >> 5);
    m.nw = gridDim.x * D1_WARPS;
    const int ng = rows / grp;
    m.n = m.gw < ng ? (ng - m.gw + m.nw - 1) / m.nw * grp * m.cpr : 0;
    return m;
}

static __device__ __forceinline__ int mv_row(const d1_mv &m, int lr) {
    return (m.gw + lr / m.grp * m.nw) * m.grp + lr % m.grp;
}

/* Loads items j0 .. j0+D1_BATCH of this lane. */
static __device__ __forceinline__ void mv_load(const d1_mv &m, uint4 (&w)[D1_BATCH], int j0) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int u = 0; u < D1_BATCH; u++) {
        const int j = j0 + u, lr = j / m.cpr, i = (j - lr * m.cpr) * 32 + lane;
        w[u] = j < m.n && i < m.cols8 ? __ldg(m.W + (size_t)mv_row(m, lr) * m.cols8 + i)
                                      : make_uint4(0, 0, 0, 0);
    }
}

enum { MV_STORE = 0, MV_ADD = 1, MV_SILU = 2 };

/* Runs a lane's items against xs (the bf16 input vector in shared memory); items
 * 0 .. D1_BATCH are already in w. MV_STORE: y[row] = s; MV_ADD: y[row] += s (the
 * warp owns the row); MV_SILU: rows are gate/up pairs, act[row/2] = silu(g)·u. */
/* Lane 0: y at the warp's first row (MV_ADD's residual, read early). */
static __device__ __forceinline__ float mv_first_y(const d1_mv &m, const float *y) {
    return m.n > 0 && (threadIdx.x & 31) == 0 ? __ldcg(y + mv_row(m, 0)) : 0.0f;
}

/* y0: mv_first_y for MV_ADD. */
template <int MODE>
static __device__ __forceinline__ void mv_run(const d1_mv &m, uint4 (&w)[D1_BATCH],
                                              const uint4 *xs, float *y, bf16 *act,
                                              float y0 = 0.0f) {
    const int lane = threadIdx.x & 31;
    float acc = 0.0f, gate = 0.0f;
    for (int j0 = 0; j0 < m.n; j0 += D1_BATCH) {
        if (j0 > 0) mv_load(m, w, j0);
#pragma unroll
        for (int u = 0; u < D1_BATCH; u++) {
            const int j = j0 + u;
            if (j < m.n) { /* warp-uniform */
                const int lr = j / m.cpr, c = j - lr * m.cpr, i = c * 32 + lane;
                if (i < m.cols8) acc += dot8(w[u], xs[i]);
                if (c == m.cpr - 1) {
                    acc = warp_sum(acc);
                    const int row = mv_row(m, lr);
                    if (MODE == MV_SILU) {
                        if (lr % 2 == 0)
                            gate = acc;
                        else if (lane == 0)
                            act[row / 2] = f2bf(gate / (1.0f + expf(-gate)) * acc);
                    } else if (lane == 0) {
                        y[row] = MODE == MV_ADD ? (lr == 0 ? y0 : __ldcg(y + row)) + acc : acc;
                    }
                    acc = 0.0f;
                }
            }
        }
    }
}

/* xs = bf16(x / rms(x) * w) for the float vector x (global, written by other
 * blocks), or for the bf16 embedding row emb when x is NULL. Up to 8 elements per
 * thread stay in registers, so x is read once. */
static __device__ __forceinline__ void stage_norm(bf16 *xs, const float *x, const bf16 *emb,
                                                  const float *w, int d, float eps) {
    float v[8], ss = 0.0f;
#pragma unroll
    for (int u = 0; u < 8; u++) {
        const int i = threadIdx.x + u * D1_THREADS;
        v[u] = i < d ? (x ? __ldcg(x + i) : bf2f(emb[i])) : 0.0f;
        ss += v[u] * v[u];
    }
    for (int i = threadIdx.x + 8 * D1_THREADS; i < d; i += D1_THREADS) {
        const float t = x ? __ldcg(x + i) : bf2f(emb[i]);
        ss += t * t;
    }
    const float inv = rsqrtf(block_sum(ss) / (float)d + eps);
#pragma unroll
    for (int u = 0; u < 8; u++) {
        const int i = threadIdx.x + u * D1_THREADS;
        if (i < d) xs[i] = f2bf(v[u] * inv * w[i]);
    }
    for (int i = threadIdx.x + 8 * D1_THREADS; i < d; i += D1_THREADS)
        xs[i] = f2bf((x ? __ldcg(x + i) : bf2f(emb[i])) * inv * w[i]);
    __syncthreads();
}

/* xs = src (n bf16, n % 8 == 0), written by other blocks. */
static __device__ __forceinline__ void stage_copy(uint4 *xs, const bf16 *src, int n) {
    const uint4 *s = reinterpret_cast<const uint4 *>(src);
    for (int i = threadIdx.x; i < n / 8; i += D1_THREADS) xs[i] = __ldcg(s + i);
    __syncthreads();
}

/* q/k: + bias, RMSNorm (when nw), RoPE at pos, in place on v (this lane's DPL dims
 * lane*DPL ..), through the warp's row buf in shared memory. */
template <int HD>
static __device__ __forceinline__ void d1_rope(float (&v)[HD / 32], float *buf, const float *nw,
                                               const float *inv_freq, int pos, float eps,
                                               int interleaved) {
    constexpr int DPL = HD / 32;
    const int lane = threadIdx.x & 31;
    if (nw) head_rmsnorm<DPL>(v, nw, HD, eps);
#pragma unroll
    for (int e = 0; e < DPL; e++) buf[lane * DPL + e] = v[e];
    __syncwarp();
#pragma unroll
    for (int e = 0; e < DPL; e++) {
        int fi, partner;
        float sign;
        rope_pair(lane * DPL + e, HD, interleaved, &fi, &partner, &sign);
        float s, c;
        sincosf((float)pos * inv_freq[fi], &s, &c);
        v[e] = v[e] * c + sign * buf[partner] * s;
    }
    __syncwarp();
}

/* Shared memory of the attention phase. */
template <int HD> struct d1_attn_smem {
    float qs[D1_MAX_GROUP][HD];      /* scaled, rotated queries */
    float sc[D1_MAX_GROUP][D1_TILE]; /* scores, then probabilities, of a key tile */
    float red[D1_MAX_GROUP][HD];     /* sum of the warps' outputs */
    float m[D1_MAX_GROUP], l[D1_MAX_GROUP], alpha[D1_MAX_GROUP];
    float kbuf[D1_WARPS][HD]; /* RoPE scratch, a row per warp */
    int is_last;
    alignas(16) bf16 vs[D1_TILE][HD]; /* the value rows of a key tile */
};

/* Attention of the one token over its context for (kv head, split) = this block's
 * work item (blocks without one go on to the barrier). The
 * split holding the newest key also computes that key and value (k norm, RoPE)
 * and writes them to the cache before reading it. Splits: the context cut into
 * S = min(max_splits, ceil(keys / D1_TILE)) parts; with S > 1 the last split block
 * to finish (atomic counter) combines them. */
template <int HD>
static __device__ void d1_attention(const d1_params &p, const d1_layer &L, int layer,
                                    d1_attn_smem<HD> &sm) {
    constexpr int DPL = HD / 32;
    const kv_geom g = p.g;
    const int G = g.n_heads / g.n_kv, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int pos = *p.pos, len = pos + 1;
    const int lo = p.window > 0 && len > p.window ? len - p.window : 0;
    const int S = max(1, min(p.max_splits, (len - lo + D1_TILE - 1) / D1_TILE));
    if ((int)blockIdx.x >= g.n_kv * S) return;
    const int kvh = blockIdx.x / S, split = blockIdx.x % S;
    const int chunk = (len - lo + S - 1) / S;
    const int k0 = lo + split * chunk, k1 = min(len, k0 + chunk);
    const bool newest = k0 < len && k1 == len; /* this split holds key pos */
    const int slot = *p.slot;
    const float *qkv = p.qkv;
    const int kcol = g.n_heads * HD + kvh * HD, vcol = kcol + g.n_kv * HD;

    for (int e = tid; e < D1_MAX_GROUP * HD; e += D1_THREADS) (&sm.red[0][0])[e] = 0.0f;
    /* tasks: the G query heads, then (newest split only) k and v */
    for (int task = warp; task < G + (newest ? 2 : 0); task += D1_WARPS) {
        const int col = task < G ? (kvh * G + task) * HD : task == G ? kcol : vcol;
        float v[DPL];
#pragma unroll
        for (int e = 0; e < DPL; e++) {
            const int c = col + lane * DPL + e;
            v[e] = __ldcg(qkv + c) + (L.bqkv ? L.bqkv[c] : 0.0f);
        }
        if (task == G + 1) { /* v */
            bf16 *dst = p.kv + kv_offset(g, layer, 1, kvh, slot / g.block_size, slot % g.block_size);
#pragma unroll
            for (int e = 0; e < DPL; e++) dst[lane * DPL + e] = f2bf(v[e]);
            continue;
        }
        d1_rope<HD>(v, sm.kbuf[warp], task < G ? L.q_norm : L.k_norm, p.inv_freq, pos, p.eps,
                    p.interleaved);
        if (task < G) {
#pragma unroll
            for (int e = 0; e < DPL; e++) sm.qs[task][lane * DPL + e] = v[e] * p.scale;
        } else {
            bf16 *dst = p.kv + kv_offset(g, layer, 0, kvh, slot / g.block_size, slot % g.block_size);
#pragma unroll
            for (int e = 0; e < DPL; e++) dst[lane * DPL + e] = f2bf(v[e]);
        }
    }
    if (tid < D1_MAX_GROUP) {
        sm.m[tid] = -INFINITY;
        sm.l[tid] = 0.0f;
    }
    __syncthreads(); /* queries in shared memory, the newest key and value in the cache */

    float acc[D1_MAX_GROUP][DPL];
#pragma unroll
    for (int r = 0; r < D1_MAX_GROUP; r++)
#pragma unroll
        for (int e = 0; e < DPL; e++) acc[r][e] = 0.0f;
    const int32_t *bt = p.block_table;
    for (int base = k0; base < k1; base += D1_TILE) {
        const int n = min(D1_TILE, k1 - base);
        if (tid < n) { /* key row to registers, value row to shared memory, all in flight */
            const int key = base + tid, kb = bt[key / g.block_size], ks = key % g.block_size;
            const uint4 *kr = reinterpret_cast<const uint4 *>(p.kv + kv_offset(g, layer, 0, kvh, kb, ks));
            const uint4 *vr = reinterpret_cast<const uint4 *>(p.kv + kv_offset(g, layer, 1, kvh, kb, ks));
#pragma unroll
            for (int c = 0; c < HD / 8; c++) cp_async16(&sm.vs[tid][c * 8], vr + c);
            asm volatile("cp.async.commit_group;" ::: "memory");
            float dot[D1_MAX_GROUP];
#pragma unroll
            for (int r = 0; r < D1_MAX_GROUP; r++) dot[r] = 0.0f;
            constexpr int KC = HD / 8 < 16 ? HD / 8 : 16; /* K loads in flight */
#pragma unroll
            for (int c0 = 0; c0 < HD / 8; c0 += KC) {
                uint4 k8[KC];
#pragma unroll
                for (int c = 0; c < KC; c++) k8[c] = __ldcg(kr + c0 + c);
#pragma unroll
                for (int c = 0; c < KC; c++) {
                    const float kf[8] = {bf_lo(k8[c].x), bf_hi(k8[c].x), bf_lo(k8[c].y),
                                         bf_hi(k8[c].y), bf_lo(k8[c].z), bf_hi(k8[c].z),
                                         bf_lo(k8[c].w), bf_hi(k8[c].w)};
#pragma unroll
                    for (int r = 0; r < D1_MAX_GROUP; r++) {
                        if (r < G) {
#pragma unroll
                            for (int e = 0; e < 8; e++)
                                dot[r] = fmaf(sm.qs[r][(c0 + c) * 8 + e], kf[e], dot[r]);
                        }
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < D1_MAX_GROUP; r++)
                if (r < G) sm.sc[r][tid] = dot[r];
        }
        __syncthreads();
        if (warp < G) { /* warp r: online softmax of row r over this tile */
            const int r = warp;
            float mt = -INFINITY;
            for (int j = lane; j < n; j += 32) mt = fmaxf(mt, sm.sc[r][j]);
            for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
            const float mo = sm.m[r], nm = fmaxf(mo, mt);
            float ps = 0.0f;
            for (int j = lane; j < n; j += 32) {
                const float pr = expf(sm.sc[r][j] - nm);
                sm.sc[r][j] = pr;
                ps += pr;
            }
            ps = warp_sum(ps);
            if (lane == 0) {
                const float a = expf(mo - nm); /* 0 on the first tile */
                sm.alpha[r] = a;
                sm.l[r] = sm.l[r] * a + ps;
                sm.m[r] = nm;
            }
        }
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncthreads(); /* probabilities and value rows ready */
        /* warp w: keys w, w+8, ... of the tile, dims lane*DPL .. of every row */
#pragma unroll
        for (int r = 0; r < D1_MAX_GROUP; r++)
            if (r < G) {
                const float a = sm.alpha[r];
#pragma unroll
                for (int e = 0; e < DPL; e++) acc[r][e] *= a;
            }
#pragma unroll 4
        for (int j = warp; j < n; j += D1_WARPS) {
            const bf16 *vr = &sm.vs[j][lane * DPL];
            float vf[DPL];
            if constexpr (DPL == 2) {
                const unsigned v2 = *reinterpret_cast<const unsigned *>(vr);
                vf[0] = bf_lo(v2); vf[1] = bf_hi(v2);
            } else if constexpr (DPL == 4) {
                const uint2 v4 = *reinterpret_cast<const uint2 *>(vr);
                vf[0] = bf_lo(v4.x); vf[1] = bf_hi(v4.x); vf[2] = bf_lo(v4.y); vf[3] = bf_hi(v4.y);
            } else {
                const uint4 v8 = *reinterpret_cast<const uint4 *>(vr);
                vf[0] = bf_lo(v8.x); vf[1] = bf_hi(v8.x); vf[2] = bf_lo(v8.y); vf[3] = bf_hi(v8.y);
                vf[4] = bf_lo(v8.z); vf[5] = bf_hi(v8.z); vf[6] = bf_lo(v8.w); vf[7] = bf_hi(v8.w);
            }
#pragma unroll
            for (int r = 0; r < D1_MAX_GROUP; r++)
                if (r < G) {
                    const float pr = sm.sc[r][j];
#pragma unroll
                    for (int e = 0; e < DPL; e++) acc[r][e] = fmaf(pr, vf[e], acc[r][e]);
                }
        }
        __syncthreads(); /* sc, alpha and vs free for the next tile */
    }
#pragma unroll
    for (int r = 0; r < D1_MAX_GROUP; r++)
        if (r < G)
#pragma unroll
            for (int e = 0; e < DPL; e++) atomicAdd(&sm.red[r][lane * DPL + e], acc[r][e]);
    __syncthreads();
    if (S == 1) {
        for (int e = tid; e < G * HD; e += D1_THREADS) {
            const int r = e / HD, dd = e % HD;
            p.attn[(size_t)(kvh * G + r) * HD + dd] =
                f2bf(sm.l[r] > 0.0f ? sm.red[r][dd] / sm.l[r] : 0.0f);
        }
        return;
    }
    const size_t pb = ((size_t)kvh * p.max_splits + split) * G;
    for (int e = tid; e < G * HD; e += D1_THREADS) p.part_o[pb * HD + e] = (&sm.red[0][0])[e];
    if (tid < G) {
        p.part_ml[(pb + tid) * 2] = sm.m[tid];
        p.part_ml[(pb + tid) * 2 + 1] = sm.l[tid];
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        const int prev = atomicAdd(&p.done[kvh], 1);
        sm.is_last = prev == S - 1;
        if (sm.is_last) p.done[kvh] = 0;
    }
    __syncthreads();
    if (!sm.is_last) return;
    __threadfence();
    for (int e = tid; e < G * HD; e += D1_THREADS) {
        const int r = e / HD;
        float M = -INFINITY;
        for (int s = 0; s < S; s++) {
            const size_t q = ((size_t)kvh * p.max_splits + s) * G + r;
            if (__ldcg(&p.part_ml[q * 2 + 1]) > 0.0f) M = fmaxf(M, __ldcg(&p.part_ml[q * 2]));
        }
        float num = 0.0f, den = 0.0f;
        for (int s = 0; s < S; s++) {
            const size_t q = ((size_t)kvh * p.max_splits + s) * G + r;
            const float l = __ldcg(&p.part_ml[q * 2 + 1]);
            if (l > 0.0f) {
                const float w = expf(__ldcg(&p.part_ml[q * 2]) - M);
                num += w * __ldcg(&p.part_o[q * HD + e % HD]);
                den += w * l;
            }
        }
        p.attn[(size_t)kvh * G * HD + e] = f2bf(den > 0.0f ? num / den : 0.0f);
    }
}

// ----------------------------------------------------------------------------
// CUDA kernel

template <int HD>
__global__ void __launch_bounds__(D1_THREADS, 1) decode1_kernel(const d1_params p) {
    extern __shared__ uint4 d1_smem[];
    bf16 *xs = reinterpret_cast<bf16 *>(d1_smem);
    d1_attn_smem<HD> &asm_ = *reinterpret_cast<d1_attn_smem<HD> *>(d1_smem);
    uint4 w[D1_BATCH];
    int k = 0; /* barriers passed */
    if (p.trace && blockIdx.x == 0 && threadIdx.x == 0) p.trace[0] = globaltimer();
    const bf16 *emb = p.tok_embd + (size_t)*p.token * p.d;
    if (blockIdx.x == 0)
        for (int i = threadIdx.x; i < p.d; i += D1_THREADS) p.x[i] = bf2f(emb[i]);
    for (int l = 0; l < p.n_layers; l++) {
        const d1_layer &L = p.layers[l];
        d1_mv m = mv_plan(L.wqkv, p.qkv_rows, p.d, 1);
        mv_load(m, w, 0);
        if (l > 0) d1_sync(p.bar, p.trace, k);
        stage_norm(xs, l > 0 ? p.x : NULL, emb, L.attn_norm, p.d, p.eps);
        mv_run<MV_STORE>(m, w, d1_smem, p.qkv, NULL);
        d1_sync(p.bar, p.trace, k);

        d1_attention<HD>(p, L, l, asm_);
        m = mv_plan(L.wo, p.d, p.qd, 1);
        mv_load(m, w, 0);
        float y0 = mv_first_y(m, p.x); /* x last written two barriers ago */
        d1_sync(p.bar, p.trace, k);

        stage_copy(d1_smem, p.attn, p.qd);
        mv_run<MV_ADD>(m, w, d1_smem, p.x, NULL, y0);
        m = mv_plan(L.wgu, 2 * p.d_ff, p.d, 2);
        mv_load(m, w, 0);
        d1_sync(p.bar, p.trace, k);

        stage_norm(xs, p.x, NULL, L.ffn_norm, p.d, p.eps);
        mv_run<MV_SILU>(m, w, d1_smem, NULL, p.act);
        m = mv_plan(L.wdown, p.d, p.d_ff, 1);
        mv_load(m, w, 0);
        y0 = mv_first_y(m, p.x); /* x last written before the previous barrier */
        d1_sync(p.bar, p.trace, k);

        stage_copy(d1_smem, p.act, p.d_ff);
        mv_run<MV_ADD>(m, w, d1_smem, p.x, NULL, y0);
    }
    d1_mv m = mv_plan(p.lm_head, p.vocab, p.d, 1);
    mv_load(m, w, 0);
    d1_sync(p.bar, p.trace, k);
    stage_norm(xs, p.x, NULL, p.out_norm, p.d, p.eps);
    mv_run<MV_STORE>(m, w, d1_smem, p.logits, NULL);
    if (p.trace) {
        __syncthreads();
        if (blockIdx.x == 0 && threadIdx.x == 0) p.trace[1 + 2 * k] = globaltimer();
    }
}

// ----------------------------------------------------------------------------
// launchers

/* Dynamic shared memory of decode1_kernel<HD>: the staged input vector or the
 * attention phase's buffers, whichever is larger. */
template <int HD> static size_t decode1_smem(int widest) {
    const size_t xs = (size_t)widest * sizeof(bf16);
    return xs > sizeof(d1_attn_smem<HD>) ? xs : sizeof(d1_attn_smem<HD>);
}

lpx_status decode1_init(int hd, int widest, int *blocks_per_sm) {
    *blocks_per_sm = 0;
    size_t smem = 0;
    cudaError_t e = cudaErrorInvalidValue;
#define D1_INIT(HD)                                                                                \
    if (hd == HD) {                                                                                \
        smem = decode1_smem<HD>(widest);                                                           \
        if (smem > 200 * 1024) return LPX_OK;                                                      \
        LPX_CUDA_TRY(cudaFuncSetAttribute(decode1_kernel<HD>,                                      \
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)); \
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, decode1_kernel<HD>,       \
                                                          D1_THREADS, smem);                       \
    }
    D1_INIT(64) D1_INIT(128) D1_INIT(256)
#undef D1_INIT
    LPX_CUDA_TRY(e);
    return LPX_OK;
}

lpx_status decode1(const d1_params *p, int hd, int widest, int n_blocks, cudaStream_t st) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(n_blocks);
    cfg.blockDim = dim3(D1_THREADS);
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cudaError_t e = cudaErrorInvalidValue;
#define D1_LAUNCH(HD)                                                                              \
    if (hd == HD) {                                                                                \
        cfg.dynamicSmemBytes = decode1_smem<HD>(widest);                                           \
        e = cudaLaunchKernelEx(&cfg, decode1_kernel<HD>, *p);                                      \
    }
    D1_LAUNCH(64) D1_LAUNCH(128) D1_LAUNCH(256)
#undef D1_LAUNCH
    LPX_CUDA_TRY(e);
    return LPX_OK;
}

/* The CUDA backend: weights uploaded once as bf16 (q/k/v merged, gate/up
 * interleaved), a bf16 paged KV cache, and one step = a flat sequence of kernel
 * launches (forward_layers + forward_logits). Decode steps (one token per
 * sequence) replay a CUDA graph captured per batch-size bucket 1, 2, 4, ... so the
 * host issues three calls per step: copy inputs, launch graph, copy logits. */
#include "attention.cuh"
#include "common.cuh"
#include "decode1.h"
#include "elementwise.cuh"
#include "flash_prefill.cuh"
#include "matmul.cuh"
#include "qkv_attn.cuh"
#include "sampling.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend/backend.h"
#include "base/checked.h"
#include "sample/sampler.h"
#include "model/model.h"
}

#ifndef LPX_CUDA_ARCHS
#define LPX_CUDA_ARCHS "unknown"
#endif

#define MAX_BUCKETS 10 /* decode graphs for 1, 2, 4, ..., 512 sequences */
#define N_SLOTS 2      /* steps in flight at most (step_begin/step_end) */

typedef struct cuda_layer {
    const float *attn_norm, *ffn_norm; /* (d_model) */
    const bf16 *wqkv;   /* (n_heads*hd + 2*n_kv*hd, d_model): q rows, then k, then v */
    const float *bqkv;  /* (same rows) or NULL */
    const float *q_norm, *k_norm; /* (hd) or NULL */
    const bf16 *wo;     /* (d_model, n_heads*hd) */
    const bf16 *wgu;    /* (2*d_ff, d_model): row 2j = gate j, row 2j+1 = up j */
    const bf16 *wdown;  /* (d_model, d_ff) */
} cuda_layer;

typedef struct cuda_backend {
    lpx_backend base;
    lpx_config cfg;
    int device;
    cudaStream_t stream;
    matmul_ctx mc;
    void *blas_ws;
    void **allocs;
    int n_allocs, cap_allocs;
    size_t mem_used;

    cuda_layer *layers; /* [n_layers], host array of device pointers */
    const bf16 *tok_embd, *lm_head; /* (vocab, d_model) */
    const float *out_norm;          /* (d_model) */
    const float *inv_freq;          /* (hd/2), scaling applied */
    bf16 *kv;                       /* (n_blocks, block_stride) */
    kv_geom geom;
    int qkv_rows;

    int tok_cap;    /* most tokens per step */
    int seq_cap;    /* most sequences per step */
    int logit_cap;  /* logits rows computed per pass */
    int max_blocks; /* block-table row stride on the device */
    /* step inputs, int32, same layout on host (pinned) and device:
     * tokens | positions | slots | tok_seq | logit_rows (tok_cap each) | prefill
     * attention tiles (2*tok_cap: flash_tiles makes at most 1.125 per token) |
     * block table. The current slot's (see slots below). */
    int32_t *in_host, *in_dev;

    float *x;       /* (tok_cap, d_model) residual stream */
    bf16 *h;        /* (tok_cap, d_model) normalised */
    float *qkv;     /* (tok_cap, qkv_rows) */
    float *q;       /* (tok_cap, n_heads*hd) after rope */
    bf16 *attn;     /* (tok_cap, n_heads*hd) */
    float *gu;      /* (tok_cap, 2*d_ff) GEMM path only */
    bf16 *act;      /* (tok_cap, d_ff) */
    float *part_o;  /* (T, n_heads, S, hd) */
    float *part_ml; /* (T, n_heads, S, 2) */
    int *done;      /* (tok_cap, n_kv) split counters of the attention kernel */
    float *logits;  /* (logit_cap, vocab) */

    /* steps with sample (sampling.cuh): rows and token counts in, token ids out, pinned
     * on the host; allocated at the first call. srow_host, srow_dev and tok_host
     * are the current slot's. tok_dev keeps the last sampled step's tokens until
     * the next one's sampler: the next step reads its fed tokens there first. */
    lpx_sample_row *srow_host, *srow_dev;  /* (tok_cap) */
    int32_t *tok_host, *tok_dev;           /* (tok_cap) */
    float *amax_v;                         /* (tok_cap, AM_BLOCKS) argmax parts */
    int *amax_i;                           /* (tok_cap, AM_BLOCKS) */
    lpx_token_count *seen_host, *seen_dev; /* (seen_cap), grown on demand */
    int seen_cap;

    bool use_graphs;
    int n_buckets;
    /* Two slots, so that step N+1 is prepared while step N runs (step_begin): each
     * has its own inputs (pinned and device), sampling rows and token buffer, and
     * its own graphs, which captured those addresses. A step without sample (it runs
     * alone) uses the current slot; one with sample moves to the other one. The
     * inputs go up on the side stream `up` while the step before still runs. */
    int cur;
    int32_t *slot_in_host[N_SLOTS], *slot_in_dev[N_SLOTS];
    lpx_sample_row *slot_srow_host[N_SLOTS], *slot_srow_dev[N_SLOTS];
    int32_t *slot_tok_host[N_SLOTS];
    cudaStream_t up;
    cudaEvent_t up_done[N_SLOTS], step_done[N_SLOTS];
    cudaGraphExec_t graphs[N_SLOTS][MAX_BUCKETS];
    /* the same steps with the device sampler and the token copy to tok_host inside
     * (steps with sample): one launch a step; dropped when seen_dev moves (grow_seen) */
    cudaGraphExec_t graphs_s[N_SLOTS][MAX_BUCKETS];
    /* steps in flight: n_flight of them, the oldest in slot `oldest`; what the
     * end of each needs (flight[slot]); feed_rows: the logits rows of the last
     * step_begin's step, which the next step_begin may feed from (-1: none) */
    int n_flight, oldest, feed_rows;
    struct {
        int rows, k;
        bool decode, d1;
        int32_t *out; /* where step_end copies the step's tokens; NULL: a logits step */
    } flight[N_SLOTS];
    bool tracing; /* a trace buffer is on: step_begin waits for its step */

    /* the persistent batch-1 decode kernel (decode1.cu); d1_blocks 0: not used */
    int d1_blocks;
    int d1_widest;  /* longest vector staged in shared memory (d, n_heads*hd, d_ff) */
    d1_params d1;
    int32_t *d1_in_host, *d1_in_dev; /* token, position, slot, block table row (pinned / device) */
    /* LPX_CUDA_D1_TRACE: per-phase times of block 0 summed over steps (ns) */
    unsigned long long *d1_trace_host;
    double d1_phase_ns[7]; /* work of phases qkv, attention, o, gate/up, down; barrier wait; lm_head */
    int d1_traced;

    /* profiling knobs (docs/PERF.md, "Where a batch-1 step goes"): LPX_CUDA_SKIP
     * leaves ops out of the step (wrong output, for timing differences only);
     * LPX_CUDA_TIMING=1 times each decode graph on the GPU with events */
    unsigned skip;
    cudaEvent_t ev[N_SLOTS][2];
    double graph_ms;
    int graph_steps;
    /* LPX_CUDA_ATTN_TRACE=1: phase marks of the decode attention (AD_TRACE a layer) */
    long long *attn_trace, *attn_trace_host;
    double attn_phase[AD_TRACE];
    int attn_traced;
    /* batch-1 decode: q/k/v projection and attention in one cluster kernel
     * (qkv_attn.cuh); qa.cluster 0: the two-kernel path */
    qa_plan qa;
    /* LPX_CUDA_MV_TRACE=1: the batch-1 graph's projections (matmul.cuh, MV_TRACE a
     * launch); per kind (qkv, o, gate/up, down): cycles before the wait, x staging,
     * weights wait, rest; ns wait to last block end; ns release after the predecessor */
    long long *mv_trace_host;
    double mv_phase[4][6];
    int mv_traced;
    /* LPX_CUDA_BLK_TRACE=layer: per-block marks of that layer's batch-1 kernels
     * (fused, o, gate/up, down: BT_BLOCKS x BT_MARKS each, common.cuh), written as
     * CSV to LPX_CUDA_BLK_TRACE_FILE (default stderr) at the 64th traced step */
    long long *bt_dev, *bt_host;
    int bt_layer, bt_steps;
} cuda_backend;

enum { SK_EMBED = 1, SK_QKV = 2, SK_ROPE = 4, SK_ATTN = 8, SK_O = 16, SK_GU = 32, SK_DOWN = 64,
       SK_HEAD = 128, SK_SAMPLE = 256 };

/* LPX_CUDA_SKIP: a comma list of embed, qkv, rope, attn, o, gu, down, head, sample
 * (rope: prefill steps only; decode attention does its own). */
static unsigned parse_skip(const char *env) {
    static const char *names[] = {"embed", "qkv", "rope", "attn", "o", "gu", "down", "head", "sample"};
    unsigned m = 0;
    for (const char *p = env; p && *p;) {
        const size_t n = strcspn(p, ",");
        for (unsigned i = 0; i < sizeof names / sizeof *names; i++)
            if (strlen(names[i]) == n && !strncmp(p, names[i], n)) m |= 1u << i;
        p += n + (p[n] == ',');
    }
    return m;
}

/* --- host-side conversion ------------------------------------------------ */

static uint16_t f2bf_host(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static lpx_status check_shape(const lpx_tensor *t, const char *what, int layer, int64_t rows,
                              int64_t cols) {
    if (!t) return lpx_errorf(LPX_ERR_FORMAT, "cuda: layer %d: tensor %s missing", layer, what);
    if (lpx_tensor_rows(t) != rows || lpx_tensor_cols(t) != cols)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "cuda: tensor %s: expected shape (%lld, %lld), found (%lld, %lld)",
                          t->name, (long long)rows, (long long)cols,
                          (long long)lpx_tensor_rows(t), (long long)lpx_tensor_cols(t));
    return LPX_OK;
}

/* Writes row r of t, as bf16, to dst row (row0 + r*step) (rows of t's width). */
static void convert_rows(const lpx_tensor *t, uint16_t *dst, int64_t row0, int64_t step,
                         float *tmp) {
    const int64_t rows = lpx_tensor_rows(t), cols = lpx_tensor_cols(t);
    size_t rb = 0;
    lpx_dtype_row_bytes(t->type, cols, &rb); /* validated by the loader */
    for (int64_t r = 0; r < rows; r++) {
        lpx_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, tmp, cols);
        uint16_t *o = dst + (size_t)(row0 + r * step) * cols;
        for (int64_t c = 0; c < cols; c++) o[c] = f2bf_host(tmp[c]);
    }
}

/* --- device allocation ----------------------------------------------------- */

static lpx_status dalloc(cuda_backend *b, void **p, size_t bytes) {
    if (b->n_allocs == b->cap_allocs) {
        const int cap = b->cap_allocs ? 2 * b->cap_allocs : 64;
        void **a = (void **)realloc(b->allocs, sizeof(void *) * cap);
        if (!a) return lpx_errorf(LPX_ERR_NOMEM, "cuda: out of host memory");
        b->allocs = a;
        b->cap_allocs = cap;
    }
    LPX_CUDA_TRY(cudaMalloc(p, bytes ? bytes : 16));
    b->allocs[b->n_allocs++] = *p;
    b->mem_used += bytes;
    return LPX_OK;
}

/* Uploads the tensors ts[0..n) stacked (or, with interleave, row-interleaved) as
 * one bf16 matrix of width cols. */
static lpx_status upload_matrix(cuda_backend *b, const bf16 **out, const lpx_tensor *const *ts,
                                int n, bool interleave, int64_t cols, uint16_t *stage,
                                float *tmp) {
    int64_t rows = 0;
    for (int i = 0; i < n; i++) {
        if (interleave)
            convert_rows(ts[i], stage, i, n, tmp);
        else
            convert_rows(ts[i], stage, rows, 1, tmp);
        rows += lpx_tensor_rows(ts[i]);
    }
    void *d;
    const size_t bytes = (size_t)rows * cols * sizeof(bf16);
    LPX_TRY(dalloc(b, &d, bytes));
    LPX_CUDA_TRY(cudaMemcpy(d, stage, bytes, cudaMemcpyHostToDevice));
    *out = (const bf16 *)d;
    return LPX_OK;
}

/* Uploads vectors ts[0..n) concatenated as float (a norm weight or merged bias). */
static lpx_status upload_vector(cuda_backend *b, const float **out, const lpx_tensor *const *ts,
                                int n, float *tmp) {
    int64_t len = 0;
    for (int i = 0; i < n; i++) {
        const int64_t e = lpx_tensor_cols(ts[i]);
        if (lpx_tensor_rows(ts[i]) != 1)
            return lpx_errorf(LPX_ERR_FORMAT, "cuda: tensor %s: expected a vector", ts[i]->name);
        lpx_dequantize_row(ts[i]->type, ts[i]->data, tmp + len, e);
        len += e;
    }
    void *d;
    LPX_TRY(dalloc(b, &d, (size_t)len * sizeof(float)));
    LPX_CUDA_TRY(cudaMemcpy(d, tmp, (size_t)len * sizeof(float), cudaMemcpyHostToDevice));
    *out = (const float *)d;
    return LPX_OK;
}

/* inv_freq[i] = theta^(-2i/hd), computed in float as transformers does, then scaled. */
static void rope_inv_freq(const lpx_config *c, float *f) {
    const int half = c->head_dim / 2;
    for (int i = 0; i < half; i++) {
        float inv = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->head_dim);
        if (c->rope_scaling == LPX_ROPE_LINEAR) {
            inv /= c->rope_factor;
        } else if (c->rope_scaling == LPX_ROPE_LLAMA3) {
            const float old = (float)c->rope_original_max_pos;
            const float low_wl = old / c->rope_low_freq_factor;
            const float high_wl = old / c->rope_high_freq_factor;
            const float wl = 2.0f * (float)M_PI / inv;
            if (wl > low_wl) {
                inv /= c->rope_factor;
            } else if (wl >= high_wl) {
                const float smooth = (old / wl - c->rope_low_freq_factor) /
                                     (c->rope_high_freq_factor - c->rope_low_freq_factor);
                inv = (1.0f - smooth) * inv / c->rope_factor + smooth * inv;
            }
        }
        f[i] = inv;
    }
}

/* --- device checks ----------------------------------------------------------- */

static lpx_status pick_device(int dev, cudaDeviceProp *prop) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return lpx_errorf(LPX_ERR_DEVICE, "cuda: no usable GPU: cudaGetDeviceCount: %s (%s)",
                          cudaGetErrorName(e), cudaGetErrorString(e));
    if (n == 0) return lpx_errorf(LPX_ERR_DEVICE, "cuda: no CUDA GPU found");
    if (dev < 0 || dev >= n)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: device %d requested, %d present", dev, n);
    LPX_CUDA_TRY(cudaSetDevice(dev));
    LPX_CUDA_TRY(cudaGetDeviceProperties(prop, dev));
    cudaFuncAttributes fa;
    e = cudaFuncGetAttributes(&fa, embed_kernel);
    if (e != cudaSuccess)
        return lpx_errorf(LPX_ERR_UNSUPPORTED,
                          "cuda: %s has compute capability %d.%d but this lpx has GPU code only "
                          "for sm_%s (LPX_CUDA_ARCHS); rebuild with "
                          "-DCMAKE_CUDA_ARCHITECTURES=%d%d (%s)",
                          prop->name, prop->major, prop->minor, LPX_CUDA_ARCHS, prop->major,
                          prop->minor, cudaGetErrorString(e));
    return LPX_OK;
}

/* --- the step ------------------------------------------------------------- */

enum { IN_TOK = 0, IN_POS = 1, IN_SLOT = 2, IN_SEQ = 3, IN_ROWS = 4, IN_TILES = 5, IN_BT = 7 };
static int32_t *in_part(const cuda_backend *b, int32_t *base, int part) {
    return base + (size_t)part * b->tok_cap;
}

/* Layer l's q/k/v projection and attention as separate kernels (every step but
 * the batch-1 decode that qkv_attn.cuh fuses). */
static lpx_status qkv_and_attention(cuda_backend *b, int l, int T, int n_tiles, int S) {
    const lpx_config *c = &b->cfg;
    const cuda_layer *L = &b->layers[l];
    const float eps = c->rms_norm_eps;
    const unsigned sk = b->skip;
    cudaStream_t st = b->stream;
    int32_t *in = b->in_dev;
    const int d = c->d_model;
    if (!(sk & SK_QKV))
        LPX_TRY(matmul(&b->mc, b->qkv, NULL, NULL, L->wqkv, b->x, L->attn_norm, b->h, eps, T,
                       b->qkv_rows, d, 0, st));
    /* decode: q/k norms and RoPE are fused into the attention kernel */
    if (n_tiles > 0 && !(sk & SK_ROPE))
        LPX_TRY(qkv_rope(b->q, b->kv, b->qkv, L->bqkv, L->q_norm, L->k_norm, b->inv_freq,
                         in_part(b, in, IN_POS), in_part(b, in, IN_SLOT), T, b->geom, l,
                         c->rms_norm_eps, c->rope_interleaved, st));
    if (sk & SK_ATTN)
        ;
    else if (n_tiles > 0)
        LPX_TRY(flash_prefill(b->attn, b->q, b->kv, in_part(b, in, IN_TILES), n_tiles,
                              in_part(b, in, IN_SEQ), in_part(b, in, IN_POS),
                              in_part(b, in, IN_BT), b->max_blocks, b->geom, l,
                              c->sliding_window, st));
    else
        LPX_TRY(attention(b->attn, b->part_o, b->part_ml, b->done, b->kv, b->qkv, L->bqkv,
                          L->q_norm, L->k_norm, b->inv_freq, T, in_part(b, in, IN_SEQ),
                          in_part(b, in, IN_POS), in_part(b, in, IN_SLOT),
                          in_part(b, in, IN_BT), b->max_blocks, S, b->geom, l,
                          c->rms_norm_eps, c->rope_interleaved, c->sliding_window,
                          b->attn_trace, st));
    return LPX_OK;
}

/* LPX_CUDA_BLK_TRACE: the per-block marks of kernel k (0 fused, 1 o, 2 gate/up, 3
 * down) of layer l in a one-token step, or NULL. */
static long long *bt_of(const cuda_backend *b, int T, int l, int k) {
    if (!b->bt_dev || T != 1 || l != b->bt_layer) return NULL;
    return b->bt_dev + (size_t)k * BT_BLOCKS * BT_MARKS;
}

/* Everything up to the final norm, for T tokens; attention by the flash prefill
 * kernel over n_tiles query tiles, or with n_tiles 0 by the decode kernel (one
 * token per sequence). */
static lpx_status forward_layers(cuda_backend *b, int T, int n_tiles) {
    const lpx_config *c = &b->cfg;
    cudaStream_t st = b->stream;
    const int d = c->d_model, qd = c->n_heads * c->head_dim;
    int32_t *in = b->in_dev;
    const int S = attn_splits(T, c->n_kv_heads, b->mc.n_sms);
    const unsigned sk = b->skip;
    if (!(sk & SK_EMBED))
        LPX_TRY(embed(b->x, b->tok_embd, in_part(b, in, IN_TOK), b->tok_dev, T, d, st));
    for (int l = 0; l < c->n_layers; l++) {
        const cuda_layer *L = &b->layers[l];
        const float eps = c->rms_norm_eps;
        const bool fused = T == 1 && n_tiles == 0 && b->qa.cluster && !(sk & (SK_QKV | SK_ATTN));
        if (fused) {
            LPX_TRY(qkv_attn(&b->qa, b->attn, b->kv, L->wqkv, b->x, L->attn_norm, L->bqkv,
                             L->q_norm, L->k_norm, b->inv_freq, in_part(b, in, IN_SEQ),
                             in_part(b, in, IN_POS), in_part(b, in, IN_SLOT),
                             in_part(b, in, IN_BT), b->max_blocks, b->geom, l, d, eps,
                             c->rope_interleaved, c->sliding_window,
                             g_early & EARLY_F  ? QA_NEXT_START
                             : g_late & EARLY_F ? QA_NEXT_ROWS
                                                : QA_NEXT_WAIT,
                             b->attn_trace, bt_of(b, T, l, 0), st));
        } else {
            LPX_TRY(qkv_and_attention(b, l, T, n_tiles, S));
        }
        /* Which kernels let the next one launch at their start (g_early): by default
         * o, so that gate/up's 12 MB of weights (Qwen3-0.6B) stream during the
         * attention as well (gate/up reads only weights before its wait), and down,
         * so that the next layer's fused kernel has done its setup (2.7-3.7 µs
         * under the weight streams) when down ends (docs/PERF.md row 32). A kernel
         * may read its residual x before its wait (MM_ADD_EARLY) only if x's last
         * writer has completed once it can start: o's x is down's (or embed's),
         * complete when the kernel before o launched o after its own wait; down's x
         * is o's, complete when gate/up launched down after its wait. */
        const unsigned E = g_early, La = g_late;
        const int o_add = fused && (E & EARLY_F) ? MM_ADD : MM_ADD_EARLY;
        const int down_add = E & EARLY_G ? MM_ADD : MM_ADD_EARLY;
        /* batch 1: gate/up's weight pieces two at a time (MM_PACE; docs/PERF.md row 33) */
        const int gu_pace = T == 1 ? MM_PACE(g_pace) : 0;
        /* batch 1: gate/up one block an SM (MM_SOLO; docs/PERF.md row 34) */
        const unsigned So = T == 1 ? g_solo : 0;
        g_bt_next = bt_of(b, T, l, 1);
        if (!(sk & SK_O))
            LPX_TRY(matmul(&b->mc, b->x, NULL, NULL, L->wo, b->attn, NULL, NULL, eps, T, d, qd,
                           o_add | (So & EARLY_O ? MM_SOLO : 0) |
                               (E & EARLY_O ? MM_NEXT_EARLY : La & EARLY_O ? MM_NEXT_LATE : 0),
                           st));
        g_bt_next = bt_of(b, T, l, 2);
        if (!(sk & SK_GU))
            LPX_TRY(matmul(&b->mc, NULL, b->act, b->gu, L->wgu, b->x, L->ffn_norm, b->h, eps, T,
                           2 * c->d_ff, d,
                           gu_pace | (So & EARLY_G ? MM_SOLO : 0) |
                               (E & EARLY_G ? MM_NEXT_EARLY : La & EARLY_G ? MM_NEXT_LATE : 0),
                           st));
        g_bt_next = bt_of(b, T, l, 3);
        if (!(sk & SK_DOWN))
            LPX_TRY(matmul(&b->mc, b->x, NULL, NULL, L->wdown, b->act, NULL, NULL, eps, T, d,
                           c->d_ff,
                           down_add | (So & EARLY_D ? MM_SOLO : 0) |
                               (E & EARLY_D ? MM_NEXT_EARLY : La & EARLY_D ? MM_NEXT_LATE : 0),
                           st));
        g_bt_next = NULL; /* a skipped or non-TMA launch leaves it unconsumed */
    }
    return LPX_OK;
}

/* Logits (n, vocab) into b->logits for the token rows listed at rows (device). */
static lpx_status forward_logits(cuda_backend *b, const int32_t *rows, int n) {
    const lpx_config *c = &b->cfg;
    if (b->skip & SK_HEAD) return LPX_OK;
    LPX_TRY(rmsnorm(b->h, b->x, b->out_norm, rows, n, c->d_model, c->rms_norm_eps, b->stream));
    return matmul(&b->mc, b->logits, NULL, NULL, b->lm_head, b->h, NULL, NULL, 0.0f, n,
                  c->vocab_size, c->d_model, 0, b->stream);
}

static int bucket_of(int n) {
    int k = 0;
    while ((1 << k) < n) k++;
    return k;
}

/* Checks the batch against the contract in backend.h and packs it into in_host
 * (T_pad tokens: padding tokens have slot -1 and sequence -1). */
static lpx_status pack_batch(cuda_backend *b, const lpx_batch *bt, const int32_t *feed, int T_pad,
                             int *used_blocks) {
    const lpx_config *c = &b->cfg;
    const int bs = b->geom.block_size;
    if (bt->n_tokens < 1 || bt->n_tokens > b->tok_cap)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: step with %d tokens (1..%d allowed)",
                          bt->n_tokens, b->tok_cap);
    if (bt->n_seqs < 1 || bt->n_seqs > b->seq_cap || bt->n_seqs > bt->n_tokens)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: step with %d sequences (1..%d allowed)",
                          bt->n_seqs, b->seq_cap);
    if (bt->seq_start[0] != 0 || bt->seq_start[bt->n_seqs] != bt->n_tokens)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: seq_start must run from 0 to n_tokens");
    if (bt->n_logits < 0 || bt->n_logits > bt->n_tokens)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: %d logits rows for %d tokens", bt->n_logits,
                          bt->n_tokens);
    int32_t *tok = in_part(b, b->in_host, IN_TOK), *pos = in_part(b, b->in_host, IN_POS);
    int32_t *slot = in_part(b, b->in_host, IN_SLOT), *seq = in_part(b, b->in_host, IN_SEQ);
    int32_t *rows = in_part(b, b->in_host, IN_ROWS), *table = in_part(b, b->in_host, IN_BT);
    int maxb = 0;
    for (int s = 0; s < bt->n_seqs; s++) {
        const int t0 = bt->seq_start[s], t1 = bt->seq_start[s + 1], len = bt->seq_len[s];
        if (t1 <= t0 || len < t1 - t0)
            return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: sequence %d: %d tokens, length %d", s,
                              t1 - t0, len);
        const int nb = ceil_div(len, bs);
        if (nb > b->max_blocks || nb > bt->max_blocks)
            return lpx_errorf(LPX_ERR_TOO_LONG, "cuda: sequence %d: length %d exceeds %d tokens",
                              s, len, (b->max_blocks < bt->max_blocks ? b->max_blocks : bt->max_blocks) * bs);
        const int32_t *src = bt->block_table + (size_t)s * bt->max_blocks;
        for (int i = 0; i < nb; i++) {
            if (src[i] < 0 || src[i] >= b->base.opts.n_blocks)
                return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: sequence %d: block id %d (of %d)",
                                  s, src[i], b->base.opts.n_blocks);
            table[(size_t)s * b->max_blocks + i] = src[i];
        }
        if (nb > maxb) maxb = nb;
        for (int t = t0; t < t1; t++) {
            const int p = len - (t1 - t0) + (t - t0);
            if (bt->positions[t] != p)
                return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: token %d: position %d, expected %d",
                                  t, bt->positions[t], p);
            if (feed && feed[t] >= 0) { /* embed_kernel reads it from tok_dev */
                if (feed[t] >= b->feed_rows)
                    return lpx_errorf(LPX_ERR_INVALID_ARG,
                                      "cuda: token %d: feed row %d (the step before has %d rows)",
                                      t, feed[t], b->feed_rows < 0 ? 0 : b->feed_rows);
                tok[t] = -1 - feed[t];
            } else if (bt->tokens[t] < 0 || bt->tokens[t] >= c->vocab_size) {
                return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: token id %d outside vocab (%d)",
                                  bt->tokens[t], c->vocab_size);
            } else {
                tok[t] = bt->tokens[t];
            }
            pos[t] = p;
            slot[t] = src[p / bs] * bs + p % bs;
            seq[t] = s;
        }
    }
    for (int t = bt->n_tokens; t < T_pad; t++) {
        tok[t] = 0;
        pos[t] = 0;
        slot[t] = -1;
        seq[t] = -1;
        rows[t] = t;
    }
    for (int i = 0; i < bt->n_logits; i++) {
        if (bt->logit_rows[i] < 0 || bt->logit_rows[i] >= bt->n_tokens)
            return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: logit row %d outside %d tokens",
                              bt->logit_rows[i], bt->n_tokens);
        rows[i] = bt->logit_rows[i];
    }
    *used_blocks = maxb;
    return LPX_OK;
}

/* The step's inputs to the device, on the side stream (so that they go up while
 * the step before still runs): with T > 0 (a decode step of T tokens, padding
 * included) the T entries of tokens .. logit rows, the parts a decode step reads,
 * as one strided copy; else every part whole (prefill tiles included). Then the
 * used columns of the block table. */
static lpx_status upload_inputs(cuda_backend *b, int n_seqs, int used_blocks, int T) {
    if (T > 0)
        LPX_CUDA_TRY(cudaMemcpy2DAsync(b->in_dev, sizeof(int32_t) * b->tok_cap, b->in_host,
                                       sizeof(int32_t) * b->tok_cap, sizeof(int32_t) * T,
                                       IN_TILES, cudaMemcpyHostToDevice, b->up));
    else
        LPX_CUDA_TRY(cudaMemcpyAsync(b->in_dev, b->in_host, sizeof(int32_t) * IN_BT * b->tok_cap,
                                     cudaMemcpyHostToDevice, b->up));
    LPX_CUDA_TRY(cudaMemcpy2DAsync(in_part(b, b->in_dev, IN_BT), sizeof(int32_t) * b->max_blocks,
                                   in_part(b, b->in_host, IN_BT),
                                   sizeof(int32_t) * b->max_blocks, sizeof(int32_t) * used_blocks,
                                   n_seqs, cudaMemcpyHostToDevice, b->up));
    return LPX_OK;
}

/* Hands logits rows r0 .. r0+n (in b->logits) to the caller: copied to the host,
 * or, for a step with sample, sampled here so only token ids are copied. */
static lpx_status emit_rows(cuda_backend *b, int r0, int n, float *logits, bool sample) {
    const int V = b->cfg.vocab_size;
    if (sample) {
        if (!(b->skip & SK_SAMPLE))
            LPX_TRY(sample_rows(b->logits, V, n, b->srow_dev + r0, b->seen_dev, b->amax_v,
                                b->amax_i, b->tok_dev + r0, b->stream));
        LPX_CUDA_TRY(cudaMemcpyAsync(b->tok_host + r0, b->tok_dev + r0, sizeof(int32_t) * n,
                                     cudaMemcpyDeviceToHost, b->stream));
    } else {
        LPX_CUDA_TRY(cudaMemcpyAsync(logits + (size_t)r0 * V, b->logits, sizeof(float) * V * n,
                                     cudaMemcpyDeviceToHost, b->stream));
    }
    return LPX_OK;
}

/* The decode graph of bucket k (1 << k tokens) for the current slot; with sample,
 * the sampler and the token copy too (every row of the bucket: padding rows are
 * plain greedy). Nothing may be in flight: the stream is captured. */
static lpx_status capture_decode_graph(cuda_backend *b, int k, bool sample) {
    const int T = 1 << k;
    cudaGraph_t g;
    LPX_CUDA_TRY(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
    lpx_status s = forward_layers(b, T, 0);
    if (s == LPX_OK) s = forward_logits(b, in_part(b, b->in_dev, IN_ROWS), T);
    if (s == LPX_OK && sample) s = emit_rows(b, 0, T, NULL, true);
    cudaError_t e = cudaStreamEndCapture(b->stream, &g);
    if (s != LPX_OK) {
        if (e == cudaSuccess) cudaGraphDestroy(g);
        return s;
    }
    LPX_CUDA_TRY(e);
    e = cudaGraphInstantiate(sample ? &b->graphs_s[b->cur][k] : &b->graphs[b->cur][k], g, 0);
    cudaGraphDestroy(g);
    LPX_CUDA_TRY(e);
    return LPX_OK;
}

/* Adds the phase times of the last persistent step (block 0's view: its own work
 * per phase, and its wait at each barrier for the slowest block). */
static lpx_status decode1_trace_add(cuda_backend *b) {
    const int L = b->cfg.n_layers, nk = 5 * L;
    unsigned long long *t = b->d1_trace_host;
    LPX_CUDA_TRY(cudaMemcpy(t, b->d1.trace, sizeof(unsigned long long) * (2 + 2 * nk),
                            cudaMemcpyDeviceToHost));
    for (int k = 0; k < nk; k++) {
        b->d1_phase_ns[k % 5] += (double)(t[1 + 2 * k] - t[2 * k]);
        b->d1_phase_ns[5] += (double)(t[2 + 2 * k] - t[1 + 2 * k]);
    }
    b->d1_phase_ns[6] += (double)(t[1 + 2 * nk] - t[2 * nk]);
    b->d1_traced++;
    return LPX_OK;
}

/* A step's sampling rows (srow_host, n of them) to the device, followed by plain
 * greedy rows up to T (a sampled decode graph samples every row of its bucket;
 * these read no penalty counts). */
static lpx_status upload_sample_rows(cuda_backend *b, int n, int T) {
    for (int i = n; i < T; i++) {
        lpx_sample_row *r = &b->srow_host[i];
        memset(r, 0, sizeof(*r));
        r->p.top_p = 1.0f;
        r->p.repetition_penalty = 1.0f;
    }
    if (T > 0)
        LPX_CUDA_TRY(cudaMemcpyAsync(b->srow_dev, b->srow_host, sizeof(lpx_sample_row) * T,
                                     cudaMemcpyHostToDevice, b->up));
    return LPX_OK;
}

/* Makes slot i current: the step prepared next uses its buffers and graphs. */
static void use_slot(cuda_backend *b, int i) {
    b->cur = i;
    b->in_host = b->slot_in_host[i];
    b->in_dev = b->slot_in_dev[i];
    b->srow_host = b->slot_srow_host[i];
    b->srow_dev = b->slot_srow_dev[i];
    b->tok_host = b->slot_tok_host[i];
}

/* Queues one step in the current slot, without waiting: its logits rows go to
 * logits (host), or with sample to tok_host. feed: step_begin's (NULL otherwise).
 * The persistent batch-1 kernel (d1) runs only when the caller waits at once
 * (sync): it reads its inputs from one buffer of its own. */
static lpx_status enqueue_step(cuda_backend *b, const lpx_batch *bt, const int32_t *feed,
                               float *logits, bool sample, bool sync) {
    const int slot = b->cur;
    b->flight[slot].rows = bt->n_logits;
    b->flight[slot].decode = b->flight[slot].d1 = false;
    b->flight[slot].k = 0;
    if (sync && b->d1_blocks > 0 && bt->n_tokens == 1 && bt->n_seqs == 1 && bt->n_logits == 1) {
        int used_blocks = 0;
        LPX_TRY(pack_batch(b, bt, NULL, 1, &used_blocks));
        /* one small copy: the three inputs and the used part of the block table */
        int32_t *in = b->d1_in_host;
        in[0] = in_part(b, b->in_host, IN_TOK)[0];
        in[1] = in_part(b, b->in_host, IN_POS)[0];
        in[2] = in_part(b, b->in_host, IN_SLOT)[0];
        memcpy(in + 3, in_part(b, b->in_host, IN_BT), sizeof(int32_t) * used_blocks);
        LPX_CUDA_TRY(cudaMemcpyAsync(b->d1_in_dev, in, sizeof(int32_t) * (3 + used_blocks),
                                     cudaMemcpyHostToDevice, b->stream));
        LPX_TRY(decode1(&b->d1, b->cfg.head_dim, b->d1_widest, b->d1_blocks, b->stream));
        if (sample) {
            LPX_TRY(upload_sample_rows(b, 1, 1));
            LPX_CUDA_TRY(cudaEventRecord(b->up_done[slot], b->up));
            LPX_CUDA_TRY(cudaStreamWaitEvent(b->stream, b->up_done[slot], 0));
        }
        LPX_TRY(emit_rows(b, 0, 1, logits, sample));
        LPX_CUDA_TRY(cudaEventRecord(b->step_done[slot], b->stream));
        b->flight[slot].d1 = true;
        return LPX_OK;
    }
    bool decode = b->use_graphs && bt->n_tokens == bt->n_seqs && bt->n_logits == bt->n_tokens &&
                  bucket_of(bt->n_tokens) < b->n_buckets;
    for (int i = 0; decode && i < bt->n_logits; i++) decode = bt->logit_rows[i] == i;
    const int k = decode ? bucket_of(bt->n_tokens) : 0;
    const int T_pad = decode ? 1 << k : bt->n_tokens;
    int used_blocks = 0;
    LPX_TRY(pack_batch(b, bt, feed, T_pad, &used_blocks));
    /* A step with a prefill chunk goes through the flash prefill kernel (its
     * one-token sequences too); one token per sequence, the decode kernel. */
    const int n_tiles = decode || bt->n_tokens == bt->n_seqs
                            ? 0
                            : flash_tiles(bt->seq_start, bt->n_seqs,
                                          b->cfg.n_heads / b->cfg.n_kv_heads,
                                          in_part(b, b->in_host, IN_TILES));
    cudaGraphExec_t *gx = NULL;
    if (decode) {
        gx = sample ? &b->graphs_s[slot][k] : &b->graphs[slot][k];
        if (!*gx) { /* capture (once a bucket and slot) needs the stream idle */
            LPX_CUDA_TRY(cudaStreamSynchronize(b->stream));
            LPX_TRY(capture_decode_graph(b, k, sample));
        }
    }
    /* The slot's last step has ended (at most N_SLOTS in flight), so its buffers
     * are free; the wait only orders the side stream after it on the device. */
    LPX_CUDA_TRY(cudaStreamWaitEvent(b->up, b->step_done[slot], 0));
    LPX_TRY(upload_inputs(b, bt->n_seqs, used_blocks, decode ? T_pad : 0));
    if (sample) LPX_TRY(upload_sample_rows(b, bt->n_logits, decode ? T_pad : bt->n_logits));
    LPX_CUDA_TRY(cudaEventRecord(b->up_done[slot], b->up));
    LPX_CUDA_TRY(cudaStreamWaitEvent(b->stream, b->up_done[slot], 0));
    if (decode) { /* n_logits == n_tokens: every row */
        cudaEvent_t *ev = b->ev[slot];
        if (ev[0]) LPX_CUDA_TRY(cudaEventRecord(ev[0], b->stream));
        LPX_CUDA_TRY(cudaGraphLaunch(*gx, b->stream));
        if (ev[0]) LPX_CUDA_TRY(cudaEventRecord(ev[1], b->stream));
        if (!sample) LPX_TRY(emit_rows(b, 0, bt->n_logits, logits, false));
    } else {
        LPX_TRY(forward_layers(b, bt->n_tokens, n_tiles));
        for (int r0 = 0; r0 < bt->n_logits; r0 += b->logit_cap) {
            const int n = bt->n_logits - r0 < b->logit_cap ? bt->n_logits - r0 : b->logit_cap;
            LPX_TRY(forward_logits(b, in_part(b, b->in_dev, IN_ROWS) + r0, n));
            LPX_TRY(emit_rows(b, r0, n, logits, sample));
        }
    }
    LPX_CUDA_TRY(cudaEventRecord(b->step_done[slot], b->stream));
    b->flight[slot].decode = decode;
    b->flight[slot].k = k;
    return LPX_OK;
}

/* Waits for the step in slot i and adds its traces and timings (LPX_CUDA_*). */
static lpx_status finish_step(cuda_backend *b, int i) {
    LPX_CUDA_TRY(cudaEventSynchronize(b->step_done[i]));
    const bool decode = b->flight[i].decode, k0 = b->flight[i].k == 0;
    if (b->d1.trace && b->flight[i].d1) LPX_TRY(decode1_trace_add(b));
    if (decode && b->attn_trace && k0) {
        const int nl = b->cfg.n_layers;
        LPX_CUDA_TRY(cudaMemcpy(b->attn_trace_host, b->attn_trace,
                                sizeof(long long) * AD_TRACE * nl, cudaMemcpyDeviceToHost));
        for (int l = 0; l < nl; l++) {
            const long long *t = b->attn_trace_host + (size_t)l * AD_TRACE;
            for (int j = 1; j < 8; j++) b->attn_phase[j] += (double)(t[j] - t[j - 1]);
            b->attn_phase[8] += (double)(t[9] - t[8]);
            /* gap from this layer's attention end to the next layer's start */
            if (l + 1 < nl) b->attn_phase[9] += (double)(t[AD_TRACE + 8] - t[9]);
            for (int j = 10; j < 13 && b->qa.cluster; j++) b->attn_phase[j] += (double)(t[j] - t[8]);
        }
        b->attn_traced++;
    }
    if (decode && g_mv_trace && k0 && g_mv_trace_n == g_mv_trace_cap) {
        const int n = g_mv_trace_cap;
        LPX_CUDA_TRY(cudaMemcpy(b->mv_trace_host, g_mv_trace, sizeof(long long) * MV_TRACE * n,
                                cudaMemcpyDeviceToHost));
        for (int j = 0; j < n; j++) {
            const long long *t = b->mv_trace_host + (size_t)MV_TRACE * j;
            const int nk = b->qa.cluster ? 3 : 4, kind = 4 - nk + j % nk;
            double *ph = b->mv_phase[kind];
            for (int q = 0; q < 4; q++) ph[q] += (double)t[2 + q];
            ph[4] += (double)(t[6] - t[1]);
            if (j > 0 && kind != 1) ph[5] += (double)(t[1] - t[6 - MV_TRACE]);
        }
        b->mv_traced++;
    }
    if (decode && b->bt_dev && k0 && ++b->bt_steps == 64) {
        const size_t n = (size_t)4 * BT_BLOCKS * BT_MARKS;
        LPX_CUDA_TRY(cudaMemcpy(b->bt_host, b->bt_dev, sizeof(long long) * n,
                                cudaMemcpyDeviceToHost));
        const char *path = getenv("LPX_CUDA_BLK_TRACE_FILE");
        FILE *f = path ? fopen(path, "w") : stderr;
        if (!f) fprintf(stderr, "lpx cuda: LPX_CUDA_BLK_TRACE_FILE %s: cannot write\n", path);
        if (f) {
            static const char *kn[] = {"fused", "o", "gu", "down"};
            fprintf(f, "layer,kernel,block,sm,start,wait,staged,rows,end\n");
            for (int k = 0; k < 4; k++)
                for (int blk = 0; blk < BT_BLOCKS; blk++) {
                    const long long *t = b->bt_host + ((size_t)k * BT_BLOCKS + blk) * BT_MARKS;
                    if (t[1] == 0) continue; /* no such block */
                    fprintf(f, "%d,%s,%d,%lld,%lld,%lld,%lld,%lld,%lld\n", b->bt_layer, kn[k], blk,
                            t[0], t[1], t[2], t[3], t[4], t[5]);
                }
            if (f != stderr) fclose(f);
        }
    }
    if (decode && b->ev[i][0] && k0) {
        float ms = 0.0f;
        LPX_CUDA_TRY(cudaEventElapsedTime(&ms, b->ev[i][0], b->ev[i][1]));
        b->graph_ms += ms;
        b->graph_steps++;
    }
    return LPX_OK;
}

/* Grows the pinned host buffer of token counts and its device twin to n. */
static lpx_status grow_seen(cuda_backend *b, int n) {
    if (n <= b->seen_cap) return LPX_OK;
    int c = b->seen_cap ? b->seen_cap : 4096;
    while (c < n) c = c > INT32_MAX / 2 ? n : 2 * c;
    LPX_CUDA_TRY(cudaStreamSynchronize(b->stream)); /* steps in flight read seen_dev */
    for (int i = 0; i < N_SLOTS; i++)
        for (int k = 0; k < MAX_BUCKETS; k++) { /* they captured the old seen_dev */
            if (b->graphs_s[i][k]) cudaGraphExecDestroy(b->graphs_s[i][k]);
            b->graphs_s[i][k] = NULL;
        }
    if (b->seen_host) cudaFreeHost(b->seen_host);
    cudaFree(b->seen_dev);
    b->seen_host = b->seen_dev = NULL;
    b->seen_cap = 0;
    LPX_CUDA_TRY(cudaMallocHost((void **)&b->seen_host, (size_t)c * sizeof(lpx_token_count)));
    LPX_CUDA_TRY(cudaMalloc((void **)&b->seen_dev, (size_t)c * sizeof(lpx_token_count)));
    b->seen_cap = c;
    return LPX_OK;
}

/* The sampler's buffers, at the first sampled step: a row per token at most, per
 * slot. tok_dev last: it marks the rest as there (the graphs captured before it
 * read no fed tokens: embed reads tok_dev only for negative ids). */
static lpx_status sample_buffers(cuda_backend *b) {
    if (b->tok_dev) return LPX_OK;
    const size_t T = (size_t)b->tok_cap;
    for (int i = 0; i < N_SLOTS; i++) {
        LPX_CUDA_TRY(cudaMallocHost((void **)&b->slot_srow_host[i], T * sizeof(lpx_sample_row)));
        LPX_CUDA_TRY(cudaMallocHost((void **)&b->slot_tok_host[i], T * sizeof(int32_t)));
        LPX_TRY(dalloc(b, (void **)&b->slot_srow_dev[i], T * sizeof(lpx_sample_row)));
    }
    LPX_TRY(dalloc(b, (void **)&b->amax_v, T * AM_BLOCKS * sizeof(float)));
    LPX_TRY(dalloc(b, (void **)&b->amax_i, T * AM_BLOCKS * sizeof(int)));
    LPX_TRY(dalloc(b, (void **)&b->tok_dev, T * sizeof(int32_t)));
    use_slot(b, b->cur);
    return LPX_OK;
}

/* The checks and uploads of a step with sample: the rows into the current slot
 * (enqueue_step uploads them), the token counts to the device. */
static lpx_status prepare_sample(cuda_backend *b, const lpx_batch *bt, const lpx_sample_batch *sb) {
    const int n = bt->n_logits;
    LPX_TRY(lpx_sample_batch_check(sb, n, b->cfg.vocab_size));
    if (n < 0 || n > bt->n_tokens || n > b->tok_cap)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: %d logits rows for %d tokens (at most %d)",
                          n, bt->n_tokens, b->tok_cap);
    LPX_CUDA_TRY(cudaSetDevice(b->device));
    LPX_TRY(sample_buffers(b));
    LPX_TRY(grow_seen(b, sb->n_seen));
    if (n > 0) memcpy(b->srow_host, sb->rows, sizeof(lpx_sample_row) * n);
    if (sb->n_seen > 0) {
        LPX_CUDA_TRY(cudaStreamSynchronize(b->stream)); /* steps in flight read seen_dev */
        memcpy(b->seen_host, sb->seen, sizeof(lpx_token_count) * sb->n_seen);
        LPX_CUDA_TRY(cudaMemcpyAsync(b->seen_dev, b->seen_host,
                                     sizeof(lpx_token_count) * sb->n_seen,
                                     cudaMemcpyHostToDevice, b->up));
    }
    return LPX_OK;
}

/* Ends every step in flight after a failure (their caches are unknown). */
static lpx_status drop_flight(cuda_backend *b, lpx_status s) {
    b->n_flight = 0;
    b->feed_rows = -1;
    return s;
}

/* A step without sample: alone, in the current slot (no step is in flight). */
static lpx_status begin_logits(cuda_backend *b, const lpx_step *st) {
    if (st->feed || !st->logits)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "cuda: step_begin: a step without sample takes logits and no feed");
    b->feed_rows = -1; /* the next step_begin may not feed (backend.h) */
    LPX_TRY(enqueue_step(b, st->batch, NULL, st->logits, false, true));
    const int slot = b->cur;
    b->flight[slot].out = NULL;
    b->oldest = slot;
    b->n_flight = 1;
    if (b->tracing) { /* the trace buffers are the graph's: read them before the next step */
        lpx_status s = finish_step(b, slot);
        if (s != LPX_OK) return drop_flight(b, s);
    }
    return LPX_OK;
}

static lpx_status cuda_step_begin(lpx_backend *base, const lpx_step *st) {
    cuda_backend *b = (cuda_backend *)base;
    const lpx_batch *bt = st->batch;
    const lpx_sample_batch *sb = st->sample;
    if (b->n_flight >= N_SLOTS)
        return lpx_errorf(LPX_ERR_BUSY, "cuda: step_begin with %d steps in flight (at most %d)",
                          b->n_flight, N_SLOTS);
    if (b->n_flight > 0 && (!sb || !b->flight[b->cur].out))
        return lpx_errorf(LPX_ERR_BUSY,
                          "cuda: step_begin: a step without sample runs alone (%d in flight)",
                          b->n_flight);
    LPX_CUDA_TRY(cudaSetDevice(b->device));
    if (!sb) return begin_logits(b, st);
    LPX_TRY(sample_buffers(b));
    /* the slot after the last begun step's (the one in flight, if any) */
    const int prev = b->cur, slot = (prev + 1) % N_SLOTS;
    use_slot(b, slot);
    const int32_t *feed = st->feed;
    lpx_status s = prepare_sample(b, bt, sb);
    for (int i = 0; s == LPX_OK && feed && i < bt->n_logits; i++)
        if (lpx_sampling_penalized(&sb->rows[i].p))
            s = lpx_errorf(LPX_ERR_INVALID_ARG,
                           "cuda: step_begin: row %d has a penalty and the step a feed", i);
    if (s == LPX_OK) s = enqueue_step(b, bt, feed, NULL, true, false);
    if (s != LPX_OK) { /* a failed check queued nothing; a failed launch shows at the next wait */
        use_slot(b, prev);
        b->feed_rows = -1; /* the next step_begin may not feed (backend.h) */
        return s;
    }
    b->flight[slot].out = st->tokens;
    if (b->n_flight == 0) b->oldest = slot;
    b->n_flight++;
    b->feed_rows = bt->n_logits;
    if (b->tracing) { /* the trace buffers are the graph's: read them before the next step */
        s = finish_step(b, slot);
        if (s != LPX_OK) return drop_flight(b, s);
    }
    return LPX_OK;
}

static lpx_status cuda_step_end(lpx_backend *base) {
    cuda_backend *b = (cuda_backend *)base;
    if (b->n_flight == 0)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: step_end with no step in flight");
    const int i = b->oldest;
    lpx_status s = b->tracing ? LPX_OK : finish_step(b, i);
    if (s != LPX_OK) return drop_flight(b, s);
    if (b->flight[i].out)
        memcpy(b->flight[i].out, b->slot_tok_host[i], sizeof(int32_t) * b->flight[i].rows);
    b->oldest = (i + 1) % N_SLOTS;
    b->n_flight--;
    return LPX_OK;
}

/* --- create / destroy ------------------------------------------------------- */

static void cuda_destroy(lpx_backend *base) {
    cuda_backend *b = (cuda_backend *)base;
    if (!b) return;
    cudaSetDevice(b->device);
    if (b->stream) cudaStreamSynchronize(b->stream); /* steps begun and not ended */
    if (b->up) cudaStreamSynchronize(b->up);
    if (b->d1_traced > 0) {
        const double n = b->d1_traced, L = b->cfg.n_layers;
        fprintf(stderr,
                "lpx cuda: persistent decode, %d steps, block 0, us per layer: qkv %.2f, "
                "attention %.2f, o %.2f, gate/up %.2f, down %.2f, barrier waits %.2f; lm_head "
                "%.2f us per step\n",
                b->d1_traced, b->d1_phase_ns[0] / n / L / 1e3, b->d1_phase_ns[1] / n / L / 1e3,
                b->d1_phase_ns[2] / n / L / 1e3, b->d1_phase_ns[3] / n / L / 1e3,
                b->d1_phase_ns[4] / n / L / 1e3, b->d1_phase_ns[5] / n / L / 1e3,
                b->d1_phase_ns[6] / n / 1e3);
    }
    if (b->graph_steps > 0)
        fprintf(stderr, "lpx cuda: batch-1 decode graph, %d steps, %.2f us per step on the GPU\n",
                b->graph_steps, 1e3 * b->graph_ms / b->graph_steps);
    for (int i = 0; i < N_SLOTS; i++)
        for (int j = 0; j < 2; j++)
            if (b->ev[i][j]) cudaEventDestroy(b->ev[i][j]);
    if (b->attn_traced > 0) {
        const double n = (double)b->attn_traced * b->cfg.n_layers;
        /* the marks of attn_decode_kernel, or of qkv_attn_kernel (qkv_attn.cuh) */
        fprintf(stderr,
                b->qa.cluster
                    ? "lpx cuda: fused q/k/v + attention (cluster), block 0, mean cycles per "
                      "layer: inputs and issue %.0f, wait %.0f, x norm %.0f, "
                      "rows %.0f, cluster barrier and q/k/v %.0f, attention %.0f, cluster "
                      "barrier and combine %.0f; %.2f us from the wait to the end; %.2f us from "
                      "its end to the next layer's wait\n"
                    : "lpx cuda: decode attention, block (0,0,0), mean cycles per layer: inputs "
                      "%.0f, issue %.0f, wait for the projection %.0f, q/k/v %.0f, scores %.0f, "
                      "P·V %.0f, combine and output %.0f; %.2f us from the wait to the end; "
                      "%.2f us from its end to the next layer's wait\n",
                b->attn_phase[1] / n, b->attn_phase[2] / n, b->attn_phase[3] / n,
                b->attn_phase[4] / n, b->attn_phase[5] / n, b->attn_phase[6] / n,
                b->attn_phase[7] / n, b->attn_phase[8] / n / 1e3,
                b->attn_phase[9] / ((double)b->attn_traced * (b->cfg.n_layers - 1)) / 1e3);
    }
    if (b->attn_traced > 0 && b->qa.cluster) {
        const double n = (double)b->attn_traced * b->cfg.n_layers;
        fprintf(stderr,
                "lpx cuda: fused q/k/v + attention, the last block after block 0's wait: weights "
                "landed %.2f us, rows done %.2f us, end %.2f us\n",
                b->attn_phase[10] / n / 1e3, b->attn_phase[11] / n / 1e3,
                b->attn_phase[12] / n / 1e3);
    }
    free(b->attn_trace_host);
    if (b->mv_traced > 0) {
        static const char *kind[4] = {"qkv", "o", "gate/up", "down"};
        const double n = (double)b->mv_traced * b->cfg.n_layers;
        for (int k = b->qa.cluster ? 1 : 0; k < 4; k++) {
            const double *ph = b->mv_phase[k];
            fprintf(stderr,
                    "lpx cuda: matvec %s, block 0 cycles: before the wait %.0f, x %.0f, weights "
                    "wait %.0f, rest %.0f; wait to last block end %.2f us",
                    kind[k], ph[0] / n, ph[1] / n, ph[2] / n, ph[3] / n, ph[4] / n / 1e3);
            if (k != 1)
                fprintf(stderr, "; release after the predecessor's end %.2f us",
                        ph[5] / (k == 0 ? n - b->mv_traced : n) / 1e3);
            fprintf(stderr, "\n");
        }
    }
    if (b->mv_trace_host) g_mv_trace = NULL; /* freed with b's allocations below */
    free(b->mv_trace_host);
    free(b->bt_host);
    free(b->d1_trace_host);
    for (int i = 0; i < N_SLOTS; i++) {
        for (int k = 0; k < MAX_BUCKETS; k++) {
            if (b->graphs[i][k]) cudaGraphExecDestroy(b->graphs[i][k]);
            if (b->graphs_s[i][k]) cudaGraphExecDestroy(b->graphs_s[i][k]);
        }
        if (b->slot_in_host[i]) cudaFreeHost(b->slot_in_host[i]);
        if (b->slot_srow_host[i]) cudaFreeHost(b->slot_srow_host[i]);
        if (b->slot_tok_host[i]) cudaFreeHost(b->slot_tok_host[i]);
        if (b->up_done[i]) cudaEventDestroy(b->up_done[i]);
        if (b->step_done[i]) cudaEventDestroy(b->step_done[i]);
    }
    if (b->mc.blas) cublasDestroy(b->mc.blas);
    for (int i = 0; i < b->n_allocs; i++) cudaFree(b->allocs[i]);
    if (b->d1_in_host) cudaFreeHost(b->d1_in_host);
    if (b->seen_host) cudaFreeHost(b->seen_host);
    cudaFree(b->seen_dev);
    if (b->up) cudaStreamDestroy(b->up);
    if (b->stream) cudaStreamDestroy(b->stream);
    free(b->allocs);
    free(b->layers);
    free(b);
}

static lpx_status check_config(const lpx_config *c) {
    if (c->head_dim != 64 && c->head_dim != 128 && c->head_dim != 256)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "cuda: head_dim %d (64, 128 or 256 supported)",
                          c->head_dim);
    if (c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads ||
        c->n_heads / c->n_kv_heads > ATTN_MAX_GROUP)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "cuda: %d query heads over %d KV heads (group of "
                          "at most %d)", c->n_heads, c->n_kv_heads, ATTN_MAX_GROUP);
    if (c->d_model % 8 || c->d_ff % 8 || (c->n_heads * c->head_dim) % 8)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "cuda: d_model %d, d_ff %d: need multiples of 8",
                          c->d_model, c->d_ff);
    return LPX_OK;
}

/* Upper bound of T * attn_splits(T) over 1..cap. */
static size_t part_rows(int cap, int n_kv, int n_sms) {
    size_t m = 0;
    for (int T = 1; T <= cap; T++) {
        const size_t r = (size_t)T * attn_splits(T, n_kv, n_sms);
        if (r > m) m = r;
    }
    return m;
}

/* Prepares the persistent batch-1 decode kernel (decode1.cu) when LPX_CUDA_MEGA=1
 * asks for it (opt-in: slower than the graphs so far, docs/PERF.md) and the GPU and
 * the model allow it (cooperative launch, one block per SM, shared memory). */
static lpx_status decode1_setup(cuda_backend *b, const cudaDeviceProp *prop) {
    const lpx_config *c = &b->cfg;
    const char *env = getenv("LPX_CUDA_MEGA");
    if (!env || strcmp(env, "1") || !prop->cooperativeLaunch) return LPX_OK;
    const int hd = c->head_dim, d = c->d_model, qd = c->n_heads * hd;
    int widest = d > qd ? d : qd;
    if (c->d_ff > widest) widest = c->d_ff;
    int per_sm = 0;
    LPX_TRY(decode1_init(hd, widest, &per_sm));
    if (per_sm < 1 || c->n_heads / c->n_kv_heads > D1_MAX_GROUP) return LPX_OK;
    d1_params *p = &b->d1;
    const int n_blocks = prop->multiProcessorCount, G = c->n_heads / c->n_kv_heads;
    p->max_splits = n_blocks / c->n_kv_heads;
    if (p->max_splits > D1_MAX_SPLITS) p->max_splits = D1_MAX_SPLITS;
    if (p->max_splits < 1) return LPX_OK;

    d1_layer *hl = (d1_layer *)calloc((size_t)c->n_layers, sizeof(d1_layer));
    if (!hl) return lpx_errorf(LPX_ERR_NOMEM, "cuda: out of host memory");
    for (int l = 0; l < c->n_layers; l++) {
        const cuda_layer *L = &b->layers[l];
        hl[l].attn_norm = L->attn_norm;
        hl[l].ffn_norm = L->ffn_norm;
        hl[l].bqkv = L->bqkv;
        hl[l].q_norm = L->q_norm;
        hl[l].k_norm = L->k_norm;
        hl[l].wqkv = L->wqkv;
        hl[l].wo = L->wo;
        hl[l].wgu = L->wgu;
        hl[l].wdown = L->wdown;
    }
    void *dl = NULL;
    lpx_status s = dalloc(b, &dl, sizeof(d1_layer) * c->n_layers);
    if (s == LPX_OK && cudaMemcpy(dl, hl, sizeof(d1_layer) * c->n_layers, cudaMemcpyHostToDevice))
        s = lpx_errorf(LPX_ERR_DEVICE, "cuda: upload of the layer table failed");
    free(hl);
    LPX_TRY(s);
    const size_t parts = (size_t)c->n_kv_heads * p->max_splits * G;
    LPX_TRY(dalloc(b, (void **)&p->part_o, parts * hd * sizeof(float)));
    LPX_TRY(dalloc(b, (void **)&p->part_ml, parts * 2 * sizeof(float)));
    LPX_TRY(dalloc(b, (void **)&p->done, c->n_kv_heads * sizeof(int)));
    LPX_CUDA_TRY(cudaMemset(p->done, 0, c->n_kv_heads * sizeof(int)));
    LPX_TRY(dalloc(b, (void **)&p->bar, sizeof(unsigned)));
    LPX_CUDA_TRY(cudaMemset(p->bar, 0, sizeof(unsigned)));

    p->layers = (const d1_layer *)dl;
    p->tok_embd = b->tok_embd;
    p->lm_head = b->lm_head;
    p->out_norm = b->out_norm;
    p->inv_freq = b->inv_freq;
    p->kv = b->kv;
    const size_t in_bytes = sizeof(int32_t) * (3 + (size_t)b->max_blocks);
    LPX_CUDA_TRY(cudaMallocHost((void **)&b->d1_in_host, in_bytes));
    LPX_TRY(dalloc(b, (void **)&b->d1_in_dev, in_bytes));
    p->token = b->d1_in_dev;
    p->pos = b->d1_in_dev + 1;
    p->slot = b->d1_in_dev + 2;
    p->block_table = b->d1_in_dev + 3;
    p->x = b->x;
    p->qkv = b->qkv;
    p->attn = b->attn;
    p->act = b->act;
    p->logits = b->logits;
    p->g.n_heads = b->geom.n_heads;
    p->g.n_kv = b->geom.n_kv;
    p->g.head_dim = b->geom.head_dim;
    p->g.block_size = b->geom.block_size;
    p->g.block_stride = b->geom.block_stride;
    p->n_layers = c->n_layers;
    p->d = d;
    p->qd = qd;
    p->qkv_rows = b->qkv_rows;
    p->d_ff = c->d_ff;
    p->vocab = c->vocab_size;
    p->window = c->sliding_window;
    p->interleaved = c->rope_interleaved;
    p->eps = c->rms_norm_eps;
    p->scale = 1.0f / sqrtf((float)hd);
    env = getenv("LPX_CUDA_D1_TRACE");
    if (env && strcmp(env, "0")) {
        const size_t n = 2 + 10 * (size_t)c->n_layers;
        b->d1_trace_host = (unsigned long long *)calloc(n, sizeof(unsigned long long));
        if (!b->d1_trace_host) return lpx_errorf(LPX_ERR_NOMEM, "cuda: out of host memory");
        LPX_TRY(dalloc(b, (void **)&p->trace, n * sizeof(unsigned long long)));
    }
    b->d1_widest = widest;
    b->d1_blocks = n_blocks;
    return LPX_OK;
}

/* The host and device buffers of a trace knob: n long longs each, zeroed (the
 * matvec trace's last-block end is an atomicMax into its device buffer). */
static lpx_status trace_buffers(cuda_backend *b, size_t n, const char *what, long long **host,
                                long long **dev) {
    *host = (long long *)calloc(n, sizeof(long long));
    if (!*host) return lpx_errorf(LPX_ERR_NOMEM, "cuda: %s trace: out of host memory", what);
    LPX_TRY(dalloc(b, (void **)dev, n * sizeof(long long)));
    LPX_CUDA_TRY(cudaMemset(*dev, 0, n * sizeof(long long)));
    return LPX_OK;
}

/* Whether the batch-1 products should run as matvec_tma_small_kernel: where one
 * fused q/k/v + attention block and two product blocks fit an SM's registers only
 * with the small kernel's cap (registers are allocated a warp at a time, in units of
 * 8 a thread). LPX_CUDA_MV_SMALL=0/1 forces the choice. */
static lpx_status mv_small_pays(const qa_plan *qa, const cudaDeviceProp *prop, bool *small) {
    const char *env = getenv("LPX_CUDA_MV_SMALL");
    if (env && *env) {
        *small = strcmp(env, "0") != 0;
        return LPX_OK;
    }
    *small = false;
    if (!qa->cluster) return LPX_OK;
    cudaFuncAttributes big, sm;
    LPX_CUDA_TRY(cudaFuncGetAttributes(&big, matvec_tma_kernel<1>));
    LPX_CUDA_TRY(cudaFuncGetAttributes(&sm, matvec_tma_small_kernel));
    auto block = [](int regs, int threads) { return (regs + 7) / 8 * 8 * threads; };
    const int fused = block(qa->regs, QA_THREADS), per_sm = prop->regsPerMultiprocessor;
    *small = fused + 2 * block(sm.numRegs, MV2_WARPS * 32) <= per_sm &&
             fused + 2 * block(big.numRegs, MV2_WARPS * 32) > per_sm;
    return LPX_OK;
}

static lpx_status cuda_create_inner(cuda_backend *b, const lpx_model *m, const lpx_backend_opts *o) {
    const lpx_config *c = &m->cfg;
    LPX_TRY(check_config(c));
    cudaDeviceProp prop;
    LPX_TRY(pick_device(o->device, &prop));
    b->device = o->device;
    b->mc.n_sms = prop.multiProcessorCount;
    const int hd = c->head_dim, d = c->d_model, qd = c->n_heads * hd;
    b->qkv_rows = qd + 2 * c->n_kv_heads * hd;

    lpx_backend_opts *eo = &b->base.opts;
    if (eo->block_size <= 0) eo->block_size = 16;
    if (eo->max_seqs <= 0) eo->max_seqs = 256;
    if (eo->max_batch_tokens <= 0) eo->max_batch_tokens = 2048;
    const int max_ctx = c->max_position_embeddings > 0 ? c->max_position_embeddings : 4096;
    if (eo->n_blocks <= 0) eo->n_blocks = ceil_div(4 * (max_ctx < 4096 ? max_ctx : 4096), eo->block_size);
    b->seq_cap = eo->max_seqs;
    b->n_buckets = 0;
    while (b->n_buckets < MAX_BUCKETS && (1 << b->n_buckets) <= 2 * b->seq_cap - 1 &&
           (1 << b->n_buckets) <= 512)
        b->n_buckets++;
    const int top_bucket = 1 << (b->n_buckets - 1);
    b->tok_cap = eo->max_batch_tokens > top_bucket ? eo->max_batch_tokens : top_bucket;
    /* prefill tiles name their first (token, head) row in 31 - FP_ROW_BITS bits */
    if (b->tok_cap > (1 << (31 - FP_ROW_BITS)) / ATTN_MAX_GROUP)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "cuda: max_batch_tokens %d (at most %d)",
                          b->tok_cap, (1 << (31 - FP_ROW_BITS)) / ATTN_MAX_GROUP);
    b->logit_cap = b->tok_cap < 256 ? b->tok_cap : (top_bucket > 256 ? top_bucket : 256);
    b->max_blocks = ceil_div(max_ctx, eo->block_size);
    if (b->max_blocks > eo->n_blocks) b->max_blocks = eo->n_blocks;
    b->geom.n_heads = c->n_heads;
    b->geom.n_kv = c->n_kv_heads;
    b->geom.head_dim = hd;
    b->geom.block_size = eo->block_size;
    b->geom.n_layers = c->n_layers;
    b->geom.block_stride = (int64_t)c->n_layers * 2 * c->n_kv_heads * eo->block_size * hd;
    const char *env = getenv("LPX_CUDA_GRAPHS");
    b->use_graphs = !(env && !strcmp(env, "0"));
    env = getenv("LPX_CUDA_PDL");
    g_use_pdl = !(env && !strcmp(env, "0"));
    b->skip = parse_skip(getenv("LPX_CUDA_SKIP"));
    b->qa = qkv_attn_plan(c->n_heads, c->n_kv_heads, hd, d);
    if (getenv("LPX_CUDA_TIMING") || getenv("LPX_CUDA_ATTN_TRACE"))
        fprintf(stderr,
                "lpx cuda: batch-1 fused q/k/v + attention: %s (clusters of %d blocks, %d rows "
                "a block, %zu bytes of shared memory a block)\n",
                b->qa.cluster ? "on" : "off", b->qa.cluster, b->qa.rb, b->qa.smem);
    env = getenv("LPX_CUDA_ATTN_TRACE");
    if (env && !strcmp(env, "1"))
        LPX_TRY(trace_buffers(b, (size_t)AD_TRACE * c->n_layers, "attention", &b->attn_trace_host,
                              &b->attn_trace));
    env = getenv("LPX_CUDA_MV_TRACE");
    if (env && !strcmp(env, "1")) {
        /* qkv (unless fused with the attention), o, gate/up, down a layer */
        const int n = (b->qa.cluster ? 3 : 4) * c->n_layers;
        LPX_TRY(trace_buffers(b, (size_t)MV_TRACE * n, "matvec", &b->mv_trace_host, &g_mv_trace));
        g_mv_trace_cap = n;
        g_mv_trace_n = 0;
    }
    env = getenv("LPX_CUDA_BLK_TRACE");
    if (env && *env) {
        b->bt_layer = atoi(env);
        LPX_TRY(trace_buffers(b, (size_t)4 * BT_BLOCKS * BT_MARKS, "block", &b->bt_host,
                              &b->bt_dev));
    }
    b->tracing = b->attn_trace || g_mv_trace || b->bt_dev;
    env = getenv("LPX_CUDA_TIMING");
    if (env && !strcmp(env, "1"))
        for (int i = 0; i < N_SLOTS; i++)
            for (int j = 0; j < 2; j++) LPX_CUDA_TRY(cudaEventCreate(&b->ev[i][j]));
    LPX_TRY(matvec_init());
    LPX_TRY(mv_small_pays(&b->qa, &prop, &g_mv_small));
    if (getenv("LPX_CUDA_TIMING")) {
        fprintf(stderr, "lpx cuda: batch-1 projections on %s (fused kernel: %d registers a thread)\n",
                g_mv_small ? "matvec_tma_small_kernel" : "matvec_tma_kernel", b->qa.regs);
        fprintf(stderr,
                "lpx cuda: batch-1 projections one block an SM (MM_SOLO):%s%s%s%s (%d bytes of "
                "shared memory a block)\n",
                g_solo & EARLY_O ? " o" : "", g_solo & EARLY_G ? " gate/up" : "",
                g_solo & EARLY_D ? " down" : "", g_solo ? "" : " none", g_mv_solo_smem);
    }
    LPX_TRY(attention_init());
    LPX_TRY(flash_prefill_init());

    /* Memory plan, checked before any large allocation. */
    const size_t T = (size_t)b->tok_cap;
    const size_t wl = (size_t)b->qkv_rows * d + (size_t)d * qd + 2 * (size_t)c->d_ff * d +
                      (size_t)d * c->d_ff;
    const bool tied = c->tied_embeddings || m->w.lm_head == m->w.tok_embd;
    const size_t wbytes = 2 * (wl * c->n_layers + (size_t)c->vocab_size * d * (tied ? 1 : 2));
    const size_t kvbytes = (size_t)eo->n_blocks * b->geom.block_stride * 2;
    const size_t prow = part_rows(b->tok_cap, c->n_kv_heads, b->mc.n_sms);
    const size_t scratch = T * (4 * d + 2 * d + 4 * b->qkv_rows + 4 * qd + 2 * qd +
                                8 * c->d_ff + 2 * c->d_ff) +
                           prow * c->n_heads * (hd + 2) * 4 +
                           (size_t)b->logit_cap * c->vocab_size * 4 + (64u << 20);
    size_t free_b = 0, total_b = 0;
    LPX_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    const size_t need = wbytes + kvbytes + scratch;
    if (need > free_b)
        return lpx_errorf(LPX_ERR_NOMEM,
                          "cuda: %s: needs %.1f MiB (weights %.1f, KV cache %.1f for %d blocks, "
                          "scratch %.1f) but %.1f MiB of %.1f are free",
                          prop.name, need / 1048576.0, wbytes / 1048576.0, kvbytes / 1048576.0,
                          eo->n_blocks, scratch / 1048576.0, free_b / 1048576.0,
                          total_b / 1048576.0);

    LPX_CUDA_TRY(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
    LPX_CUDA_TRY(cudaStreamCreateWithFlags(&b->up, cudaStreamNonBlocking));
    for (int i = 0; i < N_SLOTS; i++) {
        LPX_CUDA_TRY(cudaEventCreateWithFlags(&b->up_done[i], cudaEventDisableTiming));
        LPX_CUDA_TRY(cudaEventCreateWithFlags(&b->step_done[i], cudaEventDisableTiming));
    }
    b->feed_rows = -1;
    LPX_CUBLAS_TRY(cublasCreate(&b->mc.blas));
    LPX_TRY(dalloc(b, &b->blas_ws, 32u << 20));
    LPX_CUBLAS_TRY(cublasSetWorkspace(b->mc.blas, b->blas_ws, 32u << 20));
    LPX_CUBLAS_TRY(cublasSetStream(b->mc.blas, b->stream));

    /* Weights. One host staging buffer as large as the largest merged matrix. */
    size_t stage_elems = (size_t)c->vocab_size * d;
    if ((size_t)2 * c->d_ff * d > stage_elems) stage_elems = (size_t)2 * c->d_ff * d;
    if ((size_t)b->qkv_rows * d > stage_elems) stage_elems = (size_t)b->qkv_rows * d;
    int64_t widest = d > c->d_ff ? d : c->d_ff;
    if (qd > widest) widest = qd;
    if (b->qkv_rows > widest) widest = b->qkv_rows;
    uint16_t *stage = (uint16_t *)malloc(stage_elems * sizeof(uint16_t));
    float *tmp = (float *)malloc((size_t)widest * sizeof(float));
    b->layers = (cuda_layer *)calloc((size_t)c->n_layers, sizeof(cuda_layer));
    lpx_status s = LPX_OK;
    if (!stage || !tmp || !b->layers) s = lpx_errorf(LPX_ERR_NOMEM, "cuda: out of host memory");
    const lpx_weights *w = &m->w;
    if (s == LPX_OK) s = check_shape(w->tok_embd, "token_embd", -1, c->vocab_size, d);
    if (s == LPX_OK) s = upload_matrix(b, &b->tok_embd, &w->tok_embd, 1, false, d, stage, tmp);
    if (s == LPX_OK) {
        if (tied) {
            b->lm_head = b->tok_embd;
        } else {
            s = check_shape(w->lm_head, "output", -1, c->vocab_size, d);
            if (s == LPX_OK) s = upload_matrix(b, &b->lm_head, &w->lm_head, 1, false, d, stage, tmp);
        }
    }
    if (s == LPX_OK) s = check_shape(w->out_norm, "output_norm", -1, 1, d);
    if (s == LPX_OK) s = upload_vector(b, &b->out_norm, &w->out_norm, 1, tmp);
    for (int l = 0; s == LPX_OK && l < c->n_layers; l++) {
        const lpx_layer *L = &w->layers[l];
        cuda_layer *D = &b->layers[l];
        const int kvd = c->n_kv_heads * hd;
        if (s == LPX_OK) s = check_shape(L->attn_norm, "attn_norm", l, 1, d);
        if (s == LPX_OK) s = check_shape(L->ffn_norm, "ffn_norm", l, 1, d);
        if (s == LPX_OK) s = check_shape(L->wq, "attn_q", l, qd, d);
        if (s == LPX_OK) s = check_shape(L->wk, "attn_k", l, kvd, d);
        if (s == LPX_OK) s = check_shape(L->wv, "attn_v", l, kvd, d);
        if (s == LPX_OK) s = check_shape(L->wo, "attn_output", l, d, qd);
        if (s == LPX_OK) s = check_shape(L->w_gate, "ffn_gate", l, c->d_ff, d);
        if (s == LPX_OK) s = check_shape(L->w_up, "ffn_up", l, c->d_ff, d);
        if (s == LPX_OK) s = check_shape(L->w_down, "ffn_down", l, d, c->d_ff);
        if (s != LPX_OK) break;
        const lpx_tensor *qkv[3] = {L->wq, L->wk, L->wv};
        const lpx_tensor *gu[2] = {L->w_gate, L->w_up};
        s = upload_vector(b, &D->attn_norm, &L->attn_norm, 1, tmp);
        if (s == LPX_OK) s = upload_vector(b, &D->ffn_norm, &L->ffn_norm, 1, tmp);
        if (s == LPX_OK) s = upload_matrix(b, &D->wqkv, qkv, 3, false, d, stage, tmp);
        if (s == LPX_OK) s = upload_matrix(b, &D->wo, &L->wo, 1, false, qd, stage, tmp);
        if (s == LPX_OK) s = upload_matrix(b, &D->wgu, gu, 2, true, d, stage, tmp);
        if (s == LPX_OK) s = upload_matrix(b, &D->wdown, &L->w_down, 1, false, c->d_ff, stage, tmp);
        if (s == LPX_OK && c->qkv_bias) {
            if (!L->bq || !L->bk || !L->bv) {
                s = lpx_errorf(LPX_ERR_FORMAT, "cuda: layer %d: q/k/v bias missing", l);
            } else {
                const lpx_tensor *bias[3] = {L->bq, L->bk, L->bv};
                s = upload_vector(b, &D->bqkv, bias, 3, tmp);
            }
        }
        if (s == LPX_OK && c->qk_norm) {
            if (!L->q_norm || !L->k_norm)
                s = lpx_errorf(LPX_ERR_FORMAT, "cuda: layer %d: q/k norm missing", l);
            if (s == LPX_OK) s = upload_vector(b, &D->q_norm, &L->q_norm, 1, tmp);
            if (s == LPX_OK) s = upload_vector(b, &D->k_norm, &L->k_norm, 1, tmp);
        }
    }
    if (s == LPX_OK) {
        float *f = tmp;
        rope_inv_freq(c, f);
        void *dv;
        s = dalloc(b, &dv, sizeof(float) * (hd / 2));
        if (s == LPX_OK && cudaMemcpy(dv, f, sizeof(float) * (hd / 2), cudaMemcpyHostToDevice))
            s = lpx_errorf(LPX_ERR_DEVICE, "cuda: upload of rope frequencies failed");
        b->inv_freq = (const float *)dv;
    }
    free(stage);
    free(tmp);
    LPX_TRY(s);

    LPX_TRY(dalloc(b, (void **)&b->kv, kvbytes));
    LPX_CUDA_TRY(cudaMemset(b->kv, 0, kvbytes));
    const size_t in_elems = IN_BT * T + (size_t)b->seq_cap * b->max_blocks;
    for (int i = 0; i < N_SLOTS; i++) {
        LPX_CUDA_TRY(cudaMallocHost((void **)&b->slot_in_host[i], in_elems * sizeof(int32_t)));
        memset(b->slot_in_host[i], 0, in_elems * sizeof(int32_t));
        LPX_TRY(dalloc(b, (void **)&b->slot_in_dev[i], in_elems * sizeof(int32_t)));
        LPX_CUDA_TRY(cudaMemset(b->slot_in_dev[i], 0, in_elems * sizeof(int32_t)));
    }
    use_slot(b, 0);
    LPX_TRY(dalloc(b, (void **)&b->x, T * d * 4));
    LPX_TRY(dalloc(b, (void **)&b->h, T * d * 2));
    LPX_TRY(dalloc(b, (void **)&b->qkv, T * b->qkv_rows * 4));
    LPX_TRY(dalloc(b, (void **)&b->q, T * qd * 4));
    LPX_TRY(dalloc(b, (void **)&b->attn, T * qd * 2));
    LPX_TRY(dalloc(b, (void **)&b->gu, T * 2 * c->d_ff * 4));
    LPX_TRY(dalloc(b, (void **)&b->act, T * c->d_ff * 2));
    LPX_TRY(dalloc(b, (void **)&b->part_o, prow * c->n_heads * hd * 4));
    LPX_TRY(dalloc(b, (void **)&b->part_ml, prow * c->n_heads * 2 * 4));
    LPX_TRY(dalloc(b, (void **)&b->done, T * c->n_kv_heads * sizeof(int)));
    LPX_CUDA_TRY(cudaMemset(b->done, 0, T * c->n_kv_heads * sizeof(int)));
    LPX_TRY(dalloc(b, (void **)&b->logits, (size_t)b->logit_cap * c->vocab_size * 4));
    LPX_TRY(decode1_setup(b, &prop));
    LPX_CUDA_TRY(cudaDeviceSynchronize());
    return LPX_OK;
}

static lpx_status cuda_create(const lpx_model *m, const lpx_backend_opts *o, lpx_backend **out) {
    cuda_backend *b = (cuda_backend *)calloc(1, sizeof(cuda_backend));
    if (!b) return lpx_errorf(LPX_ERR_NOMEM, "cuda: out of host memory");
    b->base.ops = &lpx_cuda_backend_ops;
    b->base.model = m;
    b->base.opts = *o;
    b->cfg = m->cfg;
    lpx_status s = cuda_create_inner(b, m, o);
    if (s != LPX_OK) {
        cuda_destroy(&b->base);
        return s;
    }
    *out = &b->base;
    return LPX_OK;
}

static lpx_status cuda_copy_block(lpx_backend *base, int32_t src, int32_t dst) {
    cuda_backend *b = (cuda_backend *)base;
    const int n = b->base.opts.n_blocks;
    if (src < 0 || src >= n || dst < 0 || dst >= n)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cuda: copy_block %d -> %d (of %d blocks)", src,
                          dst, n);
    const size_t bytes = (size_t)b->geom.block_stride * sizeof(bf16);
    LPX_CUDA_TRY(cudaSetDevice(b->device));
    LPX_CUDA_TRY(cudaMemcpyAsync(b->kv + (size_t)dst * b->geom.block_stride,
                                 b->kv + (size_t)src * b->geom.block_stride, bytes,
                                 cudaMemcpyDeviceToDevice, b->stream));
    LPX_CUDA_TRY(cudaStreamSynchronize(b->stream));
    return LPX_OK;
}

static size_t cuda_memory_used(const lpx_backend *base) {
    return ((const cuda_backend *)base)->mem_used;
}

extern "C" const lpx_backend_ops lpx_cuda_backend_ops = {
    "cuda", cuda_create, cuda_step_begin, cuda_step_end, cuda_copy_block, cuda_memory_used,
    cuda_destroy,
};

/* The CUDA backend: weights uploaded once (q/k/v merged, gate/up interleaved),
 * bf16 or kept quantized in wpack.h's packings, a bf16 paged KV cache, and one step = a flat sequence of kernel
 * launches (forward_layers + forward_logits). Decode steps (one token per
 * sequence) replay a CUDA graph captured per batch-size bucket 1, 2, 4, ... so the
 * host issues three calls per step: copy inputs, launch graph, copy logits. */
#include "attention.cuh"
#include "common.cuh"
#include "elementwise.cuh"
#include "flash_prefill.cuh"
#include "matmul.cuh"
#include "qkv_attn.cuh"
#include "sampling.cuh"
#include "trace.cuh"
#include "tuning.h"

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
/* decode graphs a slot: one a bucket, and batch 1 past tune.qa_ctx keys
 * (long_step: no fused kernel) at index MAX_BUCKETS */
#define N_GRAPHS (MAX_BUCKETS + 1)
static_assert(N_SLOTS == TRACE_SLOTS, "trace.cuh keeps timing events per slot");

typedef struct cuda_layer {
    const float *attn_norm, *ffn_norm; /* (d_model) */
    wmat wqkv;          /* (n_heads*hd + 2*n_kv*hd, d_model): q rows, then k, then v */
    const float *bqkv;  /* (same rows) or NULL */
    const float *q_norm, *k_norm; /* (hd) or NULL */
    wmat wo;            /* (d_model, n_heads*hd) */
    wmat wgu;           /* (2*d_ff, d_model): row 2j = gate j, row 2j+1 = up j */
    wmat wdown;         /* (d_model, d_ff) */
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
    wmat tok_embd, lm_head;         /* (vocab, d_model) */
    const float *out_norm;          /* (d_model) */
    const float *inv_freq;          /* (hd/2), scaling applied */
    void *kv;                       /* (n_blocks, block_stride) of kv_elem<geom.fp8> */
    float *kvs;                     /* fp8: the scales (n_blocks, kv_block_scales), after kv */
    kv_geom geom;
    int qkv_rows;

    int tok_cap;    /* most tokens per step */
    int seq_cap;    /* most sequences per step */
    int logit_cap;  /* logits rows computed per pass */
    int max_blocks; /* block-table row stride on the device */
    /* step inputs, int32, same layout on host (pinned) and device:
     * tokens | positions | slots | tok_seq | logit_rows (tok_cap each) | prefill
     * attention tiles (2*tok_cap: flash_tiles makes at most 1.125 per token) |
     * block table (seq_cap rows) | a decode step's attention plan (AP_HDR +
     * 8*plan_cap, attn_plan.h). The current slot's (see slots below). */
    int32_t *in_host, *in_dev;

    float *x;       /* (tok_cap, d_model) residual stream */
    bf16 *h;        /* (tok_cap, d_model) normalised */
    float *qkv;     /* (tok_cap, qkv_rows) */
    float *q;       /* (tok_cap, n_heads*hd) after rope */
    bf16 *attn;     /* (tok_cap, n_heads*hd) */
    float *gu;      /* (tok_cap, 2*d_ff) GEMM path only */
    bf16 *act;      /* (tok_cap, d_ff) */
    float *part_o;  /* (plan_cap, G, hd) a decode attention item's partial output */
    float *part_ml; /* (plan_cap, G, 2) and its maxima and sums */
    int plan_cap;   /* items of a decode step's attention plan at most */
    attn_ctx ag;    /* the decode attention kernel's grids (attention.cuh) */
    /* this step is a batch-1 decode past tune.qa_ctx keys: the two-kernel path,
     * whose attention splits over the whole GPU, instead of the fused kernel */
    bool long_step;
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
    cudaGraphExec_t graphs[N_SLOTS][N_GRAPHS];
    /* the same steps with the device sampler and the token copy to tok_host inside
     * (steps with sample): one launch a step; dropped when seen_dev moves (grow_seen) */
    cudaGraphExec_t graphs_s[N_SLOTS][N_GRAPHS];
    /* steps in flight: n_flight of them, the oldest in slot `oldest`; what the
     * end of each needs (flight[slot]); feed_rows: the logits rows of the last
     * step_begin's step, which the next step_begin may feed from (-1: none) */
    int n_flight, oldest, feed_rows;
    struct {
        int rows, k;
        bool decode;
        int32_t *out; /* where step_end copies the step's tokens; NULL: a logits step */
    } flight[N_SLOTS];
    bool tracing; /* a trace buffer is on: step_begin waits for its step */

    /* this instance's tuning (tuning.h: resolved at create from the model's shape,
     * the device and the tune string) and its developer trace (trace.cuh; NULL: off) */
    cuda_tuning tune;
    cuda_trace *trace;

    /* batch-1 decode: q/k/v projection and attention in one cluster kernel
     * (qkv_attn.cuh); qa.cluster 0: the two-kernel path */
    qa_plan qa;
    /* the weights were converted to bf16 at upload (else kept in wpack.h's packings) */
    bool bf16_weights;
} cuda_backend;

/* --- host-side conversion ------------------------------------------------ */

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

/* A matrix the backend holds, merged from up to three of the file's tensors
 * (stacked, or row-interleaved for gate/up). */
typedef struct merged {
    const lpx_tensor *ts[3];
    int n;
    bool interleave;
    int64_t cols;
} merged;

/* The packing of a merged matrix: wpack.h's choice, or bf16. */
static lpx_status matrix_format(const merged *mt, bool bf16, lpx_wp_format *f) {
    if (bf16) {
        *f = lpx_wp_format{LPX_WP_BF16, 0, 0};
        return LPX_OK;
    }
    return lpx_wp_choose(mt->ts, mt->n, mt->cols, f);
}

/* Uploads the matrix mt: bf16, or (b->bf16_weights false) in the packing wpack.h
 * chooses for its tensors. */
static lpx_status upload_matrix(cuda_backend *b, wmat *out, const merged *mt, uint8_t *stage,
                                float *tmp) {
    lpx_wp_format f;
    LPX_TRY(matrix_format(mt, b->bf16_weights, &f));
    const size_t rb = lpx_wp_row_bytes(f, mt->cols);
    int64_t rows = 0;
    for (int i = 0; i < mt->n; i++) {
        LPX_TRY(lpx_wp_pack_rows(f, mt->ts[i], stage, mt->interleave ? i : rows,
                                 mt->interleave ? mt->n : 1, tmp));
        rows += lpx_tensor_rows(mt->ts[i]);
    }
    void *d;
    const size_t bytes = (size_t)rows * rb;
    LPX_TRY(dalloc(b, &d, bytes));
    LPX_CUDA_TRY(cudaMemcpy(d, stage, bytes, cudaMemcpyHostToDevice));
    *out = wmat_of(d, f, (int)rb);
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

/* The attention plan's part of the step inputs at base (count, then items). */
static int32_t *plan_part(const cuda_backend *b, int32_t *base) {
    return base + (size_t)IN_BT * b->tok_cap + (size_t)b->seq_cap * b->max_blocks;
}

/* The compute stream, with the instance's PDL choice, for the launchers. */
static kstream kst(const cuda_backend *b) { return kstream{b->stream, b->tune.pdl}; }

/* Whether a step of T tokens runs the batch-1 decode's q/k/v projection and
 * attention as one kernel (qkv_attn.cuh): up to tune.qa_ctx keys (long_step). */
static bool uses_fused(const cuda_backend *b, int T, int n_tiles) {
    return T == 1 && n_tiles == 0 && b->qa.cluster && !b->long_step &&
           !(b->tune.skip & (SK_QKV | SK_ATTN));
}

/* Layer l's q/k/v projection and attention as separate kernels (every step but
 * the batch-1 decode that qkv_attn.cuh fuses). */
static lpx_status qkv_and_attention(cuda_backend *b, int l, int T, int n_tiles) {
    const lpx_config *c = &b->cfg;
    const cuda_layer *L = &b->layers[l];
    const float eps = c->rms_norm_eps;
    const unsigned sk = b->tune.skip;
    const kstream st = kst(b);
    int32_t *in = b->in_dev;
    const int d = c->d_model;
    if (!(sk & SK_QKV))
        LPX_TRY(matmul(&b->mc, b->qkv, NULL, NULL, L->wqkv, b->x, L->attn_norm, b->h, eps, T,
                       b->qkv_rows, d, 0, st));
    /* decode: q/k norms and RoPE are fused into the attention kernel */
    if (n_tiles > 0 && !(sk & SK_ROPE))
        LPX_TRY(qkv_rope(b->q, b->kv, b->kvs, b->qkv, L->bqkv, L->q_norm, L->k_norm, b->inv_freq,
                         in_part(b, in, IN_POS), in_part(b, in, IN_SLOT), T, b->geom, l,
                         c->rms_norm_eps, c->rope_interleaved, st));
    if (sk & SK_ATTN)
        ;
    else if (n_tiles > 0)
        LPX_TRY(flash_prefill(b->attn, b->q, b->kv, b->kvs, in_part(b, in, IN_TILES), n_tiles,
                              in_part(b, in, IN_SEQ), in_part(b, in, IN_POS),
                              in_part(b, in, IN_BT), b->max_blocks, b->geom, l,
                              c->sliding_window, st));
    else
        LPX_TRY(attention(&b->ag, b->attn, b->part_o, b->part_ml, b->done, b->kv, b->kvs, b->qkv,
                          L->bqkv, L->q_norm, L->k_norm, b->inv_freq, in_part(b, in, IN_SEQ),
                          in_part(b, in, IN_POS), in_part(b, in, IN_SLOT),
                          in_part(b, in, IN_BT), b->max_blocks, plan_part(b, in), b->geom, l,
                          c->rms_norm_eps, c->rope_interleaved, trace_attn(b->trace), st));
    return LPX_OK;
}

/* The launch flags of a step's projections (matmul.cuh's MM_*) and when the fused
 * kernel lets o launch (QA_NEXT_*): the same in every layer of a step. */
typedef struct layer_flags {
    int o, gu, down, qa_next;
} layer_flags;

static layer_flags layer_flags_of(const cuda_tuning *tu, int T, bool fused) {
    /* Which kernels let the next one launch at their start (tu->early): by default
     * o, so that gate/up's 12 MB of weights (Qwen3-0.6B) stream during the
     * attention as well (gate/up reads only weights before its wait), and down,
     * so that the next layer's fused kernel has done its setup (2.7-3.7 µs
     * under the weight streams) when down ends (docs/lab/notebook.md row 32). A kernel
     * may read its residual x before its wait (MM_ADD_EARLY) only if x's last
     * writer has completed once it can start: o's x is down's (or embed's),
     * complete when the kernel before o launched o after its own wait; down's x
     * is o's, complete when gate/up launched down after its wait. tu->late: those
     * that let it launch only once their own weights are used. */
    const unsigned E = tu->early, La = tu->late;
    auto next = [&](unsigned k) { return E & k ? MM_NEXT_EARLY : La & k ? MM_NEXT_LATE : 0; };
    /* batch 1: the projections one block an SM (MM_SOLO; docs/lab/notebook.md row 34) */
    const unsigned So = T == 1 ? tu->solo : 0;
    layer_flags f;
    f.qa_next = E & TK_F ? QA_NEXT_START : La & TK_F ? QA_NEXT_ROWS : QA_NEXT_WAIT;
    f.o = (fused && (E & TK_F) ? MM_ADD : MM_ADD_EARLY) | (So & TK_O ? MM_SOLO : 0) | next(TK_O);
    /* batch 1: gate/up's weight pieces tu->pace at a time (MM_PACE; docs/lab/notebook.md row 33) */
    f.gu = (T == 1 ? MM_PACE(tu->pace) : 0) | (So & TK_G ? MM_SOLO : 0) | next(TK_G);
    f.down = (E & TK_G ? MM_ADD : MM_ADD_EARLY) | (So & TK_D ? MM_SOLO : 0) | next(TK_D);
    return f;
}

/* Everything up to the final norm, for T tokens; attention by the flash prefill
 * kernel over n_tiles query tiles, or with n_tiles 0 by the decode kernel (one
 * token per sequence). tune.skip leaves ops out (timing only). */
static lpx_status forward_layers(cuda_backend *b, int T, int n_tiles) {
    const lpx_config *c = &b->cfg;
    const kstream st = kst(b);
    const int d = c->d_model, qd = c->n_heads * c->head_dim, dff = c->d_ff;
    const float eps = c->rms_norm_eps;
    int32_t *in = b->in_dev;
    const unsigned sk = b->tune.skip;
    const bool fused = uses_fused(b, T, n_tiles);
    const layer_flags f = layer_flags_of(&b->tune, T, fused);
    cuda_trace *tr = b->trace;
    // x = tok_embd[tokens]
    if (!(sk & SK_EMBED))
        LPX_TRY(embed(b->x, b->tok_embd, in_part(b, in, IN_TOK), b->tok_dev, T, d, st));
    for (int l = 0; l < c->n_layers; l++) {
        const cuda_layer *L = &b->layers[l];
        // attn = attention(rope(rmsnorm(x) · Wqkvᵀ + bqkv)), k/v into the cache
        if (fused)
            LPX_TRY(qkv_attn(&b->qa, b->attn, b->kv, b->kvs, L->wqkv, b->x, L->attn_norm, L->bqkv,
                             L->q_norm, L->k_norm, b->inv_freq, in_part(b, in, IN_SEQ),
                             in_part(b, in, IN_POS), in_part(b, in, IN_SLOT),
                             in_part(b, in, IN_BT), b->max_blocks, b->geom, l, d, eps,
                             c->rope_interleaved, c->sliding_window, f.qa_next, trace_attn(tr),
                             trace_blk(tr, T, l, BK_FUSED), st));
        else
            LPX_TRY(qkv_and_attention(b, l, T, n_tiles));
        // x += attn · Woᵀ                                  (T, d)
        trace_blk_next(tr, T, l, BK_O);
        if (!(sk & SK_O))
            LPX_TRY(matmul(&b->mc, b->x, NULL, NULL, L->wo, b->attn, NULL, NULL, eps, T, d, qd,
                           f.o, st));
        // act = silu(rmsnorm(x) · Wgateᵀ) * (rmsnorm(x) · Wupᵀ)   (T, d_ff)
        trace_blk_next(tr, T, l, BK_GU);
        if (!(sk & SK_GU))
            LPX_TRY(matmul(&b->mc, NULL, b->act, b->gu, L->wgu, b->x, L->ffn_norm, b->h, eps, T,
                           2 * dff, d, f.gu, st));
        // x += act · Wdownᵀ                                (T, d)
        trace_blk_next(tr, T, l, BK_DOWN);
        if (!(sk & SK_DOWN))
            LPX_TRY(matmul(&b->mc, b->x, NULL, NULL, L->wdown, b->act, NULL, NULL, eps, T, d, dff,
                           f.down, st));
        trace_blk_next(tr, T, l, -1);
    }
    return LPX_OK;
}

/* Logits (n, vocab) into b->logits for the token rows listed at rows (device). */
static lpx_status forward_logits(cuda_backend *b, const int32_t *rows, int n) {
    const lpx_config *c = &b->cfg;
    if (b->tune.skip & SK_HEAD) return LPX_OK;
    LPX_TRY(rmsnorm(b->h, b->x, b->out_norm, rows, n, c->d_model, c->rms_norm_eps, kst(b)));
    return matmul(&b->mc, b->logits, NULL, NULL, b->lm_head, b->h, NULL, NULL, 0.0f, n,
                  c->vocab_size, c->d_model, 0, kst(b));
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
 * used columns of the block table, and a decode step's attention plan. */
static lpx_status upload_inputs(cuda_backend *b, int n_seqs, int used_blocks, int T,
                                size_t plan_elems) {
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
    if (plan_elems)
        LPX_CUDA_TRY(cudaMemcpyAsync(plan_part(b, b->in_dev), plan_part(b, b->in_host),
                                     sizeof(int32_t) * plan_elems, cudaMemcpyHostToDevice, b->up));
    return LPX_OK;
}

/* Hands logits rows r0 .. r0+n (in b->logits) to the caller: copied to the host,
 * or, for a step with sample, sampled here so only token ids are copied. */
static lpx_status emit_rows(cuda_backend *b, int r0, int n, float *logits, bool sample) {
    const int V = b->cfg.vocab_size;
    if (sample) {
        if (!(b->tune.skip & SK_SAMPLE))
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

/* The decode graph gi (graph_index) of bucket k (1 << k tokens) for the current
 * slot; with sample, the sampler and the token copy too (every row of the bucket:
 * padding rows are plain greedy). Nothing may be in flight: the stream is captured. */
static lpx_status capture_decode_graph(cuda_backend *b, int k, int gi, bool sample) {
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
    e = cudaGraphInstantiate(sample ? &b->graphs_s[b->cur][gi] : &b->graphs[b->cur][gi], g, 0);
    cudaGraphDestroy(g);
    LPX_CUDA_TRY(e);
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

/* The graph of bucket k: its own, or for a long batch-1 step the one without the
 * fused kernel. */
static int graph_index(const cuda_backend *b, int k) {
    return k == 0 && b->long_step ? MAX_BUCKETS : k;
}

/* A decode step's attention plan (attn_plan.h) of T tokens, from the packed
 * positions and sequences, into the plan part of the host inputs; its int32s. */
static lpx_status plan_attention(cuda_backend *b, int T, size_t *n_elems) {
    int32_t *plan = plan_part(b, b->in_host);
    const lpx_attn_plan_in in = {T,
                                 in_part(b, b->in_host, IN_POS),
                                 in_part(b, b->in_host, IN_SEQ),
                                 b->cfg.n_kv_heads,
                                 b->cfg.sliding_window,
                                 b->ag.blocks,
                                 b->tune.attn_keys,
                                 b->tune.attn_waves};
    const int n = lpx_cuda_attn_plan(&in, (lpx_attn_item *)(plan + AP_HDR), b->plan_cap);
    if (n < 0)
        return lpx_errorf(LPX_ERR_INTERNAL, "cuda: attention plan of %d tokens over %d items", T,
                          b->plan_cap);
    plan[0] = n;
    *n_elems = AP_HDR + (size_t)n * (sizeof(lpx_attn_item) / sizeof(int32_t));
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
 * logits (host), or with sample to tok_host. feed: step_begin's (NULL otherwise). */
static lpx_status enqueue_step(cuda_backend *b, const lpx_batch *bt, const int32_t *feed,
                               float *logits, bool sample) {
    const int slot = b->cur;
    b->flight[slot].rows = bt->n_logits;
    b->flight[slot].decode = false;
    b->flight[slot].k = 0;
    bool decode = b->tune.graphs && bt->n_tokens == bt->n_seqs && bt->n_logits == bt->n_tokens &&
                  bucket_of(bt->n_tokens) < b->n_buckets;
    for (int i = 0; decode && i < bt->n_logits; i++) decode = bt->logit_rows[i] == i;
    const int k = decode ? bucket_of(bt->n_tokens) : 0;
    const int T_pad = decode ? 1 << k : bt->n_tokens;
    int used_blocks = 0;
    LPX_TRY(pack_batch(b, bt, feed, T_pad, &used_blocks));
    b->long_step = bt->n_tokens == 1 && bt->n_seqs == 1 && bt->seq_len[0] > b->tune.qa_ctx;
    /* A step with a prefill chunk goes through the flash prefill kernel (its
     * one-token sequences too); one token per sequence, the decode kernel. */
    const int n_tiles = decode || bt->n_tokens == bt->n_seqs
                            ? 0
                            : flash_tiles(bt->seq_start, bt->n_seqs,
                                          b->cfg.n_heads / b->cfg.n_kv_heads,
                                          in_part(b, b->in_host, IN_TILES));
    size_t plan_elems = 0; /* the fused kernel reads no plan */
    if (n_tiles == 0 && !uses_fused(b, T_pad, 0)) LPX_TRY(plan_attention(b, T_pad, &plan_elems));
    cudaGraphExec_t *gx = NULL;
    if (decode) {
        const int gi = graph_index(b, k);
        gx = sample ? &b->graphs_s[slot][gi] : &b->graphs[slot][gi];
        if (!*gx) { /* capture (once a graph and slot) needs the stream idle */
            LPX_CUDA_TRY(cudaStreamSynchronize(b->stream));
            LPX_TRY(capture_decode_graph(b, k, gi, sample));
        }
    }
    /* The slot's last step has ended (at most N_SLOTS in flight), so its buffers
     * are free; the wait only orders the side stream after it on the device. */
    LPX_CUDA_TRY(cudaStreamWaitEvent(b->up, b->step_done[slot], 0));
    LPX_TRY(upload_inputs(b, bt->n_seqs, used_blocks, decode ? T_pad : 0, plan_elems));
    if (sample) LPX_TRY(upload_sample_rows(b, bt->n_logits, decode ? T_pad : bt->n_logits));
    LPX_CUDA_TRY(cudaEventRecord(b->up_done[slot], b->up));
    LPX_CUDA_TRY(cudaStreamWaitEvent(b->stream, b->up_done[slot], 0));
    if (decode) { /* n_logits == n_tokens: every row */
        LPX_TRY(trace_graph_begin(b->trace, slot, b->stream));
        LPX_CUDA_TRY(cudaGraphLaunch(*gx, b->stream));
        LPX_TRY(trace_graph_end(b->trace, slot, b->stream));
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

/* Waits for the step in slot i and adds its traces and timings (trace.cuh). */
static lpx_status finish_step(cuda_backend *b, int i) {
    LPX_CUDA_TRY(cudaEventSynchronize(b->step_done[i]));
    return trace_step_done(b->trace, i, b->flight[i].decode, b->flight[i].k == 0);
}

/* Grows the pinned host buffer of token counts and its device twin to n. */
static lpx_status grow_seen(cuda_backend *b, int n) {
    if (n <= b->seen_cap) return LPX_OK;
    int c = b->seen_cap ? b->seen_cap : 4096;
    while (c < n) c = c > INT32_MAX / 2 ? n : 2 * c;
    LPX_CUDA_TRY(cudaStreamSynchronize(b->stream)); /* steps in flight read seen_dev */
    for (int i = 0; i < N_SLOTS; i++)
        for (int k = 0; k < N_GRAPHS; k++) { /* they captured the old seen_dev */
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
    LPX_TRY(enqueue_step(b, st->batch, NULL, st->logits, false));
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
    if (s == LPX_OK) s = enqueue_step(b, bt, feed, NULL, true);
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
    trace_destroy(b->trace);
    for (int i = 0; i < N_SLOTS; i++) {
        for (int k = 0; k < N_GRAPHS; k++) {
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
    if (b->seen_host) cudaFreeHost(b->seen_host);
    cudaFree(b->seen_dev);
    if (b->up) cudaStreamDestroy(b->up);
    if (b->stream) cudaStreamDestroy(b->stream);
    free(b->allocs);
    free(b->layers);
    free(b);
}

/* Layer l's matrices: q/k/v, o, gate/up, down; their shapes checked. */
static lpx_status layer_matrices(const lpx_config *c, const lpx_layer *L, int l, merged out[4]) {
    const int d = c->d_model, qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    LPX_TRY(check_shape(L->attn_norm, "attn_norm", l, 1, d));
    LPX_TRY(check_shape(L->ffn_norm, "ffn_norm", l, 1, d));
    LPX_TRY(check_shape(L->wq, "attn_q", l, qd, d));
    LPX_TRY(check_shape(L->wk, "attn_k", l, kvd, d));
    LPX_TRY(check_shape(L->wv, "attn_v", l, kvd, d));
    LPX_TRY(check_shape(L->wo, "attn_output", l, d, qd));
    LPX_TRY(check_shape(L->w_gate, "ffn_gate", l, c->d_ff, d));
    LPX_TRY(check_shape(L->w_up, "ffn_up", l, c->d_ff, d));
    LPX_TRY(check_shape(L->w_down, "ffn_down", l, d, c->d_ff));
    out[0] = merged{{L->wq, L->wk, L->wv}, 3, false, d};
    out[1] = merged{{L->wo, NULL, NULL}, 1, false, qd};
    out[2] = merged{{L->w_gate, L->w_up, NULL}, 2, true, d};
    out[3] = merged{{L->w_down, NULL, NULL}, 1, false, c->d_ff};
    return LPX_OK;
}

/* What the weights will take on the device, before any is uploaded: their bytes,
 * the largest matrix's (the host staging buffer), the dequantization tile the
 * GEMM of a quantized matrix needs (elements; 0: every matrix is bf16), and the
 * packings of the layers' q/k/v (bits 1 << lpx_wp_kind) with their widest row
 * (the fused batch-1 kernel's plan: qkv_attn_plan). */
typedef struct weight_plan {
    size_t bytes, stage_bytes, tile_elems;
    unsigned qkv_kinds;
    int qkv_row_bytes;
} weight_plan;

#define WTILE_MAX_ELEMS ((size_t)32 << 20) /* 64 MB of bf16 */

static lpx_status plan_matrix(const merged *mt, bool bf16, weight_plan *p, lpx_wp_format *out) {
    lpx_wp_format f;
    LPX_TRY(matrix_format(mt, bf16, &f));
    *out = f;
    int64_t rows = 0;
    for (int i = 0; i < mt->n; i++) rows += lpx_tensor_rows(mt->ts[i]);
    const size_t bytes = (size_t)rows * lpx_wp_row_bytes(f, mt->cols);
    p->bytes += bytes;
    if (bytes > p->stage_bytes) p->stage_bytes = bytes;
    if (f.kind != LPX_WP_BF16) {
        size_t e = (size_t)rows * (size_t)mt->cols;
        if (e > WTILE_MAX_ELEMS) e = WTILE_MAX_ELEMS;
        if (e > p->tile_elems) p->tile_elems = e;
    }
    return LPX_OK;
}

static lpx_status plan_weights(const lpx_model *m, bool tied, bool bf16, weight_plan *p) {
    const lpx_config *c = &m->cfg;
    const lpx_weights *w = &m->w;
    *p = weight_plan{0, 0, 0, 0u, 0};
    lpx_wp_format q;
    LPX_TRY(check_shape(w->tok_embd, "token_embd", -1, c->vocab_size, c->d_model));
    merged e = {{w->tok_embd, NULL, NULL}, 1, false, c->d_model};
    LPX_TRY(plan_matrix(&e, bf16, p, &q));
    if (!tied) {
        LPX_TRY(check_shape(w->lm_head, "output", -1, c->vocab_size, c->d_model));
        e.ts[0] = w->lm_head;
        LPX_TRY(plan_matrix(&e, bf16, p, &q));
    }
    for (int l = 0; l < c->n_layers; l++) {
        merged mt[4];
        LPX_TRY(layer_matrices(c, &w->layers[l], l, mt));
        for (int k = 0; k < 4; k++) {
            LPX_TRY(plan_matrix(&mt[k], bf16, p, &q));
            if (k > 0) continue;
            p->qkv_kinds |= 1u << q.kind;
            const int rb = (int)lpx_wp_row_bytes(q, mt[k].cols);
            if (rb > p->qkv_row_bytes) p->qkv_row_bytes = rb;
        }
    }
    return LPX_OK;
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

/* The facts the tuning is resolved from (tuning.h): the device's, and what the
 * kernels this shape runs compiled to. */
static lpx_status gather_facts(const qa_plan *qa, const cudaDeviceProp *prop, int solo_smem,
                               cuda_facts *f) {
    cudaFuncAttributes big, sm;
    LPX_CUDA_TRY(cudaFuncGetAttributes(&big, matvec_tma_kernel<1, WF_BF16>));
    LPX_CUDA_TRY(cudaFuncGetAttributes(&sm, matvec_tma_small_kernel));
    f->n_sms = prop->multiProcessorCount;
    f->regs_per_sm = prop->regsPerMultiprocessor;
    f->qa_cluster = qa->cluster;
    f->qa_regs = qa->regs;
    f->qa_threads = QA_THREADS;
    f->mv_regs = big.numRegs;
    f->mv_small_regs = sm.numRegs;
    f->mv_threads = MV2_WARPS * 32;
    f->mv_solo_smem = solo_smem;
    return LPX_OK;
}

static lpx_status cuda_create_inner(cuda_backend *b, const lpx_model *m, const lpx_backend_opts *o) {
    const lpx_config *c = &m->cfg;
    LPX_TRY(check_config(c));
    if (o->kv_dtype != LPX_KV_AUTO && o->kv_dtype != LPX_KV_BF16 && o->kv_dtype != LPX_KV_FP8)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "cuda: --kv-cache-dtype %s is not supported on the "
                          "CUDA backend (bf16 and fp8 are)", lpx_kv_dtype_name(o->kv_dtype));
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
    if (eo->block_size > 1024 || (eo->block_size & (eo->block_size - 1)))
        return lpx_errorf(LPX_ERR_UNSUPPORTED,
                          "cuda: KV block size %d: a power of two up to 1024 is needed",
                          eo->block_size);
    b->geom.block_size = eo->block_size;
    b->geom.bs_shift = __builtin_ctz((unsigned)eo->block_size);
    b->geom.n_layers = c->n_layers;
    b->geom.block_stride = (int64_t)c->n_layers * 2 * c->n_kv_heads * eo->block_size * hd;
    b->geom.fp8 = o->kv_dtype == LPX_KV_FP8;
    /* the tuning: the tune string, the fused kernel's plan (unless qa=0), the
     * device's facts, then the per-instance choices (tuning.c) */
    cuda_tune_overrides ov;
    LPX_TRY(lpx_cuda_tune_parse(o->tune, &ov));
    const cuda_shape shape = {c->n_heads, c->n_kv_heads, hd, d, c->d_ff};
    LPX_TRY(attention_init(&b->geom, b->mc.n_sms, &b->ag));
    /* decode steps: at most seq_cap tokens, or a graph's bucket */
    b->plan_cap = lpx_cuda_attn_plan_cap(b->seq_cap > top_bucket ? b->seq_cap : top_bucket,
                                         c->n_kv_heads, b->ag.blocks);

    /* Memory plan, checked before any large allocation. The weights are bf16 where
     * those and the rest fit the free memory (the quantized packings are slower
     * today for batches past 8 and prefill: docs/backend.md), else as the file
     * keeps them (tune key wq: 0 always bf16, 1 always as the file). */
    const size_t T = (size_t)b->tok_cap;
    const size_t kvbytes = (size_t)eo->n_blocks * kv_block_bytes(&b->geom);
    const size_t prow = (size_t)b->plan_cap * (c->n_heads / c->n_kv_heads); /* item rows */
    const size_t scratch = T * (4 * d + 2 * d + 4 * b->qkv_rows + 4 * qd + 2 * qd +
                                8 * c->d_ff + 2 * c->d_ff) +
                           prow * (hd + 2) * 4 +
                           (size_t)b->logit_cap * c->vocab_size * 4 + (64u << 20);
    size_t free_b = 0, total_b = 0;
    LPX_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    const bool tied = c->tied_embeddings || m->w.lm_head == m->w.tok_embd;
    weight_plan wp;
    LPX_TRY(plan_weights(m, tied, true, &wp));
    b->bf16_weights = ov.wq != 1 && (ov.wq == 0 || wp.bytes + kvbytes + scratch <= free_b);
    if (!b->bf16_weights) LPX_TRY(plan_weights(m, tied, false, &wp));
    const size_t wbytes = wp.bytes + wp.tile_elems * sizeof(bf16);
    const size_t need = wbytes + kvbytes + scratch;
    if (need > free_b)
        return lpx_errorf(LPX_ERR_NOMEM,
                          "cuda: %s: needs %.1f MiB (weights %.1f%s, KV cache %.1f for %d blocks, "
                          "scratch %.1f) but %.1f MiB of %.1f are free",
                          prop.name, need / 1048576.0, wbytes / 1048576.0,
                          b->bf16_weights ? " as bf16" : " kept quantized", kvbytes / 1048576.0,
                          eo->n_blocks, scratch / 1048576.0, free_b / 1048576.0,
                          total_b / 1048576.0);

    if (ov.qa != 0) b->qa = qkv_attn_plan(&shape, wp.qkv_kinds, wp.qkv_row_bytes, b->geom.fp8);
    int solo_smem = 0;
    LPX_TRY(matvec_init(&solo_smem));
    cuda_facts facts;
    LPX_TRY(gather_facts(&b->qa, &prop, solo_smem, &facts));
    lpx_cuda_tuning_resolve(&shape, &facts, &ov, &b->tune);
    b->mc.tune = &b->tune;
    LPX_TRY(trace_create(o->trace, c->n_layers, b->qa.cluster != 0, &b->trace));
    b->mc.probe = trace_probe(b->trace);
    b->tracing = trace_waits(b->trace);
    trace_report_plan(b->trace, &b->qa, &b->tune);
    LPX_TRY(flash_prefill_init());

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
    int64_t widest = d > c->d_ff ? d : c->d_ff;
    if (qd > widest) widest = qd;
    if (b->qkv_rows > widest) widest = b->qkv_rows;
    uint8_t *stage = (uint8_t *)malloc(wp.stage_bytes);
    float *tmp = (float *)malloc((size_t)widest * sizeof(float));
    b->layers = (cuda_layer *)calloc((size_t)c->n_layers, sizeof(cuda_layer));
    lpx_status s = LPX_OK;
    if (!stage || !tmp || !b->layers) s = lpx_errorf(LPX_ERR_NOMEM, "cuda: out of host memory");
    const lpx_weights *w = &m->w;
    merged e = {{w->tok_embd, NULL, NULL}, 1, false, d};
    if (s == LPX_OK) s = upload_matrix(b, &b->tok_embd, &e, stage, tmp);
    if (s == LPX_OK) {
        if (tied) {
            b->lm_head = b->tok_embd;
        } else {
            e.ts[0] = w->lm_head;
            s = upload_matrix(b, &b->lm_head, &e, stage, tmp);
        }
    }
    if (s == LPX_OK) s = check_shape(w->out_norm, "output_norm", -1, 1, d);
    if (s == LPX_OK) s = upload_vector(b, &b->out_norm, &w->out_norm, 1, tmp);
    if (s == LPX_OK && wp.tile_elems) {
        s = dalloc(b, (void **)&b->mc.wtile, wp.tile_elems * sizeof(bf16));
        b->mc.wtile_elems = wp.tile_elems;
    }
    for (int l = 0; s == LPX_OK && l < c->n_layers; l++) {
        const lpx_layer *L = &w->layers[l];
        cuda_layer *D = &b->layers[l];
        merged mt[4];
        s = layer_matrices(c, L, l, mt);
        wmat *dst[4] = {&D->wqkv, &D->wo, &D->wgu, &D->wdown};
        for (int k = 0; s == LPX_OK && k < 4; k++)
            s = upload_matrix(b, dst[k], &mt[k], stage, tmp);
        if (s == LPX_OK) s = upload_vector(b, &D->attn_norm, &L->attn_norm, 1, tmp);
        if (s == LPX_OK) s = upload_vector(b, &D->ffn_norm, &L->ffn_norm, 1, tmp);
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

    LPX_TRY(dalloc(b, &b->kv, kvbytes));
    LPX_CUDA_TRY(cudaMemset(b->kv, 0, kvbytes));
    if (b->geom.fp8)
        b->kvs = (float *)((uint8_t *)b->kv + (size_t)eo->n_blocks * kv_block_elem_bytes(&b->geom));
    const size_t in_elems = IN_BT * T + (size_t)b->seq_cap * b->max_blocks + AP_HDR +
                            (size_t)b->plan_cap * (sizeof(lpx_attn_item) / sizeof(int32_t));
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
    LPX_TRY(dalloc(b, (void **)&b->part_o, prow * hd * 4));
    LPX_TRY(dalloc(b, (void **)&b->part_ml, prow * 2 * 4));
    LPX_TRY(dalloc(b, (void **)&b->done, T * c->n_kv_heads * sizeof(int)));
    LPX_CUDA_TRY(cudaMemset(b->done, 0, T * c->n_kv_heads * sizeof(int)));
    LPX_TRY(dalloc(b, (void **)&b->logits, (size_t)b->logit_cap * c->vocab_size * 4));
    LPX_CUDA_TRY(cudaDeviceSynchronize());
    return LPX_OK;
}

static lpx_status cuda_create(const lpx_model *m, const lpx_backend_opts *o, lpx_backend **out) {
    cuda_backend *b = (cuda_backend *)calloc(1, sizeof(cuda_backend));
    if (!b) return lpx_errorf(LPX_ERR_NOMEM, "cuda: out of host memory");
    b->base.ops = &lpx_cuda_backend_ops;
    b->base.model = m;
    b->base.opts = *o;
    b->base.opts.tune = b->base.opts.trace = NULL; /* read at create only (into tune, trace) */
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
    const size_t bytes = kv_block_elem_bytes(&b->geom);
    uint8_t *kv = (uint8_t *)b->kv;
    LPX_CUDA_TRY(cudaSetDevice(b->device));
    LPX_CUDA_TRY(cudaMemcpyAsync(kv + dst * bytes, kv + src * bytes, bytes,
                                 cudaMemcpyDeviceToDevice, b->stream));
    if (b->geom.fp8) {
        const size_t sn = kv_block_scales(&b->geom);
        LPX_CUDA_TRY(cudaMemcpyAsync(b->kvs + dst * sn, b->kvs + src * sn, sn * sizeof(float),
                                     cudaMemcpyDeviceToDevice, b->stream));
    }
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

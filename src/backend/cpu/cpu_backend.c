/* The CPU backend: the reference implementation of the backend interface.
 *
 * Weights used in place from the model file: products over block types are
 * integer dot products against activations quantized to int8 per block of 32
 * (cpu_qdot.h; the kernels, AVX2 or plain C, picked per instance at create),
 * plain F32/F16/BF16 weights are dequantized a row at a time; everything else
 * is fp32, with a paged KV cache (fp32 by default, bf16 or fp8 on request: cpu_kv.h,
 * which has its layout) and a thread pool that splits every product over its output
 * rows and attention over (token, head). Attention reads bf16/fp8 keys and values
 * decoded to fp32, then runs the same fp32 arithmetic in the same order. */
#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/cpu_kv.h"
#include "base/checked.h"
#include "base/error.h"
#include "base/threadpool.h"
#include "sample/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cpu_layer_vecs {
    const float *attn_norm, *ffn_norm; /* (d_model) */
    const float *bq, *bk, *bv;         /* (q_dim), (kv_dim), (kv_dim), or NULL */
    const float *q_norm, *k_norm;      /* (head_dim), or NULL */
} cpu_layer_vecs;

typedef struct cpu_backend {
    lpx_backend base; /* first: the engine holds an lpx_backend * */
    lpx_threadpool *pool;
    int n_threads;
    cpu_qkernels qk;       /* the integer dots of this instance */
    bool exact;            /* tune act=f32: fp32 activations in every product */
    cpu_matmul_env env;    /* pool, kernels and scratch of every product */
    int64_t q_dim, kv_dim; /* n_heads * head_dim, n_kv_heads * head_dim */
    int64_t ctx_cap;       /* n_blocks * block_size: the longest possible context */
    size_t bytes;          /* weights + everything allocated here */

    cpu_kv kv;              /* the KV cache (cpu_kv.h) */
    float *kv_rows;         /* [n_threads][head_dim] a K or V head decoded (bf16, fp8) */
    float *vec_store;       /* 1-D weights converted to float */
    cpu_layer_vecs *layers; /* [n_layers], pointers into vec_store */
    const float *out_norm;  /* (d_model) */
    float *inv_freq;        /* (head_dim / 2) RoPE frequencies after scaling */

    /* scratch for up to max_batch_tokens tokens (T) */
    float *x;                   /* [T][d_model] residual stream */
    float *xb;                  /* [T][max(d_model, q_dim)] normed input / attention output */
    float *q;                   /* [T][q_dim] */
    float *k, *v;               /* [T][kv_dim] */
    float *gate, *up;           /* [T][d_ff] */
    float *rope_cos, *rope_sin; /* [T][head_dim / 2] */
    float *rowbuf;    /* [n_threads][CPU_MATMUL_ROWBUF(max cols)] dequantized weight rows */
    lpx_blk_q8 *xq;   /* [T][max cols / 32] a product's input, quantized */
    float *scores;    /* [n_threads][ctx_cap] attention weights */
    int32_t *tok_seq; /* [T] sequence index of each token */

    /* steps with sample: the host sampler over logits kept here */
    lpx_sampler sampler;
    float *sample_logits; /* [sample_rows][vocab] */
    int32_t sample_rows;

    /* step_begin/step_end, synchronously: step_begin runs the step at once and
     * queues its result; step_end hands the results over in order. */
    int32_t *ahead_tokens[2]; /* [2][max_batch_tokens] a FIFO of the steps in flight */
    int32_t ahead_n[2];       /* their n_logits */
    int32_t *ahead_out[2];    /* where step_end copies their tokens; NULL: a logits step */
    int ahead_head, ahead_count;
    int ahead_last;      /* slot of the last step begun (stays valid after its step_end) */
    bool ahead_feedable; /* ahead_last may be fed from: a step with sample, the last begun */
    int32_t *fed;        /* [max_batch_tokens] the batch's tokens with feed resolved */
} cpu_backend;

/* ---- creation ----------------------------------------------------------- */

static lpx_status alloc_floats(cpu_backend *b, float **p, int64_t n, const char *what) {
    size_t bytes;
    if (n < 0 || !lpx_mul_size((size_t)n, sizeof(float), &bytes))
        return lpx_errorf(LPX_ERR_NOMEM, "cpu backend: %s: size overflows", what);
    *p = calloc(bytes ? bytes : 1, 1);
    if (!*p)
        return lpx_errorf(LPX_ERR_NOMEM, "cpu backend: %s: cannot allocate %zu bytes", what, bytes);
    b->bytes += bytes;
    return LPX_OK;
}

static lpx_status check_matrix(const lpx_tensor *t, const char *role, int layer, int64_t rows,
                               int64_t cols) {
    if (!t) return lpx_errorf(LPX_ERR_FORMAT, "cpu backend: layer %d: %s missing", layer, role);
    size_t row_bytes;
    if (t->n_dims != 2 || t->shape[0] != rows || t->shape[1] != cols)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "cpu backend: tensor %s (%s): expected shape (%lld, %lld), found %d dims "
                          "(%lld, %lld)",
                          t->name, role, (long long)rows, (long long)cols, t->n_dims,
                          (long long)t->shape[0], (long long)(t->n_dims > 1 ? t->shape[1] : 0));
    if ((unsigned)t->type >= LPX_DT_COUNT || !lpx_dtype_row_bytes(t->type, cols, &row_bytes))
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "cpu backend: tensor %s: type %d with %lld columns",
                          t->name, (int)t->type, (long long)cols);
    size_t want;
    if (!lpx_mul_size(row_bytes, (size_t)rows, &want) || want != t->nbytes || !t->data)
        return lpx_errorf(LPX_ERR_FORMAT, "cpu backend: tensor %s: %zu bytes, expected %zu",
                          t->name, t->nbytes, want);
    return LPX_OK;
}

/* Converts a 1-D weight (norm scale, bias) of n elements to float at *dst and
 * advances *dst; a NULL tensor where optional gives NULL. */
static lpx_status load_vec(const lpx_tensor *t, const char *role, int64_t n, bool required,
                           float **dst, const float **out) {
    *out = NULL;
    if (!t) {
        if (required) return lpx_errorf(LPX_ERR_FORMAT, "cpu backend: %s missing", role);
        return LPX_OK;
    }
    size_t bytes;
    if (t->n_dims != 1 || t->shape[0] != n)
        return lpx_errorf(LPX_ERR_FORMAT, "cpu backend: tensor %s (%s): expected shape (%lld)",
                          t->name, role, (long long)n);
    if ((unsigned)t->type >= LPX_DT_COUNT || !lpx_dtype_row_bytes(t->type, n, &bytes) ||
        bytes != t->nbytes || !t->data)
        return lpx_errorf(LPX_ERR_FORMAT, "cpu backend: tensor %s (%s): bad type or size", t->name,
                          role);
    cpu_dequantize(t->type, t->data, *dst, n);
    *out = *dst;
    *dst += n;
    return LPX_OK;
}

/* RoPE inverse frequencies as Hugging Face computes them (in float32), with
 * Llama 3 or linear scaling applied. */
static void rope_frequencies(const lpx_config *c, float *inv_freq) {
    int64_t half = c->head_dim / 2;
    for (int64_t i = 0; i < half; i++) {
        float f = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->head_dim);
        if (c->rope_scaling == LPX_ROPE_LINEAR) {
            f /= c->rope_factor;
        } else if (c->rope_scaling == LPX_ROPE_LLAMA3) {
            float old_ctx = (float)c->rope_original_max_pos;
            float low_wavelen = old_ctx / c->rope_low_freq_factor;
            float high_wavelen = old_ctx / c->rope_high_freq_factor;
            float wavelen = 2.0f * (float)M_PI / f;
            if (wavelen > low_wavelen) {
                f /= c->rope_factor;
            } else if (wavelen >= high_wavelen) {
                float smooth = (old_ctx / wavelen - c->rope_low_freq_factor) /
                               (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1.0f - smooth) * f / c->rope_factor + smooth * f;
            }
        }
        inv_freq[i] = f;
    }
}

static lpx_status check_config(const lpx_config *c) {
    if (c->n_layers <= 0 || c->d_model <= 0 || c->n_heads <= 0 || c->n_kv_heads <= 0 ||
        c->head_dim <= 0 || c->head_dim % 2 || c->d_ff <= 0 || c->vocab_size <= 0 ||
        c->n_heads % c->n_kv_heads)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "cpu backend: bad config: %d layers, d_model %d, %d heads, %d kv heads, "
                          "head_dim %d, d_ff %d, vocab %d",
                          c->n_layers, c->d_model, c->n_heads, c->n_kv_heads, c->head_dim, c->d_ff,
                          c->vocab_size);
    if (!(c->rope_theta > 0) || !(c->rms_norm_eps >= 0))
        return lpx_errorf(LPX_ERR_FORMAT, "cpu backend: rope_theta %g, rms_norm_eps %g",
                          c->rope_theta, c->rms_norm_eps);
    if (c->rope_scaling != LPX_ROPE_NONE && !(c->rope_factor > 0))
        return lpx_errorf(LPX_ERR_FORMAT, "cpu backend: rope scaling factor %g", c->rope_factor);
    if (c->rope_scaling == LPX_ROPE_LLAMA3 &&
        !(c->rope_high_freq_factor > c->rope_low_freq_factor && c->rope_low_freq_factor > 0 &&
          c->rope_original_max_pos > 0))
        return lpx_errorf(LPX_ERR_FORMAT,
                          "cpu backend: llama3 rope: low_freq_factor %g, high_freq_factor %g, "
                          "original_max_position_embeddings %d",
                          c->rope_low_freq_factor, c->rope_high_freq_factor,
                          c->rope_original_max_pos);
    return LPX_OK;
}

static lpx_status check_weights(const lpx_model *m) {
    const lpx_config *c = &m->cfg;
    const lpx_weights *w = &m->w;
    int64_t d = c->d_model, q = (int64_t)c->n_heads * c->head_dim,
            kv = (int64_t)c->n_kv_heads * c->head_dim;
    LPX_TRY(check_matrix(w->tok_embd, "token embedding", -1, c->vocab_size, d));
    LPX_TRY(check_matrix(w->lm_head, "lm_head", -1, c->vocab_size, d));
    if (!w->layers) return lpx_errorf(LPX_ERR_FORMAT, "cpu backend: model has no layers");
    for (int l = 0; l < c->n_layers; l++) {
        const lpx_layer *L = &w->layers[l];
        LPX_TRY(check_matrix(L->wq, "attn_q", l, q, d));
        LPX_TRY(check_matrix(L->wk, "attn_k", l, kv, d));
        LPX_TRY(check_matrix(L->wv, "attn_v", l, kv, d));
        LPX_TRY(check_matrix(L->wo, "attn_output", l, d, q));
        LPX_TRY(check_matrix(L->w_gate, "ffn_gate", l, c->d_ff, d));
        LPX_TRY(check_matrix(L->w_up, "ffn_up", l, c->d_ff, d));
        LPX_TRY(check_matrix(L->w_down, "ffn_down", l, d, c->d_ff));
    }
    return LPX_OK;
}

static void cpu_destroy(lpx_backend *base) {
    cpu_backend *b = (cpu_backend *)base;
    if (!b) return;
    lpx_threadpool_destroy(b->pool);
    cpu_kv_free(&b->kv);
    free(b->kv_rows);
    free(b->vec_store);
    free(b->layers);
    free(b->inv_freq);
    free(b->x);
    free(b->xb);
    free(b->q);
    free(b->k);
    free(b->v);
    free(b->gate);
    free(b->up);
    free(b->rope_cos);
    free(b->rope_sin);
    free(b->rowbuf);
    free(b->xq);
    free(b->scores);
    free(b->tok_seq);
    lpx_sampler_free(&b->sampler);
    free(b->sample_logits);
    free(b->ahead_tokens[0]);
    free(b->ahead_tokens[1]);
    free(b->fed);
    free(b);
}

static lpx_status cpu_create_into(cpu_backend *b, const lpx_model *m) {
    const lpx_config *c = &m->cfg;
    const lpx_backend_opts *o = &b->base.opts;
    LPX_TRY(check_config(c));
    LPX_TRY(check_weights(m));
    for (int64_t i = 0; i < m->n_tensors; i++)
        b->bytes += m->tensors[i].nbytes;

    int64_t d = c->d_model, hd = c->head_dim, L = c->n_layers, T = o->max_batch_tokens;
    b->q_dim = (int64_t)c->n_heads * hd;
    b->kv_dim = (int64_t)c->n_kv_heads * hd;
    b->ctx_cap = (int64_t)o->n_blocks * o->block_size;
    LPX_TRY(cpu_kv_init(&b->kv, c, o->kv_dtype, o->n_blocks, o->block_size));
    b->bytes += b->kv.bytes;

    /* 1-D weights: per layer 2 norms, up to 3 biases and 2 q/k norms; out_norm. */
    int64_t per_layer = 2 * d + b->q_dim + 2 * b->kv_dim + 2 * hd;
    LPX_TRY(alloc_floats(b, &b->vec_store, L * per_layer + d, "norm weights"));
    b->layers = calloc((size_t)L, sizeof *b->layers);
    if (!b->layers) return lpx_errorf(LPX_ERR_NOMEM, "cpu backend: out of memory");
    float *dst = b->vec_store;
    for (int l = 0; l < L; l++) {
        const lpx_layer *src = &m->w.layers[l];
        cpu_layer_vecs *v = &b->layers[l];
        LPX_TRY(load_vec(src->attn_norm, "attn_norm", d, true, &dst, &v->attn_norm));
        LPX_TRY(load_vec(src->ffn_norm, "ffn_norm", d, true, &dst, &v->ffn_norm));
        LPX_TRY(load_vec(src->bq, "attn_q bias", b->q_dim, c->qkv_bias, &dst, &v->bq));
        LPX_TRY(load_vec(src->bk, "attn_k bias", b->kv_dim, c->qkv_bias, &dst, &v->bk));
        LPX_TRY(load_vec(src->bv, "attn_v bias", b->kv_dim, c->qkv_bias, &dst, &v->bv));
        LPX_TRY(load_vec(src->q_norm, "attn_q_norm", hd, c->qk_norm, &dst, &v->q_norm));
        LPX_TRY(load_vec(src->k_norm, "attn_k_norm", hd, c->qk_norm, &dst, &v->k_norm));
    }
    LPX_TRY(load_vec(m->w.out_norm, "output_norm", d, true, &dst, &b->out_norm));

    LPX_TRY(alloc_floats(b, &b->inv_freq, hd / 2, "rope"));
    rope_frequencies(c, b->inv_freq);

    LPX_TRY(lpx_threadpool_create(o->n_threads, &b->pool));
    b->n_threads = lpx_threadpool_size(b->pool);
    int64_t wide = d > b->q_dim ? d : b->q_dim;
    int64_t max_cols = wide > c->d_ff ? wide : c->d_ff;
    LPX_TRY(alloc_floats(b, &b->x, T * d, "activations"));
    LPX_TRY(alloc_floats(b, &b->xb, T * wide, "activations"));
    LPX_TRY(alloc_floats(b, &b->q, T * b->q_dim, "activations"));
    LPX_TRY(alloc_floats(b, &b->k, T * b->kv_dim, "activations"));
    LPX_TRY(alloc_floats(b, &b->v, T * b->kv_dim, "activations"));
    LPX_TRY(alloc_floats(b, &b->gate, T * c->d_ff, "activations"));
    LPX_TRY(alloc_floats(b, &b->up, T * c->d_ff, "activations"));
    LPX_TRY(alloc_floats(b, &b->rope_cos, T * (hd / 2), "rope"));
    LPX_TRY(alloc_floats(b, &b->rope_sin, T * (hd / 2), "rope"));
    LPX_TRY(alloc_floats(b, &b->rowbuf, b->n_threads * CPU_MATMUL_ROWBUF(max_cols), "row buffers"));
    size_t xq_bytes; /* T is at most INT32_MAX, max_cols / 32 too */
    if (!lpx_mul_size((size_t)T * (size_t)(max_cols / LPX_QK), sizeof *b->xq, &xq_bytes) ||
        !(b->xq = calloc(xq_bytes ? xq_bytes : 1, 1)))
        return lpx_errorf(LPX_ERR_NOMEM, "cpu backend: quantized inputs: cannot allocate");
    b->bytes += xq_bytes;
    b->env = (cpu_matmul_env){b->pool, b->exact ? NULL : &b->qk, b->rowbuf,
                              CPU_MATMUL_ROWBUF(max_cols), b->xq};
    int64_t score_floats;
    if (!lpx_mul_i64(b->ctx_cap, b->n_threads, &score_floats))
        return lpx_errorf(LPX_ERR_NOMEM, "cpu backend: attention scratch overflows");
    LPX_TRY(alloc_floats(b, &b->scores, score_floats, "attention scratch"));
    LPX_TRY(alloc_floats(b, &b->kv_rows, b->n_threads * hd, "attention scratch"));
    b->tok_seq = calloc((size_t)T, sizeof *b->tok_seq);
    b->ahead_tokens[0] = calloc((size_t)T, sizeof(int32_t));
    b->ahead_tokens[1] = calloc((size_t)T, sizeof(int32_t));
    b->fed = calloc((size_t)T, sizeof *b->fed);
    if (!b->tok_seq || !b->ahead_tokens[0] || !b->ahead_tokens[1] || !b->fed)
        return lpx_errorf(LPX_ERR_NOMEM, "cpu backend: out of memory");
    return LPX_OK;
}

/* The CPU backend's developer tuning (docs/dev.md): comma-separated isa=avx2|c
 * (the integer dot kernels; default: the best the CPU runs) and act=q8|f32
 * (f32: fp32 activations in every product, the exact mode the transformers
 * references are checked in). */
static lpx_status parse_tune(const char *tune, char isa[8], bool *exact) {
    for (const char *p = tune; p && *p;) {
        size_t n = strcspn(p, ",");
#define ITEM(s) (n == sizeof s - 1 && !strncmp(p, s, n))
        if (ITEM("isa=c") || ITEM("isa=avx2"))
            snprintf(isa, 8, "%.*s", (int)n - 4, p + 4);
        else if (ITEM("act=q8") || ITEM("act=f32"))
            *exact = ITEM("act=f32");
        else
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "cpu tune: '%.*s': expected isa=avx2|c or act=q8|f32 (docs/dev.md)",
                              (int)(n > 40 ? 40 : n), p);
#undef ITEM
        p += n + (p[n] == ',');
    }
    return LPX_OK;
}

static lpx_status cpu_create(const lpx_model *m, const lpx_backend_opts *o, lpx_backend **out) {
    *out = NULL;
    lpx_backend_opts opts = *o;
    if (o->trace && o->trace[0])
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "cpu backend: developer tracing \"%s\": the CPU backend has none "
                          "(docs/dev.md)",
                          o->trace);
    char isa[8] = "";
    bool exact = false;
    LPX_TRY(parse_tune(o->tune, isa, &exact));
    opts.tune = opts.trace = NULL; /* not kept: read at create only */
    if (opts.block_size == 0) opts.block_size = 16;
    if (opts.block_size < 0 || opts.n_blocks <= 0 || opts.max_batch_tokens <= 0 ||
        opts.max_seqs <= 0)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "cpu backend: block_size %d, n_blocks %d, max_batch_tokens %d, max_seqs "
                          "%d: all must be positive",
                          opts.block_size, opts.n_blocks, opts.max_batch_tokens, opts.max_seqs);
    cpu_backend *b = calloc(1, sizeof *b);
    if (!b) return lpx_errorf(LPX_ERR_NOMEM, "cpu backend: out of memory");
    b->base.ops = &lpx_cpu_backend_ops;
    b->base.model = m;
    b->base.opts = opts;
    b->exact = exact;
    if (!cpu_qkernels_init(&b->qk, isa)) {
        free(b);
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "cpu tune: isa=%s: this CPU lacks it", isa);
    }
    lpx_status s = cpu_create_into(b, m);
    if (s != LPX_OK) {
        cpu_destroy(&b->base);
        return s;
    }
    *out = &b->base;
    return LPX_OK;
}

/* ---- one step ----------------------------------------------------------- */

static lpx_status check_batch(const cpu_backend *b, const lpx_batch *bt) {
    const lpx_backend_opts *o = &b->base.opts;
    const int32_t vocab = b->base.model->cfg.vocab_size;
    if (bt->n_tokens <= 0 || bt->n_tokens > o->max_batch_tokens)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cpu backend: batch of %d tokens (limit %d)",
                          bt->n_tokens, o->max_batch_tokens);
    if (bt->n_seqs <= 0 || bt->n_seqs > o->max_seqs || bt->max_blocks <= 0)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "cpu backend: batch of %d sequences (limit %d), %d blocks per row",
                          bt->n_seqs, o->max_seqs, bt->max_blocks);
    if (bt->n_logits < 0 || bt->n_logits > bt->n_tokens)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cpu backend: %d logit rows for %d tokens",
                          bt->n_logits, bt->n_tokens);
    if (bt->seq_start[0] != 0 || bt->seq_start[bt->n_seqs] != bt->n_tokens)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "cpu backend: seq_start must run from 0 to n_tokens %d", bt->n_tokens);
    for (int32_t s = 0; s < bt->n_seqs; s++) {
        int32_t a = bt->seq_start[s], e = bt->seq_start[s + 1], len = bt->seq_len[s];
        if (e <= a || len < e - a || (int64_t)len > b->ctx_cap ||
            (int64_t)len > (int64_t)bt->max_blocks * o->block_size)
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "cpu backend: sequence %d: tokens %d..%d, context length %d "
                              "(capacity %lld)",
                              s, a, e, len, (long long)b->ctx_cap);
        const int32_t *table = bt->block_table + (int64_t)s * bt->max_blocks;
        for (int32_t i = 0; i < (len + o->block_size - 1) / o->block_size; i++)
            if (table[i] < 0 || table[i] >= o->n_blocks)
                return lpx_errorf(LPX_ERR_INVALID_ARG,
                                  "cpu backend: sequence %d: block %d is %d (have %d blocks)", s, i,
                                  table[i], o->n_blocks);
        for (int32_t t = a; t < e; t++) {
            if (bt->positions[t] != len - (e - t))
                return lpx_errorf(
                    LPX_ERR_INVALID_ARG,
                    "cpu backend: token %d of sequence %d at position %d, expected %d", t, s,
                    bt->positions[t], len - (e - t));
            if (bt->tokens[t] < 0 || bt->tokens[t] >= vocab)
                return lpx_errorf(LPX_ERR_INVALID_ARG,
                                  "cpu backend: token id %d outside the vocabulary (%d)",
                                  bt->tokens[t], vocab);
        }
    }
    for (int32_t i = 0; i < bt->n_logits; i++)
        if (bt->logit_rows[i] < 0 || bt->logit_rows[i] >= bt->n_tokens)
            return lpx_errorf(LPX_ERR_INVALID_ARG, "cpu backend: logit row %d of %d tokens",
                              bt->logit_rows[i], bt->n_tokens);
    return LPX_OK;
}

typedef struct attn_ctx {
    cpu_backend *b;
    const lpx_batch *bt;
    int layer;
} attn_ctx;

/* Attention of items [begin, end), item = token * n_heads + head: softmax of
 * q.k / sqrt(head_dim) over the sequence's positions up to the token's own
 * (and inside the sliding window when the model has one), times V. */
static void attention_items(void *arg, int64_t begin, int64_t end, int thread) {
    const attn_ctx *a = arg;
    cpu_backend *b = a->b;
    const lpx_config *c = &b->base.model->cfg;
    const lpx_batch *bt = a->bt;
    const int64_t hd = c->head_dim, bs = b->base.opts.block_size;
    const int group = c->n_heads / c->n_kv_heads;
    const float scale = 1.0f / sqrtf((float)hd);
    float *scores = b->scores + (int64_t)thread * b->ctx_cap;
    float *row = b->kv_rows + (int64_t)thread * hd; /* (head_dim) */
    for (int64_t it = begin; it < end; it++) {
        int64_t t = it / c->n_heads;
        int h = (int)(it % c->n_heads), kvh = h / group;
        const int32_t *table = bt->block_table + (int64_t)b->tok_seq[t] * bt->max_blocks;
        int64_t pos = bt->positions[t];
        int64_t lo =
            c->sliding_window > 0 && pos >= c->sliding_window ? pos - c->sliding_window + 1 : 0;
        const float *q = b->q + t * b->q_dim + h * hd; /* (head_dim) */
        float *out = b->xb + t * b->q_dim + h * hd;    /* (head_dim) */
        float mx = -INFINITY;
        for (int64_t j = lo; j <= pos; j++) {
            const float *k = cpu_kv_read(&b->kv, table[j / bs], a->layer, 0, j % bs, kvh, row);
            float s = cpu_dot(q, k, hd) * scale;
            scores[j - lo] = s;
            if (s > mx) mx = s;
        }
        float sum = 0.0f;
        for (int64_t j = lo; j <= pos; j++) {
            float e = expf(scores[j - lo] - mx);
            scores[j - lo] = e;
            sum += e;
        }
        memset(out, 0, (size_t)hd * sizeof *out);
        float inv = 1.0f / sum;
        for (int64_t j = lo; j <= pos; j++) {
            const float *v = cpu_kv_read(&b->kv, table[j / bs], a->layer, 1, j % bs, kvh, row);
            cpu_axpy(out, scores[j - lo] * inv, v, hd);
        }
    }
}

static void matmul(cpu_backend *b, const cpu_matmul_job *jobs, int n_jobs, const float *x,
                   int64_t ldx, int64_t n_tok) {
    cpu_matmul(&b->env, jobs, n_jobs, x, ldx, n_tok);
}

static void layer_forward(cpu_backend *b, const lpx_batch *bt, int l) {
    const lpx_config *c = &b->base.model->cfg;
    const lpx_layer *w = &b->base.model->w.layers[l];
    const cpu_layer_vecs *v = &b->layers[l];
    const int64_t T = bt->n_tokens, d = c->d_model, hd = c->head_dim, bs = b->base.opts.block_size;

    for (int64_t t = 0; t < T; t++)
        cpu_rmsnorm(b->xb + t * d, b->x + t * d, v->attn_norm, d, c->rms_norm_eps);
    cpu_matmul_job qkv[3] = {
        {w->wq, v->bq, b->q, b->q_dim, false},
        {w->wk, v->bk, b->k, b->kv_dim, false},
        {w->wv, v->bv, b->v, b->kv_dim, false},
    };
    matmul(b, qkv, 3, b->xb, d, T);

    for (int64_t t = 0; t < T; t++) {
        const float *cs = b->rope_cos + t * (hd / 2), *sn = b->rope_sin + t * (hd / 2);
        for (int h = 0; h < c->n_heads; h++) {
            float *q = b->q + t * b->q_dim + h * hd; /* (head_dim) */
            if (v->q_norm) cpu_rmsnorm(q, q, v->q_norm, hd, c->rms_norm_eps);
            cpu_rope(q, cs, sn, hd, c->rope_interleaved);
        }
        for (int h = 0; h < c->n_kv_heads; h++) {
            float *k = b->k + t * b->kv_dim + h * hd; /* (head_dim) */
            if (v->k_norm) cpu_rmsnorm(k, k, v->k_norm, hd, c->rms_norm_eps);
            cpu_rope(k, cs, sn, hd, c->rope_interleaved);
        }
        /* The chunk's own K/V go into the cache first; causality comes from
         * each token attending only up to its own position. */
        const int32_t *table = bt->block_table + (int64_t)b->tok_seq[t] * bt->max_blocks;
        int64_t pos = bt->positions[t];
        cpu_kv_write(&b->kv, table[pos / bs], l, 0, pos % bs, b->k + t * b->kv_dim, b->kv_rows);
        cpu_kv_write(&b->kv, table[pos / bs], l, 1, pos % bs, b->v + t * b->kv_dim, b->kv_rows);
    }

    attn_ctx a = {b, bt, l};
    lpx_parallel_for(b->pool, T * c->n_heads, 1, attention_items, &a);
    cpu_matmul_job o = {w->wo, NULL, b->x, d, true};
    matmul(b, &o, 1, b->xb, b->q_dim, T);

    for (int64_t t = 0; t < T; t++)
        cpu_rmsnorm(b->xb + t * d, b->x + t * d, v->ffn_norm, d, c->rms_norm_eps);
    cpu_matmul_job gu[2] = {
        {w->w_gate, NULL, b->gate, c->d_ff, false},
        {w->w_up, NULL, b->up, c->d_ff, false},
    };
    matmul(b, gu, 2, b->xb, d, T);
    cpu_swiglu(b->gate, b->up, T * c->d_ff);
    cpu_matmul_job down = {w->w_down, NULL, b->x, d, true};
    matmul(b, &down, 1, b->gate, c->d_ff, T);
}

static lpx_status forward(lpx_backend *base, const lpx_batch *bt, float *logits) {
    cpu_backend *b = (cpu_backend *)base;
    const lpx_model *m = base->model;
    const lpx_config *c = &m->cfg;
    LPX_TRY(check_batch(b, bt));
    const int64_t T = bt->n_tokens, d = c->d_model, half = c->head_dim / 2;

    for (int32_t s = 0; s < bt->n_seqs; s++)
        for (int32_t t = bt->seq_start[s]; t < bt->seq_start[s + 1]; t++)
            b->tok_seq[t] = s;
    for (int64_t t = 0; t < T; t++) {
        /* Angles in float32 as Hugging Face computes them (position * inv_freq). */
        for (int64_t i = 0; i < half; i++) {
            float ang = (float)bt->positions[t] * b->inv_freq[i];
            b->rope_cos[t * half + i] = cosf(ang);
            b->rope_sin[t * half + i] = sinf(ang);
        }
        const float *e = cpu_weight_row(m->w.tok_embd, bt->tokens[t], b->x + t * d);
        if (e != b->x + t * d) memcpy(b->x + t * d, e, (size_t)d * sizeof(float));
    }

    for (int l = 0; l < c->n_layers; l++)
        layer_forward(b, bt, l);

    if (bt->n_logits == 0) return LPX_OK;
    for (int32_t i = 0; i < bt->n_logits; i++)
        cpu_rmsnorm(b->xb + i * d, b->x + (int64_t)bt->logit_rows[i] * d, b->out_norm, d,
                    c->rms_norm_eps);
    cpu_matmul_job head = {m->w.lm_head, NULL, logits, c->vocab_size, false};
    matmul(b, &head, 1, b->xb, d, bt->n_logits);
    return LPX_OK;
}

/* A step with sample, on the host: the step's logits, then the host sampler, so the
 * engine's device-sampling path runs (and is tested) without a GPU. */
static lpx_status forward_sample(lpx_backend *base, const lpx_batch *bt, const lpx_sample_batch *sb,
                                 int32_t *tokens) {
    cpu_backend *b = (cpu_backend *)base;
    const int32_t V = base->model->cfg.vocab_size;
    LPX_TRY(lpx_sample_batch_check(sb, bt->n_logits, V));
    if (!b->sampler.vocab) LPX_TRY(lpx_sampler_init(&b->sampler, V));
    if (bt->n_logits > b->sample_rows) {
        size_t bytes;
        if (!lpx_mul_size((size_t)bt->n_logits * sizeof(float), (size_t)V, &bytes))
            return lpx_errorf(LPX_ERR_NOMEM, "cpu backend: %d logits rows overflow", bt->n_logits);
        float *l = realloc(b->sample_logits, bytes);
        if (!l)
            return lpx_errorf(LPX_ERR_NOMEM, "cpu backend: %d logits rows: out of memory",
                              bt->n_logits);
        b->sample_logits = l;
        b->sample_rows = bt->n_logits;
    }
    LPX_TRY(forward(base, bt, b->sample_logits));
    for (int32_t i = 0; i < bt->n_logits; i++) {
        const lpx_sample_row *r = &sb->rows[i];
        const bool pen = lpx_sampling_penalized(&r->p);
        tokens[i] =
            lpx_sample(&b->sampler, &r->p, r->seed, r->index, b->sample_logits + (size_t)i * V,
                       pen ? sb->seen + r->seen_start : NULL, pen ? r->n_seen : 0, NULL, NULL);
    }
    return LPX_OK;
}

/* The batch's tokens into b->fed, each fed one taken from the last step begun. */
static lpx_status resolve_feed(cpu_backend *b, const lpx_batch *bt, const lpx_sample_batch *sb,
                               const int32_t *feed) {
    if (bt->n_tokens <= 0 || bt->n_tokens > b->base.opts.max_batch_tokens || bt->n_logits < 0 ||
        bt->n_logits > bt->n_tokens)
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "cpu backend: step_begin: %d tokens (limit %d), %d logit rows",
                          bt->n_tokens, b->base.opts.max_batch_tokens, bt->n_logits);
    bool fed = false;
    for (int32_t i = 0; i < bt->n_tokens; i++) {
        b->fed[i] = bt->tokens[i];
        if (!feed || feed[i] < 0) continue;
        if (!b->ahead_feedable)
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "cpu backend: step_begin: token %d is fed (row %d) but the last "
                              "step begun was not a step with sample that began",
                              i, feed[i]);
        if (feed[i] >= b->ahead_n[b->ahead_last])
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "cpu backend: step_begin: token %d is fed from row %d of a step "
                              "with %d logit rows",
                              i, feed[i], b->ahead_n[b->ahead_last]);
        b->fed[i] = b->ahead_tokens[b->ahead_last][feed[i]];
        fed = true;
    }
    for (int32_t i = 0; fed && sb && sb->rows && i < bt->n_logits; i++)
        if (lpx_sampling_penalized(&sb->rows[i].p))
            return lpx_errorf(LPX_ERR_INVALID_ARG,
                              "cpu backend: step_begin: row %d has a penalty in a step with fed "
                              "tokens (its token counts would miss them)",
                              i);
    return LPX_OK;
}

static lpx_status cpu_step_begin(lpx_backend *base, const lpx_step *st) {
    cpu_backend *b = (cpu_backend *)base;
    const lpx_batch *bt = st->batch;
    if (b->ahead_count == 2)
        return lpx_errorf(LPX_ERR_BUSY, "cpu backend: step_begin: two steps in flight already");
    if (b->ahead_count > 0 && (!st->sample || !b->ahead_out[b->ahead_last]))
        return lpx_errorf(LPX_ERR_BUSY,
                          "cpu backend: step_begin: a step without sample runs alone (%d in "
                          "flight)",
                          b->ahead_count);
    int slot = (b->ahead_head + b->ahead_count) % 2;
    lpx_status s;
    if (!st->sample) {
        s = st->feed || !st->logits
                ? lpx_errorf(LPX_ERR_INVALID_ARG,
                             "cpu backend: step_begin: a step without sample takes logits "
                             "and no feed")
                : forward(base, bt, st->logits);
        b->ahead_feedable = false;
    } else {
        s = resolve_feed(b, bt, st->sample, st->feed);
        lpx_batch run = *bt;
        run.tokens = b->fed;
        if (s == LPX_OK) s = forward_sample(base, &run, st->sample, b->ahead_tokens[slot]);
        b->ahead_feedable = s == LPX_OK;
    }
    if (s != LPX_OK) return s;
    b->ahead_n[slot] = bt->n_logits;
    b->ahead_out[slot] = st->sample ? st->tokens : NULL;
    b->ahead_last = slot;
    b->ahead_count++;
    return LPX_OK;
}

static lpx_status cpu_step_end(lpx_backend *base) {
    cpu_backend *b = (cpu_backend *)base;
    if (b->ahead_count == 0)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cpu backend: step_end: no step in flight");
    int slot = b->ahead_head;
    if (b->ahead_out[slot] && b->ahead_n[slot] > 0)
        memcpy(b->ahead_out[slot], b->ahead_tokens[slot],
               (size_t)b->ahead_n[slot] * sizeof(int32_t));
    b->ahead_head = (slot + 1) % 2;
    b->ahead_count--;
    return LPX_OK;
}

static lpx_status cpu_copy_block(lpx_backend *base, int32_t src, int32_t dst) {
    cpu_backend *b = (cpu_backend *)base;
    if (src < 0 || dst < 0 || src >= base->opts.n_blocks || dst >= base->opts.n_blocks)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "cpu backend: copy block %d to %d of %d", src, dst,
                          base->opts.n_blocks);
    cpu_kv_copy_block(&b->kv, src, dst);
    return LPX_OK;
}

static size_t cpu_memory_used(const lpx_backend *base) {
    return ((const cpu_backend *)base)->bytes;
}

const lpx_backend_ops lpx_cpu_backend_ops = {
    .name = "cpu",
    .create = cpu_create,
    .step_begin = cpu_step_begin,
    .step_end = cpu_step_end,
    .copy_block = cpu_copy_block,
    .memory_used = cpu_memory_used,
    .destroy = cpu_destroy,
};

/* lpx quantize's job: plan each tensor's type, write the metadata, convert the tensors
 * row by row on a thread pool (dequantize the source row, quantize it), stream them
 * into the GGUF writer. Rules and methods: quantize_model.h, docs/quantize.md. */
#include "model/quantize_model.h"

#include "base/checked.h"
#include "base/error.h"
#include "base/threadpool.h"
#include "format/ggml.h"
#include "format/gguf_write.h"
#include "format/quantize.h"
#include "model/hf_gguf_tokenizer.h"
#include "model/loader.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ggml type ids (ggml.h) and llama.cpp's llama_ftype values for general.file_type. */
static const uint32_t ggml_id[LPX_DT_COUNT] = {
    [LPX_DT_F32] = 0,  [LPX_DT_F16] = 1,   [LPX_DT_BF16] = 30, [LPX_DT_Q8_0] = 8, [LPX_DT_Q4_0] = 2,
    [LPX_DT_Q4_1] = 3, [LPX_DT_Q4_K] = 12, [LPX_DT_Q5_K] = 13, [LPX_DT_Q6_K] = 14};

static const struct kind {
    const char *name;
    lpx_dtype base;
    uint32_t file_type;
    bool mix; /* q4_k_m: Q6_K for a share of attn_v and ffn_down */
} kinds[] = {
    {"q8_0", LPX_DT_Q8_0, 7, false},   {"q4_0", LPX_DT_Q4_0, 2, false},
    {"q4_1", LPX_DT_Q4_1, 3, false},   {"q5_k", LPX_DT_Q5_K, 16, false},
    {"q4_k_m", LPX_DT_Q4_K, 15, true}, {"q6_k", LPX_DT_Q6_K, 18, false},
    {"bf16", LPX_DT_BF16, 32, false},  {"f16", LPX_DT_F16, 1, false},
};

static bool quantized(lpx_dtype t) {
    return t != LPX_DT_F32 && t != LPX_DT_F16 && t != LPX_DT_BF16;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers and every third
 * between. */
static bool more_bits(long i, long n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* A type whose block divides `cols`: the K-quants fall back to the 32-blocks (Q4_K to
 * Q4_1, the 5- and 6-bit ones to Q8_0: lpx keeps no Q5_0/Q5_1), those to F32. */
static lpx_dtype fitting(lpx_dtype t, int64_t cols) {
    while (cols % lpx_dtype_block_elems(t))
        t = t == LPX_DT_Q4_K                  ? LPX_DT_Q4_1
            : lpx_dtype_block_elems(t) == 256 ? LPX_DT_Q8_0
                                              : LPX_DT_F32;
    return t;
}

/* One output tensor: where its values come from and what it becomes. */
typedef struct job_tensor {
    char name[96];
    const lpx_tensor *src;
    lpx_dtype type;
    int64_t rows, cols;
    int32_t perm_heads; /* > 0: q/k rows permuted to llama.cpp's interleaved rope (heads) */
    char note[128];
    size_t nbytes;
} job_tensor;

static void plan(const struct kind *k, const lpx_model *m, job_tensor *jt) {
    const lpx_tensor *t = jt->src;
    jt->rows = lpx_tensor_rows(t);
    jt->cols = lpx_tensor_cols(t);
    jt->note[0] = 0;
    if (t->n_dims == 1 || !strcmp(jt->name, "rope_freqs.weight")) {
        jt->type = LPX_DT_F32;
        return;
    }
    lpx_dtype want = k->base;
    const char *n = jt->name;
    bool output =
        !strcmp(n, "output.weight") || (m->cfg.tied_embeddings && !strcmp(n, "token_embd.weight"));
    long layer = -1;
    if (!strncmp(n, "blk.", 4)) layer = strtol(n + 4, NULL, 10);
    if (quantized(want) && output && want != LPX_DT_Q8_0) want = LPX_DT_Q6_K;
    if (k->mix && layer >= 0 && (strstr(n, ".attn_v.") || strstr(n, ".ffn_down.")) &&
        more_bits(layer, m->cfg.n_layers))
        want = LPX_DT_Q6_K;
    jt->type = fitting(want, jt->cols);
    if (jt->type != want)
        snprintf(jt->note, sizeof jt->note, "%s needs rows of %d, these have %lld: %s",
                 lpx_dtype_name(want), lpx_dtype_block_elems(want), (long long)jt->cols,
                 lpx_dtype_name(jt->type));
}

/* ---- metadata ------------------------------------------------------------ */

static void kv_arch_u32(lpx_gguf_writer *w, const char *arch, const char *key, int64_t v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    lpx_gguf_kv_u32(w, k, (uint32_t)v);
}
static void kv_arch_f32(lpx_gguf_writer *w, const char *arch, const char *key, float v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    lpx_gguf_kv_f32(w, k, v);
}

/* A directory's config as llama.cpp's converter writes it. */
static void hf_metadata(lpx_gguf_writer *w, const lpx_model *m, const char *arch) {
    const lpx_config *c = &m->cfg;
    lpx_gguf_kv_str(w, "general.architecture", arch, strlen(arch));
    const char *base = strrchr(m->path, '/');
    base = base && base[1] ? base + 1 : m->path;
    lpx_gguf_kv_str(w, "general.name", base, strlen(base));
    kv_arch_u32(w, arch, "block_count", c->n_layers);
    kv_arch_u32(w, arch, "context_length", c->max_position_embeddings);
    kv_arch_u32(w, arch, "embedding_length", c->d_model);
    kv_arch_u32(w, arch, "feed_forward_length", c->d_ff);
    kv_arch_u32(w, arch, "attention.head_count", c->n_heads);
    kv_arch_u32(w, arch, "attention.head_count_kv", c->n_kv_heads);
    kv_arch_u32(w, arch, "attention.key_length", c->head_dim);
    kv_arch_u32(w, arch, "attention.value_length", c->head_dim);
    kv_arch_f32(w, arch, "attention.layer_norm_rms_epsilon", c->rms_norm_eps);
    kv_arch_f32(w, arch, "rope.freq_base", c->rope_theta);
    kv_arch_u32(w, arch, "rope.dimension_count", c->head_dim);
    kv_arch_u32(w, arch, "vocab_size", c->vocab_size);
    if (c->rope_scaling == LPX_ROPE_LINEAR) {
        char k[128];
        snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
        lpx_gguf_kv_str(w, k, "linear", 6);
        kv_arch_f32(w, arch, "rope.scaling.factor", c->rope_factor);
    } else if (c->rope_scaling == LPX_ROPE_LLAMA3) {
        kv_arch_u32(w, arch, "rope.scaling.original_context_length", c->rope_original_max_pos);
    }
    if (m->gen.bos_id >= 0)
        lpx_gguf_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)m->gen.bos_id);
    if (m->gen.n_eos)
        lpx_gguf_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)m->gen.eos_ids[0]);
    if (m->chat_template)
        lpx_gguf_kv_str(w, "tokenizer.chat_template", m->chat_template, strlen(m->chat_template));
}

/* Llama 3 scaling as llama.cpp stores it: one divisor per rotary frequency. */
static void llama3_freqs(const lpx_config *c, float *div) {
    const double pi = 3.14159265358979323846, orig = c->rope_original_max_pos;
    const double lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
    for (int i = 0; i < c->head_dim / 2; i++) {
        double freq = pow(c->rope_theta, -2.0 * i / c->head_dim), wl = 2 * pi / freq;
        double smooth = (orig / wl - lo) / (hi - lo);
        div[i] = wl < orig / hi   ? 1.0f
                 : wl > orig / lo ? c->rope_factor
                                  : (float)(1 / ((1 - smooth) / c->rope_factor + smooth));
    }
}

/* ---- conversion ---------------------------------------------------------- */

typedef struct conv {
    const job_tensor *jt;
    size_t src_row_bytes, dst_row_bytes;
    uint8_t *out;   /* [rows][dst_row_bytes] */
    float *scratch; /* [threads][cols] */
    int64_t *bad;   /* [threads] first refused element (row * cols + col), or -1 */
} conv;

/* Source row of output row r: llama.cpp's permute of q/k for interleaved rope puts the
 * two halves of each head's rotary pairs next to each other. */
static int64_t source_row(const job_tensor *jt, int64_t r) {
    if (jt->perm_heads <= 0) return r;
    int64_t hd = jt->rows / jt->perm_heads, h = r / hd, i = r % hd;
    return h * hd + (i % 2) * (hd / 2) + i / 2;
}

static void conv_rows(void *ctx, int64_t begin, int64_t end, int thread) {
    conv *c = ctx;
    const job_tensor *jt = c->jt;
    float *x = c->scratch + (size_t)thread * (size_t)jt->cols;
    const uint8_t *src = jt->src->data;
    for (int64_t r = begin; r < end; r++) {
        int64_t sr = source_row(jt, r), at;
        lpx_dequantize_row(jt->src->type, src + (size_t)sr * c->src_row_bytes, x, jt->cols);
        if (!lpx_quantize_row(jt->type, x, c->out + (size_t)r * c->dst_row_bytes, jt->cols, &at) &&
            c->bad[thread] < 0)
            c->bad[thread] = sr * jt->cols + at;
    }
}

static lpx_status convert(lpx_gguf_writer *w, lpx_threadpool *pool, const job_tensor *jt) {
    const lpx_tensor *t = jt->src;
    if (t->type == jt->type && jt->perm_heads <= 0) return lpx_gguf_put_data(w, t->data, t->nbytes);
    conv c = {jt, 0, 0, NULL, NULL, NULL};
    int nt = lpx_threadpool_size(pool);
    if (!lpx_dtype_row_bytes(t->type, jt->cols, &c.src_row_bytes) ||
        !lpx_dtype_row_bytes(jt->type, jt->cols, &c.dst_row_bytes))
        return lpx_errorf(LPX_ERR_INTERNAL, "tensor %s: row size", jt->name);
    c.out = malloc(jt->nbytes ? jt->nbytes : 1);
    c.scratch = malloc((size_t)nt * (size_t)jt->cols * sizeof(float));
    c.bad = malloc((size_t)nt * sizeof *c.bad);
    lpx_status s = LPX_OK;
    if (!c.out || !c.scratch || !c.bad)
        s = lpx_errorf(LPX_ERR_NOMEM, "tensor %s: out of memory", jt->name);
    if (s == LPX_OK) {
        for (int i = 0; i < nt; i++)
            c.bad[i] = -1;
        lpx_parallel_for(pool, jt->rows, 16, conv_rows, &c);
        int64_t bad = -1;
        for (int i = 0; i < nt; i++)
            if (c.bad[i] >= 0 && (bad < 0 || c.bad[i] < bad)) bad = c.bad[i];
        if (bad >= 0) {
            float v;
            int64_t row = bad / jt->cols, col = bad % jt->cols;
            lpx_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)row * c.src_row_bytes,
                               c.scratch, jt->cols);
            v = c.scratch[col];
            s = lpx_errorf(LPX_ERR_FORMAT,
                           "tensor %s: value %g at row %lld, column %lld cannot be "
                           "stored as %s",
                           jt->name, v, (long long)row, (long long)col,
                           isfinite(v) ? lpx_dtype_name(jt->type) : "any type");
        }
    }
    if (s == LPX_OK) s = lpx_gguf_put_data(w, c.out, jt->nbytes);
    free(c.out);
    free(c.scratch);
    free(c.bad);
    return s;
}

/* ---- the job ------------------------------------------------------------- */

typedef struct job {
    const lpx_quantize_opts *o;
    const struct kind *k;
    lpx_model *m;
    job_tensor *ts;
    int64_t n;
    lpx_tensor freqs; /* rope_freqs.weight made for a Llama 3 directory */
    float *freqs_data;
} job;

static void warn(const job *j, const char *msg) {
    if (j->o->progress) j->o->progress(j->o->ctx, &(lpx_quant_event){.warning = msg});
}

/* The tensors to write, in the source's order, each planned. */
static lpx_status collect(job *j) {
    lpx_model *m = j->m;
    const lpx_config *c = &m->cfg;
    bool hf = strcmp(m->format, "gguf") != 0;
    const lpx_arch_info *ai = lpx_arch_get(c->arch);
    if (!(j->ts = calloc((size_t)m->n_tensors + 1, sizeof *j->ts)))
        return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < m->n_tensors; i++) {
        const lpx_tensor *t = &m->tensors[i];
        job_tensor *jt = &j->ts[j->n];
        bool named = lpx_model_gguf_name(m, t->name, jt->name, sizeof jt->name);
        if (!named || (hf && c->tied_embeddings && !strcmp(jt->name, "output.weight"))) {
            char msg[192];
            snprintf(msg, sizeof msg, "tensor %s %s: left out", t->name,
                     named ? "is the tied embedding's copy" : "has no llama.cpp name");
            warn(j, msg);
            continue;
        }
        jt->src = t;
        if (hf && ai->gguf_rope_interleaved && t->n_dims == 2) {
            if (strstr(jt->name, ".attn_q.weight")) jt->perm_heads = c->n_heads;
            if (strstr(jt->name, ".attn_k.weight")) jt->perm_heads = c->n_kv_heads;
        }
        j->n++;
    }
    if (hf && c->rope_scaling == LPX_ROPE_LLAMA3) {
        if (!(j->freqs_data = malloc((size_t)c->head_dim / 2 * sizeof(float))))
            return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
        llama3_freqs(c, j->freqs_data);
        j->freqs = (lpx_tensor){.name = "rope_freqs.weight",
                                .type = LPX_DT_F32,
                                .n_dims = 1,
                                .shape = {c->head_dim / 2},
                                .data = j->freqs_data,
                                .nbytes = (size_t)c->head_dim / 2 * sizeof(float)};
        snprintf(j->ts[j->n].name, sizeof j->ts[j->n].name, "rope_freqs.weight");
        j->ts[j->n++].src = &j->freqs;
    }
    for (int64_t i = 0; i < j->n; i++) {
        job_tensor *jt = &j->ts[i];
        plan(j->k, m, jt);
        if (jt->src->type == jt->type && !jt->perm_heads && !jt->note[0])
            snprintf(jt->note, sizeof jt->note, "copied");
        if (!lpx_dtype_row_bytes(jt->type, jt->cols, &jt->nbytes) ||
            !lpx_mul_size(jt->nbytes, (size_t)jt->rows, &jt->nbytes))
            return lpx_errorf(LPX_ERR_FORMAT, "tensor %s: too large", jt->name);
    }
    /* Only tensors converted lose accuracy twice; the ones kept as stored do not. */
    char types[64] = "";
    for (int64_t i = 0; i < j->n; i++) {
        const job_tensor *jt = &j->ts[i];
        const char *tn = lpx_dtype_name(jt->src->type);
        if (quantized(jt->src->type) && (jt->src->type != jt->type || jt->perm_heads) &&
            !strstr(types, tn))
            snprintf(types + strlen(types), sizeof types - strlen(types), "%s%s",
                     *types ? ", " : "", tn);
    }
    if (*types) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "the source holds quantized tensors (%s): they are dequantized and quantized "
                 "again, which loses accuracy beyond what %s alone loses",
                 types, j->k->name);
        warn(j, msg);
    }
    return LPX_OK;
}

static lpx_status write_all(job *j, lpx_gguf_writer *w, lpx_threadpool *pool,
                            lpx_quantize_result *r) {
    lpx_model *m = j->m;
    if (!strcmp(m->format, "gguf")) {
        const lpx_gguf *g = ((lpx_model_store *)m->impl)->gguf;
        for (int64_t i = 0; i < lpx_gguf_n_kv(g); i++) {
            const char *key = lpx_gguf_key(g, i);
            if (strcmp(key, "general.file_type") && strcmp(key, "general.quantization_version"))
                lpx_gguf_kv_copy(w, g, i);
        }
    } else {
        const lpx_arch_info *ai = lpx_arch_get(m->cfg.arch);
        hf_metadata(w, m, ai->gguf_arch ? ai->gguf_arch : "llama");
        char why[160], msg[256];
        if (m->cfg.sliding_window > 0 && m->cfg.sliding_window < m->cfg.max_position_embeddings) {
            snprintf(msg, sizeof msg,
                     "sliding_window %d has no llama.cpp key: the file attends over the whole "
                     "context",
                     m->cfg.sliding_window);
            warn(j, msg);
        }
        LPX_TRY(lpx_hf_tokenizer_gguf(m->path, m->cfg.vocab_size, w, why, sizeof why));
        if (*why) {
            snprintf(msg, sizeof msg, "%s: the file gets no tokenizer (runs on token ids only)",
                     why);
            warn(j, msg);
        }
    }
    lpx_gguf_kv_u32(w, "general.file_type", j->k->file_type);
    lpx_gguf_kv_u32(w, "general.quantization_version", 2);
    for (int64_t i = 0; i < j->n; i++) {
        const job_tensor *jt = &j->ts[i];
        lpx_gguf_add_tensor(w, jt->name, jt->src->n_dims, jt->src->shape, ggml_id[jt->type],
                            jt->nbytes);
    }
    for (int64_t i = 0; i < j->n; i++) {
        const job_tensor *jt = &j->ts[i];
        if (j->o->cancel && *j->o->cancel) return lpx_errorf(LPX_ERR_CANCELLED, "cancelled");
        LPX_TRY(convert(w, pool, jt));
        r->bytes_in += (int64_t)jt->src->nbytes;
        r->bytes_out += (int64_t)jt->nbytes;
        r->n_tensors++;
        if (j->o->progress)
            j->o->progress(j->o->ctx,
                           &(lpx_quant_event){i + 1, j->n, jt->name, lpx_dtype_name(jt->src->type),
                                              lpx_dtype_name(jt->type), jt->note, NULL});
    }
    return LPX_OK;
}

lpx_status lpx_quantize_model(const char *in, const char *out, const lpx_quantize_opts *o,
                              lpx_quantize_result *r) {
    memset(r, 0, sizeof *r);
    job j = {.o = o};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (o->type && !strcmp(o->type, kinds[i].name)) j.k = &kinds[i];
    if (!j.k)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "unknown type '%s' (%s)", o->type ? o->type : "",
                          LPX_QUANT_TYPES);
    LPX_TRY(lpx_model_open(in, &j.m));
    lpx_threadpool *pool = NULL;
    lpx_gguf_writer *w = NULL;
    int64_t align = 32;
    lpx_status s = collect(&j);
    if (s == LPX_OK && !strcmp(j.m->format, "gguf"))
        lpx_gguf_get_i64(((lpx_model_store *)j.m->impl)->gguf, "general.alignment", &align);
    if (s == LPX_OK) s = lpx_threadpool_create(o->n_threads, &pool);
    if (s == LPX_OK) s = lpx_gguf_writer_create(out, (size_t)align, o->overwrite, &w);
    if (s == LPX_OK) s = write_all(&j, w, pool, r);
    if (s == LPX_OK)
        s = lpx_gguf_writer_finish(w);
    else
        lpx_gguf_writer_abort(w);
    lpx_threadpool_destroy(pool);
    free(j.ts);
    free(j.freqs_data);
    lpx_model_close(j.m);
    return s;
}

/* lpx_model_open: dispatch to the format loader, then one set of checks for
 * both formats: the family's tensors present with the shapes the config
 * implies, dimensions that divide, layer count and vocabulary consistent. */
#include "model/loader.h"

#include "base/checked.h"
#include "base/error.h"
#include "format/kv_dtype.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- sampling defaults of the file ----------------------------------------- */

void lpx_gen_take(lpx_model *m, lpx_gen_key key, const char *where, bool num, double v) {
    /* the ranges of lpx_sampling_validate (src/sample/sampler.c), which every request
     * passes; float-sized, as the cast of a larger double is undefined */
    bool ok = num && isfinite(v) && fabs(v) <= FLT_MAX;
    const char *want = "";
    switch (key) {
    case LPX_GEN_TEMPERATURE:
        ok = ok && v >= 0;
        want = "a finite value >= 0";
        if (ok) m->gen.temperature = (float)v;
        break;
    case LPX_GEN_TOP_P:
        ok = ok && v > 0 && v <= 1;
        want = "a value in (0, 1]";
        if (ok) m->gen.top_p = (float)v;
        break;
    case LPX_GEN_TOP_K:
        ok = ok && v >= 0 && v <= INT32_MAX && v == floor(v);
        want = "a whole number >= 0";
        if (ok) m->gen.top_k = (int32_t)v;
        break;
    case LPX_GEN_REPETITION:
        ok = ok && v > 0;
        want = "a finite value > 0";
        if (ok) m->gen.repetition_penalty = (float)v;
        break;
    }
    if (ok || m->n_warnings == LPX_MODEL_MAX_WARNINGS) return;
    char val[32] = "not a number";
    if (num) snprintf(val, sizeof val, "%g", v);
    snprintf(m->warnings[m->n_warnings++], sizeof m->warnings[0],
             "%s is %s: expected %s; ignored (requests that leave it out get lpx's default)", where,
             val, want);
}

/* ---- architectures ------------------------------------------------------ */

static const lpx_arch_info archs[] = {
    /* GGUF "llama" q/k rows were permuted by llama.cpp's converter: interleaved rope. */
    {LPX_ARCH_LLAMA, "llama", "LlamaForCausalLM", "llama", false, false, true},
    {LPX_ARCH_QWEN2, "qwen2", "Qwen2ForCausalLM", "qwen2", true, false, false},
    {LPX_ARCH_QWEN3, "qwen3", "Qwen3ForCausalLM", "qwen3", false, true, false},
    /* Mistral GGUF files say "llama" and load through that row. */
    {LPX_ARCH_MISTRAL, "mistral", "MistralForCausalLM", NULL, false, false, true},
};
#define N_ARCHS (sizeof archs / sizeof archs[0])

const lpx_arch_info *lpx_arch_get(lpx_arch a) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (archs[i].arch == a) return &archs[i];
    return NULL;
}

const lpx_arch_info *lpx_arch_by_hf_class(const char *cls) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (!strcmp(archs[i].hf_class, cls)) return &archs[i];
    return NULL;
}

const lpx_arch_info *lpx_arch_by_gguf(const char *name, size_t len) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (archs[i].gguf_arch && strlen(archs[i].gguf_arch) == len &&
            !memcmp(archs[i].gguf_arch, name, len))
            return &archs[i];
    return NULL;
}

/* The tensors of one layer: Hugging Face and GGUF names, the lpx_layer slot,
 * when the family needs it and the shape the config implies. */
enum need { ALWAYS, IF_QKV_BIAS, IF_QK_NORM };
enum shape { SH_D, SH_HD, SH_Q, SH_KV, SH_QROWS, SH_KVROWS, SH_O, SH_UP, SH_DOWN };
static const struct role {
    const char *hf, *gguf;
    size_t slot;
    enum need need;
    enum shape shape;
} roles[] = {
    {"input_layernorm.weight", "attn_norm.weight", offsetof(lpx_layer, attn_norm), ALWAYS, SH_D},
    {"self_attn.q_proj.weight", "attn_q.weight", offsetof(lpx_layer, wq), ALWAYS, SH_Q},
    {"self_attn.k_proj.weight", "attn_k.weight", offsetof(lpx_layer, wk), ALWAYS, SH_KV},
    {"self_attn.v_proj.weight", "attn_v.weight", offsetof(lpx_layer, wv), ALWAYS, SH_KV},
    {"self_attn.q_proj.bias", "attn_q.bias", offsetof(lpx_layer, bq), IF_QKV_BIAS, SH_QROWS},
    {"self_attn.k_proj.bias", "attn_k.bias", offsetof(lpx_layer, bk), IF_QKV_BIAS, SH_KVROWS},
    {"self_attn.v_proj.bias", "attn_v.bias", offsetof(lpx_layer, bv), IF_QKV_BIAS, SH_KVROWS},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", offsetof(lpx_layer, q_norm), IF_QK_NORM,
     SH_HD},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", offsetof(lpx_layer, k_norm), IF_QK_NORM,
     SH_HD},
    {"self_attn.o_proj.weight", "attn_output.weight", offsetof(lpx_layer, wo), ALWAYS, SH_O},
    {"post_attention_layernorm.weight", "ffn_norm.weight", offsetof(lpx_layer, ffn_norm), ALWAYS,
     SH_D},
    {"mlp.gate_proj.weight", "ffn_gate.weight", offsetof(lpx_layer, w_gate), ALWAYS, SH_UP},
    {"mlp.up_proj.weight", "ffn_up.weight", offsetof(lpx_layer, w_up), ALWAYS, SH_UP},
    {"mlp.down_proj.weight", "ffn_down.weight", offsetof(lpx_layer, w_down), ALWAYS, SH_DOWN},
};

bool lpx_model_gguf_name(const lpx_model *m, const char *name, char *out, size_t cap) {
    static const char *const globals[][2] = {{"model.embed_tokens.weight", "token_embd.weight"},
                                             {"model.norm.weight", "output_norm.weight"},
                                             {"lm_head.weight", "output.weight"}};
    if (!strcmp(m->format, "gguf")) return snprintf(out, cap, "%s", name) < (int)cap;
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (!strcmp(name, globals[i][0])) return snprintf(out, cap, "%s", globals[i][1]) < (int)cap;
    const char *prefix = "model.layers.";
    size_t n = strlen(prefix);
    char *end;
    if (strncmp(name, prefix, n)) return false;
    long l = strtol(name + n, &end, 10);
    if (end == name + n || *end != '.' || l < 0) return false;
    for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++)
        if (!strcmp(end + 1, roles[r].hf))
            return snprintf(out, cap, "blk.%ld.%s", l, roles[r].gguf) < (int)cap;
    return false;
}

/* ---- store: mappings and buffers released at close ----------------------- */

lpx_status lpx_store_map_file(lpx_model_store *st, const char *path, const void **data,
                              size_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return lpx_errorf(LPX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return lpx_errorf(LPX_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return lpx_errorf(LPX_ERR_FORMAT, "%s: truncated: the file is empty", path);
    }
    struct lpx_mapping *maps = realloc(st->maps, (size_t)(st->n_maps + 1) * sizeof *maps);
    if (!maps) {
        close(fd);
        return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", path);
    }
    st->maps = maps;
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED) return lpx_errorf(LPX_ERR_IO, "%s: mmap failed: %s", path, strerror(err));
    maps[st->n_maps].p = p;
    maps[st->n_maps++].n = (size_t)sb.st_size;
    *data = p;
    *size = (size_t)sb.st_size;
    return LPX_OK;
}

void *lpx_store_alloc(lpx_model_store *st, size_t n) {
    void **owned = realloc(st->owned, (size_t)(st->n_owned + 1) * sizeof *owned);
    if (!owned) return NULL;
    st->owned = owned;
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 1)) return NULL;
    owned[st->n_owned++] = p;
    return p;
}

/* ---- checks and binding -------------------------------------------------- */

const lpx_tensor *lpx_model_find_tensor(const lpx_model *m, const char *name) {
    for (int64_t i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}

static void fmt_shape(char *buf, size_t cap, int nd, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < nd && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Finds name and checks it has shape {rows, cols} (or {rows} when cols == 0). */
static lpx_status bind(const lpx_model *m, const char *name, int64_t rows, int64_t cols,
                       bool required, const lpx_tensor **out) {
    int nd = cols ? 2 : 1;
    int64_t want[2] = {rows, cols};
    char ws[64], fs[128];
    const lpx_tensor *t = lpx_model_find_tensor(m, name);
    fmt_shape(ws, sizeof ws, nd, want);
    *out = t;
    if (!t)
        return required ? lpx_errorf(LPX_ERR_FORMAT, "%s: missing tensor %s (expected shape %s)",
                                     m->path, name, ws)
                        : LPX_OK;
    if (t->n_dims != nd || t->shape[0] != rows || (cols && t->shape[1] != cols)) {
        fmt_shape(fs, sizeof fs, t->n_dims, t->shape);
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tensor %s: expected shape %s, found %s%s%s%s",
                          m->path, name, ws, fs, m->quant[0] ? " (dequantized at load: " : "",
                          m->quant,
                          m->quant[0] ? "; its packed shapes contradict config.json)" : "");
    }
    if (t->raw)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: tensor %s: dtype %s is read only as part of a quantized weight "
                          "(config.json quantization_config: docs/models.md)",
                          m->path, name, t->raw == LPX_RAW_I32 ? "I32" : "F8_E4M3");
    size_t rb;
    if (!lpx_dtype_row_bytes(t->type, lpx_tensor_cols(t), &rb))
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: tensor %s: %lld columns are not a multiple of the "
                          "%s block (%d)",
                          m->path, name, (long long)lpx_tensor_cols(t), lpx_dtype_name(t->type),
                          lpx_dtype_block_elems(t->type));
    return LPX_OK;
}

static lpx_status check_config(const lpx_model *m) {
    const lpx_config *c = &m->cfg;
    if (c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: n_kv_heads %d does not divide n_heads %d", m->path,
                          c->n_kv_heads, c->n_heads);
    if (!(c->rope_theta > 0) || (c->rope_scaling != LPX_ROPE_NONE && !(c->rope_factor > 0)))
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: rope theta %g and scaling factor %g must be positive", m->path,
                          c->rope_theta, c->rope_factor);
    if (c->head_dim % 2)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: head_dim %d is odd (rope needs pairs)", m->path,
                          c->head_dim);
    /* Every layer has at least 9 tensors: this bounds the allocation below. */
    if (c->n_layers > m->n_tensors)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: %d layers but only %lld tensors", m->path,
                          c->n_layers, (long long)m->n_tensors);
    return LPX_OK;
}

/* Layer index of a per-layer tensor name, or -1. */
static long layer_of(const char *name, const char *prefix) {
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n)) return -1;
    char *end;
    errno = 0;
    long l = strtol(name + n, &end, 10);
    return end != name + n && *end == '.' && !errno && l >= 0 ? l : -1;
}

static lpx_status bind_weights(lpx_model *m) {
    lpx_config *c = &m->cfg;
    bool gguf = !strcmp(m->format, "gguf");
    const char *prefix = gguf ? "blk." : "model.layers.";
    const lpx_arch_info *ai = lpx_arch_get(c->arch);
    LPX_TRY(check_config(m));
    for (int64_t i = 0; i < m->n_tensors; i++) {
        long l = layer_of(m->tensors[i].name, prefix);
        if (l >= c->n_layers)
            return lpx_errorf(LPX_ERR_FORMAT,
                              "%s: tensor %s belongs to layer %ld but the model has %d layers "
                              "(layer count mismatch)",
                              m->path, m->tensors[i].name, l, c->n_layers);
    }

    const char *embd = gguf ? "token_embd.weight" : "model.embed_tokens.weight";
    const lpx_tensor *e = lpx_model_find_tensor(m, embd);
    if (!e) return lpx_errorf(LPX_ERR_FORMAT, "%s: missing tensor %s", m->path, embd);
    if (e->n_dims != 2 || e->shape[1] != c->d_model || e->shape[0] > INT32_MAX)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: tensor %s: expected shape [vocab, %d], found %d dims "
                          "with %lld columns",
                          m->path, embd, c->d_model, e->n_dims, (long long)lpx_tensor_cols(e));
    if (c->vocab_size && c->vocab_size != e->shape[0])
        return lpx_errorf(LPX_ERR_FORMAT, "%s: vocab_size %d does not match the %lld rows of %s",
                          m->path, c->vocab_size, (long long)e->shape[0], embd);
    c->vocab_size = (int32_t)e->shape[0];
    int64_t V = c->vocab_size, D = c->d_model, F = c->d_ff;
    int64_t Q = (int64_t)c->n_heads * c->head_dim, KV = (int64_t)c->n_kv_heads * c->head_dim;
    LPX_TRY(bind(m, embd, V, D, true, &m->w.tok_embd));
    LPX_TRY(bind(m, gguf ? "output_norm.weight" : "model.norm.weight", D, 0, true, &m->w.out_norm));
    if (c->tied_embeddings)
        m->w.lm_head = m->w.tok_embd;
    else
        LPX_TRY(bind(m, gguf ? "output.weight" : "lm_head.weight", V, D, true, &m->w.lm_head));

    if (!(m->w.layers = calloc((size_t)c->n_layers, sizeof *m->w.layers)))
        return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", m->path);
    const int64_t dims[][2] = {[SH_D] = {D, 0},   [SH_HD] = {c->head_dim, 0}, [SH_Q] = {Q, D},
                               [SH_KV] = {KV, D}, [SH_QROWS] = {Q, 0},        [SH_KVROWS] = {KV, 0},
                               [SH_O] = {D, Q},   [SH_UP] = {F, D},           [SH_DOWN] = {D, F}};
    for (int l = 0; l < c->n_layers; l++) {
        for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++) {
            const struct role *ro = &roles[r];
            bool need = ro->need == ALWAYS || (ro->need == IF_QKV_BIAS && ai->qkv_bias) ||
                        (ro->need == IF_QK_NORM && ai->qk_norm);
            if (!need) continue;
            char name[96];
            snprintf(name, sizeof name, "%s%d.%s", prefix, l, gguf ? ro->gguf : ro->hf);
            const lpx_tensor **slot = (const lpx_tensor **)((char *)&m->w.layers[l] + ro->slot);
            LPX_TRY(bind(m, name, dims[ro->shape][0], dims[ro->shape][1], true, slot));
        }
    }
    return LPX_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names must be unique across shards; data must be aligned for its element type
 * (safetensors does not align tensors: misaligned ones are copied). */
static lpx_status check_tensors(lpx_model *m) {
    const char **names = malloc((size_t)(m->n_tensors ? m->n_tensors : 1) * sizeof *names);
    if (!names) return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", m->path);
    for (int64_t i = 0; i < m->n_tensors; i++)
        names[i] = m->tensors[i].name;
    qsort(names, (size_t)m->n_tensors, sizeof *names, cmp_name);
    lpx_status s = LPX_OK;
    for (int64_t i = 1; i < m->n_tensors && s == LPX_OK; i++)
        if (!strcmp(names[i - 1], names[i]))
            s = lpx_errorf(LPX_ERR_FORMAT, "%s: duplicate tensor name %s", m->path, names[i]);
    free(names);
    for (int64_t i = 0; i < m->n_tensors && s == LPX_OK; i++) {
        lpx_tensor *t = &m->tensors[i];
        size_t align = t->raw                                            ? 1
                       : t->type == LPX_DT_F32                           ? 4
                       : t->type == LPX_DT_F16 || t->type == LPX_DT_BF16 ? 2
                                                                         : 1;
        if ((uintptr_t)t->data % align == 0) continue;
        void *copy = lpx_store_alloc(m->impl, t->nbytes);
        if (!copy) return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", m->path);
        memcpy(copy, t->data, t->nbytes);
        t->data = copy;
    }
    return s;
}

/* The tokenizer when the model has one: GGUF tokenizer.ggml.* metadata or a
 * directory's tokenizer.json. Weights-only models (test fixtures) have none. */
static lpx_status load_tokenizer(lpx_model *m) {
    lpx_model_store *st = m->impl;
    lpx_status s;
    if (st->gguf) {
        if (lpx_gguf_find(st->gguf, "tokenizer.ggml.tokens") < 0) return LPX_OK;
        s = lpx_tokenizer_load_gguf(st->gguf, &m->tok);
    } else {
        char path[4200];
        snprintf(path, sizeof path, "%s/tokenizer.json", m->path);
        if (access(path, F_OK) != 0) return LPX_OK;
        s = lpx_tokenizer_load_hf(m->path, &m->tok);
    }
    if (s != LPX_OK) return lpx_error_wrap(s, "%s: tokenizer", m->path);
    int32_t n = lpx_vocab_size(m->tok);
    if (n > m->cfg.vocab_size)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: the tokenizer has %d tokens but the embedding only %d rows (vocab "
                          "mismatch)",
                          m->path, n, m->cfg.vocab_size);
    return LPX_OK;
}

/* ---- public API ---------------------------------------------------------- */

lpx_status lpx_model_open(const char *path, lpx_model **out) {
    *out = NULL;
    if (!path || !*path) return lpx_errorf(LPX_ERR_INVALID_ARG, "lpx_model_open: empty path");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return lpx_errorf(LPX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    lpx_model *m = calloc(1, sizeof *m);
    if (!m || !(m->impl = calloc(1, sizeof(lpx_model_store)))) {
        free(m);
        return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", path);
    }
    if (strlen(path) >= sizeof m->path) {
        lpx_model_close(m);
        return lpx_errorf(LPX_ERR_INVALID_ARG, "model path of %zu bytes is too long", strlen(path));
    }
    strcpy(m->path, path);
    m->gen = (lpx_gen_defaults){
        .temperature = -1, .top_p = -1, .top_k = -1, .repetition_penalty = -1, .bos_id = -1};
    lpx_status s;
    if (S_ISDIR(sb.st_mode)) {
        strcpy(m->format, "safetensors");
        s = lpx_hf_load(m, path);
    } else {
        strcpy(m->format, "gguf");
        s = lpx_gguf_model_load(m, path);
        size_t n = strlen(path);
        if (s == LPX_ERR_FORMAT && n > 12 && !strcmp(path + n - 12, ".safetensors"))
            s = lpx_errorf(LPX_ERR_INVALID_ARG,
                           "%s: a safetensors file; give the model directory that holds it and "
                           "config.json",
                           path);
    }
    if (s == LPX_OK) s = check_tensors(m);
    if (s == LPX_OK) s = bind_weights(m);
    if (s == LPX_OK) s = load_tokenizer(m);
    if (s != LPX_OK) {
        lpx_model_close(m);
        return s;
    }
    *out = m;
    return LPX_OK;
}

void lpx_model_close(lpx_model *m) {
    if (!m) return;
    lpx_model_store *st = m->impl;
    lpx_tokenizer_free(m->tok); /* before the mapping its GGUF strings may live in */
    if (st) {
        lpx_gguf_close(st->gguf);
        for (int i = 0; i < st->n_maps; i++)
            munmap(st->maps[i].p, st->maps[i].n);
        for (int i = 0; i < st->n_owned; i++)
            free(st->owned[i]);
        free(st->maps);
        free(st->owned);
        free(st);
    }
    free(m->w.layers);
    free(m->tensors);
    free(m->chat_template);
    free(m);
}

const lpx_tokenizer *lpx_model_tokenizer(const lpx_model *m) {
    return m->tok;
}

static int64_t n_elems(const lpx_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++)
        n *= t->shape[d]; /* fits: checked at load */
    return n;
}

static void count(lpx_model_info *info, const lpx_tensor *t) {
    if (!t) return;
    info->n_params += n_elems(t);
    info->weight_bytes += (int64_t)t->nbytes;
    info->dtype_params[t->type] += n_elems(t);
    info->dtype_bytes[t->type] += (int64_t)t->nbytes;
    info->decode_bytes_per_step += (int64_t)t->nbytes;
}

lpx_status lpx_model_info_get(const lpx_model *m, lpx_model_info *out) {
    static const char *scaling[] = {"none", "llama3", "linear"};
    const lpx_config *c = &m->cfg;
    memset(out, 0, sizeof *out);
    snprintf(out->arch, sizeof out->arch, "%s", lpx_arch_get(c->arch)->name);
    snprintf(out->format, sizeof out->format, "%s", m->format);
    out->n_layers = c->n_layers;
    out->d_model = c->d_model;
    out->n_heads = c->n_heads;
    out->n_kv_heads = c->n_kv_heads;
    out->head_dim = c->head_dim;
    out->d_ff = c->d_ff;
    out->vocab_size = c->vocab_size;
    out->max_position_embeddings = c->max_position_embeddings;
    out->rope_theta = c->rope_theta;
    out->rms_norm_eps = c->rms_norm_eps;
    snprintf(out->rope_scaling, sizeof out->rope_scaling, "%s", scaling[c->rope_scaling]);
    out->tied_embeddings = c->tied_embeddings;
    out->qkv_bias = c->qkv_bias;
    out->qk_norm = c->qk_norm;
    out->has_chat_template = m->chat_template != NULL;
    out->n_dequantized_at_load = m->n_converted; /* GGUF types are all kept as stored */
    snprintf(out->quantization, sizeof out->quantization, "%s", m->quant);

    /* A decode step reads one embedding row, every layer and the whole lm_head. */
    const lpx_tensor *e = m->w.tok_embd;
    count(out, e);
    out->decode_bytes_per_step += (int64_t)(e->nbytes / (size_t)e->shape[0]) - (int64_t)e->nbytes;
    count(out, m->w.out_norm);
    if (m->w.lm_head != e)
        count(out, m->w.lm_head);
    else
        out->decode_bytes_per_step += (int64_t)e->nbytes;
    for (int l = 0; l < c->n_layers; l++) {
        const lpx_layer *L = &m->w.layers[l];
        const lpx_tensor *ts[] = {L->attn_norm, L->wq,     L->wk,     L->wv,     L->bq,
                                  L->bk,        L->bv,     L->q_norm, L->k_norm, L->wo,
                                  L->ffn_norm,  L->w_gate, L->w_up,   L->w_down};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            count(out, ts[i]);
    }
    /* K and V of every layer in a bf16 KV cache and in an fp8 one. */
    out->kv_bytes_per_token =
        lpx_kv_token_bytes(c->n_layers, c->n_kv_heads, c->head_dim, LPX_KV_BF16);
    out->kv_bytes_per_token_fp8 =
        lpx_kv_token_bytes(c->n_layers, c->n_kv_heads, c->head_dim, LPX_KV_FP8);
    return LPX_OK;
}

void lpx_model_default_name(const char *path, char *out, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    size_t len = n - b;
    if (len > 5 && !strncmp(path + n - 5, ".gguf", 5)) len -= 5;
    snprintf(out, cap, "%.*s", (int)len, path + b);
}

/* A model from a GGUF file: hyperparameters from general.architecture and the
 * <arch>.* keys, tensors kept in their blocks (every supported type), chat
 * template and special token ids from tokenizer.* metadata. */
#include "format/ggml.h"
#include "model/loader.h"

#include "base/checked.h"
#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LPX_MAX_ROPE_PAIRS 1024

typedef struct hp {
    const lpx_gguf *g;
    const char *path, *arch;
} hp;

static lpx_status hp_int(const hp *h, const char *key, int32_t dflt, int32_t *out) {
    char k[128];
    int64_t v;
    snprintf(k, sizeof k, "%s.%s", h->arch, key);
    if (lpx_gguf_find(h->g, k) < 0) {
        if (dflt < 0) return lpx_errorf(LPX_ERR_FORMAT, "%s: key %s missing", h->path, k);
        *out = dflt;
        return LPX_OK;
    }
    if (!lpx_gguf_get_i64(h->g, k, &v) || v < 1 || v > INT32_MAX)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: key %s must be a positive 32-bit integer", h->path,
                          k);
    *out = (int32_t)v;
    return LPX_OK;
}

static lpx_status hp_float(const hp *h, const char *key, double dflt, float *out) {
    char k[128];
    double v;
    snprintf(k, sizeof k, "%s.%s", h->arch, key);
    if (lpx_gguf_find(h->g, k) < 0) {
        if (dflt < 0) return lpx_errorf(LPX_ERR_FORMAT, "%s: key %s missing", h->path, k);
        *out = (float)dflt;
        return LPX_OK;
    }
    if (!lpx_gguf_get_f64(h->g, k, &v) || !isfinite(v) || v < 0)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: key %s must be a non-negative float", h->path, k);
    *out = (float)v;
    return LPX_OK;
}

static lpx_status parse_rope(const hp *h, lpx_config *c) {
    char k[128];
    const char *s;
    size_t len;
    LPX_TRY(hp_float(h, "rope.freq_base", 10000.0, &c->rope_theta));
    int32_t rot;
    LPX_TRY(hp_int(h, "rope.dimension_count", c->head_dim, &rot));
    if (rot != c->head_dim)
        return lpx_errorf(LPX_ERR_UNSUPPORTED,
                          "%s: partial rotary embedding (rope.dimension_count %d, head_dim %d) is "
                          "not supported",
                          h->path, rot, c->head_dim);
    c->rope_scaling = LPX_ROPE_NONE;
    snprintf(k, sizeof k, "%s.rope.scaling.type", h->arch);
    if (lpx_gguf_get_str(h->g, k, &s, &len) && !(len == 4 && !memcmp(s, "none", 4))) {
        if (!(len == 6 && !memcmp(s, "linear", 6)))
            return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: %s '%.*s' is not supported (none, linear)",
                              h->path, k, (int)(len > 32 ? 32 : len), s);
        c->rope_scaling = LPX_ROPE_LINEAR;
        LPX_TRY(hp_float(h, "rope.scaling.factor", -1, &c->rope_factor));
    }
    return LPX_OK;
}

static lpx_status parse_hparams(const hp *h, lpx_config *c) {
    int32_t value_len;
    LPX_TRY(hp_int(h, "block_count", -1, &c->n_layers));
    LPX_TRY(hp_int(h, "embedding_length", -1, &c->d_model));
    LPX_TRY(hp_int(h, "feed_forward_length", -1, &c->d_ff));
    LPX_TRY(hp_int(h, "attention.head_count", -1, &c->n_heads));
    LPX_TRY(hp_int(h, "attention.head_count_kv", c->n_heads, &c->n_kv_heads));
    LPX_TRY(hp_int(h, "context_length", -1, &c->max_position_embeddings));
    char k[128];
    snprintf(k, sizeof k, "%s.attention.key_length", h->arch);
    if (lpx_gguf_find(h->g, k) < 0 && c->d_model % c->n_heads)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: embedding_length %d is not divisible by head_count %d", h->path,
                          c->d_model, c->n_heads);
    LPX_TRY(hp_int(h, "attention.key_length", c->d_model / c->n_heads, &c->head_dim));
    LPX_TRY(hp_int(h, "attention.value_length", c->head_dim, &value_len));
    if (value_len != c->head_dim)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: value_length %d differs from key_length %d",
                          h->path, value_len, c->head_dim);
    LPX_TRY(hp_float(h, "attention.layer_norm_rms_epsilon", -1, &c->rms_norm_eps));
    int32_t vocab;
    LPX_TRY(hp_int(h, "vocab_size", 0, &vocab));
    c->vocab_size = vocab; /* 0: taken from the embedding by the checks in model.c */
    return parse_rope(h, c);
}

static void gen_from_metadata(const lpx_gguf *g, lpx_model *m) {
    lpx_gen_defaults *gen = &m->gen;
    int64_t v;
    double f;
    static const char *eos_keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                     "tokenizer.ggml.eom_token_id"};
    for (size_t i = 0; i < sizeof eos_keys / sizeof eos_keys[0]; i++) {
        if (!lpx_gguf_get_i64(g, eos_keys[i], &v) || v < 0 || v > INT32_MAX) continue;
        bool dup = false;
        for (int j = 0; j < gen->n_eos; j++)
            dup |= gen->eos_ids[j] == v;
        if (!dup) gen->eos_ids[gen->n_eos++] = (int32_t)v;
    }
    if (lpx_gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &v) && v >= 0 && v <= INT32_MAX)
        gen->bos_id = (int32_t)v;
    static const struct {
        const char *key;
        lpx_gen_key k;
    } keys[] = {{"general.sampling.temp", LPX_GEN_TEMPERATURE},
                {"general.sampling.top_p", LPX_GEN_TOP_P},
                {"general.sampling.top_k", LPX_GEN_TOP_K},
                {"general.sampling.penalty_repeat", LPX_GEN_REPETITION}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (lpx_gguf_get_f64(g, keys[i].key, &f))
            lpx_gen_take(m, keys[i].k, keys[i].key, true, f);
        else if (lpx_gguf_get_i64(g, keys[i].key, &v))
            lpx_gen_take(m, keys[i].k, keys[i].key, true, (double)v);
        else if (lpx_gguf_find(g, keys[i].key) >= 0)
            lpx_gen_take(m, keys[i].k, keys[i].key, false, 0);
    }
}

/* llama.cpp's converter stores Llama 3 rope scaling as one divisor per frequency
 * (rope_freqs.weight) instead of its parameters. Llama 3.x use low_freq_factor 1,
 * high_freq_factor 4 and an original context of 8192 with factor = the largest
 * divisor; those parameters are accepted only if they reproduce every value. */
static lpx_status rope_from_freqs(const hp *h, lpx_config *c, const lpx_tensor *t) {
    int64_t n = c->head_dim / 2;
    if (t->type != LPX_DT_F32 || t->n_dims != 1 || t->shape[0] != n)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "%s: tensor rope_freqs.weight: expected F32 of shape [%lld], found %s "
                          "with %d dims",
                          h->path, (long long)n, lpx_dtype_name(t->type), t->n_dims);
    float div[LPX_MAX_ROPE_PAIRS];
    if (n > LPX_MAX_ROPE_PAIRS)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: rope_freqs.weight with head_dim %d", h->path,
                          c->head_dim);
    memcpy(div, t->data, (size_t)n * sizeof(float)); /* the file need not align it */
    float factor = 1;
    for (int64_t i = 0; i < n; i++)
        factor = div[i] > factor ? div[i] : factor;
    int32_t orig;
    LPX_TRY(hp_int(h, "rope.scaling.original_context_length", 8192, &orig));
    const double lo = 1, hi = 4, pi = 3.14159265358979323846;
    for (int64_t i = 0; i < n; i++) {
        double freq = pow(c->rope_theta, -2.0 * (double)i / c->head_dim), wl = 2 * pi / freq, want;
        if (wl < orig / hi)
            want = 1;
        else if (wl > orig / lo)
            want = factor;
        else {
            double smooth = (orig / wl - lo) / (hi - lo);
            want = 1 / ((1 - smooth) / factor + smooth);
        }
        if (!isfinite(div[i]) || fabs(div[i] - want) > 1e-3 * want)
            return lpx_errorf(
                LPX_ERR_UNSUPPORTED,
                "%s: rope_freqs.weight[%lld] is %g, llama3 scaling (factor %g, low 1, "
                "high 4, original context %d) gives %g",
                h->path, (long long)i, div[i], factor, orig, want);
    }
    c->rope_scaling = LPX_ROPE_LLAMA3;
    c->rope_factor = factor;
    c->rope_low_freq_factor = (float)lo;
    c->rope_high_freq_factor = (float)hi;
    c->rope_original_max_pos = orig;
    return LPX_OK;
}

static lpx_status load_tensors(lpx_model *m, const lpx_gguf *g, const char *path) {
    int64_t n = lpx_gguf_n_tensors(g);
    m->tensors = calloc((size_t)(n ? n : 1), sizeof *m->tensors);
    if (!m->tensors) return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", path);
    m->n_tensors = n;
    for (int64_t i = 0; i < n; i++) {
        lpx_tensor *t = &m->tensors[i];
        uint32_t type = lpx_gguf_tensor_ggml_type(g, i);
        const lpx_ggml_type_info *ti = lpx_ggml_type(type);
        snprintf(t->name, sizeof t->name, "%s", lpx_gguf_tensor_name(g, i));
        t->n_dims = lpx_gguf_tensor_n_dims(g, i);
        for (int d = 0; d < t->n_dims; d++)
            t->shape[d] = lpx_gguf_tensor_dim(g, i, d);
        const void *data = lpx_gguf_tensor_data(g, i, &t->nbytes);
        if (ti->lpx_type >= 0) {
            t->type = (lpx_dtype)ti->lpx_type;
            t->data = data;
        } else {
            return lpx_errorf(LPX_ERR_UNSUPPORTED,
                              "%s: tensor %s has type %s, which lpx does not support (F32, F16, "
                              "BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)",
                              path, t->name, ti->name);
        }
    }
    return LPX_OK;
}

lpx_status lpx_gguf_model_load(lpx_model *m, const char *path) {
    lpx_model_store *st = m->impl;
    LPX_TRY(lpx_gguf_open(path, &st->gguf));
    const lpx_gguf *g = st->gguf;
    const char *s;
    size_t len;
    if (!lpx_gguf_get_str(g, "general.architecture", &s, &len))
        return lpx_errorf(LPX_ERR_FORMAT, "%s: key general.architecture missing", path);
    const lpx_arch_info *ai = lpx_arch_by_gguf(s, len);
    if (!ai)
        return lpx_errorf(LPX_ERR_UNSUPPORTED,
                          "%s: architecture '%.*s' is not supported (llama, qwen2, qwen3)", path,
                          (int)(len > 32 ? 32 : len), s);
    lpx_config *c = &m->cfg;
    c->arch = ai->arch;
    c->qkv_bias = ai->qkv_bias;
    c->qk_norm = ai->qk_norm;
    c->rope_interleaved = ai->gguf_rope_interleaved;
    hp h = {g, path, ai->gguf_arch};
    LPX_TRY(parse_hparams(&h, c));
    LPX_TRY(load_tensors(m, g, path));
    const lpx_tensor *rf = lpx_model_find_tensor(m, "rope_freqs.weight");
    if (rf) LPX_TRY(rope_from_freqs(&h, c, rf));
    c->tied_embeddings = !lpx_model_find_tensor(m, "output.weight");
    gen_from_metadata(g, m);
    if (lpx_gguf_get_str(g, "tokenizer.chat_template", &s, &len)) {
        const char *nul = memchr(s, '\0', len);
        if (nul)
            return lpx_errorf(LPX_ERR_FORMAT,
                              "%s: tokenizer.chat_template holds a NUL byte at offset %zu (of "
                              "%zu): it would cut the template",
                              path, (size_t)(nul - s), len);
        if (!(m->chat_template = strndup(s, len)))
            return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", path);
    }
    return LPX_OK;
}

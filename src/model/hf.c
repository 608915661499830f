/* Hugging Face model directories: config.json, generation_config.json,
 * tokenizer_config.json (chat template) and single or sharded safetensors. */
#include "model/loader.h"

#include "base/error.h"
#include "base/json_text.h"
#include "base/readall.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_JSON_FILE (64u << 20) /* index files of big models are a few MB */

/* Reads dir/file. nul_marked (may be NULL): when the text holds \u0000 escapes, which
 * cJSON takes as the end of a string, the text parsed again with each one as \u0001 (a
 * string that differs between the two parses had a NUL); else NULL. */
static lpx_status load_json_marked(const char *dir, const char *file, bool required, cJSON **out,
                                   cJSON **nul_marked) {
    char path[4200];
    char *text;
    size_t len;
    *out = NULL;
    if (nul_marked) *nul_marked = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    lpx_status s = lpx_read_file(path, MAX_JSON_FILE, &text, &len);
    if (s == LPX_ERR_IO && !required) {
        lpx_error_clear();
        return LPX_OK;
    }
    LPX_TRY(s);
    *out = cJSON_ParseWithLength(text, len);
    size_t at = lpx_json_nul_escape(text, len, 0);
    if (nul_marked && at < len) {
        for (; at < len; at = lpx_json_nul_escape(text, len, at + 6))
            text[at + 5] = '1';
        *nul_marked = cJSON_ParseWithLength(text, len);
    }
    free(text);
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return lpx_errorf(LPX_ERR_FORMAT, "%s: invalid JSON (expected an object)", path);
    }
    return LPX_OK;
}

static lpx_status load_json(const char *dir, const char *file, bool required, cJSON **out) {
    return load_json_marked(dir, file, required, out, NULL);
}

static const cJSON *item(const cJSON *o, const char *key) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsNull(v) ? NULL : v;
}

static bool json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= (double)lo && v->valuedouble <= (double)hi) ||
        v->valuedouble != floor(v->valuedouble))
        return false;
    *out = (int64_t)v->valuedouble;
    return true;
}

/* A positive int32 field; dflt < 0 makes it required. */
static lpx_status cfg_int(const cJSON *o, const char *file, const char *key, int32_t dflt,
                          int32_t *out) {
    const cJSON *v = item(o, key);
    int64_t x;
    if (!v) {
        if (dflt < 0) return lpx_errorf(LPX_ERR_FORMAT, "%s: %s missing", file, key);
        *out = dflt;
        return LPX_OK;
    }
    if (!json_int(v, 1, INT32_MAX, &x))
        return lpx_errorf(LPX_ERR_FORMAT, "%s: %s must be a positive integer", file, key);
    *out = (int32_t)x;
    return LPX_OK;
}

static lpx_status cfg_float(const cJSON *o, const char *file, const char *key, double dflt,
                            float *out) {
    const cJSON *v = item(o, key);
    if (!v) {
        if (dflt < 0) return lpx_errorf(LPX_ERR_FORMAT, "%s: %s missing", file, key);
        *out = (float)dflt;
        return LPX_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: %s must be a non-negative number", file, key);
    *out = (float)v->valuedouble;
    return LPX_OK;
}

static bool cfg_bool(const cJSON *o, const char *key, bool dflt) {
    const cJSON *v = item(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* rope_scaling (transformers 4) or rope_parameters (transformers 5). */
static lpx_status parse_rope(const cJSON *cfg, lpx_config *c) {
    const cJSON *rp = item(cfg, "rope_scaling");
    if (!rp) rp = item(cfg, "rope_parameters");
    /* rope_theta sits at the top level or, in transformers 5, in rope_parameters. */
    LPX_TRY(cfg_float(item(cfg, "rope_theta") ? cfg : rp, "config.json", "rope_theta", 10000.0,
                      &c->rope_theta));
    c->rope_scaling = LPX_ROPE_NONE;
    if (!rp) return LPX_OK;
    if (!cJSON_IsObject(rp))
        return lpx_errorf(LPX_ERR_FORMAT, "config.json: rope_scaling is not an object");
    const cJSON *type = item(rp, "rope_type");
    if (!type) type = item(rp, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "default";
    if (!strcmp(t, "default")) return LPX_OK;
    if (!strcmp(t, "linear")) {
        c->rope_scaling = LPX_ROPE_LINEAR;
        return cfg_float(rp, "config.json: rope_scaling", "factor", -1, &c->rope_factor);
    }
    if (!strcmp(t, "llama3")) {
        const char *f = "config.json: rope_scaling";
        c->rope_scaling = LPX_ROPE_LLAMA3;
        LPX_TRY(cfg_float(rp, f, "factor", -1, &c->rope_factor));
        LPX_TRY(cfg_float(rp, f, "low_freq_factor", -1, &c->rope_low_freq_factor));
        LPX_TRY(cfg_float(rp, f, "high_freq_factor", -1, &c->rope_high_freq_factor));
        LPX_TRY(cfg_int(rp, f, "original_max_position_embeddings", -1, &c->rope_original_max_pos));
        if (!(c->rope_high_freq_factor > c->rope_low_freq_factor))
            return lpx_errorf(LPX_ERR_FORMAT,
                              "%s: high_freq_factor %g must exceed low_freq_factor %g", f,
                              c->rope_high_freq_factor, c->rope_low_freq_factor);
        return LPX_OK;
    }
    return lpx_errorf(LPX_ERR_UNSUPPORTED,
                      "config.json: rope_scaling type %s is not supported (llama3, linear)", t);
}

static lpx_status parse_config(const cJSON *cfg, lpx_config *c) {
    const char *f = "config.json";
    const cJSON *archs = item(cfg, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    if (!cJSON_IsString(a0))
        return lpx_errorf(LPX_ERR_FORMAT, "config.json: architectures missing");
    const lpx_arch_info *ai = lpx_arch_by_hf_class(a0->valuestring);
    if (!ai)
        return lpx_errorf(LPX_ERR_UNSUPPORTED,
                          "config.json: architecture %s is not supported (LlamaForCausalLM, "
                          "Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM)",
                          a0->valuestring);
    c->arch = ai->arch;
    c->qkv_bias = ai->qkv_bias;
    c->qk_norm = ai->qk_norm;
    c->rope_interleaved = false;
    LPX_TRY(cfg_int(cfg, f, "num_hidden_layers", -1, &c->n_layers));
    LPX_TRY(cfg_int(cfg, f, "hidden_size", -1, &c->d_model));
    LPX_TRY(cfg_int(cfg, f, "num_attention_heads", -1, &c->n_heads));
    LPX_TRY(cfg_int(cfg, f, "num_key_value_heads", c->n_heads, &c->n_kv_heads));
    LPX_TRY(cfg_int(cfg, f, "intermediate_size", -1, &c->d_ff));
    LPX_TRY(cfg_int(cfg, f, "vocab_size", -1, &c->vocab_size));
    LPX_TRY(cfg_int(cfg, f, "max_position_embeddings", -1, &c->max_position_embeddings));
    if (!item(cfg, "head_dim") && c->d_model % c->n_heads)
        return lpx_errorf(LPX_ERR_FORMAT,
                          "config.json: hidden_size %d is not divisible by num_attention_heads %d",
                          c->d_model, c->n_heads);
    LPX_TRY(cfg_int(cfg, f, "head_dim", c->d_model / c->n_heads, &c->head_dim));
    LPX_TRY(cfg_float(cfg, f, "rms_norm_eps", 1e-6, &c->rms_norm_eps));
    LPX_TRY(parse_rope(cfg, c));
    c->tied_embeddings = cfg_bool(cfg, "tie_word_embeddings", false);
    const cJSON *act = item(cfg, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu")))
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "config.json: hidden_act %s is not supported (silu)",
                          cJSON_IsString(act) ? act->valuestring : "?");
    if (!ai->qkv_bias && cfg_bool(cfg, "attention_bias", false))
        return lpx_errorf(LPX_ERR_UNSUPPORTED,
                          "config.json: attention_bias is not supported for %s", ai->hf_class);
    if (cfg_bool(cfg, "mlp_bias", false))
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "config.json: mlp_bias is not supported");
    c->sliding_window = 0;
    if (c->arch == LPX_ARCH_MISTRAL) {
        LPX_TRY(cfg_int(cfg, f, "sliding_window", 0, &c->sliding_window));
    } else if (cfg_bool(cfg, "use_sliding_window", false)) {
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "config.json: use_sliding_window is not supported");
    }
    return LPX_OK;
}

/* eos_token_id: an integer or a list of them. */
static lpx_status parse_ids(const cJSON *o, const char *file, lpx_gen_defaults *g) {
    const cJSON *eos = item(o, "eos_token_id"), *bos = item(o, "bos_token_id");
    int64_t x;
    if (eos) {
        int n = cJSON_IsArray(eos) ? cJSON_GetArraySize(eos) : 1;
        if (n > (int)(sizeof g->eos_ids / sizeof g->eos_ids[0]))
            return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: %d eos_token_id values (at most 8)", file,
                              n);
        g->n_eos = 0;
        for (int i = 0; i < n; i++) {
            if (!json_int(cJSON_IsArray(eos) ? cJSON_GetArrayItem(eos, i) : eos, 0, INT32_MAX, &x))
                return lpx_errorf(LPX_ERR_FORMAT,
                                  "%s: eos_token_id must be an integer or a list "
                                  "of integers",
                                  file);
            g->eos_ids[g->n_eos++] = (int32_t)x;
        }
    }
    if (bos) {
        if (!json_int(bos, 0, INT32_MAX, &x))
            return lpx_errorf(LPX_ERR_FORMAT, "%s: bos_token_id must be an integer", file);
        g->bos_id = (int32_t)x;
    }
    return LPX_OK;
}

static lpx_status parse_generation(const cJSON *cfg, const cJSON *gen, lpx_model *m) {
    LPX_TRY(parse_ids(cfg, "config.json", &m->gen));
    if (!gen) return LPX_OK;
    LPX_TRY(parse_ids(gen, "generation_config.json", &m->gen));
    /* Read whether or not do_sample is set, as vLLM does: they are the model's defaults. */
    static const struct {
        const char *key;
        lpx_gen_key k;
    } keys[] = {{"temperature", LPX_GEN_TEMPERATURE},
                {"top_p", LPX_GEN_TOP_P},
                {"top_k", LPX_GEN_TOP_K},
                {"repetition_penalty", LPX_GEN_REPETITION}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *v = item(gen, keys[i].key);
        char where[64];
        snprintf(where, sizeof where, "generation_config.json: %s", keys[i].key);
        if (v)
            lpx_gen_take(m, keys[i].k, where, cJSON_IsNumber(v),
                         cJSON_IsNumber(v) ? v->valuedouble : 0);
    }
    return LPX_OK;
}

/* tokenizer_config.json's chat_template: a string, or the "default" of a list of
 * {name, template}; NULL when none. */
static const cJSON *chat_template_of(const cJSON *tc) {
    const cJSON *ct = item(tc, "chat_template");
    if (!cJSON_IsArray(ct)) return ct;
    const cJSON *e, *found = NULL;
    cJSON_ArrayForEach(e, ct) {
        const cJSON *n = item(e, "name");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, "default")) found = item(e, "template");
    }
    return found;
}

/* chat_template.jinja (transformers 5) or tokenizer_config.json's chat_template:
 * a string, or a list of {name, template} of which "default" is the one used. */
static lpx_status load_chat_template(const char *dir, char **out) {
    char path[4200];
    size_t len;
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    lpx_status s = lpx_read_file(path, MAX_JSON_FILE, out, &len);
    if (s == LPX_OK && strlen(*out) != len) {
        size_t at = strlen(*out);
        free(*out);
        *out = NULL;
        return lpx_errorf(LPX_ERR_FORMAT,
                          "chat_template.jinja: a NUL byte at offset %zu (of %zu): it would cut "
                          "the template",
                          at, len);
    }
    if (s != LPX_ERR_IO) return s;
    lpx_error_clear();
    cJSON *tc, *marked;
    LPX_TRY(load_json_marked(dir, "tokenizer_config.json", false, &tc, &marked));
    const cJSON *ct = chat_template_of(tc), *cm = marked ? chat_template_of(marked) : NULL;
    s = LPX_OK;
    if (ct && !cJSON_IsString(ct))
        s = lpx_errorf(LPX_ERR_FORMAT, "tokenizer_config.json: chat_template is not a string");
    else if (ct && cJSON_IsString(cm) && strcmp(ct->valuestring, cm->valuestring))
        s = lpx_errorf(LPX_ERR_FORMAT,
                       "tokenizer_config.json: chat_template holds \\u0000 (a NUL) at offset "
                       "%zu: it would cut the template",
                       strlen(ct->valuestring));
    else if (ct && !(*out = strdup(ct->valuestring)))
        s = lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    cJSON_Delete(tc);
    cJSON_Delete(marked);
    return s;
}

static lpx_status add_shard(lpx_model *m, const char *dir, const char *file) {
    char path[4200];
    const void *data;
    size_t size;
    lpx_tensor *ts;
    int64_t n;
    if (strchr(file, '/') || !strcmp(file, "..") || !*file)
        return lpx_errorf(LPX_ERR_FORMAT, "%s/model.safetensors.index.json: bad shard name '%s'",
                          dir, file);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    LPX_TRY(lpx_store_map_file(m->impl, path, &data, &size));
    LPX_TRY(lpx_safetensors_parse(data, size, path, &ts, &n));
    lpx_tensor *all = realloc(m->tensors, (size_t)(m->n_tensors + n + 1) * sizeof *all);
    if (!all) {
        free(ts);
        return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(all + m->n_tensors, ts, (size_t)n * sizeof *ts);
    free(ts);
    m->tensors = all;
    m->n_tensors += n;
    return LPX_OK;
}

/* Shards of the index in first-seen order; each listed tensor must be in its shard. */
static lpx_status load_sharded(lpx_model *m, const char *dir, const cJSON *index) {
    const cJSON *wm = item(index, "weight_map"), *e, *f;
    if (!cJSON_IsObject(wm))
        return lpx_errorf(LPX_ERR_FORMAT, "%s/model.safetensors.index.json: weight_map missing",
                          dir);
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e))
            return lpx_errorf(LPX_ERR_FORMAT,
                              "%s/model.safetensors.index.json: weight_map[%s] is not a file name",
                              dir, e->string);
        bool seen = false;
        for (f = wm->child; f != e && !seen; f = f->next)
            seen = !strcmp(f->valuestring, e->valuestring);
        if (!seen) LPX_TRY(add_shard(m, dir, e->valuestring));
    }
    cJSON_ArrayForEach(e, wm) {
        const lpx_tensor *t = lpx_model_find_tensor(m, e->string);
        if (!t)
            return lpx_errorf(
                LPX_ERR_FORMAT,
                "%s/model.safetensors.index.json lists tensor %s in %s, which lacks it", dir,
                e->string, e->valuestring);
    }
    return LPX_OK;
}

lpx_status lpx_hf_load(lpx_model *m, const char *dir) {
    cJSON *cfg = NULL, *gen = NULL, *index = NULL;
    lpx_status s = load_json(dir, "config.json", true, &cfg);
    if (s == LPX_OK && (s = parse_config(cfg, &m->cfg)) != LPX_OK) lpx_error_wrap(s, "%s", dir);
    if (s == LPX_OK) s = load_json(dir, "generation_config.json", false, &gen);
    if (s == LPX_OK && (s = parse_generation(cfg, gen, m)) != LPX_OK) lpx_error_wrap(s, "%s", dir);
    if (s == LPX_OK && (s = load_chat_template(dir, &m->chat_template)) != LPX_OK)
        lpx_error_wrap(s, "%s", dir);
    if (s == LPX_OK) s = load_json(dir, "model.safetensors.index.json", false, &index);
    if (s == LPX_OK)
        s = index ? load_sharded(m, dir, index) : add_shard(m, dir, "model.safetensors");
    const cJSON *qc = item(cfg, "quantization_config");
    const cJSON *dt = item(cfg, "torch_dtype") ? item(cfg, "torch_dtype") : item(cfg, "dtype");
    if (s == LPX_OK && qc)
        s = lpx_hf_quant_apply(m, qc, cJSON_IsString(dt) ? dt->valuestring : NULL);
    cJSON_Delete(cfg);
    cJSON_Delete(gen);
    cJSON_Delete(index);
    return s;
}

/* A Hugging Face directory's tokenizer.json as GGUF tokenizer.ggml.* keys, as llama.cpp's
 * converter writes them for byte-level BPE ("gpt2"): tokens by id (padded to the
 * embedding's rows with [PADn]), their types, the merges, the pre-tokenizer's llama.cpp
 * name, add_bos_token. Other tokenizers are left out with the reason. */
#include "model/hf_gguf_tokenizer.h"

#include "base/error.h"
#include "base/readall.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENIZER_JSON (256u << 20)

/* ggml token types */
enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5 };

static const cJSON *get(const cJSON *o, const char *k) {
    return cJSON_GetObjectItemCaseSensitive(o, k);
}
static bool is_type(const cJSON *o, const char *type) {
    const cJSON *t = get(o, "type");
    return cJSON_IsString(t) && !strcmp(t->valuestring, type);
}
static bool flag(const cJSON *o, const char *k, bool dflt) {
    const cJSON *v = get(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* llama.cpp's name for the pre-tokenizer pipeline, or NULL. */
static const char *pre_name(const cJSON *pre) {
    if (is_type(pre, "ByteLevel") && flag(pre, "use_regex", true)) return "gpt-2";
    const cJSON *seq = get(pre, "pretokenizers");
    if (!is_type(pre, "Sequence") || cJSON_GetArraySize(seq) != 2) return NULL;
    const cJSON *a = cJSON_GetArrayItem(seq, 0), *b = cJSON_GetArrayItem(seq, 1);
    if (!is_type(b, "ByteLevel")) return NULL;
    if (is_type(a, "Digits") && flag(a, "individual_digits", false) && flag(b, "use_regex", true))
        return "smollm";
    const cJSON *re = get(get(a, "pattern"), "Regex");
    if (!is_type(a, "Split") || !cJSON_IsString(re) || flag(b, "use_regex", true)) return NULL;
    static const char *const split_names[] = {"llama-bpe", "qwen2"};
    for (size_t i = 0; i < 2; i++)
        if (!strcmp(re->valuestring, lpx_tokenizer_pre_regex(split_names[i])))
            return split_names[i];
    return NULL;
}

static lpx_status write_tokens(lpx_gguf_writer *w, const cJSON *root, int32_t n_vocab, char *why,
                               size_t cap) {
    const cJSON *model = get(root, "model"), *vocab = get(model, "vocab"), *e;
    const cJSON *merges = get(model, "merges"), *added = get(root, "added_tokens");
    const char **text = calloc((size_t)n_vocab, sizeof *text);
    int32_t *type = calloc((size_t)n_vocab, sizeof *type);
    if (!text || !type) {
        free(text);
        free(type);
        return lpx_errorf(LPX_ERR_NOMEM, "out of memory");
    }
    lpx_status s = LPX_OK;
    cJSON_ArrayForEach(e, vocab) {
        int id = cJSON_IsNumber(e) ? e->valueint : -1;
        if (id < 0 || id >= n_vocab) {
            snprintf(why, cap, "token %d of tokenizer.json is outside the %d embedding rows", id,
                     n_vocab);
            goto out;
        }
        text[id] = e->string;
        type[id] = TT_NORMAL;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = get(e, "id"), *c = get(e, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(c) || id->valueint < 0 ||
            id->valueint >= n_vocab) {
            snprintf(why, cap, "an added token of tokenizer.json is outside the %d embedding rows",
                     n_vocab);
            goto out;
        }
        text[id->valueint] = c->valuestring;
        type[id->valueint] = flag(e, "special", false) ? TT_CONTROL : TT_USER;
    }
    lpx_gguf_kv_str(w, "tokenizer.ggml.model", "gpt2", 4);
    lpx_gguf_kv_arr(w, "tokenizer.ggml.tokens", LPX_GGUF_STRING, (uint64_t)n_vocab);
    for (int32_t i = 0; i < n_vocab; i++) {
        char pad[32];
        if (!text[i]) snprintf(pad, sizeof pad, "[PAD%d]", i);
        lpx_gguf_put_str(w, text[i] ? text[i] : pad, strlen(text[i] ? text[i] : pad));
    }
    lpx_gguf_kv_arr(w, "tokenizer.ggml.token_type", LPX_GGUF_I32, (uint64_t)n_vocab);
    for (int32_t i = 0; i < n_vocab; i++)
        lpx_gguf_put_i32(w, text[i] ? type[i] : TT_UNUSED);
    /* merges: "a b" (tokenizers < 0.20) or ["a", "b"] */
    lpx_gguf_kv_arr(w, "tokenizer.ggml.merges", LPX_GGUF_STRING,
                    (uint64_t)cJSON_GetArraySize(merges));
    cJSON_ArrayForEach(e, merges) {
        if (cJSON_IsString(e)) {
            lpx_gguf_put_str(w, e->valuestring, strlen(e->valuestring));
            continue;
        }
        const cJSON *a = cJSON_GetArrayItem(e, 0), *b = cJSON_GetArrayItem(e, 1);
        if (!cJSON_IsString(a) || !cJSON_IsString(b)) {
            s = lpx_errorf(LPX_ERR_FORMAT, "tokenizer.json: a merge is not two strings");
            goto out;
        }
        size_t la = strlen(a->valuestring), lb = strlen(b->valuestring);
        char *m = malloc(la + lb + 2);
        if (!m) {
            s = lpx_errorf(LPX_ERR_NOMEM, "out of memory");
            goto out;
        }
        memcpy(m, a->valuestring, la);
        m[la] = ' ';
        memcpy(m + la + 1, b->valuestring, lb + 1);
        lpx_gguf_put_str(w, m, la + lb + 1);
        free(m);
    }
out:
    free(text);
    free(type);
    return s;
}

lpx_status lpx_hf_tokenizer_gguf(const char *dir, int32_t n_vocab, lpx_gguf_writer *w, char *why,
                                 size_t cap) {
    char path[4200], *json = NULL, *cfg_text = NULL;
    size_t len;
    *why = 0;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    lpx_status s = lpx_read_file(path, MAX_TOKENIZER_JSON, &json, &len);
    if (s == LPX_ERR_IO) {
        lpx_error_clear();
        snprintf(why, cap, "no tokenizer.json");
        return LPX_OK;
    }
    LPX_TRY(s);
    cJSON *root = cJSON_ParseWithLength(json, len), *cfg = NULL;
    free(json);
    const cJSON *model = get(root, "model");
    const char *pre = pre_name(get(root, "pre_tokenizer"));
    if (!root)
        s = lpx_errorf(LPX_ERR_FORMAT, "%s: invalid JSON", path);
    else if (!is_type(model, "BPE") || flag(model, "byte_fallback", false))
        snprintf(why, cap, "tokenizer.json is not byte-level BPE (only those are converted)");
    else if (!pre)
        snprintf(why, cap, "tokenizer.json's pre_tokenizer is not one llama.cpp names");
    else
        s = write_tokens(w, root, n_vocab, why, cap);
    if (s == LPX_OK && !*why) {
        lpx_gguf_kv_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        if (lpx_read_file(path, MAX_TOKENIZER_JSON, &cfg_text, &len) == LPX_OK)
            cfg = cJSON_ParseWithLength(cfg_text, len);
        lpx_error_clear();
        lpx_gguf_kv_bool(w, "tokenizer.ggml.add_bos_token", flag(cfg, "add_bos_token", false));
    }
    free(cfg_text);
    cJSON_Delete(cfg);
    cJSON_Delete(root);
    return s;
}

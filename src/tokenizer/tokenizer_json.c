/* Loading a tokenizer from Hugging Face tokenizer.json (+ tokenizer_config.json):
 * model BPE (byte-level or SentencePiece-style with byte fallback), its
 * normalizer, pre-tokenizer, decoder and post-processor. Every field is checked;
 * a construct these models do not use is a clear "unsupported" error. */
#include "base/checked.h"
#include "base/error.h"
#include "base/readall.h"
#include "tokenizer/tokenizer_internal.h"

#include <cjson/cJSON.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_MAX_JSON_BYTES ((size_t)1 << 30)

static const char *W = "tokenizer.json";

static const char *get_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool get_bool(const cJSON *o, const char *key, bool dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static char *dup_str(const char *s, size_t *len) {
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p) memcpy(p, s, n + 1);
    if (len) *len = n;
    return p;
}

static lpx_status type_of(const cJSON *o, const char *what, const char **type) {
    *type = get_str(o, "type");
    if (!*type) return lpx_errorf(LPX_ERR_FORMAT, "%s: %s without a \"type\"", W, what);
    return LPX_OK;
}

/* A Split / Replace pattern: {"String": s} or {"Regex": r}. */
static lpx_status get_pattern(const cJSON *o, const char *what, const char **s, bool *is_regex) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    const char *str = get_str(p, "String"), *re = get_str(p, "Regex");
    if (!str && !re)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: %s without a String or Regex pattern", W, what);
    *s = str ? str : re;
    *is_regex = !str;
    return LPX_OK;
}

/* ---- normalizer ---------------------------------------------------------------- */

static lpx_status add_norm(lpx_tokenizer *t, const cJSON *o) {
    if (cJSON_IsNull(o) || !o) return LPX_OK;
    const char *type;
    LPX_TRY(type_of(o, "normalizer", &type));
    if (!strcmp(type, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "normalizers"))
            LPX_TRY(add_norm(t, e));
        return LPX_OK;
    }
    if (t->n_norms >= TOK_MAX_OPS)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: more than %d normalizers", W, TOK_MAX_OPS);
    tok_norm *n = &t->norms[t->n_norms];
    memset(n, 0, sizeof *n);
    if (!strcmp(type, "NFC"))
        n->kind = TOK_NORM_NFC;
    else if (!strcmp(type, "NFD"))
        n->kind = TOK_NORM_NFD;
    else if (!strcmp(type, "NFKC"))
        n->kind = TOK_NORM_NFKC;
    else if (!strcmp(type, "NFKD"))
        n->kind = TOK_NORM_NFKD;
    else if (!strcmp(type, "Lowercase"))
        n->kind = TOK_NORM_LOWERCASE;
    else if (!strcmp(type, "Prepend")) {
        const char *s = get_str(o, "prepend");
        if (!s) return lpx_errorf(LPX_ERR_FORMAT, "%s: Prepend normalizer without \"prepend\"", W);
        n->kind = TOK_NORM_PREPEND;
        n->a = dup_str(s, &n->a_len);
    } else if (!strcmp(type, "Replace")) {
        const char *pat, *content = get_str(o, "content");
        bool is_regex;
        LPX_TRY(get_pattern(o, "Replace normalizer", &pat, &is_regex));
        if (is_regex)
            return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: Replace normalizer with a Regex", W);
        if (!content || !*pat)
            return lpx_errorf(LPX_ERR_FORMAT, "%s: Replace normalizer needs pattern and content",
                              W);
        n->kind = TOK_NORM_REPLACE;
        n->a = dup_str(pat, &n->a_len);
        n->b = dup_str(content, &n->b_len);
        if (!n->b) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: out of memory");
    } else {
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: normalizer type \"%s\"", W, type);
    }
    if ((n->kind == TOK_NORM_PREPEND || n->kind == TOK_NORM_REPLACE) && !n->a)
        return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: out of memory");
    t->n_norms++;
    return LPX_OK;
}

/* ---- pre-tokenizer ---------------------------------------------------------------- */

static lpx_status parse_behavior(const cJSON *o, tok_behavior *b) {
    const char *s = get_str(o, "behavior");
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};
    for (int i = 0; s && i < 5; i++)
        if (!strcmp(s, names[i])) {
            *b = (tok_behavior)i;
            return LPX_OK;
        }
    return lpx_errorf(LPX_ERR_FORMAT, "%s: Split behavior \"%s\" unknown", W, s ? s : "(missing)");
}

static lpx_status add_pre(lpx_tokenizer *t, const cJSON *o) {
    if (cJSON_IsNull(o) || !o) return LPX_OK;
    const char *type;
    LPX_TRY(type_of(o, "pre_tokenizer", &type));
    if (!strcmp(type, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "pretokenizers"))
            LPX_TRY(add_pre(t, e));
        return LPX_OK;
    }
    if (t->n_pres >= TOK_MAX_OPS)
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: more than %d pre-tokenizers", W, TOK_MAX_OPS);
    tok_pre *p = &t->pres[t->n_pres];
    memset(p, 0, sizeof *p);
    if (!strcmp(type, "Split")) {
        const char *pat;
        bool is_regex;
        LPX_TRY(get_pattern(o, "Split pre-tokenizer", &pat, &is_regex));
        LPX_TRY(parse_behavior(o, &p->behavior));
        p->invert = get_bool(o, "invert", false);
        if (is_regex) {
            p->kind = TOK_PRE_SPLIT_REGEX;
            LPX_TRY(tok_compile_regex(pat, strlen(pat), &p->re));
        } else {
            p->kind = TOK_PRE_SPLIT_STRING;
            p->a = dup_str(pat, &p->a_len);
            if (!p->a) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: out of memory");
        }
    } else if (!strcmp(type, "ByteLevel")) {
        p->kind = TOK_PRE_BYTELEVEL;
        p->flag = get_bool(o, "add_prefix_space", true);
        if (get_bool(o, "use_regex", true))
            LPX_TRY(tok_compile_regex(tok_gpt2_regex, strlen(tok_gpt2_regex), &p->re));
    } else if (!strcmp(type, "Digits")) {
        p->kind = TOK_PRE_DIGITS;
        p->flag = get_bool(o, "individual_digits", false);
    } else if (!strcmp(type, "Metaspace")) {
        const char *rep = get_str(o, "replacement"), *scheme = get_str(o, "prepend_scheme");
        p->kind = TOK_PRE_METASPACE;
        p->a = dup_str(rep ? rep : "\xE2\x96\x81", &p->a_len);
        if (!p->a) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: out of memory");
        if (!scheme)
            p->prepend = get_bool(o, "add_prefix_space", true) ? 2 : 0;
        else if (!strcmp(scheme, "always"))
            p->prepend = 2;
        else if (!strcmp(scheme, "first"))
            p->prepend = 1;
        else if (!strcmp(scheme, "never"))
            p->prepend = 0;
        else
            return lpx_errorf(LPX_ERR_FORMAT, "%s: Metaspace prepend_scheme \"%s\"", W, scheme);
        p->flag = get_bool(o, "split", true);
    } else {
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: pre_tokenizer type \"%s\"", W, type);
    }
    t->n_pres++;
    return LPX_OK;
}

/* ---- decoder -------------------------------------------------------------------- */

static lpx_status set_dec_space(lpx_tokenizer *t, const char *s) {
    free(t->dec_space);
    t->dec_space = dup_str(s, &t->dec_space_len);
    if (!t->dec_space) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: out of memory");
    return LPX_OK;
}

static lpx_status add_dec(lpx_tokenizer *t, const cJSON *o) {
    if (cJSON_IsNull(o) || !o) return LPX_OK;
    const char *type;
    LPX_TRY(type_of(o, "decoder", &type));
    if (!strcmp(type, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "decoders"))
            LPX_TRY(add_dec(t, e));
    } else if (!strcmp(type, "ByteLevel")) {
        t->dec_bytelevel = true;
    } else if (!strcmp(type, "ByteFallback")) {
        t->dec_byte_fallback = true;
    } else if (!strcmp(type, "Fuse")) {
        /* Joining pieces is what lpx's decoder always does. */
    } else if (!strcmp(type, "Replace")) {
        const char *pat, *content = get_str(o, "content");
        bool is_regex;
        LPX_TRY(get_pattern(o, "Replace decoder", &pat, &is_regex));
        if (is_regex || !content || strcmp(content, " ") || !*pat)
            return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: Replace decoder other than STRING -> \" \"",
                              W);
        LPX_TRY(set_dec_space(t, pat));
    } else if (!strcmp(type, "Strip")) {
        const char *c = get_str(o, "content");
        const cJSON *start = cJSON_GetObjectItemCaseSensitive(o, "start");
        const cJSON *stop = cJSON_GetObjectItemCaseSensitive(o, "stop");
        if (!c || strcmp(c, " ") || !cJSON_IsNumber(start) || start->valuedouble < 0 ||
            start->valuedouble > 8 || (cJSON_IsNumber(stop) && stop->valuedouble != 0))
            return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: Strip decoder other than leading spaces",
                              W);
        t->dec_strip_lead = (int)start->valuedouble;
    } else if (!strcmp(type, "Metaspace")) {
        const char *rep = get_str(o, "replacement"), *scheme = get_str(o, "prepend_scheme");
        LPX_TRY(set_dec_space(t, rep ? rep : "\xE2\x96\x81"));
        bool strip = scheme ? strcmp(scheme, "never") != 0 : get_bool(o, "add_prefix_space", true);
        t->dec_strip_lead = strip ? 1 : 0;
    } else {
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: decoder type \"%s\"", W, type);
    }
    return LPX_OK;
}

/* ---- post-processor ------------------------------------------------------------- */

static lpx_status template_ids(lpx_tokenizer *t, const cJSON *o) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(o, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(o, "special_tokens");
    bool after = false;
    const cJSON *e;
    t->n_prefix = t->n_suffix = 0;
    cJSON_ArrayForEach(e, single) {
        if (cJSON_GetObjectItemCaseSensitive(e, "Sequence")) {
            after = true;
            continue;
        }
        const char *name = get_str(cJSON_GetObjectItemCaseSensitive(e, "SpecialToken"), "id");
        if (!name)
            return lpx_errorf(LPX_ERR_FORMAT, "%s: TemplateProcessing item without SpecialToken id",
                              W);
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(specials, name), "ids");
        const cJSON *id;
        if (!cJSON_IsArray(ids))
            return lpx_errorf(LPX_ERR_FORMAT,
                              "%s: TemplateProcessing special token \"%s\" has no ids", W, name);
        cJSON_ArrayForEach(id, ids) {
            int n = after ? t->n_suffix : t->n_prefix;
            if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= t->n_vocab)
                return lpx_errorf(LPX_ERR_FORMAT,
                                  "%s: TemplateProcessing id of \"%s\" out of range", W, name);
            if (n >= TOK_MAX_AFFIX)
                return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: more than %d template tokens", W,
                                  TOK_MAX_AFFIX);
            (after ? t->suffix : t->prefix)[n] = (int32_t)id->valuedouble;
            if (after)
                t->n_suffix++;
            else
                t->n_prefix++;
        }
    }
    return LPX_OK;
}

static lpx_status add_post(lpx_tokenizer *t, const cJSON *o) {
    if (cJSON_IsNull(o) || !o) return LPX_OK;
    const char *type;
    LPX_TRY(type_of(o, "post_processor", &type));
    if (!strcmp(type, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "processors"))
            LPX_TRY(add_post(t, e));
        return LPX_OK;
    }
    if (!strcmp(type, "ByteLevel")) return LPX_OK; /* offsets only */
    if (!strcmp(type, "TemplateProcessing")) return template_ids(t, o);
    return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: post_processor type \"%s\"", W, type);
}

/* ---- model -------------------------------------------------------------------- */

static lpx_status json_id(const cJSON *v, const char *what, int32_t *id) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= TOK_MAX_VOCAB ||
        v->valuedouble != (double)(int32_t)v->valuedouble)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: %s: id is not an integer in 0..%d", W, what,
                          TOK_MAX_VOCAB - 1);
    *id = (int32_t)v->valuedouble;
    return LPX_OK;
}

static lpx_status load_merges(lpx_tokenizer *t, const cJSON *merges) {
    const cJSON *m;
    uint32_t rank = 0;
    LPX_TRY(tok_mergemap_init(&t->merges, (size_t)cJSON_GetArraySize(merges)));
    cJSON_ArrayForEach(m, merges) {
        if (cJSON_IsString(m)) {
            const char *s = m->valuestring, *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return lpx_errorf(LPX_ERR_FORMAT,
                                  "%s: merge %u \"%.64s\" is not two tokens split by one space", W,
                                  rank, s);
            LPX_TRY(tok_add_merge(t, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), rank, W));
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            const char *a = cJSON_GetArrayItem(m, 0)->valuestring;
            const char *b = cJSON_GetArrayItem(m, 1)->valuestring;
            LPX_TRY(tok_add_merge(t, a, strlen(a), b, strlen(b), rank, W));
        } else {
            return lpx_errorf(LPX_ERR_FORMAT, "%s: merge %u is neither \"a b\" nor [a, b]", W,
                              rank);
        }
        rank++;
    }
    return LPX_OK;
}

static lpx_status token_of(const lpx_tokenizer *t, const cJSON *cfg, const char *key, int32_t *id) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    const char *s = cJSON_IsString(v) ? v->valuestring : get_str(v, "content");
    if (!s) return LPX_OK;
    int32_t found = lpx_tokenizer_find(t, s);
    if (found < 0)
        return lpx_errorf(LPX_ERR_FORMAT, "tokenizer_config.json: %s \"%.64s\" is not a token", key,
                          s);
    *id = found;
    return LPX_OK;
}

static lpx_status apply_config(lpx_tokenizer *t, const cJSON *cfg) {
    LPX_TRY(token_of(t, cfg, "bos_token", &t->bos));
    LPX_TRY(token_of(t, cfg, "eos_token", &t->eos));
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
    const cJSON *ae = cJSON_GetObjectItemCaseSensitive(cfg, "add_eos_token");
    /* Explicit flags rebuild the template, as transformers' update_post_processor does. */
    if (cJSON_IsBool(ab) || cJSON_IsBool(ae)) {
        t->n_prefix = t->n_suffix = 0;
        if (cJSON_IsTrue(ab) && t->bos >= 0) t->prefix[t->n_prefix++] = t->bos;
        if (cJSON_IsTrue(ae) && t->eos >= 0) t->suffix[t->n_suffix++] = t->eos;
    }
    return LPX_OK;
}

static lpx_status build(const cJSON *root, const cJSON *cfg, lpx_tokenizer **out) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    const char *mtype = get_str(model, "type");
    if (!cJSON_IsObject(model)) return lpx_errorf(LPX_ERR_FORMAT, "%s: no \"model\" object", W);
    if (mtype && strcmp(mtype, "BPE"))
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: model type \"%s\" (only BPE)", W, mtype);
    if (!cJSON_IsObject(vocab))
        return lpx_errorf(LPX_ERR_FORMAT, "%s: model.vocab is not an object", W);
    if (merges && !cJSON_IsArray(merges))
        return lpx_errorf(LPX_ERR_FORMAT, "%s: model.merges is not an array", W);
    const char *cont = get_str(model, "continuing_subword_prefix");
    const char *eow = get_str(model, "end_of_word_suffix");
    if ((cont && *cont) || (eow && *eow))
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "%s: BPE with a subword prefix or suffix", W);

    int32_t max_id = -1, id;
    size_t n_entries = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        LPX_TRY(json_id(e, "model.vocab", &id));
        if (id > max_id) max_id = id;
        n_entries++;
    }
    cJSON_ArrayForEach(e, added) {
        LPX_TRY(json_id(cJSON_GetObjectItemCaseSensitive(e, "id"), "added_tokens", &id));
        if (id > max_id) max_id = id;
    }
    lpx_tokenizer *t;
    LPX_TRY(tok_alloc(&t, max_id + 1));
    lpx_status st = tok_strmap_init(&t->vocab, n_entries);
    cJSON_ArrayForEach(e, vocab) {
        if (st != LPX_OK) break;
        id = (int32_t)e->valuedouble;
        st = tok_set_text(t, id, e->string, strlen(e->string));
        if (st == LPX_OK) tok_strmap_put(&t->vocab, t, id);
    }
    t->byte_fallback = get_bool(model, "byte_fallback", false);
    t->fuse_unk = get_bool(model, "fuse_unk", false);
    t->ignore_merges = get_bool(model, "ignore_merges", false);
    const char *unk = get_str(model, "unk_token");
    if (st == LPX_OK && unk) {
        t->unk_id = tok_strmap_get(&t->vocab, t, unk, strlen(unk));
        if (t->unk_id < 0)
            st = lpx_errorf(LPX_ERR_FORMAT, "%s: unk_token \"%.64s\" not in vocab", W, unk);
    }
    if (st == LPX_OK && merges) st = load_merges(t, merges);
    cJSON_ArrayForEach(e, added) {
        if (st != LPX_OK) break;
        const char *content = get_str(e, "content");
        if (!content) {
            st = lpx_errorf(LPX_ERR_FORMAT, "%s: added token without content", W);
            break;
        }
        tok_added a = {
            .id = (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble,
            .text = (char *)content,
            .len = strlen(content),
            .special = get_bool(e, "special", false),
            .lstrip = get_bool(e, "lstrip", false),
            .rstrip = get_bool(e, "rstrip", false),
            .single_word = get_bool(e, "single_word", false),
        };
        a.normalized = get_bool(e, "normalized", !a.special);
        st = tok_add_added(t, &a);
    }
    if (st == LPX_OK) st = add_norm(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"));
    if (st == LPX_OK) st = add_pre(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
    if (st == LPX_OK) st = add_dec(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"));
    if (st == LPX_OK) st = add_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"));
    if (st == LPX_OK) st = tok_finish(t);
    if (st == LPX_OK && t->n_prefix) t->bos = t->prefix[0];
    if (st == LPX_OK && cfg) st = apply_config(t, cfg);
    if (st != LPX_OK) {
        lpx_tokenizer_free(t);
        return st;
    }
    *out = t;
    return LPX_OK;
}

lpx_status lpx_tokenizer_from_json(const char *json, size_t len, const char *config_json,
                                   size_t config_len, lpx_tokenizer **out) {
    if (!json || !out)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "lpx_tokenizer_from_json: NULL argument");
    *out = NULL;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return lpx_errorf(LPX_ERR_FORMAT, "%s: not a JSON object", W);
    }
    cJSON *cfg = NULL;
    if (config_json) {
        cfg = cJSON_ParseWithLength(config_json, config_len);
        if (!cfg || !cJSON_IsObject(cfg)) {
            cJSON_Delete(cfg);
            cJSON_Delete(root);
            return lpx_errorf(LPX_ERR_FORMAT, "tokenizer_config.json: not a JSON object");
        }
    }
    lpx_status st = build(root, cfg, out);
    cJSON_Delete(root);
    cJSON_Delete(cfg);
#if defined(__GLIBC__)
    /* The parse tree of a large vocabulary is millions of small blocks: hand them
     * back now, or the first encode pays ~0.2 s for glibc consolidating them. */
    malloc_trim(0);
#endif
    return st;
}

/* Loads dir/tokenizer.json, with dir/tokenizer_config.json when it exists. */
static lpx_status load_pair(const char *dir, const char *json_path, lpx_tokenizer **out) {
    char path[4096];
    char *json = NULL, *cfg = NULL;
    size_t len = 0, cfg_len = 0;
    LPX_TRY(lpx_read_file(json_path, TOK_MAX_JSON_BYTES, &json, &len));
    if ((size_t)snprintf(path, sizeof path, "%s/tokenizer_config.json", dir) >= sizeof path) {
        free(json);
        return lpx_errorf(LPX_ERR_INVALID_ARG, "%s: path too long", dir);
    }
    FILE *probe = fopen(path, "rb");
    lpx_status st = LPX_OK;
    if (probe) {
        fclose(probe);
        st = lpx_read_file(path, TOK_MAX_JSON_BYTES, &cfg, &cfg_len);
    }
    if (st == LPX_OK) st = lpx_tokenizer_from_json(json, len, cfg, cfg_len, out);
    if (st != LPX_OK) st = lpx_error_wrap(st, "%s", json_path);
    free(json);
    free(cfg);
    return st;
}

lpx_status lpx_tokenizer_load_hf(const char *dir, lpx_tokenizer **out) {
    if (!dir || !out)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "lpx_tokenizer_load_hf: NULL argument");
    *out = NULL;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= sizeof path)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "%s: path too long", dir);
    return load_pair(dir, path, out);
}

lpx_status lpx_tokenizer_load_json_file(const char *path, lpx_tokenizer **out) {
    if (!path || !out)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "lpx_tokenizer_load_json_file: NULL argument");
    *out = NULL;
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if ((size_t)(slash - path) >= sizeof dir)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "%s: path too long", path);
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    return load_pair(dir, path, out);
}

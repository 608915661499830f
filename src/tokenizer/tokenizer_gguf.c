/* Loading a tokenizer from GGUF metadata (tokenizer.ggml.*). The pipeline is
 * set up to equal the Hugging Face tokenizer.json of the same model family:
 * "gpt2" files are byte-level BPE whose pre-tokenizer follows tokenizer.ggml.pre;
 * "llama" files are SentencePiece BPE (byte fallback, "▁" for spaces) whose
 * merge order comes from the scores, as transformers' converter builds it. */
#include "base/checked.h"
#include "base/error.h"
#include "tokenizer/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *W = "GGUF tokenizer";

#define SPACE_MARK "\xE2\x96\x81" /* U+2581, SentencePiece's space */

static const char LLAMA3_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const char *lpx_tokenizer_pre_regex(const char *pre) {
    if (!strcmp(pre, "llama-bpe")) return LLAMA3_REGEX;
    if (!strcmp(pre, "qwen2")) return QWEN2_REGEX;
    return NULL;
}

/* ggml token types. */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static lpx_status push_pre(lpx_tokenizer *t, tok_pre_kind kind, const char *regex, bool flag) {
    tok_pre *p = &t->pres[t->n_pres];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->flag = flag;
    p->behavior = TOK_ISOLATED;
    if (regex) LPX_TRY(tok_compile_regex(regex, strlen(regex), &p->re));
    t->n_pres++;
    return LPX_OK;
}

/* The pre-tokenizers of the Hugging Face tokenizer.json each llama.cpp "pre" name stands for. */
static lpx_status setup_pre(lpx_tokenizer *t, const char *pre, size_t len) {
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(len < 63 ? len : 63), pre ? pre : "default");
    if (!strcmp(name, "default") || !strcmp(name, "gpt-2") || !strcmp(name, "gpt2"))
        return push_pre(t, TOK_PRE_BYTELEVEL, tok_gpt2_regex, false);
    if (!strcmp(name, "smollm") || !strcmp(name, "starcoder") || !strcmp(name, "refact")) {
        LPX_TRY(push_pre(t, TOK_PRE_DIGITS, NULL, true));
        return push_pre(t, TOK_PRE_BYTELEVEL, tok_gpt2_regex, false);
    }
    if (!strcmp(name, "llama3") || !strcmp(name, "llama-v3") || !strcmp(name, "llama-bpe") ||
        !strcmp(name, "falcon3")) {
        t->ignore_merges = true;
        LPX_TRY(push_pre(t, TOK_PRE_SPLIT_REGEX, LLAMA3_REGEX, false));
        return push_pre(t, TOK_PRE_BYTELEVEL, NULL, false);
    }
    if (!strcmp(name, "qwen2") || !strcmp(name, "deepseek-r1-qwen")) {
        t->norms[t->n_norms++] = (tok_norm){.kind = TOK_NORM_NFC};
        LPX_TRY(push_pre(t, TOK_PRE_SPLIT_REGEX, QWEN2_REGEX, false));
        return push_pre(t, TOK_PRE_BYTELEVEL, NULL, false);
    }
    return lpx_errorf(LPX_ERR_UNSUPPORTED,
                      "%s: tokenizer.ggml.pre \"%s\" (known: gpt-2, smollm, starcoder, refact, "
                      "llama-bpe, llama3, falcon3, qwen2, deepseek-r1-qwen)",
                      W, name);
}

static lpx_status opt_id(const lpx_gguf *g, const char *key, int32_t n_vocab, int32_t *id) {
    int64_t v;
    if (!lpx_gguf_get_i64(g, key, &v)) return LPX_OK;
    if (v < 0 || v >= n_vocab)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: %s = %lld outside 0..%d", W, key, (long long)v,
                          n_vocab - 1);
    *id = (int32_t)v;
    return LPX_OK;
}

static lpx_status load_bpe_merges(lpx_tokenizer *t, const lpx_gguf *g) {
    lpx_gguf_type et;
    uint64_t n;
    if (!lpx_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n) || et != LPX_GGUF_STRING)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tokenizer.ggml.merges missing or not strings", W);
    if (n > (uint64_t)TOK_MAX_VOCAB * 4)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: %llu merges (limit %d)", W, (unsigned long long)n,
                          TOK_MAX_VOCAB * 4);
    LPX_TRY(tok_mergemap_init(&t->merges, (size_t)n));
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        if (!lpx_gguf_arr_str(g, "tokenizer.ggml.merges", i, &s, &len))
            return lpx_errorf(LPX_ERR_FORMAT, "%s: merge %llu unreadable", W,
                              (unsigned long long)i);
        const char *sp = memchr(s, ' ', len);
        if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - s)))
            return lpx_errorf(LPX_ERR_FORMAT,
                              "%s: merge %llu \"%.*s\" is not two tokens split by one space", W,
                              (unsigned long long)i, (int)(len > 64 ? 64 : len), s);
        LPX_TRY(tok_add_merge(t, s, (size_t)(sp - s), sp + 1, len - (size_t)(sp + 1 - s),
                              (uint32_t)i, "GGUF tokenizer.ggml.merges"));
    }
    return LPX_OK;
}

/* SentencePiece BPE merges from scores: every split of a normal piece into two
 * pieces of the vocabulary, ranked by the piece's score (highest first), ties
 * in vocabulary order, as transformers' SentencePieceExtractor orders them. */
typedef struct spm_merge {
    float score;
    int32_t id, l, r;
} spm_merge;

static int cmp_spm(const void *a, const void *b) {
    const spm_merge *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    if (x->l != y->l) return x->l < y->l ? -1 : 1;
    return (x->r > y->r) - (x->r < y->r);
}

static lpx_status load_spm_merges(lpx_tokenizer *t, const lpx_gguf *g, const uint8_t *types) {
    lpx_gguf_type et;
    uint64_t n;
    if (!lpx_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n) || n != (uint64_t)t->n_vocab)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tokenizer.ggml.scores missing or not one per token",
                          W);
    spm_merge *v = NULL;
    size_t nv = 0, cap = 0;
    lpx_status st = LPX_OK;
    for (int32_t id = 0; id < t->n_vocab && st == LPX_OK; id++) {
        double score;
        if (types[id] != TT_NORMAL || !t->text[id]) continue;
        if (!lpx_gguf_arr_f64(g, "tokenizer.ggml.scores", (uint64_t)id, &score)) {
            st = lpx_errorf(LPX_ERR_FORMAT, "%s: score %d unreadable", W, id);
            break;
        }
        const char *s = t->text[id];
        size_t len = t->text_len[id];
        for (size_t k = 1; k < len && st == LPX_OK; k++) {
            if (((unsigned char)s[k] & 0xC0) == 0x80) continue;
            int32_t l = tok_strmap_get(&t->vocab, t, s, k);
            int32_t r = tok_strmap_get(&t->vocab, t, s + k, len - k);
            if (l < 0 || r < 0) continue;
            if (nv == cap) {
                size_t nc = cap ? cap * 2 : 4096;
                spm_merge *p = realloc(v, nc * sizeof *p);
                if (!p) {
                    st = lpx_errorf(LPX_ERR_NOMEM, "%s: %zu merges", W, nc);
                    break;
                }
                v = p;
                cap = nc;
            }
            v[nv++] = (spm_merge){(float)score, id, l, r};
        }
    }
    if (st == LPX_OK) {
        qsort(v, nv, sizeof *v, cmp_spm);
        st = tok_mergemap_init(&t->merges, nv);
    }
    for (size_t i = 0; i < nv && st == LPX_OK; i++)
        tok_mergemap_put(&t->merges, v[i].l, v[i].r, (uint32_t)i, v[i].id);
    free(v);
    return st;
}

static lpx_status build(const lpx_gguf *g, lpx_tokenizer *t, uint8_t *types, bool spm) {
    uint64_t n = (uint64_t)t->n_vocab;
    lpx_gguf_type et;
    uint64_t nt;
    bool has_types = lpx_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &nt);
    if (has_types && nt != n)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: %llu token types for %llu tokens", W,
                          (unsigned long long)nt, (unsigned long long)n);
    LPX_TRY(tok_strmap_init(&t->vocab, (size_t)n));
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        int64_t ty = TT_NORMAL;
        if (!lpx_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len))
            return lpx_errorf(LPX_ERR_FORMAT, "%s: token %llu unreadable", W,
                              (unsigned long long)i);
        if (has_types && !lpx_gguf_arr_i64(g, "tokenizer.ggml.token_type", i, &ty))
            return lpx_errorf(LPX_ERR_FORMAT, "%s: token type %llu unreadable", W,
                              (unsigned long long)i);
        if (ty < TT_NORMAL || ty > TT_BYTE)
            return lpx_errorf(LPX_ERR_FORMAT, "%s: token %llu has type %lld (expected 1..6)", W,
                              (unsigned long long)i, (long long)ty);
        types[i] = (uint8_t)ty;
        LPX_TRY(tok_set_text(t, (int32_t)i, s, len));
        /* a byte token stands for the byte its text names: any other text contradicts it */
        if (ty == TT_BYTE && tok_parse_byte_token(s, len) < 0)
            return lpx_errorf(LPX_ERR_FORMAT,
                              "%s: token %llu has type BYTE (6) but its text (%zu bytes) is "
                              "not <0xHH>",
                              W, (unsigned long long)i, len);
        tok_strmap_put(&t->vocab, t, (int32_t)i);
    }
    for (uint64_t i = 0; i < n; i++) {
        int ty = types[i];
        if (ty != TT_CONTROL && ty != TT_USER && !(spm && ty == TT_UNKNOWN)) continue;
        if (t->text_len[i] == 0) continue; /* empty control tokens cannot occur in text */
        tok_added a = {.id = (int32_t)i,
                       .text = t->text[i],
                       .len = t->text_len[i],
                       .special = ty != TT_USER,
                       .normalized = false};
        LPX_TRY(tok_add_added(t, &a));
    }
    const char *model_pre;
    size_t pre_len = 0;
    if (!lpx_gguf_get_str(g, "tokenizer.ggml.pre", &model_pre, &pre_len)) model_pre = NULL;
    LPX_TRY(opt_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos));
    LPX_TRY(opt_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos));
    LPX_TRY(opt_id(g, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk_id));
    bool add_bos = spm, add_eos = false, add_space = spm;
    lpx_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos);
    lpx_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &add_eos);
    lpx_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &add_space);
    if (add_bos && t->bos >= 0) t->prefix[t->n_prefix++] = t->bos;
    if (add_eos && t->eos >= 0) t->suffix[t->n_suffix++] = t->eos;

    if (!spm) {
        /* Byte-level BPE has no <unk>: a byte missing from the vocabulary is
         * dropped, as in transformers' conversion of these files. */
        t->unk_id = -1;
        LPX_TRY(setup_pre(t, model_pre, pre_len));
        LPX_TRY(load_bpe_merges(t, g));
        t->dec_bytelevel = true;
        return LPX_OK;
    }
    /* As transformers converts these files: Metaspace("▁", prepend_scheme "first",
     * no split), BPE with byte fallback and no <unk>, decoder Replace("▁", " ") +
     * ByteFallback + Fuse + Strip(1 leading space). */
    t->byte_fallback = true;
    t->fuse_unk = true;
    t->unk_id = -1;
    tok_pre *p = &t->pres[t->n_pres++];
    *p = (tok_pre){.kind = TOK_PRE_METASPACE,
                   .prepend = add_space ? 1 : 0,
                   .a = strdup(SPACE_MARK),
                   .a_len = 3};
    t->dec_space = strdup(SPACE_MARK);
    if (!p->a || !t->dec_space) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: out of memory");
    t->dec_space_len = 3;
    t->dec_byte_fallback = true;
    t->dec_strip_lead = 1;
    return load_spm_merges(t, g, types);
}

lpx_status lpx_tokenizer_load_gguf(const lpx_gguf *g, lpx_tokenizer **out) {
    if (!g || !out)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "lpx_tokenizer_load_gguf: NULL argument");
    *out = NULL;
    const char *model;
    size_t model_len;
    if (!lpx_gguf_get_str(g, "tokenizer.ggml.model", &model, &model_len))
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tokenizer.ggml.model missing", W);
    bool spm;
    if (model_len == 4 && !memcmp(model, "gpt2", 4))
        spm = false;
    else if (model_len == 5 && !memcmp(model, "llama", 5))
        spm = true;
    else
        return lpx_errorf(LPX_ERR_UNSUPPORTED,
                          "%s: tokenizer.ggml.model \"%.*s\" (expected gpt2 or llama)", W,
                          (int)(model_len > 32 ? 32 : model_len), model);
    lpx_gguf_type et;
    uint64_t n;
    if (!lpx_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) || et != LPX_GGUF_STRING)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: tokenizer.ggml.tokens missing or not strings", W);
    if (n == 0 || n > TOK_MAX_VOCAB)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: %llu tokens (expected 1..%d)", W,
                          (unsigned long long)n, TOK_MAX_VOCAB);
    lpx_tokenizer *t;
    LPX_TRY(tok_alloc(&t, (int32_t)n));
    uint8_t *types = calloc((size_t)n, 1);
    lpx_status st =
        types ? build(g, t, types, spm) : lpx_errorf(LPX_ERR_NOMEM, "tokenizer: out of memory");
    if (st == LPX_OK) st = tok_finish(t);
    free(types);
    if (st != LPX_OK) {
        lpx_tokenizer_free(t);
        return st;
    }
    *out = t;
    return LPX_OK;
}

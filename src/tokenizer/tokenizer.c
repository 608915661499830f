/* Tokenizer core: building blocks shared by the loaders, encode (added tokens,
 * normalizer, pre-tokenizer, BPE, post-processor), decode and the streaming
 * decoder. */
#include "base/checked.h"
#include "base/error.h"
#include "tokenizer/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- building ------------------------------------------------------------------ */

lpx_status tok_alloc(lpx_tokenizer **out, int32_t n_vocab) {
    *out = NULL;
    if (n_vocab <= 0 || n_vocab > TOK_MAX_VOCAB)
        return lpx_errorf(LPX_ERR_FORMAT, "tokenizer: vocabulary size %d outside 1..%d", n_vocab,
                          TOK_MAX_VOCAB);
    lpx_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: out of memory");
    size_t n = (size_t)n_vocab;
    t->n_vocab = n_vocab;
    t->text = calloc(n, sizeof *t->text);
    t->text_len = calloc(n, sizeof *t->text_len);
    t->dec = calloc(n, sizeof *t->dec);
    t->dec_len = calloc(n, sizeof *t->dec_len);
    t->flags = calloc(n, 1);
    t->unk_id = t->bos = t->eos = -1;
    for (int i = 0; i < 256; i++)
        t->byte_ids[i] = -1;
    if (!t->text || !t->text_len || !t->dec || !t->dec_len || !t->flags) {
        lpx_tokenizer_free(t);
        return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: vocabulary of %d tokens", n_vocab);
    }
    *out = t;
    return LPX_OK;
}

static char *dup_bytes(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static bool valid_utf8(const char *s, size_t n, size_t *bad_at) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t cl = tok_utf8_len((const unsigned char *)s + i, n - i, &cp);
        if (!cl) {
            if (bad_at) *bad_at = i;
            return false;
        }
        i += cl;
    }
    return true;
}

lpx_status tok_set_text(lpx_tokenizer *t, int32_t id, const char *s, size_t len) {
    if (id < 0 || id >= t->n_vocab)
        return lpx_errorf(LPX_ERR_FORMAT, "tokenizer: token id %d outside 0..%d", id,
                          t->n_vocab - 1);
    if (len > TOK_MAX_TOKEN_BYTES)
        return lpx_errorf(LPX_ERR_FORMAT, "tokenizer: token %d is %zu bytes (limit %d)", id, len,
                          TOK_MAX_TOKEN_BYTES);
    if (!valid_utf8(s, len, NULL))
        return lpx_errorf(LPX_ERR_FORMAT, "tokenizer: token %d is not valid UTF-8", id);
    char *p = dup_bytes(s, len);
    if (!p) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: out of memory");
    free(t->text[id]);
    t->text[id] = p;
    t->text_len[id] = (uint32_t)len;
    return LPX_OK;
}

lpx_status tok_add_added(lpx_tokenizer *t, const tok_added *a) {
    if (a->len == 0) return lpx_errorf(LPX_ERR_FORMAT, "tokenizer: added token %d is empty", a->id);
    if (t->n_added >= INT16_MAX)
        return lpx_errorf(LPX_ERR_FORMAT, "tokenizer: more than %d added tokens", INT16_MAX);
    LPX_TRY(tok_set_text(t, a->id, a->text, a->len));
    /* A token added twice keeps its latest flags, as tokenizers' AddedVocabulary does. */
    for (int i = 0; i < t->n_added; i++) {
        if (t->added[i].id == a->id) {
            char *keep = t->added[i].text;
            t->added[i] = *a;
            t->added[i].text = keep;
            return LPX_OK;
        }
    }
    tok_added *p = realloc(t->added, (size_t)(t->n_added + 1) * sizeof *p);
    if (!p) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: out of memory");
    t->added = p;
    p[t->n_added] = *a;
    p[t->n_added].text = t->text[a->id];
    t->n_added++;
    return LPX_OK;
}

lpx_status tok_add_merge(lpx_tokenizer *t, const char *a, size_t a_len, const char *b, size_t b_len,
                         uint32_t rank, const char *where) {
    int32_t ia = tok_strmap_get(&t->vocab, t, a, a_len);
    int32_t ib = tok_strmap_get(&t->vocab, t, b, b_len);
    if (ia < 0 || ib < 0)
        return lpx_errorf(
            LPX_ERR_FORMAT, "%s: merge %u: token '%.*s' is not in the vocabulary", where, rank,
            (int)(ia < 0 ? (a_len > 64 ? 64 : a_len) : (b_len > 64 ? 64 : b_len)), ia < 0 ? a : b);
    char stack[256];
    size_t n = a_len + b_len;
    char *cat = n <= sizeof stack ? stack : malloc(n);
    if (!cat) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: out of memory");
    memcpy(cat, a, a_len);
    memcpy(cat + a_len, b, b_len);
    int32_t id = tok_strmap_get(&t->vocab, t, cat, n);
    if (cat != stack) free(cat);
    if (id < 0)
        return lpx_errorf(LPX_ERR_FORMAT, "%s: merge %u: '%.*s' + '%.*s' is not in the vocabulary",
                          where, rank, (int)(a_len > 64 ? 64 : a_len), a,
                          (int)(b_len > 64 ? 64 : b_len), b);
    tok_mergemap_put(&t->merges, ia, ib, rank, id);
    return LPX_OK;
}

int tok_parse_byte_token(const char *s, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    const char *h = strchr(hex, s[3]), *l = strchr(hex, s[4]);
    if (!h || !l || !s[3] || !s[4]) return -1;
    return (int)((h - hex) * 16 + (l - hex));
}

/* Decoded bytes of one token, as the model's decoder turns it into text. */
static lpx_status make_dec(lpx_tokenizer *t, int32_t id) {
    const char *s = t->text[id];
    size_t n = t->text_len[id];
    tok_buf b = {0};
    LPX_TRY(tok_buf_append(&b, "", 0));
    lpx_status st = LPX_OK;
    int byte = tok_parse_byte_token(s, n);
    if (t->dec_byte_fallback && byte >= 0) {
        unsigned char c = (unsigned char)byte;
        st = tok_buf_append(&b, &c, 1);
        t->flags[id] |= TOKF_BYTE;
    } else if (t->dec_bytelevel) {
        bool all = true;
        for (size_t i = 0; i < n && st == LPX_OK;) {
            uint32_t cp;
            size_t cl = tok_utf8_len((const unsigned char *)s + i, n - i, &cp);
            int v = tok_utf8_cp_to_byte(cp);
            if (v < 0) {
                all = false;
                break;
            }
            unsigned char c = (unsigned char)v;
            st = tok_buf_append(&b, &c, 1);
            i += cl;
        }
        /* A token outside the byte alphabet decodes to its own text. */
        if (!all) {
            b.len = 0;
            st = tok_buf_append(&b, s, n);
        }
    } else {
        for (size_t i = 0; i < n && st == LPX_OK;) {
            if (t->dec_space && n - i >= t->dec_space_len &&
                !memcmp(s + i, t->dec_space, t->dec_space_len)) {
                st = tok_buf_append(&b, " ", 1);
                i += t->dec_space_len;
            } else {
                st = tok_buf_append(&b, s + i, 1);
                i++;
            }
        }
    }
    if (st != LPX_OK) {
        free(b.p);
        return st;
    }
    t->dec[id] = b.p;
    t->dec_len[id] = (uint32_t)b.len;
    if (b.len > t->max_dec_len) t->max_dec_len = b.len;
    return LPX_OK;
}

/* The child of node by byte c, 0 when none. */
static int32_t trie_child(const lpx_tokenizer *t, int32_t node, unsigned char c) {
    for (int32_t k = t->trie[node].child; k; k = t->trie[k].sibling)
        if (t->trie[k].byte == c) return k;
    return 0;
}

/* One node per distinct prefix of the added tokens; a text two added tokens share
 * keeps the first (the order tokenizers' AddedVocabulary matches them in). */
static lpx_status trie_build(lpx_tokenizer *t) {
    size_t total = 1, cap = 1;
    for (int i = 0; i < t->n_added; i++)
        total += t->added[i].len; /* <= 32767 * TOK_MAX_TOKEN_BYTES: no overflow */
    tok_trie_node root = {0, 0, {-1, -1}, 0};
    if (!(t->trie = malloc(sizeof *t->trie)))
        return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: out of memory");
    t->trie[0] = root;
    t->n_trie = 1;
    for (int i = 0; i < t->n_added; i++) {
        const tok_added *a = &t->added[i];
        int32_t node = 0;
        for (size_t b = 0; b < a->len; b++) {
            unsigned char c = (unsigned char)a->text[b];
            int32_t next = trie_child(t, node, c);
            if (!next) {
                if (t->n_trie == cap) {
                    cap = 2 * cap < total ? 2 * cap : total;
                    tok_trie_node *p = realloc(t->trie, cap * sizeof *p);
                    if (!p) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: out of memory");
                    t->trie = p;
                }
                next = (int32_t)t->n_trie++;
                t->trie[next] = (tok_trie_node){0, t->trie[node].child, {-1, -1}, c};
                t->trie[node].child = next;
            }
            node = next;
        }
        if (t->trie[node].added[a->normalized] < 0) t->trie[node].added[a->normalized] = (int16_t)i;
    }
    return LPX_OK;
}

/* The longest added token of one kind (normalized or not) at s[0..n), or NULL. */
static const tok_added *trie_longest(const lpx_tokenizer *t, const char *s, size_t n,
                                     bool normalized) {
    const tok_added *hit = NULL;
    int32_t node = 0;
    for (size_t q = 0; q < n && t->trie && (node = trie_child(t, node, (unsigned char)s[q])); q++)
        if (t->trie[node].added[normalized] >= 0) hit = &t->added[t->trie[node].added[normalized]];
    return hit;
}

lpx_status tok_finish(lpx_tokenizer *t) {
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!t->text[id]) continue;
        if (t->text_len[id] > t->max_text_len) t->max_text_len = t->text_len[id];
        int byte = tok_parse_byte_token(t->text[id], t->text_len[id]);
        if (byte >= 0 && tok_strmap_get(&t->vocab, t, t->text[id], t->text_len[id]) == id)
            t->byte_ids[byte] = id;
        LPX_TRY(make_dec(t, id));
    }
    for (int i = 0; i < t->n_added; i++) {
        t->added[i].len = t->text_len[t->added[i].id];
        if (t->added[i].special) t->flags[t->added[i].id] |= TOKF_SPECIAL;
    }
    return trie_build(t);
}

void lpx_tokenizer_free(lpx_tokenizer *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (t->text) free(t->text[i]);
        if (t->dec) free(t->dec[i]);
    }
    free(t->text);
    free(t->text_len);
    free(t->dec);
    free(t->dec_len);
    free(t->flags);
    tok_strmap_free(&t->vocab);
    tok_mergemap_free(&t->merges);
    free(t->added);
    free(t->trie);
    for (int i = 0; i < t->n_norms; i++) {
        free(t->norms[i].a);
        free(t->norms[i].b);
    }
    for (int i = 0; i < t->n_pres; i++) {
        pcre2_code_free(t->pres[i].re);
        free(t->pres[i].a);
    }
    free(t->dec_space);
    free(t);
}

/* ---- queries ------------------------------------------------------------------- */

int32_t lpx_tokenizer_bos(const lpx_tokenizer *t) {
    return t->bos;
}
int32_t lpx_tokenizer_eos(const lpx_tokenizer *t) {
    return t->eos;
}
int32_t lpx_vocab_size(const lpx_tokenizer *t) {
    return t ? t->n_vocab : 0;
}
const char *lpx_tokenizer_token_bytes(const lpx_tokenizer *t, int32_t id, size_t *len) {
    *len = 0;
    if (id < 0 || id >= t->n_vocab || !t->text[id] || (t->flags[id] & TOKF_SPECIAL)) return NULL;
    *len = t->dec_len[id];
    return t->dec[id];
}

size_t lpx_tokenizer_max_piece(const lpx_tokenizer *t) {
    return t->max_dec_len;
}

size_t lpx_tokenizer_bytes_bound(const lpx_tokenizer *t, size_t n) {
    /* What lets one token stand for any amount of text leaves no bound: a fused <unk>
     * (a run of unknown characters), an added token that strips the whitespace beside
     * it, a Removed split or a Replace that shortens (text dropped). */
    if (t->fuse_unk && t->unk_id >= 0) return SIZE_MAX;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].lstrip || t->added[i].rstrip) return SIZE_MAX;
    for (int i = 0; i < t->n_pres; i++)
        if ((t->pres[i].kind == TOK_PRE_SPLIT_REGEX || t->pres[i].kind == TOK_PRE_SPLIT_STRING) &&
            t->pres[i].behavior == TOK_REMOVED)
            return SIZE_MAX;
    for (int i = 0; i < t->n_norms; i++)
        if (t->norms[i].kind == TOK_NORM_REPLACE && t->norms[i].b_len < t->norms[i].a_len)
            return SIZE_MAX;
    /* A token covers at most its text's bytes of the normalized text (an unknown
     * character: 4); Unicode normalization and lowercasing shrink text by at most 3 to 1
     * (NFC of Hangul jamo, the Kelvin sign to k), so 4x covers them. Byte-level and
     * Metaspace mappings only grow the text. */
    size_t per = 4 * (t->max_text_len > 4 ? t->max_text_len : 4), bytes;
    return lpx_mul_size(n, per, &bytes) ? bytes : SIZE_MAX;
}

bool lpx_tokenizer_is_special(const lpx_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->flags[id] & TOKF_SPECIAL);
}

const char *lpx_token_text(const lpx_tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab) return NULL;
    return t->text[id];
}

int32_t lpx_tokenizer_find(const lpx_tokenizer *t, const char *text) {
    size_t n = strlen(text);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && !memcmp(t->added[i].text, text, n)) return t->added[i].id;
    return tok_strmap_get(&t->vocab, t, text, n);
}

/* ---- encode -------------------------------------------------------------------- */

/* A segment of the input: an added token (id >= 0) or text still to tokenize. */
typedef struct seg {
    size_t off, len;
    int32_t id;
} seg;

typedef struct segs {
    seg *v;
    size_t n, cap;
} segs;

static lpx_status segs_push(segs *s, size_t off, size_t len, int32_t id) {
    if (len == 0 && id < 0) return LPX_OK;
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        seg *p = realloc(s->v, nc * sizeof *p);
        if (!p) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: %zu segments", nc);
        s->v = p;
        s->cap = nc;
    }
    s->v[s->n++] = (seg){off, len, id};
    return LPX_OK;
}

static size_t prev_char_start(const char *s, size_t i) {
    do
        i--;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80);
    return i;
}

/* Rust's char::is_alphanumeric, used by single_word added tokens. */
static bool is_word_char(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

/* Splits s[0..n) around added tokens of one kind (normalized or not), as
 * tokenizers' AddedVocabulary::find_matches does with a leftmost-longest
 * automaton: a match that is then rejected (special tokens when not parsing
 * them, single_word failures) is still consumed as text. */
static lpx_status split_added(const lpx_tokenizer *t, const char *s, size_t n, bool normalized,
                              bool parse_special, segs *out) {
    size_t start_off = 0;
    for (size_t p = 0; p < n;) {
        const tok_added *hit = trie_longest(t, s + p, n - p, normalized);
        if (!hit) {
            p++;
            continue;
        }
        size_t start = p, stop = p + hit->len;
        p = stop;
        if (hit->special && !parse_special) continue;
        if (hit->single_word) {
            uint32_t cp;
            bool start_ok = start == 0, stop_ok = stop == n;
            if (!start_ok) {
                size_t q = prev_char_start(s, start);
                start_ok = !(tok_utf8_len((const unsigned char *)s + q, start - q, &cp) &&
                             is_word_char(cp));
            }
            if (!stop_ok)
                stop_ok = !(tok_utf8_len((const unsigned char *)s + stop, n - stop, &cp) &&
                            is_word_char(cp));
            if (!start_ok || !stop_ok) continue;
        }
        if (hit->lstrip) {
            size_t q = start;
            while (q > start_off) {
                size_t r = prev_char_start(s, q);
                uint32_t cp;
                if (!tok_utf8_len((const unsigned char *)s + r, q - r, &cp) ||
                    !tok_is_whitespace(cp))
                    break;
                q = r;
            }
            start = q;
        }
        if (hit->rstrip) {
            uint32_t cp;
            size_t cl;
            while (stop < n &&
                   (cl = tok_utf8_len((const unsigned char *)s + stop, n - stop, &cp)) &&
                   tok_is_whitespace(cp))
                stop += cl;
            p = stop;
        }
        if (start > start_off) LPX_TRY(segs_push(out, start_off, start - start_off, -1));
        LPX_TRY(segs_push(out, start, stop - start, hit->id));
        start_off = stop;
    }
    if (start_off < n) LPX_TRY(segs_push(out, start_off, n - start_off, -1));
    return LPX_OK;
}

typedef struct enc_ctx {
    tok_buf norm, words_buf;
    segs outer, inner;
    tok_spans words;
    pcre2_match_data *md;
} enc_ctx;

static lpx_status encode_text(const lpx_tokenizer *t, enc_ctx *c, const char *s, size_t n,
                              bool at_start, bool parse_special, size_t limit, tok_ids *ids) {
    LPX_TRY(tok_normalize(t, s, n, &c->norm));
    c->inner.n = 0;
    LPX_TRY(split_added(t, c->norm.p, c->norm.len, true, parse_special, &c->inner));
    for (size_t i = 0; i < c->inner.n && !(limit && ids->n > limit); i++) {
        seg g = c->inner.v[i];
        if (g.id >= 0) {
            LPX_TRY(tok_ids_push(ids, g.id));
            continue;
        }
        c->words_buf.len = 0;
        LPX_TRY(tok_buf_append(&c->words_buf, c->norm.p + g.off, g.len));
        c->words.n = 0;
        LPX_TRY(tok_pretokenize(t, &c->words_buf, (tok_span){0, g.len}, at_start && g.off == 0,
                                &c->words, c->md));
        for (size_t k = 0; k < c->words.n && !(limit && ids->n > limit); k++)
            LPX_TRY(tok_bpe_word(t, c->words_buf.p + c->words.v[k].off, c->words.v[k].len, ids));
    }
    return LPX_OK;
}

static lpx_status tok_encode(const lpx_tokenizer *t, const char *text, size_t len, bool add_special,
                             bool parse_special, size_t limit, tok_ids *ids) {
    size_t bad;
    if (!valid_utf8(text, len, &bad))
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "tokenize: text is not valid UTF-8 (byte %zu: 0x%02x)", bad,
                          (unsigned char)text[bad]);
    enc_ctx c = {0};
    lpx_status st = LPX_OK;
    c.md = pcre2_match_data_create(1, NULL);
    if (!c.md) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: out of memory");
    if (add_special)
        for (int i = 0; i < t->n_prefix && st == LPX_OK; i++)
            st = tok_ids_push(ids, t->prefix[i]);
    if (st == LPX_OK) st = split_added(t, text, len, false, parse_special, &c.outer);
    for (size_t i = 0; i < c.outer.n && st == LPX_OK && !(limit && ids->n > limit); i++) {
        seg g = c.outer.v[i];
        if (g.id >= 0)
            st = tok_ids_push(ids, g.id);
        else
            st = encode_text(t, &c, text + g.off, g.len, g.off == 0, parse_special, limit, ids);
    }
    if (add_special)
        for (int i = 0; i < t->n_suffix && st == LPX_OK; i++)
            st = tok_ids_push(ids, t->suffix[i]);
    pcre2_match_data_free(c.md);
    free(c.norm.p);
    free(c.words_buf.p);
    free(c.outer.v);
    free(c.inner.v);
    free(c.words.v);
    return st;
}

lpx_status lpx_tokenize(const lpx_tokenizer *t, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t *ids, size_t cap, size_t *n_out) {
    return lpx_tokenize_limit(t, text, len, add_special, parse_special, 0, ids, cap, n_out);
}

lpx_status lpx_tokenize_limit(const lpx_tokenizer *t, const char *text, size_t len,
                              bool add_special, bool parse_special, size_t limit, int32_t *ids,
                              size_t cap, size_t *n_out) {
    if (!t || (!text && len) || (!ids && cap) || !n_out)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "lpx_tokenize: NULL argument");
    tok_ids v = {0};
    lpx_status st = tok_encode(t, text ? text : "", len, add_special, parse_special, limit, &v);
    if (st == LPX_OK) {
        *n_out = v.n;
        if (v.n && cap) memcpy(ids, v.v, (v.n < cap ? v.n : cap) * sizeof *ids);
    }
    free(v.v);
    return st;
}

/* ---- decode -------------------------------------------------------------------- */

/* Length of the longest prefix of s that can start a valid UTF-8 character
 * (0: s[0] cannot), and whether that prefix is a whole character. */
static size_t utf8_prefix(const unsigned char *s, size_t n, bool *complete) {
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    *complete = false;
    if (c < 0x80) {
        *complete = true;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    size_t k = 1;
    for (; k < need && k < n; k++) {
        unsigned char d = s[k];
        if (k == 1 ? (d < lo || d > hi) : (d & 0xC0) != 0x80) break;
    }
    *complete = k == need;
    return k;
}

static const char REPLACEMENT[] = "\xEF\xBF\xBD";

/* Appends s to out with every invalid sequence replaced by U+FFFD (one per
 * maximal invalid subpart, as Rust's from_utf8_lossy and Python do). When
 * keep_tail is set, an incomplete character at the very end is not consumed;
 * returns how many bytes were consumed. */
static lpx_status append_lossy(tok_buf *out, const unsigned char *s, size_t n, bool keep_tail,
                               size_t *consumed) {
    size_t i = 0;
    while (i < n) {
        bool complete;
        size_t k = utf8_prefix(s + i, n - i, &complete);
        if (complete) {
            LPX_TRY(tok_buf_append(out, s + i, k));
            i += k;
        } else if (keep_tail && k > 0 && i + k == n) {
            break;
        } else {
            LPX_TRY(tok_buf_append(out, REPLACEMENT, 3));
            i += k ? k : 1;
        }
    }
    *consumed = i;
    return LPX_OK;
}

static bool skip_id(const lpx_tokenizer *t, int32_t id, bool skip_special) {
    return id < 0 || id >= t->n_vocab || !t->text[id] ||
           (skip_special && (t->flags[id] & TOKF_SPECIAL));
}

/* Text of ids: pieces joined; a run of byte tokens that is not valid UTF-8
 * becomes one U+FFFD per byte (tokenizers' ByteFallback decoder); leading
 * spaces stripped as the decoder asks. */
static lpx_status decode_all(const lpx_tokenizer *t, const int32_t *ids, size_t n,
                             bool skip_special, tok_buf *out) {
    tok_buf raw = {0}, run = {0};
    lpx_status st = tok_buf_append(&raw, "", 0);
    size_t run_tokens = 0;
    for (size_t i = 0; i <= n && st == LPX_OK; i++) {
        /* Skipped ids are gone before the decoder runs: byte runs join across them. */
        if (i < n && skip_id(t, ids[i], skip_special)) continue;
        bool is_byte = i < n && (t->flags[ids[i]] & TOKF_BYTE);
        if (!is_byte && run_tokens) {
            if (valid_utf8(run.p, run.len, NULL)) {
                st = tok_buf_append(&raw, run.p, run.len);
            } else {
                for (size_t k = 0; k < run_tokens && st == LPX_OK; k++)
                    st = tok_buf_append(&raw, REPLACEMENT, 3);
            }
            run.len = 0;
            run_tokens = 0;
        }
        if (i == n || st != LPX_OK) continue;
        if (is_byte) {
            st = tok_buf_append(&run, t->dec[ids[i]], t->dec_len[ids[i]]);
            run_tokens++;
        } else {
            st = tok_buf_append(&raw, t->dec[ids[i]], t->dec_len[ids[i]]);
        }
    }
    size_t skip = 0;
    while (st == LPX_OK && (int)skip < t->dec_strip_lead && skip < raw.len && raw.p[skip] == ' ')
        skip++;
    size_t used;
    out->len = 0;
    if (st == LPX_OK) st = tok_buf_append(out, "", 0);
    if (st == LPX_OK)
        st = append_lossy(out, (const unsigned char *)raw.p + skip, raw.len - skip, false, &used);
    free(raw.p);
    free(run.p);
    return st;
}

/* Copies as much of b as fits in cap (NUL-terminated); returns the bytes copied. */
static size_t copy_out(const tok_buf *b, char *buf, size_t cap) {
    if (!cap) return 0;
    size_t n = b->len < cap - 1 ? b->len : cap - 1;
    /* Never cut a character in half. */
    while (n > 0 && n < b->len && ((unsigned char)b->p[n] & 0xC0) == 0x80)
        n--;
    if (n) memcpy(buf, b->p, n);
    buf[n] = '\0';
    return n;
}

lpx_status lpx_detokenize(const lpx_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                          char *buf, size_t cap, size_t *n_out) {
    if (!t || (!ids && n) || (!buf && cap) || !n_out)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "lpx_detokenize: NULL argument");
    tok_buf out = {0};
    lpx_status st = decode_all(t, ids, n, skip_special, &out);
    if (st == LPX_OK) {
        *n_out = out.len;
        copy_out(&out, buf, cap);
    }
    free(out.p);
    return st;
}

/* ---- streaming decode ------------------------------------------------------------- */

void lpx_detok_stream_init(lpx_detok_stream *s, const lpx_tokenizer *t, bool skip_special) {
    memset(s, 0, sizeof *s);
    s->tok = t;
    s->skip_special = skip_special;
    s->first = true;
}

static size_t stream_emit(lpx_detok_stream *s, const char *piece, size_t n, bool final, char *out,
                          size_t cap) {
    tok_buf in = {0}, text = {0};
    size_t used = 0;
    if (tok_buf_append(&in, s->pending, (size_t)s->n_pending) != LPX_OK ||
        tok_buf_append(&in, piece, n) != LPX_OK ||
        append_lossy(&text, (const unsigned char *)in.p, in.len, !final, &used) != LPX_OK) {
        free(in.p);
        free(text.p);
        if (cap) out[0] = '\0';
        return 0;
    }
    /* What is left is an incomplete character: at most 3 bytes. */
    s->n_pending = (int)(in.len - used);
    memcpy(s->pending, in.p + used, (size_t)s->n_pending);
    size_t w = copy_out(&text, out, cap);
    free(in.p);
    free(text.p);
    return w;
}

size_t lpx_detok_stream_push(lpx_detok_stream *s, int32_t id, char *out, size_t cap) {
    const lpx_tokenizer *t = s->tok;
    if (skip_id(t, id, s->skip_special)) {
        if (cap) out[0] = '\0';
        return 0;
    }
    const char *p = t->dec[id];
    size_t n = t->dec_len[id];
    if (s->first && n) {
        s->first = false;
        for (int k = 0; k < t->dec_strip_lead && n && *p == ' '; k++)
            p++, n--;
    }
    return stream_emit(s, p, n, false, out, cap);
}

size_t lpx_detok_stream_flush(lpx_detok_stream *s, char *out, size_t cap) {
    return stream_emit(s, "", 0, true, out, cap);
}

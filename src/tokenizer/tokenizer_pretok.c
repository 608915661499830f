/* Normalizers and pre-tokenizers, reproducing `tokenizers`' semantics: a piece
 * of text becomes a list of words; each op maps every current word to new ones.
 * Splits keep (offset, length) into one growing buffer, so ops that rewrite text
 * (ByteLevel's alphabet, Metaspace's "▁") append the new text to that buffer. */
#include "base/checked.h"
#include "base/error.h"
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

const char tok_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

lpx_status tok_buf_append(tok_buf *b, const void *s, size_t n) {
    size_t need;
    if (!lpx_add_size(b->len, n, &need) || !lpx_add_size(need, 1, &need))
        return lpx_errorf(LPX_ERR_TOO_LONG, "tokenizer: text too long");
    if (need > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < need) {
            if (!lpx_mul_size(nc, 2, &nc))
                return lpx_errorf(LPX_ERR_TOO_LONG, "tokenizer: text too long");
        }
        /* s may point into b itself (ops that copy part of the buffer). */
        bool inside = b->p && (const char *)s >= b->p && (const char *)s < b->p + b->cap;
        size_t s_off = inside ? (size_t)((const char *)s - b->p) : 0;
        char *p = realloc(b->p, nc);
        if (!p) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: buffer of %zu bytes", nc);
        b->p = p;
        if (inside) s = p + s_off;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return LPX_OK;
}

lpx_status tok_spans_push(tok_spans *s, size_t off, size_t len) {
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        tok_span *p = realloc(s->v, nc * sizeof *p);
        if (!p) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: %zu splits", nc);
        s->v = p;
        s->cap = nc;
    }
    s->v[s->n++] = (tok_span){off, len};
    return LPX_OK;
}

lpx_status tok_ids_push(tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        size_t nc = ids->cap ? ids->cap * 2 : 64;
        int32_t *p = realloc(ids->v, nc * sizeof *p);
        if (!p) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: %zu ids", nc);
        ids->v = p;
        ids->cap = nc;
    }
    ids->v[ids->n++] = id;
    return LPX_OK;
}

/* `tokenizers` runs its regexes with Oniguruma, whose Unicode \s is
 * [\t-\r\x{85}\p{Z}]; PCRE2's also takes U+180E (via \h). Rewrite \s and \S so
 * both engines agree. */
#define ONIG_SPACE "\\t-\\r\\x{85}\\p{Z}"
static lpx_status onig_spaces(const char *p, size_t n, tok_buf *out) {
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[++i];
            if (d == 's')
                LPX_TRY(tok_buf_append(out, in_class ? ONIG_SPACE : "[" ONIG_SPACE "]",
                                       strlen(ONIG_SPACE) + (in_class ? 0 : 2)));
            else if (d == 'S' && !in_class)
                LPX_TRY(tok_buf_append(out, "[^" ONIG_SPACE "]", strlen(ONIG_SPACE) + 3));
            else {
                LPX_TRY(tok_buf_append(out, p + i - 1, 2));
            }
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            LPX_TRY(tok_buf_append(out, p + i, 1));
            /* A ']' right after '[' or '[^' is a literal. */
            if (i + 1 < n && p[i + 1] == '^') LPX_TRY(tok_buf_append(out, p + ++i, 1));
            if (i + 1 < n && p[i + 1] == ']') LPX_TRY(tok_buf_append(out, p + ++i, 1));
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        LPX_TRY(tok_buf_append(out, p + i, 1));
    }
    return LPX_OK;
}

lpx_status tok_compile_regex(const char *pattern, size_t len, pcre2_code **out) {
    int err;
    PCRE2_SIZE at;
    tok_buf rw = {0};
    lpx_status st = tok_buf_append(&rw, "", 0);
    if (st == LPX_OK) st = onig_spaces(pattern, len, &rw);
    if (st != LPX_OK) {
        free(rw.p);
        return st;
    }
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)rw.p, rw.len, PCRE2_UTF | PCRE2_UCP, &err, &at, NULL);
    free(rw.p);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return lpx_errorf(LPX_ERR_UNSUPPORTED, "tokenizer: regex %.*s: %s at offset %zu",
                          (int)(len > 200 ? 200 : len), pattern, (const char *)msg, (size_t)at);
    }
    /* JIT is an optimisation: without it (unsupported CPU) the interpreter runs. */
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    *out = re;
    return LPX_OK;
}

/* ---- normalizers -------------------------------------------------------------- */

static lpx_status norm_utf8proc(tok_buf *b, int options) {
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)b->p, (utf8proc_ssize_t)b->len,
                                      &dst, (utf8proc_option_t)(options | UTF8PROC_STABLE));
    if (n < 0)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "tokenizer: normalization: %s", utf8proc_errmsg(n));
    b->len = 0;
    lpx_status st = tok_buf_append(b, dst, (size_t)n);
    free(dst);
    return st;
}

static lpx_status norm_replace(tok_buf *b, const tok_norm *op, tok_buf *tmp) {
    tmp->len = 0;
    LPX_TRY(tok_buf_append(tmp, "", 0));
    for (size_t i = 0; i < b->len;) {
        if (op->a_len && b->len - i >= op->a_len && !memcmp(b->p + i, op->a, op->a_len)) {
            LPX_TRY(tok_buf_append(tmp, op->b, op->b_len));
            i += op->a_len;
        } else {
            LPX_TRY(tok_buf_append(tmp, b->p + i, 1));
            i++;
        }
    }
    b->len = 0;
    return tok_buf_append(b, tmp->p, tmp->len);
}

static lpx_status norm_lowercase(tok_buf *b, tok_buf *tmp) {
    tmp->len = 0;
    LPX_TRY(tok_buf_append(tmp, "", 0));
    for (size_t i = 0; i < b->len;) {
        uint32_t cp;
        size_t cl = tok_utf8_len((const unsigned char *)b->p + i, b->len - i, &cp);
        if (!cl) return lpx_errorf(LPX_ERR_INTERNAL, "tokenizer: invalid UTF-8 after validation");
        i += cl;
        /* Rust's char::to_lowercase: U+0130 is the one character whose lowercase is
         * two (i + combining dot above); utf8proc gives the simple mapping. */
        if (cp == 0x130) {
            LPX_TRY(tok_buf_append(tmp, "i\xCC\x87", 3));
            continue;
        }
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t el = utf8proc_encode_char(utf8proc_tolower((utf8proc_int32_t)cp), enc);
        LPX_TRY(tok_buf_append(tmp, enc, (size_t)el));
    }
    b->len = 0;
    return tok_buf_append(b, tmp->p, tmp->len);
}

lpx_status tok_normalize(const lpx_tokenizer *t, const char *s, size_t n, tok_buf *out) {
    out->len = 0;
    LPX_TRY(tok_buf_append(out, s, n));
    tok_buf tmp = {0};
    lpx_status st = LPX_OK;
    for (int i = 0; i < t->n_norms && st == LPX_OK; i++) {
        const tok_norm *op = &t->norms[i];
        switch (op->kind) {
        case TOK_NORM_NFC:
            st = norm_utf8proc(out, UTF8PROC_COMPOSE);
            break;
        case TOK_NORM_NFD:
            st = norm_utf8proc(out, UTF8PROC_DECOMPOSE);
            break;
        case TOK_NORM_NFKC:
            st = norm_utf8proc(out, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
            break;
        case TOK_NORM_NFKD:
            st = norm_utf8proc(out, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
            break;
        case TOK_NORM_PREPEND:
            if (out->len) {
                tmp.len = 0;
                st = tok_buf_append(&tmp, op->a, op->a_len);
                if (st == LPX_OK) st = tok_buf_append(&tmp, out->p, out->len);
                if (st == LPX_OK) {
                    out->len = 0;
                    st = tok_buf_append(out, tmp.p, tmp.len);
                }
            }
            break;
        case TOK_NORM_REPLACE:
            st = norm_replace(out, op, &tmp);
            break;
        case TOK_NORM_LOWERCASE:
            st = norm_lowercase(out, &tmp);
            break;
        }
    }
    free(tmp.p);
    return st;
}

/* ---- pre-tokenizers ---------------------------------------------------------------- */

/* A split candidate: a span and whether the pattern matched it. */
typedef struct part {
    size_t off, len;
    bool match;
} part;

typedef struct parts {
    part *v;
    size_t n, cap;
} parts;

static lpx_status parts_push(parts *p, size_t off, size_t len, bool match) {
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 64;
        part *q = realloc(p->v, nc * sizeof *q);
        if (!q) return lpx_errorf(LPX_ERR_NOMEM, "tokenizer: %zu splits", nc);
        p->v = q;
        p->cap = nc;
    }
    p->v[p->n++] = (part){off, len, match};
    return LPX_OK;
}

/* Applies a split behaviour to the alternating match / non-match parts of one
 * word and appends the resulting non-empty words. */
static lpx_status apply_behavior(parts *p, tok_behavior b, bool invert, tok_spans *out) {
    if (invert)
        for (size_t i = 0; i < p->n; i++)
            p->v[i].match = !p->v[i].match;
    size_t k = 0; /* parts are merged in place into p->v[0..k) */
    bool prev_match = false;
    switch (b) {
    case TOK_REMOVED:
        for (size_t i = 0; i < p->n; i++)
            if (!p->v[i].match) p->v[k++] = p->v[i];
        break;
    case TOK_ISOLATED:
        k = p->n;
        break;
    case TOK_MERGED_PREV:
        for (size_t i = 0; i < p->n; i++) {
            part c = p->v[i];
            if (c.match && !prev_match && k)
                p->v[k - 1].len = c.off + c.len - p->v[k - 1].off;
            else
                p->v[k++] = c;
            prev_match = c.match;
        }
        break;
    case TOK_MERGED_NEXT:
        /* Walk right to left; a match joins the part after it. */
        k = p->n;
        for (size_t i = p->n; i-- > 0;) {
            part c = p->v[i];
            if (c.match && !prev_match && k < p->n) {
                p->v[k].len += p->v[k].off - c.off;
                p->v[k].off = c.off;
            } else {
                p->v[--k] = c;
            }
            prev_match = c.match;
        }
        memmove(p->v, p->v + k, (p->n - k) * sizeof *p->v);
        k = p->n - k;
        break;
    case TOK_CONTIGUOUS:
        for (size_t i = 0; i < p->n; i++) {
            part c = p->v[i];
            if (c.match == prev_match && k)
                p->v[k - 1].len = c.off + c.len - p->v[k - 1].off;
            else
                p->v[k++] = c;
            prev_match = c.match;
        }
        break;
    }
    for (size_t i = 0; i < k; i++)
        if (p->v[i].len) LPX_TRY(tok_spans_push(out, p->v[i].off, p->v[i].len));
    return LPX_OK;
}

static lpx_status find_regex(const char *buf, tok_span w, pcre2_code *re, pcre2_match_data *md,
                             parts *p) {
    size_t pos = w.off, end = w.off + w.len, last = w.off;
    while (pos <= end) {
        int rc = pcre2_match(re, (PCRE2_SPTR)buf, end, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return lpx_errorf(LPX_ERR_INTERNAL, "tokenizer: regex match: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms > last) LPX_TRY(parts_push(p, last, ms - last, false));
        if (me > ms) LPX_TRY(parts_push(p, ms, me - ms, true));
        last = me;
        if (me == ms) { /* empty match: step over one character */
            uint32_t cp;
            size_t cl = tok_utf8_len((const unsigned char *)buf + me, end - me, &cp);
            pos = me + (cl ? cl : 1);
        } else {
            pos = me;
        }
    }
    if (last < end) LPX_TRY(parts_push(p, last, end - last, false));
    return LPX_OK;
}

static lpx_status find_string(const char *buf, tok_span w, const char *pat, size_t plen, parts *p) {
    size_t last = w.off, end = w.off + w.len;
    for (size_t i = w.off; plen && i + plen <= end;) {
        if (!memcmp(buf + i, pat, plen)) {
            if (i > last) LPX_TRY(parts_push(p, last, i - last, false));
            LPX_TRY(parts_push(p, i, plen, true));
            i += plen;
            last = i;
        } else {
            i++;
        }
    }
    if (last < end) LPX_TRY(parts_push(p, last, end - last, false));
    return LPX_OK;
}

static bool is_numeric(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

static lpx_status find_digits(const char *buf, tok_span w, parts *p) {
    size_t last = w.off, end = w.off + w.len;
    for (size_t i = w.off; i < end;) {
        uint32_t cp;
        size_t cl = tok_utf8_len((const unsigned char *)buf + i, end - i, &cp);
        if (!cl) return lpx_errorf(LPX_ERR_INTERNAL, "tokenizer: invalid UTF-8 after validation");
        if (is_numeric(cp)) {
            if (i > last) LPX_TRY(parts_push(p, last, i - last, false));
            LPX_TRY(parts_push(p, i, cl, true));
            last = i + cl;
        }
        i += cl;
    }
    if (last < end) LPX_TRY(parts_push(p, last, end - last, false));
    return LPX_OK;
}

/* ByteLevel: optional leading space, then every byte becomes its alphabet character. */
static lpx_status bytelevel_map(tok_buf *b, tok_span w, bool add_prefix_space, tok_spans *out) {
    size_t off = b->len;
    char enc[2];
    if (add_prefix_space && (w.len == 0 || b->p[w.off] != ' ')) {
        int n = tok_byte_to_utf8(' ', enc);
        LPX_TRY(tok_buf_append(b, enc, (size_t)n));
    }
    for (size_t i = 0; i < w.len; i++) {
        int n = tok_byte_to_utf8((unsigned char)b->p[w.off + i], enc);
        LPX_TRY(tok_buf_append(b, enc, (size_t)n));
    }
    return tok_spans_push(out, off, b->len - off);
}

static lpx_status prefix_space(tok_buf *b, tok_span *w) {
    size_t off = b->len;
    LPX_TRY(tok_buf_append(b, " ", 1));
    LPX_TRY(tok_buf_append(b, b->p + w->off, w->len));
    *w = (tok_span){off, w->len + 1};
    return LPX_OK;
}

static lpx_status metaspace(tok_buf *b, tok_span w, const tok_pre *op, bool at_start,
                            tok_spans *out, parts *p) {
    size_t off = b->len;
    bool starts = w.len >= op->a_len && !memcmp(b->p + w.off, op->a, op->a_len);
    bool first_is_space = w.len && b->p[w.off] == ' ';
    if (!starts && !first_is_space && (op->prepend == 2 || (op->prepend == 1 && at_start)))
        LPX_TRY(tok_buf_append(b, op->a, op->a_len));
    for (size_t i = 0; i < w.len; i++) {
        if (b->p[w.off + i] == ' ')
            LPX_TRY(tok_buf_append(b, op->a, op->a_len));
        else
            LPX_TRY(tok_buf_append(b, b->p + w.off + i, 1));
    }
    tok_span nw = {off, b->len - off};
    if (!op->flag) return tok_spans_push(out, nw.off, nw.len);
    p->n = 0;
    LPX_TRY(find_string(b->p, nw, op->a, op->a_len, p));
    return apply_behavior(p, TOK_MERGED_NEXT, false, out);
}

lpx_status tok_pretokenize(const lpx_tokenizer *t, tok_buf *buf, tok_span piece, bool first_piece,
                           tok_spans *words, pcre2_match_data *md) {
    tok_spans cur = {0}, next = {0};
    parts p = {0};
    lpx_status st = tok_spans_push(&cur, piece.off, piece.len);
    for (int k = 0; k < t->n_pres && st == LPX_OK; k++) {
        const tok_pre *op = &t->pres[k];
        next.n = 0;
        for (size_t i = 0; i < cur.n && st == LPX_OK; i++) {
            tok_span w = cur.v[i];
            p.n = 0;
            switch (op->kind) {
            case TOK_PRE_SPLIT_REGEX:
                st = find_regex(buf->p, w, op->re, md, &p);
                if (st == LPX_OK) st = apply_behavior(&p, op->behavior, op->invert, &next);
                break;
            case TOK_PRE_SPLIT_STRING:
                st = find_string(buf->p, w, op->a, op->a_len, &p);
                if (st == LPX_OK) st = apply_behavior(&p, op->behavior, op->invert, &next);
                break;
            case TOK_PRE_DIGITS:
                st = find_digits(buf->p, w, &p);
                if (st == LPX_OK)
                    st = apply_behavior(&p, op->flag ? TOK_ISOLATED : TOK_CONTIGUOUS, false, &next);
                break;
            case TOK_PRE_BYTELEVEL:
                if (!op->re) {
                    st = bytelevel_map(buf, w, op->flag, &next);
                    break;
                }
                /* The prefix space goes on before the regex split; mapping follows. */
                if (op->flag && buf->p[w.off] != ' ') st = prefix_space(buf, &w);
                if (st == LPX_OK) st = find_regex(buf->p, w, op->re, md, &p);
                if (st == LPX_OK) {
                    tok_spans split = {0};
                    st = apply_behavior(&p, TOK_ISOLATED, false, &split);
                    for (size_t j = 0; j < split.n && st == LPX_OK; j++)
                        st = bytelevel_map(buf, split.v[j], false, &next);
                    free(split.v);
                }
                break;
            case TOK_PRE_METASPACE:
                st = metaspace(buf, w, op, first_piece && i == 0 && w.off == piece.off, &next, &p);
                break;
            }
        }
        tok_spans tmp = cur;
        cur = next;
        next = tmp;
    }
    for (size_t i = 0; i < cur.n && st == LPX_OK; i++)
        if (cur.v[i].len) st = tok_spans_push(words, cur.v[i].off, cur.v[i].len);
    free(cur.v);
    free(next.v);
    free(p.v);
    return st;
}

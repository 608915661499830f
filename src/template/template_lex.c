/* Template source -> tokens, as jinja2's lexer with trim_blocks and
 * lstrip_blocks: newlines normalised to \n, one trailing newline dropped,
 * "-" markers strip all whitespace on their side, a block or comment tag eats
 * the newline after it, and whitespace from a line start to a block or comment
 * tag is dropped ("+" markers keep it). */
#include "template/template_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    tpl_ctx *c;
    const char *s;
    size_t n, pos;
    int line;
    tpl_toks *out;
} lexer;

static tpl_tok *emit(lexer *L, tpl_tok_type t, const char *text, size_t len) {
    tpl_toks *o = L->out;
    if (o->n == o->cap) {
        size_t cap = o->cap ? tpl_mul(L->c, o->cap, 2) : 256;
        o->v = tpl_grow(L->c, o->v, o->n * sizeof *o->v, tpl_mul(L->c, cap, sizeof *o->v));
        o->cap = cap;
    }
    tpl_tok *k = &o->v[o->n++];
    memset(k, 0, sizeof *k);
    k->type = t;
    k->line = L->line;
    k->text = tpl_strndup(L->c, text, len);
    k->len = len;
    return k;
}

static int count_nl(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == '\n';
    return k;
}

/* Length of the (Unicode) whitespace run at s[0..n). */
static size_t space_run(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t k;
        int32_t cp = tpl_utf8_next(s + i, n - i, &k);
        if (!tpl_is_space(cp)) break;
        i += k;
    }
    return i;
}

/* Length of text after stripping trailing (Unicode) whitespace. */
static size_t rstrip_len(const char *s, size_t n) {
    size_t keep = 0, i = 0;
    while (i < n) {
        size_t k;
        int32_t cp = tpl_utf8_next(s + i, n - i, &k);
        i += k;
        if (!tpl_is_space(cp)) keep = i;
    }
    return keep;
}

static void utf8_put(tpl_ctx *c, tpl_buf *b, int32_t cp) {
    char tmp[8];
    tpl_buf_put(c, b, tmp, tpl_utf8_encode(cp, tmp));
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A string literal body, decoded as Python's "unicode-escape" codec does
 * (that is what jinja2 applies to it). */
static void lex_string(lexer *L) {
    tpl_ctx *c = L->c;
    char q = L->s[L->pos];
    int line0 = L->line;
    size_t i = L->pos + 1;
    tpl_buf b = {0};
    for (;;) {
        if (i >= L->n)
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: unterminated string literal",
                     line0);
        char ch = L->s[i];
        if (ch == q) break;
        if (ch != '\\') {
            tpl_buf_put(c, &b, &ch, 1);
            i++;
            continue;
        }
        if (i + 1 >= L->n)
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: unterminated string literal",
                     line0);
        char e = L->s[i + 1];
        i += 2;
        int32_t cp = -1;
        switch (e) {
        case '\\':
            cp = '\\';
            break;
        case '\'':
            cp = '\'';
            break;
        case '"':
            cp = '"';
            break;
        case 'a':
            cp = 7;
            break;
        case 'b':
            cp = 8;
            break;
        case 'f':
            cp = 12;
            break;
        case 'n':
            cp = 10;
            break;
        case 'r':
            cp = 13;
            break;
        case 't':
            cp = 9;
            break;
        case 'v':
            cp = 11;
            break;
        case '\n':
            continue; /* line continuation */
        case 'x':
        case 'u':
        case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            int64_t v = 0; /* 8 hex digits overflow an int */
            for (int k = 0; k < nd; k++) {
                int h = i + (size_t)k < L->n ? hexval(L->s[i + (size_t)k]) : -1;
                if (h < 0)
                    tpl_fail(c, LPX_ERR_INVALID_ARG,
                             "chat template line %d: truncated \\%c escape in a string literal",
                             L->line, e);
                v = v * 16 + h;
            }
            i += (size_t)nd;
            cp = v > 0x10ffff ? 0x110000 : (int)v;
            if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                tpl_fail(c, LPX_ERR_INVALID_ARG,
                         "chat template line %d: escape \\%c outside Unicode in a string literal",
                         L->line, e);
            break;
        }
        case 'N':
            tpl_fail(c, LPX_ERR_UNSUPPORTED,
                     "chat template line %d: unsupported construct: \\N{...} escape", L->line);
        default:
            if (e >= '0' && e <= '7') {
                cp = e - '0';
                for (int k = 0; k < 2 && i < L->n && L->s[i] >= '0' && L->s[i] <= '7'; k++)
                    cp = cp * 8 + (L->s[i++] - '0');
            } else if ((unsigned char)e >= 0x80) {
                /* jinja2 turns the character into a \x/\u/\U escape first, so the
                 * backslash escapes that escape's own backslash. */
                size_t k;
                int32_t u = tpl_utf8_next(L->s + i - 1, L->n - (i - 1), &k);
                char tmp[16];
                snprintf(tmp, sizeof tmp,
                         u < 0x100     ? "\\x%02x"
                         : u < 0x10000 ? "\\u%04x"
                                       : "\\U%08x",
                         (unsigned)u);
                tpl_buf_puts(c, &b, tmp);
                i += k - 1;
                continue;
            } else { /* unknown escapes stay as written */
                char keep[2] = {'\\', e};
                tpl_buf_put(c, &b, keep, 2);
                if (e == '\n') L->line++;
                continue;
            }
        }
        utf8_put(c, &b, cp);
    }
    tpl_tok *t = emit(L, TK_STRING, b.p ? b.p : "", b.n);
    t->line = line0;
    L->line += count_nl(L->s + L->pos, i - L->pos);
    L->pos = i + 1;
}

static bool is_digit(char ch) {
    return ch >= '0' && ch <= '9';
}
static bool is_name_start(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}

/* Digits with single underscores between them ("1_000"); returns the end. */
static size_t digit_run(const char *s, size_t n, size_t i) {
    if (i >= n || !is_digit(s[i])) return i;
    while (i < n && (is_digit(s[i]) || (s[i] == '_' && i + 1 < n && is_digit(s[i + 1]))))
        i++;
    return i;
}

static void lex_number(lexer *L) {
    const char *s = L->s;
    size_t i = digit_run(s, L->n, L->pos), start = L->pos;
    bool is_float = false;
    if (i + 1 < L->n && s[i] == '.' && is_digit(s[i + 1])) {
        i = digit_run(s, L->n, i + 1);
        is_float = true;
    }
    if (i < L->n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (s[j] == '+' || s[j] == '-')) j++;
        size_t k = digit_run(s, L->n, j);
        if (k > j) {
            i = k;
            is_float = true;
        }
    }
    char tmp[128];
    size_t m = 0;
    for (size_t k = start; k < i && m + 1 < sizeof tmp; k++)
        if (s[k] != '_') tmp[m++] = s[k];
    tmp[m] = '\0';
    if (i - start >= sizeof tmp)
        tpl_fail(L->c, LPX_ERR_INVALID_ARG, "chat template line %d: number literal too long",
                 L->line);
    tpl_tok *t = emit(L, is_float ? TK_FLOAT : TK_INT, s + start, i - start);
    if (is_float) {
        t->f = strtod(tmp, NULL);
    } else {
        unsigned long long v = strtoull(tmp, NULL, 10);
        if (m > 18 && (m > 19 || v > (unsigned long long)INT64_MAX))
            tpl_fail(L->c, LPX_ERR_UNSUPPORTED,
                     "chat template line %d: unsupported construct: integer literal beyond 64 bits",
                     L->line);
        t->i = (int64_t)v;
    }
    L->pos = i;
}

static const char *const ops[] = {"**", "//", "==", "!=", ">=", "<=", "+", "-", "/",
                                  "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                  ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};

/* Tokens of one {{ ... }} or {% ... %} up to and including its end marker.
 * Returns whether the end marker's match ended with a newline. */
static bool lex_tag(lexer *L, bool block) {
    tpl_ctx *c = L->c;
    char stack[TPL_MAX_DEPTH];
    int depth = 0;
    int line0 = L->line;
    const char *s = L->s;
    for (;;) {
        size_t p = L->pos, left = L->n - p;
        if (p >= L->n)
            tpl_fail(c, LPX_ERR_INVALID_ARG,
                     "chat template line %d: unexpected end of template, the tag opened here is "
                     "not closed",
                     line0);
        if (depth == 0) {
            const char *end = block ? "%}" : "}}";
            size_t m = 0;
            bool strip = false;
            if (left >= 3 && (s[p] == '-' || (block && s[p] == '+')) &&
                !memcmp(s + p + 1, end, 2)) {
                m = 3;
                strip = s[p] == '-';
            } else if (left >= 2 && !memcmp(s + p, end, 2)) {
                m = 2;
                if (block && left > 2 && s[p + 2] == '\n') m = 3; /* trim_blocks */
            }
            if (m) {
                if (strip) m += space_run(s + p + m, left - m);
                emit(L, block ? TK_BLOCK_END : TK_VAR_END, s + p, 0);
                L->line += count_nl(s + p, m);
                L->pos = p + m;
                return s[p + m - 1] == '\n';
            }
        }
        size_t ws = space_run(s + p, left);
        if (ws) {
            L->line += count_nl(s + p, ws);
            L->pos += ws;
            continue;
        }
        char ch = s[p];
        if (is_digit(ch)) {
            lex_number(L);
            continue;
        }
        if (is_name_start(ch)) {
            size_t i = p + 1;
            while (i < L->n && (is_name_start(s[i]) || is_digit(s[i])))
                i++;
            emit(L, TK_NAME, s + p, i - p);
            L->pos = i;
            continue;
        }
        if (ch == '\'' || ch == '"') {
            lex_string(L);
            continue;
        }
        size_t k;
        for (k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            size_t ol = strlen(ops[k]);
            if (left >= ol && !memcmp(s + p, ops[k], ol)) break;
        }
        if (k == sizeof ops / sizeof ops[0]) {
            size_t cl;
            int32_t cp = tpl_utf8_next(s + p, left, &cl);
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: unexpected character U+%04X",
                     L->line, (unsigned)cp);
        }
        const char *op = ops[k];
        if (op[0] == '(' || op[0] == '[' || op[0] == '{') {
            if (depth == TPL_MAX_DEPTH)
                tpl_fail(c, LPX_ERR_INVALID_ARG,
                         "chat template line %d: brackets nested too deeply", L->line);
            stack[depth++] = op[0] == '(' ? ')' : op[0] == '[' ? ']' : '}';
        } else if (op[0] == ')' || op[0] == ']' || op[0] == '}') {
            if (depth == 0 || stack[depth - 1] != op[0])
                tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: unexpected '%c'", L->line,
                         op[0]);
            depth--;
        }
        emit(L, TK_OP, op, strlen(op));
        L->pos += strlen(op);
    }
}

void tpl_lex(tpl_ctx *c, const char *src, size_t n, tpl_toks *out) {
    /* Normalise \r\n and \r to \n, then drop one trailing newline
     * (keep_trailing_newline=False). */
    char *s = tpl_alloc(c, tpl_add(c, n, 1));
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[m++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            s[m++] = src[i];
        }
    }
    if (m && s[m - 1] == '\n') m--;
    s[m] = '\0';

    lexer L = {.c = c, .s = s, .n = m, .pos = 0, .line = 1, .out = out};
    bool line_starting = true;
    while (L.pos < m) {
        const char *q = NULL;
        for (const char *p = s + L.pos; (p = memchr(p, '{', (size_t)(s + m - p))) != NULL; p++)
            if (p + 1 < s + m && (p[1] == '{' || p[1] == '%' || p[1] == '#')) {
                q = p;
                break;
            }
        size_t tag = q ? (size_t)(q - s) : m;
        size_t text_len = tag - L.pos;
        const char *text = s + L.pos;
        int text_lines = count_nl(text, text_len);
        if (!q) {
            if (text_len) emit(&L, TK_TEXT, text, text_len);
            break;
        }
        char kind = q[1];
        char sign = tag + 2 < m && (q[2] == '-' || q[2] == '+') ? q[2] : 0;
        if (sign == '-') {
            text_len = rstrip_len(text, text_len);
        } else if (sign != '+' && kind != '{') {
            size_t l_pos = text_len;
            while (l_pos > 0 && text[l_pos - 1] != '\n')
                l_pos--;
            if ((l_pos > 0 || line_starting) && l_pos < text_len &&
                space_run(text + l_pos, text_len - l_pos) == text_len - l_pos)
                text_len = l_pos;
        }
        if (text_len) emit(&L, TK_TEXT, text, text_len);
        L.line += text_lines;
        L.pos = tag + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            const char *e = NULL;
            for (const char *p = s + L.pos; (p = memchr(p, '#', (size_t)(s + m - p))) != NULL; p++)
                if (p + 1 < s + m && p[1] == '}') {
                    e = p;
                    break;
                }
            if (!e)
                tpl_fail(c, LPX_ERR_INVALID_ARG,
                         "chat template line %d: missing end of comment tag", L.line);
            size_t end = (size_t)(e - s) + 2;
            size_t before = (size_t)(e - s);
            if (before > L.pos && s[before - 1] == '-')
                end += space_run(s + end, m - end);
            else if (!(before > L.pos && s[before - 1] == '+') && end < m && s[end] == '\n')
                end++;
            L.line += count_nl(s + L.pos, end - L.pos);
            line_starting = s[end - 1] == '\n';
            L.pos = end;
            continue;
        }
        if (kind == '%') { /* {% raw %} would need its own lexing state */
            size_t p = L.pos + space_run(s + L.pos, m - L.pos);
            if (m - p >= 3 && !memcmp(s + p, "raw", 3) &&
                (p + 3 == m || !(is_name_start(s[p + 3]) || is_digit(s[p + 3]))))
                tpl_fail(c, LPX_ERR_UNSUPPORTED,
                         "chat template line %d: unsupported construct: {%% raw %%}", L.line);
        }
        emit(&L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, q, 0);
        line_starting = lex_tag(&L, kind == '%');
    }
    emit(&L, TK_EOF, "", 0);
}

/* Values of the template language with Python's semantics: str(), repr(),
 * ==, <, truthiness and json.dumps, plus the render's arena. */
#include "template/template_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- arena and failure ---------------------------------------------------- */

struct tpl_block {
    tpl_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

#define TPL_BLOCK_SIZE (64u << 10)

_Noreturn void tpl_fail(tpl_ctx *c, lpx_status s, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lpx_errorf(s, "%s", msg);
    longjmp(c->fail, (int)s);
}

void *tpl_alloc(tpl_ctx *c, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    tpl_block *b = c->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > TPL_BLOCK_SIZE ? n : TPL_BLOCK_SIZE;
        if (c->mem_used + cap > c->mem_cap || cap > c->mem_cap)
            tpl_fail(c, LPX_ERR_NOMEM, "chat template: render needs more than %zu bytes of memory",
                     c->mem_cap);
        b = malloc(sizeof *b + cap);
        if (!b) tpl_fail(c, LPX_ERR_NOMEM, "chat template: out of memory");
        b->used = 0;
        b->cap = cap;
        b->next = c->blocks;
        c->blocks = b;
        c->mem_used += cap;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

void *tpl_grow(tpl_ctx *c, void *old, size_t old_n, size_t new_n) {
    void *p = tpl_alloc(c, new_n);
    if (old_n) memcpy(p, old, old_n);
    return p;
}

char *tpl_strndup(tpl_ctx *c, const char *s, size_t n) {
    char *p = tpl_alloc(c, tpl_add(c, n, 1));
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void tpl_arena_free(tpl_ctx *c) {
    for (tpl_block *b = c->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    c->blocks = NULL;
    c->mem_used = 0;
}

size_t tpl_mul(tpl_ctx *c, size_t a, size_t b) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r))
        tpl_fail(c, LPX_ERR_NOMEM, "chat template: size overflow");
    return r;
}

size_t tpl_add(tpl_ctx *c, size_t a, size_t b) {
    size_t r;
    if (__builtin_add_overflow(a, b, &r))
        tpl_fail(c, LPX_ERR_NOMEM, "chat template: size overflow");
    return r;
}

/* ---- UTF-8 ---------------------------------------------------------------- */

int32_t tpl_utf8_next(const char *s, size_t n, size_t *len) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &cp);
    if (k <= 0) { /* not reached for validated text; treat the byte as itself */
        *len = 1;
        return (unsigned char)s[0];
    }
    *len = (size_t)k;
    return cp;
}

size_t tpl_utf8_encode(int32_t cp, char *out) {
    return (size_t)utf8proc_encode_char(cp, (utf8proc_uint8_t *)out);
}

bool tpl_utf8_valid(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0) return false;
        i += (size_t)k;
    }
    return true;
}

bool tpl_is_space(int32_t cp) {
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f)) return true;
    if (cp < 0x85) return false;
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

static size_t count_cps(const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)p[i] & 0xc0) != 0x80;
    return k;
}

/* ---- constructors ----------------------------------------------------------- */

tpl_val tv_str(tpl_ctx *c, const char *p, size_t n) {
    tpl_str *s = tpl_alloc(c, tpl_add(c, sizeof *s, tpl_add(c, n, 1)));
    s->n = n;
    s->ncp = count_cps(p, n);
    if (n) memcpy(s->p, p, n);
    s->p[n] = '\0';
    tpl_val v = {.t = TV_STR, .u.s = s};
    return v;
}

tpl_val tv_cstr(tpl_ctx *c, const char *p) {
    return tv_str(c, p, strlen(p));
}

tpl_val tv_list(tpl_ctx *c, size_t cap) {
    tpl_list *l = tpl_alloc(c, sizeof *l);
    l->n = 0;
    l->cap = cap;
    l->tuple = false;
    l->view = NULL;
    l->v = cap ? tpl_alloc(c, tpl_mul(c, cap, sizeof *l->v)) : NULL;
    tpl_val v = {.t = TV_LIST, .u.l = l};
    return v;
}

tpl_val tv_dict(tpl_ctx *c, tpl_type t) {
    tpl_dict *d = tpl_alloc(c, sizeof *d);
    memset(d, 0, sizeof *d);
    tpl_val v = {.t = t, .u.d = d};
    return v;
}

void tpl_list_push(tpl_ctx *c, tpl_list *l, tpl_val v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? tpl_mul(c, l->cap, 2) : 8;
        l->v = tpl_grow(c, l->v, l->n * sizeof *l->v, tpl_mul(c, cap, sizeof *l->v));
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

tpl_val *tpl_dict_get(const tpl_dict *d, tpl_val k) {
    for (size_t i = 0; i < d->n; i++)
        if (tpl_equal(d->k[i], k)) return &d->v[i];
    return NULL;
}

tpl_val *tpl_dict_get_str(const tpl_dict *d, const char *key) {
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == TV_STR && d->k[i].u.s->n == n && !memcmp(d->k[i].u.s->p, key, n))
            return &d->v[i];
    return NULL;
}

void tpl_dict_set(tpl_ctx *c, tpl_dict *d, tpl_val k, tpl_val v) {
    tpl_val *old = tpl_dict_get(d, k);
    if (old) {
        *old = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? tpl_mul(c, d->cap, 2) : 8;
        d->k = tpl_grow(c, d->k, d->n * sizeof *d->k, tpl_mul(c, cap, sizeof *d->k));
        d->v = tpl_grow(c, d->v, d->n * sizeof *d->v, tpl_mul(c, cap, sizeof *d->v));
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
}

/* ---- predicates ------------------------------------------------------------- */

const char *tpl_type_name(tpl_type t) {
    switch (t) {
    case TV_UNDEF:
        return "Undefined";
    case TV_NONE:
        return "NoneType";
    case TV_BOOL:
        return "bool";
    case TV_INT:
        return "int";
    case TV_FLOAT:
        return "float";
    case TV_STR:
        return "str";
    case TV_LIST:
        return "list";
    case TV_DICT:
        return "dict";
    case TV_NS:
        return "Namespace";
    case TV_LOOP:
        return "LoopContext";
    case TV_FUNC:
        return "function";
    case TV_METHOD:
        return "method";
    case TV_MACRO:
        return "Macro";
    }
    return "?";
}

bool tpl_truthy(tpl_val v) {
    switch (v.t) {
    case TV_UNDEF:
    case TV_NONE:
        return false;
    case TV_BOOL:
        return v.u.b;
    case TV_INT:
        return v.u.i != 0;
    case TV_FLOAT:
        return v.u.f != 0.0;
    case TV_STR:
        return v.u.s->n != 0;
    case TV_LIST:
        return v.u.l->n != 0;
    case TV_DICT:
        return v.u.d->n != 0;
    default:
        return true;
    }
}

void tpl_need_defined(tpl_ctx *c, tpl_val v) {
    if (v.t == TV_UNDEF)
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: %s", c->line,
                 v.u.why ? v.u.why : "value is undefined");
}

static bool is_num(tpl_val v) {
    return v.t == TV_BOOL || v.t == TV_INT || v.t == TV_FLOAT;
}
static double num_f(tpl_val v) {
    return v.t == TV_FLOAT ? v.u.f : v.t == TV_INT ? (double)v.u.i : (double)v.u.b;
}
static int64_t num_i(tpl_val v) {
    return v.t == TV_INT ? v.u.i : (int64_t)v.u.b;
}

bool tpl_equal(tpl_val a, tpl_val b) {
    if (is_num(a) && is_num(b)) {
        if (a.t == TV_FLOAT || b.t == TV_FLOAT) return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case TV_UNDEF:
    case TV_NONE:
        return true;
    case TV_STR:
        return a.u.s->n == b.u.s->n && !memcmp(a.u.s->p, b.u.s->p, a.u.s->n);
    case TV_LIST:
        if (a.u.l->tuple != b.u.l->tuple || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!tpl_equal(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case TV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            tpl_val *w = tpl_dict_get(b.u.d, a.u.d->k[i]);
            if (!w || !tpl_equal(a.u.d->v[i], *w)) return false;
        }
        return true;
    case TV_NS:
        return a.u.d == b.u.d;
    case TV_LOOP:
        return a.u.loop == b.u.loop;
    case TV_FUNC:
        return a.u.fn == b.u.fn;
    case TV_METHOD:
        return a.u.m == b.u.m;
    case TV_MACRO:
        return a.u.macro == b.u.macro;
    default:
        return false;
    }
}

bool tpl_less(tpl_ctx *c, tpl_val a, tpl_val b) {
    if (is_num(a) && is_num(b)) {
        if (a.t == TV_FLOAT || b.t == TV_FLOAT) return num_f(a) < num_f(b);
        return num_i(a) < num_i(b);
    }
    tpl_need_defined(c, a);
    tpl_need_defined(c, b);
    if (a.t == TV_STR && b.t == TV_STR) { /* UTF-8 byte order is code point order */
        size_t n = a.u.s->n < b.u.s->n ? a.u.s->n : b.u.s->n;
        int r = memcmp(a.u.s->p, b.u.s->p, n);
        return r < 0 || (r == 0 && a.u.s->n < b.u.s->n);
    }
    if (a.t == TV_LIST && b.t == TV_LIST && a.u.l->tuple == b.u.l->tuple) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++)
            if (!tpl_equal(a.u.l->v[i], b.u.l->v[i])) return tpl_less(c, a.u.l->v[i], b.u.l->v[i]);
        return a.u.l->n < b.u.l->n;
    }
    tpl_fail(c, LPX_ERR_INVALID_ARG,
             "chat template line %d: '<' not supported between instances of '%s' and '%s'", c->line,
             tpl_type_name(a.t), tpl_type_name(b.t));
}

/* ---- text buffers ----------------------------------------------------------- */

void tpl_buf_put(tpl_ctx *c, tpl_buf *b, const char *s, size_t n) {
    size_t need = tpl_add(c, tpl_add(c, b->n, n), 1);
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < need)
            cap = tpl_mul(c, cap, 2);
        b->p = tpl_grow(c, b->p, b->n, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void tpl_buf_puts(tpl_ctx *c, tpl_buf *b, const char *s) {
    tpl_buf_put(c, b, s, strlen(s));
}

tpl_val tpl_buf_val(tpl_ctx *c, tpl_buf *b) {
    return tv_str(c, b->p ? b->p : "", b->n);
}

/* ---- str(), repr() ------------------------------------------------------------ */

void tpl_float_repr(double f, char *out, size_t cap) {
    if (isnan(f)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(out, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    /* Shortest digits that read back to f, as Python's repr. */
    char e[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e is [-]d[.ddd]e[+-]XX: collect digits and the decimal exponent. */
    char digits[24];
    int nd = 0, exp10;
    const char *p = e;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    char *o = out;
    size_t left = cap;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int w_ = snprintf(o, left, __VA_ARGS__);                                                   \
        if (w_ < 0 || (size_t)w_ >= left) return;                                                  \
        o += w_;                                                                                   \
        left -= (size_t)w_;                                                                        \
    } while (0)
    if (neg) PUT("-");
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            PUT("0.");
            for (int i = 0; i < -exp10 - 1; i++)
                PUT("0");
            PUT("%s", digits);
        } else {
            for (int i = 0; i <= exp10; i++)
                PUT("%c", i < nd ? digits[i] : '0');
            PUT(".");
            if (nd > exp10 + 1)
                PUT("%s", digits + exp10 + 1);
            else
                PUT("0");
        }
    } else {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
#undef PUT
}

static bool printable(int32_t cp) {
    if (cp < 0x20 || cp == 0x7f) return false;
    if (cp < 0x7f || cp == ' ') return true;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}

static void repr_str(tpl_ctx *c, tpl_buf *b, const tpl_str *s) {
    bool has_sq = memchr(s->p, '\'', s->n) != NULL, has_dq = memchr(s->p, '"', s->n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    tpl_buf_put(c, b, &q, 1);
    for (size_t i = 0; i < s->n;) {
        size_t k;
        int32_t cp = tpl_utf8_next(s->p + i, s->n - i, &k);
        char esc[16];
        if (cp == q || cp == '\\') {
            esc[0] = '\\';
            esc[1] = (char)cp;
            tpl_buf_put(c, b, esc, 2);
        } else if (cp == '\n') {
            tpl_buf_puts(c, b, "\\n");
        } else if (cp == '\r') {
            tpl_buf_puts(c, b, "\\r");
        } else if (cp == '\t') {
            tpl_buf_puts(c, b, "\\t");
        } else if (!printable(cp)) {
            snprintf(esc, sizeof esc,
                     cp < 0x100     ? "\\x%02x"
                     : cp < 0x10000 ? "\\u%04x"
                                    : "\\U%08x",
                     (unsigned)cp);
            tpl_buf_puts(c, b, esc);
        } else {
            tpl_buf_put(c, b, s->p + i, k);
        }
        i += k;
    }
    tpl_buf_put(c, b, &q, 1);
}

void tpl_repr(tpl_ctx *c, tpl_buf *b, tpl_val v) {
    tpl_step(c);
    switch (v.t) {
    case TV_UNDEF:
        tpl_buf_puts(c, b, "Undefined");
        return;
    case TV_STR:
        repr_str(c, b, v.u.s);
        return;
    case TV_LIST: {
        const tpl_list *l = v.u.l;
        if (l->view) {
            tpl_buf_puts(c, b, l->view);
            tpl_buf_puts(c, b, "(");
        }
        tpl_buf_puts(c, b, l->tuple ? "(" : "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i) tpl_buf_puts(c, b, ", ");
            tpl_repr(c, b, l->v[i]);
        }
        if (l->tuple && l->n == 1) tpl_buf_puts(c, b, ",");
        tpl_buf_puts(c, b, l->tuple ? ")" : "]");
        if (l->view) tpl_buf_puts(c, b, ")");
        return;
    }
    case TV_DICT:
    case TV_NS: {
        const tpl_dict *d = v.u.d;
        tpl_buf_puts(c, b, v.t == TV_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i) tpl_buf_puts(c, b, ", ");
            tpl_repr(c, b, d->k[i]);
            tpl_buf_puts(c, b, ": ");
            tpl_repr(c, b, d->v[i]);
        }
        tpl_buf_puts(c, b, v.t == TV_NS ? "}>" : "}");
        return;
    }
    default:
        tpl_to_str(c, b, v);
        return;
    }
}

void tpl_to_str(tpl_ctx *c, tpl_buf *b, tpl_val v) {
    char tmp[64];
    switch (v.t) {
    case TV_UNDEF:
        return;
    case TV_NONE:
        tpl_buf_puts(c, b, "None");
        return;
    case TV_BOOL:
        tpl_buf_puts(c, b, v.u.b ? "True" : "False");
        return;
    case TV_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i);
        tpl_buf_puts(c, b, tmp);
        return;
    case TV_FLOAT:
        tpl_float_repr(v.u.f, tmp, sizeof tmp);
        tpl_buf_puts(c, b, tmp);
        return;
    case TV_STR:
        tpl_buf_put(c, b, v.u.s->p, v.u.s->n);
        return;
    case TV_LIST:
    case TV_DICT:
    case TV_NS:
        tpl_repr(c, b, v);
        return;
    case TV_LOOP:
        snprintf(tmp, sizeof tmp, "<LoopContext %lld/%zu>", (long long)v.u.loop->i + 1,
                 v.u.loop->items->n);
        tpl_buf_puts(c, b, tmp);
        return;
    case TV_FUNC:
    case TV_METHOD:
    case TV_MACRO:
        tpl_fail(c, LPX_ERR_UNSUPPORTED,
                 "chat template line %d: printing a function is not supported", c->line);
    }
}

tpl_val tpl_str_of(tpl_ctx *c, tpl_val v) {
    if (v.t == TV_STR) return v;
    tpl_buf b = {0};
    tpl_to_str(c, &b, v);
    return tpl_buf_val(c, &b);
}

/* ---- JSON ------------------------------------------------------------------- */

static void json_str(tpl_ctx *c, tpl_buf *b, const char *p, size_t n) {
    tpl_buf_puts(c, b, "\"");
    size_t run = 0; /* bytes copied as they are */
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        const char *esc = NULL;
        char tmp[8];
        switch (ch) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        default:
            if (ch < 0x20) {
                snprintf(tmp, sizeof tmp, "\\u%04x", ch);
                esc = tmp;
            }
        }
        if (esc) {
            tpl_buf_put(c, b, p + i - run, run);
            run = 0;
            tpl_buf_puts(c, b, esc);
        } else {
            run++;
        }
    }
    tpl_buf_put(c, b, p + n - run, run);
    tpl_buf_puts(c, b, "\"");
}

static void json_newline(tpl_ctx *c, tpl_buf *b, int indent, int level) {
    tpl_buf_puts(c, b, "\n");
    for (int i = 0; i < indent * level; i++)
        tpl_buf_puts(c, b, " ");
}

static void json_key(tpl_ctx *c, tpl_buf *b, tpl_val k) {
    switch (k.t) {
    case TV_STR:
        json_str(c, b, k.u.s->p, k.u.s->n);
        return;
    case TV_NONE:
        tpl_buf_puts(c, b, "\"null\"");
        return;
    case TV_BOOL:
        tpl_buf_puts(c, b, k.u.b ? "\"true\"" : "\"false\"");
        return;
    case TV_INT:
    case TV_FLOAT: {
        tpl_buf t = {0};
        tpl_to_str(c, &t, k);
        json_str(c, b, t.p, t.n);
        return;
    }
    default:
        tpl_fail(
            c, LPX_ERR_INVALID_ARG,
            "chat template line %d: tojson: keys must be str, int, float, bool or None, not %s",
            c->line, tpl_type_name(k.t));
    }
}

static void json_value(tpl_ctx *c, tpl_buf *b, tpl_val v, int indent, bool sort_keys, int level) {
    tpl_step(c);
    if (++c->depth > TPL_MAX_DEPTH)
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: tojson: value nested too deeply",
                 c->line);
    const char *item_sep = indent >= 0 ? "," : ", ";
    switch (v.t) {
    case TV_NONE:
        tpl_buf_puts(c, b, "null");
        break;
    case TV_BOOL:
        tpl_buf_puts(c, b, v.u.b ? "true" : "false");
        break;
    case TV_INT:
        tpl_to_str(c, b, v);
        break;
    case TV_FLOAT:
        if (isnan(v.u.f))
            tpl_buf_puts(c, b, "NaN");
        else if (isinf(v.u.f))
            tpl_buf_puts(c, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else
            tpl_to_str(c, b, v);
        break;
    case TV_STR:
        json_str(c, b, v.u.s->p, v.u.s->n);
        break;
    case TV_LIST: {
        const tpl_list *l = v.u.l;
        tpl_buf_puts(c, b, "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i) tpl_buf_puts(c, b, item_sep);
            if (indent >= 0) json_newline(c, b, indent, level + 1);
            json_value(c, b, l->v[i], indent, sort_keys, level + 1);
        }
        if (indent >= 0 && l->n) json_newline(c, b, indent, level);
        tpl_buf_puts(c, b, "]");
        break;
    }
    case TV_DICT: {
        const tpl_dict *d = v.u.d;
        size_t *order = tpl_alloc(c, tpl_mul(c, d->n + 1, sizeof *order));
        for (size_t i = 0; i < d->n; i++)
            order[i] = i;
        if (sort_keys) /* insertion sort: dicts in templates are small */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && tpl_less(c, d->k[order[j]], d->k[order[j - 1]]); j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        tpl_buf_puts(c, b, "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i) tpl_buf_puts(c, b, item_sep);
            if (indent >= 0) json_newline(c, b, indent, level + 1);
            json_key(c, b, d->k[order[i]]);
            tpl_buf_puts(c, b, ": ");
            json_value(c, b, d->v[order[i]], indent, sort_keys, level + 1);
        }
        if (indent >= 0 && d->n) json_newline(c, b, indent, level);
        tpl_buf_puts(c, b, "}");
        break;
    }
    default:
        tpl_fail(c, LPX_ERR_INVALID_ARG,
                 "chat template line %d: tojson: Object of type %s is not JSON serializable",
                 c->line, tpl_type_name(v.t));
    }
    c->depth--;
}

void tpl_to_json(tpl_ctx *c, tpl_buf *b, tpl_val v, int indent, bool sort_keys) {
    json_value(c, b, v, indent, sort_keys, 0);
}

static tpl_val from_cjson(tpl_ctx *c, const cJSON *j, int depth) {
    if (depth > TPL_MAX_DEPTH)
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template input: JSON nested too deeply");
    if (cJSON_IsNull(j)) return tv_none();
    if (cJSON_IsBool(j)) return tv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double f = j->valuedouble;
        /* cJSON keeps no literal text, so a whole number becomes an int (json.loads
         * makes "1.0" a float: the one case where this differs). */
        if (f == floor(f) && fabs(f) < 9007199254740992.0) return tv_int((int64_t)f);
        return tv_float(f);
    }
    if (cJSON_IsString(j)) {
        size_t n = strlen(j->valuestring);
        if (!tpl_utf8_valid(j->valuestring, n))
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template input: string is not valid UTF-8");
        return tv_str(c, j->valuestring, n);
    }
    if (cJSON_IsArray(j)) {
        tpl_val l = tv_list(c, (size_t)cJSON_GetArraySize(j));
        for (const cJSON *e = j->child; e; e = e->next)
            tpl_list_push(c, l.u.l, from_cjson(c, e, depth + 1));
        return l;
    }
    if (cJSON_IsObject(j)) {
        tpl_val d = tv_dict(c, TV_DICT);
        for (const cJSON *e = j->child; e; e = e->next) {
            if (!tpl_utf8_valid(e->string, strlen(e->string)))
                tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template input: key is not valid UTF-8");
            tpl_dict_set(c, d.u.d, tv_cstr(c, e->string), from_cjson(c, e, depth + 1));
        }
        return d;
    }
    tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template input: unsupported JSON value");
}

tpl_val tpl_from_json(tpl_ctx *c, const char *json, const char *what) {
    cJSON *j = cJSON_Parse(json);
    if (!j) tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template input: %s is not valid JSON", what);
    /* The tree is malloc'd by cJSON: convert it inside a nested failure point so
     * that it is freed on every path. */
    jmp_buf saved;
    memcpy(saved, c->fail, sizeof saved);
    int rc = setjmp(c->fail);
    tpl_val v = tv_none();
    if (rc == 0) v = from_cjson(c, j, 0);
    memcpy(c->fail, saved, sizeof saved);
    cJSON_Delete(j);
    if (rc) longjmp(c->fail, rc);
    return v;
}

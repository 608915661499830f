/* Filters, tests, methods of str/dict/list, and the global functions that
 * transformers' chat template environment provides, each with the semantics
 * of its jinja2 / Python original. */
#include "template/template_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

/* ---- argument helpers ------------------------------------------------------- */

/* Argument i (positional) or keyword name, or NULL when not given. */
static const tpl_val *arg(const tpl_args *a, size_t i, const char *name) {
    if (i < a->npos) return &a->pos[i];
    for (size_t k = 0; k < a->nkw; k++)
        if (name && !strcmp(a->kw[k], name)) return &a->kwv[k];
    return NULL;
}

static void check_args(tpl_ctx *c, const char *what, const tpl_args *a, size_t max_pos,
                       const char *const *names) {
    if (a->npos > max_pos)
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: %s takes at most %zu arguments",
                 c->line, what, max_pos);
    for (size_t k = 0; k < a->nkw; k++) {
        bool ok = false;
        for (const char *const *n = names; n && *n; n++)
            ok |= !strcmp(*n, a->kw[k]);
        if (!ok)
            tpl_fail(c, LPX_ERR_UNSUPPORTED,
                     "chat template line %d: unsupported construct: argument '%s' of %s", c->line,
                     a->kw[k], what);
    }
}

static const tpl_str *need_str(tpl_ctx *c, const char *what, tpl_val v) {
    tpl_need_defined(c, v);
    if (v.t != TV_STR)
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: %s expects a string, got %s",
                 c->line, what, tpl_type_name(v.t));
    return v.u.s;
}

static int64_t need_int(tpl_ctx *c, const char *what, tpl_val v) {
    tpl_need_defined(c, v);
    if (v.t != TV_INT && v.t != TV_BOOL)
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: %s expects an integer, got %s",
                 c->line, what, tpl_type_name(v.t));
    return v.t == TV_INT ? v.u.i : v.u.b;
}

static tpl_val tuple2(tpl_ctx *c, tpl_val a, tpl_val b) {
    tpl_val t = tv_list(c, 2);
    t.u.l->tuple = true;
    tpl_list_push(c, t.u.l, a);
    tpl_list_push(c, t.u.l, b);
    return t;
}

/* ---- string helpers --------------------------------------------------------- */

static bool in_chars(int32_t cp, const tpl_str *chars) {
    if (!chars) return tpl_is_space(cp);
    for (size_t i = 0; i < chars->n;) {
        size_t k;
        if (tpl_utf8_next(chars->p + i, chars->n - i, &k) == cp) return true;
        i += k;
    }
    return false;
}

/* str.strip/lstrip/rstrip: chars NULL strips whitespace. */
static tpl_val strip(tpl_ctx *c, const tpl_str *s, const tpl_str *chars, bool left, bool right) {
    size_t a = 0, b = s->n;
    if (left)
        while (a < b) {
            size_t k;
            if (!in_chars(tpl_utf8_next(s->p + a, b - a, &k), chars)) break;
            a += k;
        }
    if (right) {
        size_t keep = a;
        for (size_t i = a; i < b;) {
            size_t k;
            int32_t cp = tpl_utf8_next(s->p + i, b - i, &k);
            i += k;
            if (!in_chars(cp, chars)) keep = i;
        }
        b = keep;
    }
    return tv_str(c, s->p + a, b - a);
}

static const char *find_sub(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == n[0] && !memcmp(h + i, n, nn)) return h + i;
    return NULL;
}

static const char *rfind_sub(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn > hn) return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (!memcmp(h + i, n, nn)) return h + i;
    return NULL;
}

/* str.split(sep, maxsplit) and str.rsplit. */
static tpl_val split(tpl_ctx *c, const tpl_str *s, const tpl_str *sep, int64_t maxsplit,
                     bool from_right) {
    tpl_val out = tv_list(c, 0);
    if (sep && sep->n == 0)
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: empty separator", c->line);
    if (sep) {
        if (!from_right) {
            size_t i = 0;
            int64_t done = 0;
            for (;;) {
                const char *hit = maxsplit >= 0 && done >= maxsplit
                                      ? NULL
                                      : find_sub(s->p + i, s->n - i, sep->p, sep->n);
                if (!hit) break;
                tpl_list_push(c, out.u.l, tv_str(c, s->p + i, (size_t)(hit - (s->p + i))));
                i = (size_t)(hit - s->p) + sep->n;
                done++;
            }
            tpl_list_push(c, out.u.l, tv_str(c, s->p + i, s->n - i));
            return out;
        }
        /* rsplit: collect from the right, then reverse. */
        size_t end = s->n;
        int64_t done = 0;
        for (;;) {
            const char *hit =
                maxsplit >= 0 && done >= maxsplit ? NULL : rfind_sub(s->p, end, sep->p, sep->n);
            if (!hit) break;
            size_t at = (size_t)(hit - s->p);
            tpl_list_push(c, out.u.l, tv_str(c, s->p + at + sep->n, end - at - sep->n));
            end = at;
            done++;
        }
        tpl_list_push(c, out.u.l, tv_str(c, s->p, end));
        for (size_t i = 0, j = out.u.l->n - 1; i < j; i++, j--) {
            tpl_val t = out.u.l->v[i];
            out.u.l->v[i] = out.u.l->v[j];
            out.u.l->v[j] = t;
        }
        return out;
    }
    if (from_right && maxsplit >= 0)
        tpl_fail(
            c, LPX_ERR_UNSUPPORTED,
            "chat template line %d: unsupported construct: rsplit() on whitespace with maxsplit",
            c->line);
    /* Whitespace split: runs of whitespace separate, ends are ignored. */
    size_t i = 0;
    int64_t done = 0;
    while (i < s->n) {
        size_t k;
        while (i < s->n && tpl_is_space(tpl_utf8_next(s->p + i, s->n - i, &k)))
            i += k;
        if (i >= s->n) break;
        if (maxsplit >= 0 && done >= maxsplit) { /* the rest, trailing whitespace kept */
            tpl_list_push(c, out.u.l, tv_str(c, s->p + i, s->n - i));
            return out;
        }
        size_t start = i;
        while (i < s->n && !tpl_is_space(tpl_utf8_next(s->p + i, s->n - i, &k)))
            i += k;
        tpl_list_push(c, out.u.l, tv_str(c, s->p + start, i - start));
        done++;
    }
    return out;
}

static tpl_val replace(tpl_ctx *c, const tpl_str *s, const tpl_str *old, const tpl_str *new_,
                       int64_t count) {
    tpl_buf b = {0};
    int64_t done = 0;
    if (old->n == 0) { /* inserts new_ before every character and at the end */
        for (size_t i = 0; i <= s->n;) {
            if (count < 0 || done < count) {
                tpl_buf_put(c, &b, new_->p, new_->n);
                done++;
            }
            if (i == s->n) break;
            size_t k;
            tpl_utf8_next(s->p + i, s->n - i, &k);
            tpl_buf_put(c, &b, s->p + i, k);
            i += k;
        }
        return tpl_buf_val(c, &b);
    }
    size_t i = 0;
    for (;;) {
        const char *hit =
            count >= 0 && done >= count ? NULL : find_sub(s->p + i, s->n - i, old->p, old->n);
        if (!hit) break;
        tpl_buf_put(c, &b, s->p + i, (size_t)(hit - (s->p + i)));
        tpl_buf_put(c, &b, new_->p, new_->n);
        i = (size_t)(hit - s->p) + old->n;
        done++;
    }
    tpl_buf_put(c, &b, s->p + i, s->n - i);
    return tpl_buf_val(c, &b);
}

typedef enum { CASE_LOWER, CASE_UPPER, CASE_TITLE, CASE_CAPITALIZE } case_mode;

static bool cased(int32_t cp) {
    return utf8proc_tolower(cp) != cp || utf8proc_toupper(cp) != cp;
}

static tpl_val change_case(tpl_ctx *c, const tpl_str *s, case_mode mode) {
    tpl_buf b = {0};
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < s->n;) {
        size_t k;
        int32_t cp = tpl_utf8_next(s->p + i, s->n - i, &k), out;
        switch (mode) {
        case CASE_LOWER:
            out = utf8proc_tolower(cp);
            break;
        case CASE_UPPER:
            out = utf8proc_toupper(cp);
            break;
        case CASE_TITLE:
            out = prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp);
            break;
        default:
            out = first ? utf8proc_totitle(cp) : utf8proc_tolower(cp);
            break;
        }
        prev_cased = cased(cp);
        first = false;
        char tmp[8];
        tpl_buf_put(c, &b, tmp, tpl_utf8_encode(out, tmp));
        i += k;
    }
    return tpl_buf_val(c, &b);
}

/* Python's str.splitlines() (no keepends). */
static tpl_val splitlines(tpl_ctx *c, const tpl_str *s) {
    tpl_val out = tv_list(c, 0);
    size_t start = 0, i = 0;
    while (i < s->n) {
        size_t k;
        int32_t cp = tpl_utf8_next(s->p + i, s->n - i, &k);
        bool brk = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c ||
                   (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (brk) {
            tpl_list_push(c, out.u.l, tv_str(c, s->p + start, i - start));
            i += k;
            if (cp == '\r' && i < s->n && s->p[i] == '\n') i++;
            start = i;
        } else {
            i += k;
        }
    }
    if (start < s->n) tpl_list_push(c, out.u.l, tv_str(c, s->p + start, s->n - start));
    return out;
}

static size_t cp_count(const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)p[i] & 0xc0) != 0x80;
    return k;
}

/* ---- methods ---------------------------------------------------------------- */

enum {
    M_STARTSWITH,
    M_ENDSWITH,
    M_STRIP,
    M_LSTRIP,
    M_RSTRIP,
    M_SPLIT,
    M_RSPLIT,
    M_LOWER,
    M_UPPER,
    M_TITLE,
    M_CAPITALIZE,
    M_REPLACE,
    M_FIND,
    M_RFIND,
    M_COUNT,
    M_JOIN,
    M_SPLITLINES,
    M_ITEMS,
    M_KEYS,
    M_VALUES,
    M_GET,
    M_LIST_INDEX,
    M_LIST_COUNT,
};

static const struct {
    tpl_type t;
    const char *name;
    int id;
} methods[] = {
    {TV_STR, "startswith", M_STARTSWITH},
    {TV_STR, "endswith", M_ENDSWITH},
    {TV_STR, "strip", M_STRIP},
    {TV_STR, "lstrip", M_LSTRIP},
    {TV_STR, "rstrip", M_RSTRIP},
    {TV_STR, "split", M_SPLIT},
    {TV_STR, "rsplit", M_RSPLIT},
    {TV_STR, "lower", M_LOWER},
    {TV_STR, "upper", M_UPPER},
    {TV_STR, "title", M_TITLE},
    {TV_STR, "capitalize", M_CAPITALIZE},
    {TV_STR, "replace", M_REPLACE},
    {TV_STR, "find", M_FIND},
    {TV_STR, "rfind", M_RFIND},
    {TV_STR, "count", M_COUNT},
    {TV_STR, "join", M_JOIN},
    {TV_STR, "splitlines", M_SPLITLINES},
    {TV_DICT, "items", M_ITEMS},
    {TV_DICT, "keys", M_KEYS},
    {TV_DICT, "values", M_VALUES},
    {TV_DICT, "get", M_GET},
    {TV_LIST, "index", M_LIST_INDEX},
    {TV_LIST, "count", M_LIST_COUNT},
};

tpl_val tpl_method_lookup(tpl_ctx *c, tpl_val obj, const char *name) {
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (methods[i].t == obj.t && !strcmp(methods[i].name, name)) {
            tpl_method *m = tpl_alloc(c, sizeof *m);
            m->self = obj;
            m->id = methods[i].id;
            tpl_val v = {.t = TV_METHOD, .u.m = m};
            return v;
        }
    return tv_undef(NULL);
}

static const char *method_name(int id) {
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (methods[i].id == id) return methods[i].name;
    return "?";
}

static bool affix_match(const tpl_str *s, const tpl_str *fix, bool end) {
    if (fix->n > s->n) return false;
    return !memcmp(s->p + (end ? s->n - fix->n : 0), fix->p, fix->n);
}

static tpl_val call_method(tpl_ctx *c, const tpl_method *m, const tpl_args *a) {
    const char *name = method_name(m->id);
    tpl_val self = m->self;
    if (a->nkw && m->id != M_SPLIT && m->id != M_RSPLIT)
        tpl_fail(c, LPX_ERR_UNSUPPORTED,
                 "chat template line %d: unsupported construct: keyword arguments to %s()", c->line,
                 name);
    const tpl_val *a0 = arg(a, 0, "sep"), *a1 = arg(a, 1, "maxsplit"), *a2 = arg(a, 2, NULL);
    switch (m->id) {
    case M_STARTSWITH:
    case M_ENDSWITH: {
        if (!a0 || a->npos > 1)
            tpl_fail(c, LPX_ERR_UNSUPPORTED,
                     "chat template line %d: unsupported construct: %s() with start/end", c->line,
                     name);
        bool end = m->id == M_ENDSWITH;
        if (a0->t == TV_LIST && a0->u.l->tuple) {
            for (size_t i = 0; i < a0->u.l->n; i++)
                if (affix_match(self.u.s, need_str(c, name, a0->u.l->v[i]), end))
                    return tv_bool(true);
            return tv_bool(false);
        }
        return tv_bool(affix_match(self.u.s, need_str(c, name, *a0), end));
    }
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        const tpl_str *chars = a0 && a0->t != TV_NONE ? need_str(c, name, *a0) : NULL;
        return strip(c, self.u.s, chars, m->id != M_RSTRIP, m->id != M_LSTRIP);
    }
    case M_SPLIT:
    case M_RSPLIT: {
        const tpl_str *sep = a0 && a0->t != TV_NONE ? need_str(c, name, *a0) : NULL;
        int64_t max = a1 ? need_int(c, name, *a1) : -1;
        return split(c, self.u.s, sep, max, m->id == M_RSPLIT);
    }
    case M_LOWER:
        return change_case(c, self.u.s, CASE_LOWER);
    case M_UPPER:
        return change_case(c, self.u.s, CASE_UPPER);
    case M_TITLE:
        return change_case(c, self.u.s, CASE_TITLE);
    case M_CAPITALIZE:
        return change_case(c, self.u.s, CASE_CAPITALIZE);
    case M_REPLACE:
        if (!a0 || !a1)
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: replace() needs 2 arguments",
                     c->line);
        return replace(c, self.u.s, need_str(c, name, *a0), need_str(c, name, *a1),
                       a2 ? need_int(c, name, *a2) : -1);
    case M_FIND:
    case M_RFIND: {
        if (!a0 || a->npos > 1)
            tpl_fail(c, LPX_ERR_UNSUPPORTED,
                     "chat template line %d: unsupported construct: %s() with start/end", c->line,
                     name);
        const tpl_str *sub = need_str(c, name, *a0);
        const char *hit = m->id == M_FIND ? find_sub(self.u.s->p, self.u.s->n, sub->p, sub->n)
                                          : rfind_sub(self.u.s->p, self.u.s->n, sub->p, sub->n);
        return tv_int(hit ? (int64_t)cp_count(self.u.s->p, (size_t)(hit - self.u.s->p)) : -1);
    }
    case M_COUNT: {
        if (!a0 || a->npos > 1)
            tpl_fail(c, LPX_ERR_UNSUPPORTED,
                     "chat template line %d: unsupported construct: count() with start/end",
                     c->line);
        const tpl_str *sub = need_str(c, name, *a0);
        if (sub->n == 0) return tv_int((int64_t)self.u.s->ncp + 1);
        int64_t k = 0;
        for (const char *p = self.u.s->p, *e = p + self.u.s->n;
             (p = find_sub(p, (size_t)(e - p), sub->p, sub->n)) != NULL; p += sub->n)
            k++;
        return tv_int(k);
    }
    case M_JOIN: {
        if (!a0)
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: join() needs 1 argument",
                     c->line);
        const tpl_list *items = tpl_iterate(c, *a0);
        tpl_buf b = {0};
        for (size_t i = 0; i < items->n; i++) {
            if (i) tpl_buf_put(c, &b, self.u.s->p, self.u.s->n);
            const tpl_str *s = need_str(c, "str.join", items->v[i]);
            tpl_buf_put(c, &b, s->p, s->n);
        }
        return tpl_buf_val(c, &b);
    }
    case M_SPLITLINES:
        return splitlines(c, self.u.s);
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES: {
        const tpl_dict *d = self.u.d;
        tpl_val out = tv_list(c, d->n);
        out.u.l->view = m->id == M_ITEMS  ? "dict_items"
                        : m->id == M_KEYS ? "dict_keys"
                                          : "dict_values";
        for (size_t i = 0; i < d->n; i++)
            tpl_list_push(c, out.u.l,
                          m->id == M_ITEMS  ? tuple2(c, d->k[i], d->v[i])
                          : m->id == M_KEYS ? d->k[i]
                                            : d->v[i]);
        return out;
    }
    case M_GET: {
        if (!a0)
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: get() needs a key", c->line);
        tpl_val *v = tpl_dict_get(self.u.d, *a0);
        return v ? *v : a1 ? *a1 : tv_none();
    }
    case M_LIST_INDEX:
    case M_LIST_COUNT: {
        if (!a0)
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: %s() needs 1 argument",
                     c->line, name);
        int64_t k = 0;
        for (size_t i = 0; i < self.u.l->n; i++)
            if (tpl_equal(self.u.l->v[i], *a0)) {
                if (m->id == M_LIST_INDEX) return tv_int((int64_t)i);
                k++;
            }
        if (m->id == M_LIST_INDEX)
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: list.index(x): x not in list",
                     c->line);
        return tv_int(k);
    }
    }
    tpl_fail(c, LPX_ERR_INTERNAL, "chat template: unknown method %d", m->id);
}

/* ---- global functions ------------------------------------------------------- */

static const struct {
    const char *name;
    int id;
} globals[] = {
    {"raise_exception", TF_RAISE_EXCEPTION},
    {"strftime_now", TF_STRFTIME_NOW},
    {"namespace", TF_NAMESPACE},
    {"range", TF_RANGE},
    {"dict", TF_DICT},
};

tpl_val tpl_global_func(const char *name) {
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (!strcmp(globals[i].name, name)) {
            tpl_val v = {.t = TV_FUNC, .u.fn = globals[i].id};
            return v;
        }
    return tv_undef(NULL);
}

static tpl_val kwargs_dict(tpl_ctx *c, tpl_type t, const tpl_args *a, const char *what) {
    tpl_val d = tv_dict(c, t);
    if (a->npos > 1)
        tpl_fail(c, LPX_ERR_INVALID_ARG,
                 "chat template line %d: %s takes at most 1 positional argument", c->line, what);
    if (a->npos == 1) {
        tpl_val src = a->pos[0];
        if (src.t == TV_DICT) {
            for (size_t i = 0; i < src.u.d->n; i++)
                tpl_dict_set(c, d.u.d, src.u.d->k[i], src.u.d->v[i]);
        } else {
            const tpl_list *items = tpl_iterate(c, src);
            for (size_t i = 0; i < items->n; i++) {
                const tpl_list *kv = tpl_iterate(c, items->v[i]);
                if (kv->n != 2)
                    tpl_fail(c, LPX_ERR_INVALID_ARG,
                             "chat template line %d: %s: items must be pairs", c->line, what);
                tpl_dict_set(c, d.u.d, kv->v[0], kv->v[1]);
            }
        }
    }
    for (size_t k = 0; k < a->nkw; k++) {
        if (t == TV_NS && a->kw[k][0] == '_')
            tpl_fail(c, LPX_ERR_INVALID_ARG,
                     "chat template line %d: namespace attributes cannot start with '_'", c->line);
        tpl_dict_set(c, d.u.d, tv_cstr(c, a->kw[k]), a->kwv[k]);
    }
    return d;
}

tpl_val tpl_call(tpl_ctx *c, tpl_val fn, const tpl_args *a) {
    if (fn.t == TV_METHOD) return call_method(c, fn.u.m, a);
    if (fn.t != TV_FUNC)
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: '%s' object is not callable",
                 c->line, tpl_type_name(fn.t));
    switch (fn.u.fn) {
    case TF_RAISE_EXCEPTION: {
        tpl_buf b = {0};
        if (a->npos) tpl_to_str(c, &b, a->pos[0]);
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template: %s", b.p ? b.p : "");
    }
    case TF_STRFTIME_NOW: {
        if (a->npos != 1 || a->nkw)
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: strftime_now takes 1 argument",
                     c->line);
        const tpl_str *fmt = need_str(c, "strftime_now", a->pos[0]);
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char buf[512];
        size_t n = fmt->n ? strftime(buf, sizeof buf, fmt->p, &tm) : 0;
        if (fmt->n && n == 0)
            tpl_fail(c, LPX_ERR_UNSUPPORTED, "chat template line %d: strftime_now result too long",
                     c->line);
        return tv_str(c, buf, n);
    }
    case TF_NAMESPACE:
        return kwargs_dict(c, TV_NS, a, "namespace()");
    case TF_DICT:
        return kwargs_dict(c, TV_DICT, a, "dict()");
    case TF_RANGE: {
        if (a->nkw || a->npos < 1 || a->npos > 3)
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: range takes 1 to 3 arguments",
                     c->line);
        int64_t start = 0, stop, step = 1;
        if (a->npos == 1) {
            stop = need_int(c, "range", a->pos[0]);
        } else {
            start = need_int(c, "range", a->pos[0]);
            stop = need_int(c, "range", a->pos[1]);
            if (a->npos == 3) step = need_int(c, "range", a->pos[2]);
        }
        if (step == 0)
            tpl_fail(c, LPX_ERR_INVALID_ARG,
                     "chat template line %d: range() arg 3 must not be zero", c->line);
        double count = step > 0 ? ceil(((double)stop - (double)start) / (double)step)
                                : ceil(((double)start - (double)stop) / (double)-step);
        if (count > TPL_MAX_RANGE)
            tpl_fail(c, LPX_ERR_TOO_LONG,
                     "chat template line %d: range too big, maximum size is %d", c->line,
                     TPL_MAX_RANGE);
        tpl_val out = tv_list(c, count > 0 ? (size_t)count : 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            tpl_list_push(c, out.u.l, tv_int(i));
        return out;
    }
    }
    tpl_fail(c, LPX_ERR_INTERNAL, "chat template: unknown function %d", fn.u.fn);
}

/* ---- tests ------------------------------------------------------------------ */

static const char *const test_names[] = {
    "defined",     "undefined", "none",     "boolean", "false",    "true",     "integer",
    "float",       "number",    "string",   "mapping", "iterable", "sequence", "callable",
    "sameas",      "escaped",   "equalto",  "eq",      "==",       "ne",       "!=",
    "lt",          "<",         "lessthan", "le",      "<=",       "gt",       ">",
    "greaterthan", "ge",        ">=",       "in",      "odd",      "even",     "divisibleby",
    "lower",       "upper",     NULL};

bool tpl_test_known(const char *name) {
    for (const char *const *n = test_names; *n; n++)
        if (!strcmp(*n, name)) return true;
    return false;
}

static bool is(const char *a, const char *b) {
    return !strcmp(a, b);
}

bool tpl_test(tpl_ctx *c, const char *name, tpl_val v, const tpl_args *a) {
    const tpl_val *x = arg(a, 0, NULL);
    if (is(name, "defined")) return v.t != TV_UNDEF;
    if (is(name, "undefined")) return v.t == TV_UNDEF;
    if (is(name, "none")) return v.t == TV_NONE;
    if (is(name, "boolean")) return v.t == TV_BOOL;
    if (is(name, "false")) return v.t == TV_BOOL && !v.u.b;
    if (is(name, "true")) return v.t == TV_BOOL && v.u.b;
    if (is(name, "integer")) return v.t == TV_INT;
    if (is(name, "float")) return v.t == TV_FLOAT;
    if (is(name, "number")) return v.t == TV_INT || v.t == TV_FLOAT || v.t == TV_BOOL;
    if (is(name, "string")) return v.t == TV_STR;
    if (is(name, "mapping")) return v.t == TV_DICT;
    if (is(name, "iterable"))
        return v.t == TV_UNDEF || v.t == TV_STR || v.t == TV_LIST || v.t == TV_DICT;
    if (is(name, "sequence"))
        return v.t == TV_UNDEF || v.t == TV_STR || v.t == TV_LIST || v.t == TV_DICT;
    if (is(name, "callable")) return v.t == TV_FUNC || v.t == TV_METHOD || v.t == TV_MACRO;
    if (is(name, "escaped")) return false;
    if (is(name, "lower") || is(name, "upper")) {
        v = tpl_str_of(c, v);
        tpl_val conv = change_case(c, v.u.s, is(name, "lower") ? CASE_LOWER : CASE_UPPER);
        bool any_cased = false;
        for (size_t i = 0; i < v.u.s->n;) {
            size_t k;
            any_cased |= cased(tpl_utf8_next(v.u.s->p + i, v.u.s->n - i, &k));
            i += k;
        }
        return any_cased && tpl_equal(conv, v);
    }
    if (is(name, "odd") || is(name, "even")) { /* value % 2 == 1 / == 0, as jinja2 */
        if (v.t == TV_FLOAT) {
            double m = fmod(v.u.f, 2.0);
            if (m < 0) m += 2.0;
            return is(name, "odd") ? m == 1.0 : m == 0.0;
        }
        int64_t i = need_int(c, name, v);
        return (i % 2 != 0) == is(name, "odd");
    }
    if (!x)
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: test '%s' needs an argument",
                 c->line, name);
    if (is(name, "sameas")) {
        if (v.t != x->t) return false;
        if (v.t == TV_NONE || v.t == TV_UNDEF) return true;
        if (v.t == TV_BOOL) return v.u.b == x->u.b;
        if (v.t == TV_LIST) return v.u.l == x->u.l;
        if (v.t == TV_DICT || v.t == TV_NS) return v.u.d == x->u.d;
        return false;
    }
    if (is(name, "equalto") || is(name, "eq") || is(name, "==")) return tpl_equal(v, *x);
    if (is(name, "ne") || is(name, "!=")) return !tpl_equal(v, *x);
    if (is(name, "lt") || is(name, "<") || is(name, "lessthan")) return tpl_less(c, v, *x);
    if (is(name, "le") || is(name, "<=")) return tpl_less(c, v, *x) || tpl_equal(v, *x);
    if (is(name, "gt") || is(name, ">") || is(name, "greaterthan")) return tpl_less(c, *x, v);
    if (is(name, "ge") || is(name, ">=")) return tpl_less(c, *x, v) || tpl_equal(v, *x);
    if (is(name, "divisibleby")) { /* value % num == 0 */
        if (v.t == TV_FLOAT || x->t == TV_FLOAT) {
            tpl_need_defined(c, v);
            tpl_need_defined(c, *x);
            double fv = v.t == TV_FLOAT ? v.u.f : (double)need_int(c, name, v);
            double fd = x->t == TV_FLOAT ? x->u.f : (double)need_int(c, name, *x);
            if (fd == 0.0)
                tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: float modulo", c->line);
            return fmod(fv, fd) == 0.0;
        }
        int64_t d = need_int(c, name, *x);
        if (d == 0)
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: division by zero", c->line);
        return need_int(c, name, v) % d == 0;
    }
    /* in */
    tpl_val seq = *x;
    if (seq.t == TV_STR) {
        if (v.t != TV_STR) return false;
        return find_sub(seq.u.s->p, seq.u.s->n, v.u.s->p, v.u.s->n) != NULL;
    }
    const tpl_list *items = tpl_iterate(c, seq);
    for (size_t i = 0; i < items->n; i++)
        if (tpl_equal(items->v[i], v)) return true;
    return false;
}

/* ---- filters ---------------------------------------------------------------- */

/* jinja2's attribute getter for selectattr/map/sort/...: dotted paths, item
 * lookup first, digits as integer indices. */
static tpl_val attr_path(tpl_ctx *c, tpl_val v, const tpl_str *path) {
    const char *p = path->p, *end = p + path->n;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        if (!dot) dot = end;
        size_t n = (size_t)(dot - p);
        bool digits = n > 0;
        for (size_t i = 0; i < n; i++)
            digits &= p[i] >= '0' && p[i] <= '9';
        tpl_val key = digits ? tv_int(strtoll(tpl_strndup(c, p, n), NULL, 10)) : tv_str(c, p, n);
        v = tpl_getitem(c, v, key);
        p = dot + 1;
    }
    return v;
}

static int cmp_sort(tpl_ctx *c, tpl_val a, tpl_val b, bool case_sensitive) {
    if (!case_sensitive && a.t == TV_STR && b.t == TV_STR) {
        a = change_case(c, a.u.s, CASE_LOWER);
        b = change_case(c, b.u.s, CASE_LOWER);
    }
    return tpl_less(c, a, b) ? -1 : tpl_less(c, b, a) ? 1 : 0;
}

static tpl_val select_items(tpl_ctx *c, tpl_val seq, const tpl_args *a, bool by_attr, bool keep,
                            const char *what) {
    const tpl_list *items = tpl_iterate(c, seq);
    size_t first = 0;
    const tpl_str *path = NULL;
    if (by_attr) {
        if (a->npos < 1)
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: %s needs an attribute",
                     c->line, what);
        path = need_str(c, what, a->pos[0]);
        first = 1;
    }
    const char *test = NULL;
    if (a->npos > first) test = need_str(c, what, a->pos[first])->p;
    if (test && !tpl_test_known(test))
        tpl_fail(c, LPX_ERR_UNSUPPORTED, "chat template line %d: unsupported construct: test '%s'",
                 c->line, test);
    tpl_args targs = {.pos = a->pos + (test ? first + 1 : first),
                      .npos = a->npos - (test ? first + 1 : first)};
    tpl_val out = tv_list(c, 0);
    for (size_t i = 0; i < items->n; i++) {
        tpl_val v = path ? attr_path(c, items->v[i], path) : items->v[i];
        bool ok = test ? tpl_test(c, test, v, &targs) : tpl_truthy(v);
        if (ok == keep) tpl_list_push(c, out.u.l, items->v[i]);
    }
    return out;
}

static tpl_val indent(tpl_ctx *c, tpl_val s, const tpl_args *a) {
    static const char *const names[] = {"width", "first", "blank", NULL};
    check_args(c, "indent", a, 3, names);
    const tpl_val *w = arg(a, 0, "width"), *first = arg(a, 1, "first"), *blank = arg(a, 2, "blank");
    tpl_buf ind = {0};
    if (w && w->t == TV_STR)
        tpl_buf_put(c, &ind, w->u.s->p, w->u.s->n);
    else
        for (int64_t i = 0, n = w ? need_int(c, "indent", *w) : 4; i < n && i < 4096; i++)
            tpl_buf_puts(c, &ind, " ");
    tpl_buf text = {0};
    tpl_to_str(c, &text, s);
    tpl_buf_puts(c, &text, "\n"); /* as jinja2: makes splitlines see a last empty line */
    const tpl_list *lines = splitlines(c, tpl_buf_val(c, &text).u.s).u.l;
    tpl_buf b = {0};
    for (size_t i = 0; i < lines->n; i++) {
        const tpl_str *ln = lines->v[i].u.s;
        if (i) tpl_buf_puts(c, &b, "\n");
        if (i && (ln->n || (blank && tpl_truthy(*blank))))
            tpl_buf_put(c, &b, ind.p ? ind.p : "", ind.n);
        tpl_buf_put(c, &b, ln->p, ln->n);
    }
    tpl_val rv = tpl_buf_val(c, &b);
    if (first && tpl_truthy(*first)) {
        tpl_buf f = {0};
        tpl_buf_put(c, &f, ind.p ? ind.p : "", ind.n);
        tpl_buf_put(c, &f, rv.u.s->p, rv.u.s->n);
        rv = tpl_buf_val(c, &f);
    }
    return rv;
}

/* jinja2's title filter (not str.title): a word starts after whitespace or
 * one of -([{< ; its first character is upper-cased, the rest lower-cased. */
static tpl_val title_filter(tpl_ctx *c, const tpl_str *s) {
    tpl_buf b = {0};
    bool start = true;
    for (size_t i = 0; i < s->n;) {
        size_t k;
        int32_t cp = tpl_utf8_next(s->p + i, s->n - i, &k);
        bool sep = tpl_is_space(cp) || (cp < 0x80 && strchr("-([{<", (int)cp));
        int32_t out = sep ? cp : start ? utf8proc_toupper(cp) : utf8proc_tolower(cp);
        start = sep;
        char tmp[8];
        tpl_buf_put(c, &b, tmp, tpl_utf8_encode(out, tmp));
        i += k;
    }
    return tpl_buf_val(c, &b);
}

static tpl_val length_of(tpl_ctx *c, tpl_val v) {
    switch (v.t) {
    case TV_UNDEF:
        return tv_int(0);
    case TV_STR:
        return tv_int((int64_t)v.u.s->ncp);
    case TV_LIST:
        return tv_int((int64_t)v.u.l->n);
    case TV_DICT:
        return tv_int((int64_t)v.u.d->n);
    case TV_LOOP:
        return tv_int((int64_t)v.u.loop->items->n);
    default:
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: object of type '%s' has no len()",
                 c->line, tpl_type_name(v.t));
    }
}

tpl_val tpl_filter(tpl_ctx *c, const char *name, tpl_val v, const tpl_args *a) {
    const tpl_val *a0 = arg(a, 0, NULL);
    if (is(name, "length") || is(name, "count")) return length_of(c, v);
    if (is(name, "string")) return tpl_str_of(c, v);
    if (is(name, "safe")) return v;
    if (is(name, "trim")) {
        static const char *const names[] = {"chars", NULL};
        check_args(c, "trim", a, 1, names);
        const tpl_val *chars = arg(a, 0, "chars");
        return strip(c, tpl_str_of(c, v).u.s,
                     chars && chars->t != TV_NONE ? need_str(c, "trim", *chars) : NULL, true, true);
    }
    if (is(name, "upper")) return change_case(c, tpl_str_of(c, v).u.s, CASE_UPPER);
    if (is(name, "lower")) return change_case(c, tpl_str_of(c, v).u.s, CASE_LOWER);
    if (is(name, "title")) return title_filter(c, tpl_str_of(c, v).u.s);
    if (is(name, "capitalize")) return change_case(c, tpl_str_of(c, v).u.s, CASE_CAPITALIZE);
    if (is(name, "default") || is(name, "d")) {
        static const char *const names[] = {"default_value", "boolean", NULL};
        check_args(c, name, a, 2, names);
        const tpl_val *dv = arg(a, 0, "default_value"), *boolean = arg(a, 1, "boolean");
        bool use = v.t == TV_UNDEF || (boolean && tpl_truthy(*boolean) && !tpl_truthy(v));
        return use ? (dv ? *dv : tv_str(c, "", 0)) : v;
    }
    if (is(name, "first") || is(name, "last")) {
        const tpl_list *items = tpl_iterate(c, v);
        if (!items->n) return tv_undef("No first item, sequence was empty.");
        return items->v[is(name, "first") ? 0 : items->n - 1];
    }
    if (is(name, "list")) {
        const tpl_list *items = tpl_iterate(c, v);
        tpl_val out = tv_list(c, items->n);
        for (size_t i = 0; i < items->n; i++)
            tpl_list_push(c, out.u.l, items->v[i]);
        return out;
    }
    if (is(name, "items")) {
        if (v.t == TV_UNDEF) return tv_list(c, 0);
        if (v.t != TV_DICT)
            tpl_fail(c, LPX_ERR_INVALID_ARG,
                     "chat template line %d: items: can only get item pairs from a mapping",
                     c->line);
        tpl_method m = {.self = v, .id = M_ITEMS};
        tpl_args none = {0};
        tpl_val items = call_method(c, &m, &none);
        items.u.l->view = NULL;
        return items;
    }
    if (is(name, "join")) {
        static const char *const names[] = {"d", "attribute", NULL};
        check_args(c, "join", a, 2, names);
        const tpl_val *sep = arg(a, 0, "d"), *attr = arg(a, 1, "attribute");
        const tpl_list *items = tpl_iterate(c, v);
        tpl_buf b = {0};
        for (size_t i = 0; i < items->n; i++) {
            if (i && sep) tpl_to_str(c, &b, *sep);
            tpl_to_str(c, &b,
                       attr ? attr_path(c, items->v[i], need_str(c, "join", *attr)) : items->v[i]);
        }
        return tpl_buf_val(c, &b);
    }
    if (is(name, "replace")) {
        if (!a0 || a->npos < 2)
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: replace needs 2 arguments",
                     c->line);
        const tpl_val *cnt = arg(a, 2, "count");
        return replace(c, tpl_str_of(c, v).u.s, tpl_str_of(c, a->pos[0]).u.s,
                       tpl_str_of(c, a->pos[1]).u.s,
                       cnt && cnt->t != TV_NONE ? need_int(c, "replace", *cnt) : -1);
    }
    if (is(name, "reverse")) {
        if (v.t == TV_STR) {
            const tpl_list *chars = tpl_iterate(c, v);
            tpl_buf b = {0};
            for (size_t i = chars->n; i-- > 0;)
                tpl_buf_put(c, &b, chars->v[i].u.s->p, chars->v[i].u.s->n);
            return tpl_buf_val(c, &b);
        }
        const tpl_list *items = tpl_iterate(c, v);
        tpl_val out = tv_list(c, items->n);
        for (size_t i = items->n; i-- > 0;)
            tpl_list_push(c, out.u.l, items->v[i]);
        return out;
    }
    if (is(name, "selectattr") || is(name, "rejectattr"))
        return select_items(c, v, a, true, name[0] == 's', name);
    if (is(name, "select") || is(name, "reject"))
        return select_items(c, v, a, false, name[0] == 's', name);
    if (is(name, "map")) {
        const tpl_list *items = tpl_iterate(c, v);
        tpl_val out = tv_list(c, items->n);
        const tpl_val *attr = arg(a, a->npos, "attribute"), *dflt = arg(a, a->npos, "default");
        if (attr) {
            for (size_t i = 0; i < items->n; i++) {
                tpl_val x = attr_path(c, items->v[i], need_str(c, "map", *attr));
                tpl_list_push(c, out.u.l, x.t == TV_UNDEF && dflt ? *dflt : x);
            }
            return out;
        }
        if (!a0)
            tpl_fail(c, LPX_ERR_INVALID_ARG,
                     "chat template line %d: map needs a filter or attribute", c->line);
        const char *f = need_str(c, "map", *a0)->p;
        tpl_args rest = {
            .pos = a->pos + 1, .npos = a->npos - 1, .kw = a->kw, .kwv = a->kwv, .nkw = a->nkw};
        for (size_t i = 0; i < items->n; i++)
            tpl_list_push(c, out.u.l, tpl_filter(c, f, items->v[i], &rest));
        return out;
    }
    if (is(name, "unique") || is(name, "sort")) {
        static const char *const names[] = {"reverse", "case_sensitive", "attribute", NULL};
        check_args(c, name, a, is(name, "sort") ? 3 : 2, names);
        bool sort = is(name, "sort");
        const tpl_val *rev = sort ? arg(a, 0, "reverse") : NULL;
        const tpl_val *cs = arg(a, sort ? 1 : 0, "case_sensitive");
        const tpl_val *attr = arg(a, sort ? 2 : 1, "attribute");
        bool case_sensitive = cs && tpl_truthy(*cs), reverse = rev && tpl_truthy(*rev);
        const tpl_list *items = tpl_iterate(c, v);
        tpl_val *keys = tpl_alloc(c, tpl_mul(c, items->n + 1, sizeof *keys));
        for (size_t i = 0; i < items->n; i++)
            keys[i] = attr ? attr_path(c, items->v[i], need_str(c, name, *attr)) : items->v[i];
        tpl_val out = tv_list(c, items->n);
        if (!sort) { /* first occurrence of each key, strings compared without case */
            for (size_t i = 0; i < items->n; i++)
                if (!case_sensitive && keys[i].t == TV_STR)
                    keys[i] = change_case(c, keys[i].u.s, CASE_LOWER);
            for (size_t i = 0; i < items->n; i++) {
                bool seen = false;
                for (size_t j = 0; j < i && !seen; j++)
                    seen = tpl_equal(keys[i], keys[j]);
                if (!seen) tpl_list_push(c, out.u.l, items->v[i]);
                tpl_step(c);
            }
            return out;
        }
        size_t *ord = tpl_alloc(c, tpl_mul(c, items->n + 1, sizeof *ord));
        for (size_t i = 0; i < items->n; i++)
            ord[i] = i;
        for (size_t i = 1; i < items->n; i++) /* stable insertion sort */
            for (size_t j = i; j > 0; j--) {
                int r = cmp_sort(c, keys[ord[j - 1]], keys[ord[j]], case_sensitive);
                if (reverse ? r >= 0 : r <= 0) break;
                size_t t = ord[j];
                ord[j] = ord[j - 1];
                ord[j - 1] = t;
                tpl_step(c);
            }
        for (size_t i = 0; i < items->n; i++)
            tpl_list_push(c, out.u.l, items->v[ord[i]]);
        return out;
    }
    if (is(name, "tojson")) {
        static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys",
                                            NULL};
        check_args(c, "tojson", a, 4, names);
        const tpl_val *ea = arg(a, 0, "ensure_ascii"), *ind = arg(a, 1, "indent"),
                      *sep = arg(a, 2, "separators"), *sk = arg(a, 3, "sort_keys");
        if ((ea && tpl_truthy(*ea)) || (sep && sep->t != TV_NONE))
            tpl_fail(c, LPX_ERR_UNSUPPORTED,
                     "chat template line %d: unsupported construct: tojson with ensure_ascii or "
                     "separators",
                     c->line);
        int indent_n = -1;
        if (ind && ind->t != TV_NONE) {
            int64_t k = need_int(c, "tojson indent", *ind);
            indent_n = k < 0 ? 0 : k > 64 ? 64 : (int)k;
        }
        tpl_buf b = {0};
        tpl_to_json(c, &b, v, indent_n, sk && tpl_truthy(*sk));
        return tpl_buf_val(c, &b);
    }
    if (is(name, "indent")) return indent(c, v, a);
    if (is(name, "abs")) {
        tpl_need_defined(c, v);
        if (v.t == TV_FLOAT) return tv_float(fabs(v.u.f));
        int64_t i = need_int(c, "abs", v);
        if (i == INT64_MIN)
            tpl_fail(c, LPX_ERR_UNSUPPORTED, "chat template line %d: integer beyond 64 bits",
                     c->line);
        return tv_int(i < 0 ? -i : i);
    }
    if (is(name, "int")) {
        tpl_need_defined(c, v);
        tpl_val dflt = a0 ? *a0 : tv_int(0);
        if (v.t == TV_INT) return v;
        if (v.t == TV_BOOL) return tv_int(v.u.b);
        if (v.t == TV_FLOAT)
            return isfinite(v.u.f) && fabs(v.u.f) < 9.2e18 ? tv_int((int64_t)v.u.f) : dflt;
        if (v.t == TV_STR) {
            char *end;
            const char *p = strip(c, v.u.s, NULL, true, true).u.s->p;
            long long k = strtoll(p, &end, 10);
            if (*p && !*end) return tv_int(k);
            double f = strtod(p, &end);
            if (*p && !*end && isfinite(f) && fabs(f) < 9.2e18) return tv_int((int64_t)f);
        }
        return dflt;
    }
    if (is(name, "float")) {
        tpl_need_defined(c, v);
        tpl_val dflt = a0 ? *a0 : tv_float(0.0);
        if (v.t == TV_FLOAT) return v;
        if (v.t == TV_INT || v.t == TV_BOOL) return tv_float(v.t == TV_INT ? (double)v.u.i : v.u.b);
        if (v.t == TV_STR) {
            char *end;
            const char *p = strip(c, v.u.s, NULL, true, true).u.s->p;
            double f = strtod(p, &end);
            if (*p && !*end) return tv_float(f);
        }
        return dflt;
    }
    if (is(name, "sum")) {
        const tpl_list *items = tpl_iterate(c, v);
        const tpl_val *attr = arg(a, a->npos, "attribute"), *start = arg(a, a->npos, "start");
        tpl_val acc = start ? *start : tv_int(0);
        for (size_t i = 0; i < items->n; i++) {
            tpl_val x = attr ? attr_path(c, items->v[i], need_str(c, "sum", *attr)) : items->v[i];
            if (!((acc.t == TV_INT || acc.t == TV_FLOAT || acc.t == TV_BOOL) &&
                  (x.t == TV_INT || x.t == TV_FLOAT || x.t == TV_BOOL)))
                tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: sum of non-numbers",
                         c->line);
            if (acc.t == TV_FLOAT || x.t == TV_FLOAT)
                acc = tv_float(
                    (acc.t == TV_FLOAT ? acc.u.f : (double)(acc.t == TV_INT ? acc.u.i : acc.u.b)) +
                    (x.t == TV_FLOAT ? x.u.f : (double)(x.t == TV_INT ? x.u.i : x.u.b)));
            else {
                int64_t r;
                if (__builtin_add_overflow(acc.t == TV_INT ? acc.u.i : acc.u.b,
                                           x.t == TV_INT ? x.u.i : x.u.b, &r))
                    tpl_fail(c, LPX_ERR_UNSUPPORTED,
                             "chat template line %d: integer beyond 64 bits", c->line);
                acc = tv_int(r);
            }
        }
        return acc;
    }
    tpl_fail(c, LPX_ERR_UNSUPPORTED, "chat template line %d: unsupported construct: filter '%s'",
             c->line, name);
}

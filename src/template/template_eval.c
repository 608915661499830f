/* The interpreter: statements write to the output buffer, expressions
 * evaluate to values, with jinja2's scoping (a for loop iteration is a scope;
 * "if" is not) and its undefined-value rules (printing or testing an undefined
 * value is fine, using it in arithmetic or looking inside it fails). */
#include "template/template_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tpl_step(tpl_ctx *c) {
    if (++c->steps > TPL_MAX_STEPS)
        tpl_fail(c, LPX_ERR_TOO_LONG, "chat template line %d: render exceeds %d evaluation steps",
                 c->line, TPL_MAX_STEPS);
}

void tpl_out(tpl_ctx *c, const char *s, size_t n) {
    size_t need = tpl_add(c, tpl_add(c, c->out_len, n), 1);
    if (need > c->out_max)
        tpl_fail(c, LPX_ERR_TOO_LONG, "chat template: output exceeds %zu bytes", c->out_max);
    if (need > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < need)
            cap = tpl_mul(c, cap, 2);
        if (cap > c->out_max) cap = c->out_max;
        char *p = realloc(c->out, cap);
        if (!p) tpl_fail(c, LPX_ERR_NOMEM, "chat template: out of memory for the output");
        c->out = p;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, s, n);
    c->out_len += n;
    c->out[c->out_len] = '\0';
}

/* ---- scopes ----------------------------------------------------------------- */

tpl_scope *tpl_scope_new(tpl_ctx *c, tpl_scope *parent) {
    tpl_scope *s = tpl_alloc(c, sizeof *s);
    memset(s, 0, sizeof *s);
    s->parent = parent;
    return s;
}

void tpl_scope_set(tpl_ctx *c, tpl_scope *s, const char *name, tpl_val v) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) {
            s->vals[i] = v;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? tpl_mul(c, s->cap, 2) : 8;
        s->names =
            tpl_grow(c, s->names, s->n * sizeof *s->names, tpl_mul(c, cap, sizeof *s->names));
        s->vals = tpl_grow(c, s->vals, s->n * sizeof *s->vals, tpl_mul(c, cap, sizeof *s->vals));
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
}

static tpl_val lookup(tpl_ctx *c, tpl_scope *s, const char *name) {
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (!strcmp(s->names[i], name)) return s->vals[i];
    tpl_val f = tpl_global_func(name);
    if (f.t != TV_UNDEF) return f;
    size_t n = strlen(name) + 32;
    char *why = tpl_alloc(c, n);
    snprintf(why, n, "'%s' is undefined", name);
    return tv_undef(why);
}

/* ---- lookups ---------------------------------------------------------------- */

static tpl_val no_attr(tpl_ctx *c, tpl_val obj, const char *what) {
    const char *tn = obj.t == TV_NONE ? "None" : tpl_type_name(obj.t);
    size_t n = strlen(what) + strlen(tn) + 48;
    char *why = tpl_alloc(c, n);
    snprintf(why, n,
             obj.t == TV_NONE ? "'%s' has no attribute '%s'" : "'%s object' has no attribute '%s'",
             tn, what);
    return tv_undef(why);
}

static tpl_val loop_field(tpl_ctx *c, const tpl_loop *l, const char *name) {
    int64_t n = (int64_t)l->items->n, i = l->i;
    if (!strcmp(name, "index")) return tv_int(i + 1);
    if (!strcmp(name, "index0")) return tv_int(i);
    if (!strcmp(name, "revindex")) return tv_int(n - i);
    if (!strcmp(name, "revindex0")) return tv_int(n - i - 1);
    if (!strcmp(name, "first")) return tv_bool(i == 0);
    if (!strcmp(name, "last")) return tv_bool(i == n - 1);
    if (!strcmp(name, "length")) return tv_int(n);
    if (!strcmp(name, "depth")) return tv_int(1);
    if (!strcmp(name, "depth0")) return tv_int(0);
    if (!strcmp(name, "previtem"))
        return i > 0 ? l->items->v[i - 1] : tv_undef("there is no previous item");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? l->items->v[i + 1] : tv_undef("there is no next item");
    if (!strcmp(name, "cycle") || !strcmp(name, "changed"))
        tpl_fail(c, LPX_ERR_UNSUPPORTED, "chat template line %d: unsupported construct: loop.%s",
                 c->line, name);
    tpl_val lv = {.t = TV_LOOP};
    return no_attr(c, lv, name);
}

tpl_val tpl_getattr(tpl_ctx *c, tpl_val obj, const char *name) {
    tpl_need_defined(c, obj);
    switch (obj.t) {
    case TV_STR:
    case TV_LIST:
    case TV_DICT: {
        tpl_val m = tpl_method_lookup(c, obj, name);
        if (m.t != TV_UNDEF) return m;
        if (obj.t == TV_DICT) {
            tpl_val *v = tpl_dict_get_str(obj.u.d, name);
            if (v) return *v;
        }
        return no_attr(c, obj, name);
    }
    case TV_NS: {
        tpl_val *v = tpl_dict_get_str(obj.u.d, name);
        return v ? *v : no_attr(c, obj, name);
    }
    case TV_LOOP:
        return loop_field(c, obj.u.loop, name);
    default:
        return no_attr(c, obj, name);
    }
}

/* Python's index normalisation: negative counts from the end. */
static bool norm_index(int64_t i, size_t n, size_t *out) {
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

/* Byte offset of code point k in s (k <= s->ncp). */
static size_t cp_offset(const tpl_str *s, size_t k) {
    if (s->n == s->ncp) return k;
    size_t i = 0;
    while (k && i < s->n) {
        i++;
        while (i < s->n && ((unsigned char)s->p[i] & 0xc0) == 0x80)
            i++;
        k--;
    }
    return i;
}

tpl_val tpl_getitem(tpl_ctx *c, tpl_val obj, tpl_val key) {
    tpl_need_defined(c, obj);
    bool int_key = key.t == TV_INT || key.t == TV_BOOL;
    int64_t ki = key.t == TV_INT ? key.u.i : key.t == TV_BOOL ? key.u.b : 0;
    size_t at;
    switch (obj.t) {
    case TV_LIST:
        if (int_key) {
            if (norm_index(ki, obj.u.l->n, &at)) return obj.u.l->v[at];
            return tv_undef("list index out of range");
        }
        break;
    case TV_STR:
        if (int_key) {
            if (!norm_index(ki, obj.u.s->ncp, &at)) return tv_undef("string index out of range");
            size_t a = cp_offset(obj.u.s, at), len;
            tpl_utf8_next(obj.u.s->p + a, obj.u.s->n - a, &len);
            return tv_str(c, obj.u.s->p + a, len);
        }
        break;
    case TV_DICT: {
        tpl_val *v = tpl_dict_get(obj.u.d, key);
        if (v) return *v;
        break;
    }
    case TV_NS:
    case TV_LOOP:
        break;
    default:
        return no_attr(c, obj, "__getitem__");
    }
    /* jinja2 falls back to the attribute of that name. */
    if (key.t == TV_STR) return tpl_getattr(c, obj, key.u.s->p);
    tpl_buf b = {0};
    tpl_repr(c, &b, key);
    return no_attr(c, obj, b.p);
}

const tpl_list *tpl_iterate(tpl_ctx *c, tpl_val v) {
    switch (v.t) {
    case TV_UNDEF:
        return tv_list(c, 0).u.l;
    case TV_LIST:
        return v.u.l;
    case TV_DICT: {
        tpl_val l = tv_list(c, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++)
            tpl_list_push(c, l.u.l, v.u.d->k[i]);
        return l.u.l;
    }
    case TV_STR: {
        tpl_val l = tv_list(c, v.u.s->ncp);
        for (size_t i = 0; i < v.u.s->n;) {
            size_t k;
            tpl_utf8_next(v.u.s->p + i, v.u.s->n - i, &k);
            tpl_list_push(c, l.u.l, tv_str(c, v.u.s->p + i, k));
            i += k;
        }
        return l.u.l;
    }
    default:
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: '%s' object is not iterable",
                 c->line, tpl_type_name(v.t));
    }
}

/* ---- expressions ------------------------------------------------------------ */

static tpl_val eval(tpl_ctx *c, const tpl_expr *e, tpl_scope *s);

static int64_t slice_part(tpl_ctx *c, const tpl_expr *e, tpl_scope *s, bool *given) {
    *given = false;
    if (!e) return 0;
    tpl_val v = eval(c, e, s);
    if (v.t == TV_NONE) return 0;
    if (v.t != TV_INT && v.t != TV_BOOL)
        tpl_fail(c, LPX_ERR_INVALID_ARG,
                 "chat template line %d: slice indices must be integers or None", c->line);
    *given = true;
    return v.t == TV_INT ? v.u.i : v.u.b;
}

/* Python's slice.indices(n) + iteration. */
static tpl_val eval_slice(tpl_ctx *c, const tpl_expr *e, tpl_scope *s) {
    tpl_val obj = eval(c, e->a, s);
    tpl_need_defined(c, obj);
    bool has_start, has_stop, has_step;
    int64_t start = slice_part(c, e->b, s, &has_start);
    int64_t stop = slice_part(c, e->c, s, &has_stop);
    int64_t step = slice_part(c, e->d, s, &has_step);
    if (!has_step) step = 1;
    if (step == 0)
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: slice step cannot be zero",
                 c->line);
    if (step == INT64_MIN) step = -INT64_MAX;
    int64_t n;
    if (obj.t == TV_LIST)
        n = (int64_t)obj.u.l->n;
    else if (obj.t == TV_STR)
        n = (int64_t)obj.u.s->ncp;
    else
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: '%s' object is not subscriptable",
                 c->line, tpl_type_name(obj.t));
    int64_t lo = step < 0 ? -1 : 0, hi = step < 0 ? n - 1 : n;
    if (!has_start)
        start = step < 0 ? hi : lo;
    else {
        if (start < 0) start = start < -n ? lo : start + n;
        if (start > hi) start = hi;
        if (start < lo) start = lo;
    }
    if (!has_stop)
        stop = step < 0 ? lo : hi;
    else {
        if (stop < 0) stop = stop < -n ? lo : stop + n;
        if (stop > hi) stop = hi;
        if (stop < lo) stop = lo;
    }
    if (obj.t == TV_LIST) {
        tpl_val out = tv_list(c, 0);
        out.u.l->tuple = obj.u.l->tuple;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            tpl_list_push(c, out.u.l, obj.u.l->v[i]);
            tpl_step(c);
        }
        return out;
    }
    /* Strings slice by code point: index their starts once. */
    const tpl_str *str = obj.u.s;
    size_t *offs = tpl_alloc(c, tpl_mul(c, (size_t)n + 1, sizeof *offs));
    for (size_t i = 0, k = 0; k <= (size_t)n; k++) {
        offs[k] = i;
        if (i < str->n) {
            i++;
            while (i < str->n && ((unsigned char)str->p[i] & 0xc0) == 0x80)
                i++;
        }
    }
    if (step == 1)
        return tv_str(c, str->p + offs[start], start < stop ? offs[stop] - offs[start] : 0);
    tpl_buf b = {0};
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        tpl_buf_put(c, &b, str->p + offs[i], offs[i + 1] - offs[i]);
        tpl_step(c);
    }
    return tpl_buf_val(c, &b);
}

static bool is_intlike(tpl_val v) {
    return v.t == TV_INT || v.t == TV_BOOL;
}
static bool is_number(tpl_val v) {
    return is_intlike(v) || v.t == TV_FLOAT;
}
static int64_t as_int(tpl_val v) {
    return v.t == TV_INT ? v.u.i : v.u.b;
}
static double as_float(tpl_val v) {
    return v.t == TV_FLOAT ? v.u.f : (double)as_int(v);
}

_Noreturn static void bad_operands(tpl_ctx *c, const char *op, tpl_val a, tpl_val b) {
    tpl_need_defined(c, a);
    tpl_need_defined(c, b);
    if (!strcmp(op, "+") && a.t == TV_STR)
        tpl_fail(c, LPX_ERR_INVALID_ARG,
                 "chat template line %d: can only concatenate str (not \"%s\") to str", c->line,
                 tpl_type_name(b.t));
    tpl_fail(c, LPX_ERR_INVALID_ARG,
             "chat template line %d: unsupported operand type(s) for %s: '%s' and '%s'", c->line,
             op, tpl_type_name(a.t), tpl_type_name(b.t));
}

_Noreturn static void int_overflow(tpl_ctx *c) {
    tpl_fail(c, LPX_ERR_UNSUPPORTED, "chat template line %d: integer beyond 64 bits", c->line);
}

static tpl_val repeat(tpl_ctx *c, tpl_val seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq.t == TV_STR) {
        size_t total = tpl_mul(c, seq.u.s->n, (size_t)times);
        if (total > c->mem_cap) tpl_fail(c, LPX_ERR_NOMEM, "chat template: string too long");
        tpl_buf b = {0};
        for (int64_t i = 0; i < times; i++)
            tpl_buf_put(c, &b, seq.u.s->p, seq.u.s->n);
        return tpl_buf_val(c, &b);
    }
    tpl_val out = tv_list(c, 0);
    out.u.l->tuple = seq.u.l->tuple;
    tpl_mul(c, seq.u.l->n, (size_t)times);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.u.l->n; k++) {
            tpl_list_push(c, out.u.l, seq.u.l->v[k]);
            tpl_step(c);
        }
    return out;
}

static tpl_val arith(tpl_ctx *c, const char *op, tpl_val a, tpl_val b) {
    char o = op[0];
    if (o == '~') {
        tpl_buf buf = {0};
        tpl_to_str(c, &buf, a);
        tpl_to_str(c, &buf, b);
        return tpl_buf_val(c, &buf);
    }
    if (is_number(a) && is_number(b)) {
        bool ints = is_intlike(a) && is_intlike(b);
        int64_t x = ints ? as_int(a) : 0, y = ints ? as_int(b) : 0, r;
        double fx = as_float(a), fy = as_float(b);
        if (!strcmp(op, "+")) {
            if (!ints) return tv_float(fx + fy);
            if (__builtin_add_overflow(x, y, &r)) int_overflow(c);
            return tv_int(r);
        }
        if (!strcmp(op, "-")) {
            if (!ints) return tv_float(fx - fy);
            if (__builtin_sub_overflow(x, y, &r)) int_overflow(c);
            return tv_int(r);
        }
        if (!strcmp(op, "*")) {
            if (!ints) return tv_float(fx * fy);
            if (__builtin_mul_overflow(x, y, &r)) int_overflow(c);
            return tv_int(r);
        }
        if (!strcmp(op, "**")) {
            if (fx == 0.0 && fy < 0)
                tpl_fail(c, LPX_ERR_INVALID_ARG,
                         "chat template line %d: 0 cannot be raised to a negative power", c->line);
            if (!ints || y < 0) return tv_float(pow(fx, fy));
            r = 1;
            for (int64_t i = 0; i < y; i++) {
                if (__builtin_mul_overflow(r, x, &r)) int_overflow(c);
                if (r == 0 || r == 1) break;
                if (r == -1) {
                    r = (y - i - 1) % 2 ? -r : r;
                    break;
                }
            }
            return tv_int(r);
        }
        if ((ints && y == 0) || (!ints && fy == 0.0))
            tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: division by zero", c->line);
        if (!strcmp(op, "/")) return tv_float(fx / fy);
        if (!strcmp(op, "//")) {
            if (!ints) return tv_float(floor(fx / fy));
            if (x == INT64_MIN && y == -1) int_overflow(c);
            int64_t q = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
            return tv_int(q);
        }
        if (!strcmp(op, "%")) {
            if (!ints) {
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
                return tv_float(m);
            }
            if (y == -1) return tv_int(0);
            int64_t m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return tv_int(m);
        }
    }
    if (!strcmp(op, "+")) {
        if (a.t == TV_STR && b.t == TV_STR) {
            tpl_buf buf = {0};
            tpl_buf_put(c, &buf, a.u.s->p, a.u.s->n);
            tpl_buf_put(c, &buf, b.u.s->p, b.u.s->n);
            return tpl_buf_val(c, &buf);
        }
        if (a.t == TV_LIST && b.t == TV_LIST && a.u.l->tuple == b.u.l->tuple) {
            tpl_val out = tv_list(c, tpl_add(c, a.u.l->n, b.u.l->n));
            out.u.l->tuple = a.u.l->tuple;
            for (size_t i = 0; i < a.u.l->n; i++)
                tpl_list_push(c, out.u.l, a.u.l->v[i]);
            for (size_t i = 0; i < b.u.l->n; i++)
                tpl_list_push(c, out.u.l, b.u.l->v[i]);
            return out;
        }
    }
    if (!strcmp(op, "*")) {
        if ((a.t == TV_STR || a.t == TV_LIST) && is_intlike(b)) return repeat(c, a, as_int(b));
        if ((b.t == TV_STR || b.t == TV_LIST) && is_intlike(a)) return repeat(c, b, as_int(a));
    }
    if (!strcmp(op, "%") && a.t == TV_STR)
        tpl_fail(
            c, LPX_ERR_UNSUPPORTED,
            "chat template line %d: unsupported construct: printf-style string formatting (%%)",
            c->line);
    bad_operands(c, op, a, b);
}

static bool contains(tpl_ctx *c, tpl_val hay, tpl_val needle) {
    switch (hay.t) {
    case TV_UNDEF:
        return false;
    case TV_STR:
        if (needle.t != TV_STR) {
            tpl_need_defined(c, needle);
            tpl_fail(c, LPX_ERR_INVALID_ARG,
                     "chat template line %d: 'in <string>' requires string as left operand, not %s",
                     c->line, tpl_type_name(needle.t));
        }
        if (needle.u.s->n == 0) return true;
        if (needle.u.s->n > hay.u.s->n) return false;
        for (size_t i = 0; i + needle.u.s->n <= hay.u.s->n; i++)
            if (!memcmp(hay.u.s->p + i, needle.u.s->p, needle.u.s->n)) return true;
        return false;
    case TV_LIST:
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (tpl_equal(hay.u.l->v[i], needle)) return true;
        return false;
    case TV_DICT:
        return tpl_dict_get(hay.u.d, needle) != NULL;
    default:
        tpl_fail(c, LPX_ERR_INVALID_ARG,
                 "chat template line %d: argument of type '%s' is not iterable", c->line,
                 tpl_type_name(hay.t));
    }
}

static bool compare(tpl_ctx *c, const char *op, tpl_val a, tpl_val b) {
    if (!strcmp(op, "==")) return tpl_equal(a, b);
    if (!strcmp(op, "!=")) return !tpl_equal(a, b);
    if (!strcmp(op, "<")) return tpl_less(c, a, b);
    if (!strcmp(op, ">")) return tpl_less(c, b, a);
    if (!strcmp(op, "<=")) return tpl_less(c, a, b) || tpl_equal(a, b);
    if (!strcmp(op, ">=")) return tpl_less(c, b, a) || tpl_equal(a, b);
    if (!strcmp(op, "in")) return contains(c, b, a);
    return !contains(c, b, a); /* not in */
}

/* Evaluated arguments of a call, filter or test (args[first..]). */
static tpl_args eval_args(tpl_ctx *c, const tpl_expr *e, tpl_scope *s) {
    tpl_args a = {0};
    size_t n = e->nargs;
    tpl_val *pos = tpl_alloc(c, tpl_mul(c, n + 1, sizeof *pos));
    tpl_val *kwv = tpl_alloc(c, tpl_mul(c, n + 1, sizeof *kwv));
    const char **kw = tpl_alloc(c, tpl_mul(c, n + 1, sizeof *kw));
    for (size_t i = 0; i < n; i++) {
        tpl_val v = eval(c, e->args[i], s);
        if (e->kw[i]) {
            kw[a.nkw] = e->kw[i];
            kwv[a.nkw++] = v;
        } else {
            if (a.nkw)
                tpl_fail(c, LPX_ERR_INVALID_ARG,
                         "chat template line %d: positional argument follows keyword argument",
                         e->line);
            pos[a.npos++] = v;
        }
    }
    a.pos = pos;
    a.kw = kw;
    a.kwv = kwv;
    return a;
}

static tpl_val capture(tpl_ctx *c, const tpl_body *body, tpl_scope *s);

/* A macro call renders its body, in a scope under the one it was defined in,
 * to a string. */
static tpl_val call_macro(tpl_ctx *c, const tpl_macro *m, const tpl_args *a) {
    const tpl_stmt *def = m->def;
    if (a->npos > def->nparams)
        tpl_fail(c, LPX_ERR_INVALID_ARG,
                 "chat template line %d: macro '%s' takes not more than %zu argument(s)", c->line,
                 def->text, def->nparams);
    for (size_t k = 0; k < a->nkw; k++) {
        bool known = false;
        for (size_t i = 0; i < def->nparams; i++)
            known |= !strcmp(def->params[i], a->kw[k]);
        if (!known)
            tpl_fail(c, LPX_ERR_UNSUPPORTED,
                     "chat template line %d: unsupported construct: macro '%s' called with "
                     "unknown keyword argument '%s'",
                     c->line, def->text, a->kw[k]);
    }
    tpl_scope *ms = tpl_scope_new(c, m->scope);
    for (size_t i = 0; i < def->nparams; i++) {
        const tpl_val *given = i < a->npos ? &a->pos[i] : NULL;
        for (size_t k = 0; k < a->nkw && !given; k++)
            if (!strcmp(def->params[i], a->kw[k])) given = &a->kwv[k];
        tpl_val v;
        if (given) {
            v = *given;
        } else if (def->args[i]) {
            v = eval(c, def->args[i], ms);
        } else {
            size_t n = strlen(def->params[i]) + 32;
            char *why = tpl_alloc(c, n);
            snprintf(why, n, "'%s' is undefined", def->params[i]);
            v = tv_undef(why);
        }
        tpl_scope_set(c, ms, def->params[i], v);
    }
    int line = c->line;
    tpl_val r = capture(c, &def->body, ms);
    c->line = line;
    return r;
}

static tpl_val eval(tpl_ctx *c, const tpl_expr *e, tpl_scope *s) {
    tpl_step(c);
    if (++c->depth > TPL_MAX_DEPTH * 4)
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: evaluation nested too deeply",
                 e->line);
    int saved_line = c->line;
    c->line = e->line;
    tpl_val r;
    switch (e->kind) {
    case TE_LIT:
        r = e->lit;
        break;
    case TE_NAME:
        r = lookup(c, s, e->name);
        break;
    case TE_LIST:
    case TE_TUPLE:
        r = tv_list(c, e->nargs);
        r.u.l->tuple = e->kind == TE_TUPLE;
        for (size_t i = 0; i < e->nargs; i++)
            tpl_list_push(c, r.u.l, eval(c, e->args[i], s));
        break;
    case TE_DICT:
        r = tv_dict(c, TV_DICT);
        for (size_t i = 0; i + 1 < e->nargs; i += 2) {
            tpl_val k = eval(c, e->args[i], s);
            if (k.t == TV_LIST && !k.u.l->tuple)
                tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template line %d: unhashable type: 'list'",
                         e->line);
            tpl_dict_set(c, r.u.d, k, eval(c, e->args[i + 1], s));
        }
        break;
    case TE_ATTR:
        r = tpl_getattr(c, eval(c, e->a, s), e->name);
        break;
    case TE_ITEM: {
        tpl_val obj = eval(c, e->a, s);
        r = tpl_getitem(c, obj, eval(c, e->b, s));
        break;
    }
    case TE_SLICE:
        r = eval_slice(c, e, s);
        break;
    case TE_CALL: {
        tpl_val fn = eval(c, e->a, s);
        tpl_need_defined(c, fn);
        tpl_args a = eval_args(c, e, s);
        c->line = e->line;
        r = fn.t == TV_MACRO ? call_macro(c, fn.u.macro, &a) : tpl_call(c, fn, &a);
        break;
    }
    case TE_FILTER: {
        tpl_val v = eval(c, e->a, s);
        tpl_args a = eval_args(c, e, s);
        c->line = e->line;
        r = tpl_filter(c, e->name, v, &a);
        break;
    }
    case TE_TEST: {
        if (!tpl_test_known(e->name))
            tpl_fail(c, LPX_ERR_UNSUPPORTED,
                     "chat template line %d: unsupported construct: test '%s'", e->line, e->name);
        tpl_val v = eval(c, e->a, s);
        tpl_args a = eval_args(c, e, s);
        c->line = e->line;
        r = tv_bool(tpl_test(c, e->name, v, &a) != e->negate);
        break;
    }
    case TE_NOT:
        r = tv_bool(!tpl_truthy(eval(c, e->a, s)));
        break;
    case TE_NEG:
    case TE_POS: {
        tpl_val v = eval(c, e->a, s);
        tpl_need_defined(c, v);
        if (!is_number(v))
            tpl_fail(c, LPX_ERR_INVALID_ARG,
                     "chat template line %d: bad operand type for unary %c: '%s'", e->line,
                     e->kind == TE_NEG ? '-' : '+', tpl_type_name(v.t));
        if (e->kind == TE_POS)
            r = v.t == TV_BOOL ? tv_int(v.u.b) : v;
        else if (v.t == TV_FLOAT)
            r = tv_float(-v.u.f);
        else {
            if (as_int(v) == INT64_MIN) int_overflow(c);
            r = tv_int(-as_int(v));
        }
        break;
    }
    case TE_BINOP: {
        tpl_val a = eval(c, e->a, s);
        tpl_val b = eval(c, e->b, s);
        c->line = e->line;
        r = arith(c, e->name, a, b);
        break;
    }
    case TE_AND: {
        r = eval(c, e->a, s);
        if (tpl_truthy(r)) r = eval(c, e->b, s);
        break;
    }
    case TE_OR: {
        r = eval(c, e->a, s);
        if (!tpl_truthy(r)) r = eval(c, e->b, s);
        break;
    }
    case TE_COMPARE: {
        tpl_val left = eval(c, e->a, s);
        r = tv_bool(true);
        for (size_t i = 0; i < e->nargs; i++) {
            tpl_val right = eval(c, e->args[i], s);
            c->line = e->line;
            if (!compare(c, e->ops[i], left, right)) {
                r = tv_bool(false);
                break;
            }
            left = right;
        }
        break;
    }
    case TE_COND:
        if (tpl_truthy(eval(c, e->a, s)))
            r = eval(c, e->b, s);
        else
            r = e->c ? eval(c, e->c, s) : tv_undef("the condition was false and there is no else");
        break;
    default:
        tpl_fail(c, LPX_ERR_INTERNAL, "chat template: unknown expression kind %d", e->kind);
    }
    c->line = saved_line;
    c->depth--;
    return r;
}

/* ---- statements ------------------------------------------------------------- */

static void assign(tpl_ctx *c, const tpl_expr *target, tpl_val v, tpl_scope *s) {
    if (target->kind == TE_NAME) {
        tpl_scope_set(c, s, target->name, v);
        return;
    }
    if (target->kind == TE_ATTR) {
        tpl_val ns = lookup(c, s, target->a->name);
        if (ns.t != TV_NS)
            tpl_fail(c, LPX_ERR_INVALID_ARG,
                     "chat template line %d: cannot assign attribute on non-namespace object",
                     target->line);
        tpl_dict_set(c, ns.u.d, tv_cstr(c, target->name), v);
        return;
    }
    /* Tuple unpacking. */
    const tpl_list *items = tpl_iterate(c, v);
    if (items->n != target->nargs)
        tpl_fail(c, LPX_ERR_INVALID_ARG,
                 "chat template line %d: cannot unpack %zu values into %zu names", target->line,
                 items->n, target->nargs);
    for (size_t i = 0; i < items->n; i++)
        tpl_scope_set(c, s, target->args[i]->name, items->v[i]);
}

static void exec_for(tpl_ctx *c, const tpl_stmt *st, tpl_scope *s) {
    const tpl_list *items = tpl_iterate(c, eval(c, st->e, s));
    if (st->filter) {
        tpl_val kept = tv_list(c, 0);
        for (size_t i = 0; i < items->n; i++) {
            tpl_scope *fs = tpl_scope_new(c, s);
            assign(c, st->target, items->v[i], fs);
            if (tpl_truthy(eval(c, st->filter, fs))) tpl_list_push(c, kept.u.l, items->v[i]);
        }
        items = kept.u.l;
    }
    if (items->n == 0) {
        tpl_exec(c, &st->orelse, s);
        return;
    }
    tpl_loop *loop = tpl_alloc(c, sizeof *loop);
    loop->items = items;
    tpl_val lv = {.t = TV_LOOP, .u.loop = loop};
    for (size_t i = 0; i < items->n; i++) {
        tpl_step(c);
        loop->i = (int64_t)i;
        tpl_scope *it = tpl_scope_new(c, s);
        tpl_scope_set(c, it, "loop", lv);
        assign(c, st->target, items->v[i], it);
        tpl_exec(c, &st->body, it);
        if (c->jump == TPL_JUMP_BREAK) {
            c->jump = TPL_JUMP_NONE;
            break;
        }
        c->jump = TPL_JUMP_NONE;
    }
}

/* Runs body and returns what it printed instead of printing it. */
static tpl_val capture(tpl_ctx *c, const tpl_body *body, tpl_scope *s) {
    size_t mark = c->out_len;
    tpl_exec(c, body, s);
    tpl_val v = tv_str(c, c->out ? c->out + mark : "", c->out_len - mark);
    c->out_len = mark;
    if (c->out) c->out[mark] = '\0';
    return v;
}

void tpl_exec(tpl_ctx *c, const tpl_body *body, tpl_scope *s) {
    if (++c->depth > TPL_MAX_DEPTH * 4)
        tpl_fail(c, LPX_ERR_INVALID_ARG, "chat template: statements nested too deeply");
    for (size_t k = 0; k < body->n && c->jump == TPL_JUMP_NONE; k++) {
        const tpl_stmt *st = body->v[k];
        c->line = st->line;
        tpl_step(c);
        switch (st->kind) {
        case TS_TEXT:
            tpl_out(c, st->text, st->len);
            break;
        case TS_PRINT: {
            tpl_val v = eval(c, st->e, s);
            c->line = st->line;
            if (v.t == TV_STR) {
                tpl_out(c, v.u.s->p, v.u.s->n);
            } else {
                tpl_buf b = {0};
                tpl_to_str(c, &b, v);
                tpl_out(c, b.p ? b.p : "", b.n);
            }
            break;
        }
        case TS_IF:
            if (tpl_truthy(eval(c, st->e, s)))
                tpl_exec(c, &st->body, s);
            else
                tpl_exec(c, &st->orelse, s);
            break;
        case TS_FOR:
            exec_for(c, st, s);
            break;
        case TS_SET:
            assign(c, st->target, eval(c, st->e, s), s);
            break;
        case TS_SETBLOCK:
            st->filter->lit = capture(c, &st->body, s);
            assign(c, st->target, eval(c, st->e, s), s);
            break;
        case TS_MACRO: {
            tpl_macro *m = tpl_alloc(c, sizeof *m);
            m->def = st;
            m->scope = s;
            tpl_val v = {.t = TV_MACRO, .u.macro = m};
            tpl_scope_set(c, s, st->text, v);
            break;
        }
        case TS_BREAK:
            c->jump = TPL_JUMP_BREAK;
            break;
        case TS_CONTINUE:
            c->jump = TPL_JUMP_CONTINUE;
            break;
        case TS_BLOCK:
            tpl_exec(c, &st->body, s);
            break;
        }
    }
    c->depth--;
}

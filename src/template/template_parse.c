/* Tokens -> statement and expression trees, following jinja2's grammar and
 * operator precedence (filters and tests bind tighter than any binary
 * operator; "not" looser than comparisons; ** is left-associative). */
#include "template/template_int.h"

#include <string.h>

typedef struct parser {
    tpl_ctx *c;
    const tpl_tok *t;
    size_t i, n;
    int loops; /* enclosing for loops, for break/continue */
} parser;

static const tpl_tok *cur(parser *P) {
    return &P->t[P->i];
}
static const tpl_tok *peek(parser *P, size_t k) {
    return P->i + k < P->n ? &P->t[P->i + k] : &P->t[P->n - 1];
}
static void next(parser *P) {
    if (P->i + 1 < P->n) P->i++;
}
static bool tok_is_op(const tpl_tok *t, const char *op) {
    return t->type == TK_OP && !strcmp(t->text, op);
}
static bool tok_is_name(const tpl_tok *t, const char *name) {
    return t->type == TK_NAME && !strcmp(t->text, name);
}
static bool is_op(parser *P, const char *op) {
    return tok_is_op(cur(P), op);
}
static bool is_name(parser *P, const char *name) {
    return tok_is_name(cur(P), name);
}

static const char *tok_desc(const tpl_tok *t) {
    switch (t->type) {
    case TK_TEXT:
        return "template text";
    case TK_VAR_BEGIN:
        return "'{{'";
    case TK_VAR_END:
        return "'}}'";
    case TK_BLOCK_BEGIN:
        return "'{%'";
    case TK_BLOCK_END:
        return "'%}'";
    case TK_STRING:
        return "a string";
    case TK_INT:
    case TK_FLOAT:
        return "a number";
    case TK_EOF:
        return "end of template";
    default:
        return t->text;
    }
}

_Noreturn static void unexpected(parser *P, const char *wanted) {
    tpl_fail(P->c, LPX_ERR_INVALID_ARG, "chat template line %d: expected %s, found %s",
             cur(P)->line, wanted, tok_desc(cur(P)));
}

static void expect_op(parser *P, const char *op) {
    if (!is_op(P, op)) {
        char w[16];
        w[0] = '\'';
        strncpy(w + 1, op, 8);
        w[9] = '\0';
        strcat(w, "'");
        unexpected(P, w);
    }
    next(P);
}

static void expect(parser *P, tpl_tok_type t, const char *what) {
    if (cur(P)->type != t) unexpected(P, what);
    next(P);
}

static void enter(parser *P) {
    if (++P->c->depth > TPL_MAX_DEPTH)
        tpl_fail(P->c, LPX_ERR_INVALID_ARG, "chat template line %d: nested too deeply (over %d)",
                 cur(P)->line, TPL_MAX_DEPTH);
}
static void leave(parser *P) {
    P->c->depth--;
}

static tpl_expr *node(parser *P, tpl_expr_kind k, int line) {
    tpl_expr *e = tpl_alloc(P->c, sizeof *e);
    memset(e, 0, sizeof *e);
    e->kind = k;
    e->line = line;
    return e;
}

typedef struct exprs {
    tpl_expr **v;
    const char **kw;
    size_t n, cap;
} exprs;

static void push(parser *P, exprs *x, tpl_expr *e, const char *kw) {
    if (x->n == x->cap) {
        size_t cap = x->cap ? tpl_mul(P->c, x->cap, 2) : 4;
        x->v = tpl_grow(P->c, x->v, x->n * sizeof *x->v, tpl_mul(P->c, cap, sizeof *x->v));
        x->kw = tpl_grow(P->c, x->kw, x->n * sizeof *x->kw, tpl_mul(P->c, cap, sizeof *x->kw));
        x->cap = cap;
    }
    x->v[x->n] = e;
    x->kw[x->n++] = kw;
}

static void set_args(tpl_expr *e, const exprs *x) {
    e->args = x->v;
    e->kw = x->kw;
    e->nargs = x->n;
}

static tpl_expr *parse_expr(parser *P, bool with_cond);
static tpl_expr *parse_unary(parser *P, bool with_filter);
static tpl_expr *parse_primary(parser *P);
static tpl_expr *parse_postfix(parser *P, tpl_expr *e);

static tpl_expr *binop(parser *P, const char *op, tpl_expr *a, tpl_expr *b, int line) {
    tpl_expr *e = node(P, TE_BINOP, line);
    e->name = op;
    e->a = a;
    e->b = b;
    return e;
}

/* A comma-separated sequence that is a tuple when it has a comma. end_name
 * is a keyword that ends it too ("in" for a for target). */
static tpl_expr *parse_tuple(parser *P, bool simplified, bool with_cond, const char *end_name,
                             bool explicit_parens) {
    int line = cur(P)->line;
    exprs x = {0};
    bool is_tuple = false;
    for (;;) {
        if (x.n) expect_op(P, ",");
        const tpl_tok *t = cur(P);
        if (t->type == TK_VAR_END || t->type == TK_BLOCK_END || tok_is_op(t, ")") ||
            (end_name && tok_is_name(t, end_name)))
            break;
        push(P, &x, simplified ? parse_primary(P) : parse_expr(P, with_cond), NULL);
        if (is_op(P, ","))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        if (x.n) return x.v[0];
        if (!explicit_parens) unexpected(P, "an expression");
    }
    tpl_expr *e = node(P, TE_TUPLE, line);
    set_args(e, &x);
    return e;
}

static void parse_call_args(parser *P, exprs *x) {
    expect_op(P, "(");
    while (!is_op(P, ")")) {
        if (x->n) {
            expect_op(P, ",");
            if (is_op(P, ")")) break;
        }
        if (is_op(P, "*") || is_op(P, "**"))
            tpl_fail(P->c, LPX_ERR_UNSUPPORTED,
                     "chat template line %d: unsupported construct: *args / **kwargs in a call",
                     cur(P)->line);
        if (cur(P)->type == TK_NAME && tok_is_op(peek(P, 1), "=")) {
            const char *kw = cur(P)->text;
            next(P);
            next(P);
            push(P, x, parse_expr(P, true), kw);
        } else {
            push(P, x, parse_expr(P, true), NULL);
        }
    }
    next(P);
}

static tpl_expr *parse_list(parser *P) {
    tpl_expr *e = node(P, TE_LIST, cur(P)->line);
    exprs x = {0};
    expect_op(P, "[");
    while (!is_op(P, "]")) {
        if (x.n) {
            expect_op(P, ",");
            if (is_op(P, "]")) break;
        }
        push(P, &x, parse_expr(P, true), NULL);
    }
    next(P);
    set_args(e, &x);
    return e;
}

static tpl_expr *parse_dict(parser *P) {
    tpl_expr *e = node(P, TE_DICT, cur(P)->line);
    exprs x = {0};
    expect_op(P, "{");
    while (!is_op(P, "}")) {
        if (x.n) {
            expect_op(P, ",");
            if (is_op(P, "}")) break;
        }
        push(P, &x, parse_expr(P, true), NULL);
        expect_op(P, ":");
        push(P, &x, parse_expr(P, true), NULL);
    }
    next(P);
    set_args(e, &x);
    return e;
}

static tpl_expr *parse_primary(parser *P) {
    enter(P);
    const tpl_tok *t = cur(P);
    tpl_expr *e;
    if (t->type == TK_NAME) {
        const char *s = t->text;
        if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "false") ||
            !strcmp(s, "False")) {
            e = node(P, TE_LIT, t->line);
            e->lit = tv_bool(s[0] == 't' || s[0] == 'T');
        } else if (!strcmp(s, "none") || !strcmp(s, "None")) {
            e = node(P, TE_LIT, t->line);
            e->lit = tv_none();
        } else {
            e = node(P, TE_NAME, t->line);
            e->name = s;
        }
        next(P);
    } else if (t->type == TK_STRING) {
        /* Adjacent string literals concatenate. */
        tpl_buf b = {0};
        e = node(P, TE_LIT, t->line);
        while (cur(P)->type == TK_STRING) {
            tpl_buf_put(P->c, &b, cur(P)->text, cur(P)->len);
            next(P);
        }
        e->lit = tpl_buf_val(P->c, &b);
    } else if (t->type == TK_INT || t->type == TK_FLOAT) {
        e = node(P, TE_LIT, t->line);
        e->lit = t->type == TK_INT ? tv_int(t->i) : tv_float(t->f);
        next(P);
    } else if (tok_is_op(t, "(")) {
        next(P);
        e = parse_tuple(P, false, true, NULL, true);
        expect_op(P, ")");
    } else if (tok_is_op(t, "[")) {
        e = parse_list(P);
    } else if (tok_is_op(t, "{")) {
        e = parse_dict(P);
    } else {
        unexpected(P, "an expression");
    }
    leave(P);
    return e;
}

/* One part of a subscript: an index, or a slice with optional parts. */
static tpl_expr *parse_subscribed(parser *P) {
    int line = cur(P)->line;
    tpl_expr *parts[3] = {NULL, NULL, NULL};
    if (is_op(P, ":")) {
        next(P);
    } else {
        tpl_expr *e = parse_expr(P, true);
        if (!is_op(P, ":")) return e;
        next(P);
        parts[0] = e;
    }
    if (!is_op(P, ":") && !is_op(P, "]") && !is_op(P, ",")) parts[1] = parse_expr(P, true);
    if (is_op(P, ":")) {
        next(P);
        if (!is_op(P, "]") && !is_op(P, ",")) parts[2] = parse_expr(P, true);
    }
    tpl_expr *s = node(P, TE_SLICE, line);
    s->b = parts[0];
    s->c = parts[1];
    s->d = parts[2];
    return s;
}

static tpl_expr *parse_subscript(parser *P, tpl_expr *obj) {
    const tpl_tok *t = cur(P);
    if (tok_is_op(t, ".")) {
        next(P);
        const tpl_tok *a = cur(P);
        if (a->type == TK_NAME) {
            tpl_expr *e = node(P, TE_ATTR, a->line);
            e->a = obj;
            e->name = a->text;
            next(P);
            return e;
        }
        if (a->type == TK_INT) {
            tpl_expr *e = node(P, TE_ITEM, a->line);
            e->a = obj;
            e->b = node(P, TE_LIT, a->line);
            e->b->lit = tv_int(a->i);
            next(P);
            return e;
        }
        unexpected(P, "an attribute name");
    }
    next(P); /* [ */
    exprs x = {0};
    while (!is_op(P, "]")) {
        if (x.n) {
            expect_op(P, ",");
            if (is_op(P, "]")) break;
        }
        push(P, &x, parse_subscribed(P), NULL);
    }
    next(P);
    if (x.n == 0) unexpected(P, "a subscript");
    tpl_expr *key = x.v[0];
    if (x.n > 1) {
        for (size_t i = 0; i < x.n; i++)
            if (x.v[i]->kind == TE_SLICE)
                tpl_fail(P->c, LPX_ERR_UNSUPPORTED,
                         "chat template line %d: unsupported construct: slice in a tuple subscript",
                         t->line);
        key = node(P, TE_TUPLE, t->line);
        set_args(key, &x);
    }
    if (key->kind == TE_SLICE) {
        key->a = obj;
        return key;
    }
    tpl_expr *e = node(P, TE_ITEM, t->line);
    e->a = obj;
    e->b = key;
    return e;
}

static tpl_expr *parse_call(parser *P, tpl_expr *fn) {
    tpl_expr *e = node(P, TE_CALL, cur(P)->line);
    exprs x = {0};
    parse_call_args(P, &x);
    e->a = fn;
    set_args(e, &x);
    return e;
}

static tpl_expr *parse_postfix(parser *P, tpl_expr *e) {
    for (;;) {
        if (is_op(P, ".") || is_op(P, "["))
            e = parse_subscript(P, e);
        else if (is_op(P, "("))
            e = parse_call(P, e);
        else
            return e;
    }
}

/* A filter or test name; jinja2 allows dotted names. */
static const char *parse_dotted_name(parser *P) {
    if (cur(P)->type != TK_NAME) unexpected(P, "a name");
    tpl_buf b = {0};
    tpl_buf_puts(P->c, &b, cur(P)->text);
    next(P);
    while (is_op(P, ".") && peek(P, 1)->type == TK_NAME) {
        next(P);
        tpl_buf_puts(P->c, &b, ".");
        tpl_buf_puts(P->c, &b, cur(P)->text);
        next(P);
    }
    return b.p;
}

static tpl_expr *parse_filter_expr(parser *P, tpl_expr *e) {
    for (;;) {
        const tpl_tok *t = cur(P);
        if (tok_is_op(t, "|")) {
            next(P);
            tpl_expr *f = node(P, TE_FILTER, t->line);
            f->a = e;
            f->name = parse_dotted_name(P);
            if (is_op(P, "(")) {
                exprs x = {0};
                parse_call_args(P, &x);
                set_args(f, &x);
            }
            e = f;
        } else if (tok_is_name(t, "is")) {
            next(P);
            tpl_expr *f = node(P, TE_TEST, t->line);
            f->a = e;
            if (is_name(P, "not")) {
                f->negate = true;
                next(P);
            }
            f->name = parse_dotted_name(P);
            const tpl_tok *a = cur(P);
            exprs x = {0};
            if (tok_is_op(a, "(")) {
                parse_call_args(P, &x);
            } else if ((a->type == TK_NAME || a->type == TK_STRING || a->type == TK_INT ||
                        a->type == TK_FLOAT || tok_is_op(a, "[") || tok_is_op(a, "{")) &&
                       !tok_is_name(a, "else") && !tok_is_name(a, "or") && !tok_is_name(a, "and")) {
                if (tok_is_name(a, "is"))
                    tpl_fail(P->c, LPX_ERR_INVALID_ARG,
                             "chat template line %d: cannot chain multiple tests with is", a->line);
                push(P, &x, parse_postfix(P, parse_primary(P)), NULL);
            }
            set_args(f, &x);
            e = f;
        } else if (tok_is_op(t, "(")) {
            e = parse_call(P, e);
        } else {
            return e;
        }
    }
}

static tpl_expr *parse_unary(parser *P, bool with_filter) {
    enter(P);
    const tpl_tok *t = cur(P);
    tpl_expr *e;
    if (tok_is_op(t, "-") || tok_is_op(t, "+")) {
        next(P);
        e = node(P, t->text[0] == '-' ? TE_NEG : TE_POS, t->line);
        e->a = parse_unary(P, false);
    } else {
        e = parse_primary(P);
    }
    e = parse_postfix(P, e);
    if (with_filter) e = parse_filter_expr(P, e);
    leave(P);
    return e;
}

static tpl_expr *parse_pow(parser *P) {
    tpl_expr *e = parse_unary(P, true);
    while (is_op(P, "**")) {
        int line = cur(P)->line;
        next(P);
        e = binop(P, "**", e, parse_unary(P, true), line);
    }
    return e;
}

static tpl_expr *parse_math2(parser *P) {
    tpl_expr *e = parse_pow(P);
    while (is_op(P, "*") || is_op(P, "/") || is_op(P, "//") || is_op(P, "%")) {
        const tpl_tok *t = cur(P);
        next(P);
        e = binop(P, t->text, e, parse_pow(P), t->line);
    }
    return e;
}

static tpl_expr *parse_concat(parser *P) {
    tpl_expr *e = parse_math2(P);
    while (is_op(P, "~")) {
        int line = cur(P)->line;
        next(P);
        e = binop(P, "~", e, parse_math2(P), line);
    }
    return e;
}

static tpl_expr *parse_math1(parser *P) {
    tpl_expr *e = parse_concat(P);
    while (is_op(P, "+") || is_op(P, "-")) {
        const tpl_tok *t = cur(P);
        next(P);
        e = binop(P, t->text, e, parse_concat(P), t->line);
    }
    return e;
}

static tpl_expr *parse_compare(parser *P) {
    int line = cur(P)->line;
    tpl_expr *first = parse_math1(P);
    exprs x = {0};
    for (;;) {
        const tpl_tok *t = cur(P);
        const char *op = NULL;
        if (t->type == TK_OP &&
            (!strcmp(t->text, "==") || !strcmp(t->text, "!=") || !strcmp(t->text, "<") ||
             !strcmp(t->text, "<=") || !strcmp(t->text, ">") || !strcmp(t->text, ">="))) {
            op = t->text;
            next(P);
        } else if (tok_is_name(t, "in")) {
            op = "in";
            next(P);
        } else if (tok_is_name(t, "not") && tok_is_name(peek(P, 1), "in")) {
            op = "not in";
            next(P);
            next(P);
        } else {
            break;
        }
        push(P, &x, parse_math1(P), op); /* the operator rides in the keyword slot */
    }
    if (!x.n) return first;
    tpl_expr *e = node(P, TE_COMPARE, line);
    e->a = first;
    e->args = x.v;
    e->ops = x.kw;
    e->nargs = x.n;
    return e;
}

static tpl_expr *parse_not(parser *P) {
    if (is_name(P, "not")) {
        enter(P);
        tpl_expr *e = node(P, TE_NOT, cur(P)->line);
        next(P);
        e->a = parse_not(P);
        leave(P);
        return e;
    }
    return parse_compare(P);
}

static tpl_expr *parse_and(parser *P) {
    tpl_expr *e = parse_not(P);
    while (is_name(P, "and")) {
        tpl_expr *n = node(P, TE_AND, cur(P)->line);
        next(P);
        n->a = e;
        n->b = parse_not(P);
        e = n;
    }
    return e;
}

static tpl_expr *parse_or(parser *P) {
    tpl_expr *e = parse_and(P);
    while (is_name(P, "or")) {
        tpl_expr *n = node(P, TE_OR, cur(P)->line);
        next(P);
        n->a = e;
        n->b = parse_and(P);
        e = n;
    }
    return e;
}

static tpl_expr *parse_expr(parser *P, bool with_cond) {
    enter(P);
    tpl_expr *e = parse_or(P);
    while (with_cond && is_name(P, "if")) {
        tpl_expr *n = node(P, TE_COND, cur(P)->line);
        next(P);
        n->a = parse_or(P);
        n->b = e;
        if (is_name(P, "else")) {
            next(P);
            n->c = parse_expr(P, true);
        }
        e = n;
    }
    leave(P);
    return e;
}

/* ---- statements ------------------------------------------------------------- */

static void body_push(parser *P, tpl_body *b, tpl_stmt *s) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? tpl_mul(P->c, b->cap, 2) : 8;
        b->v = tpl_grow(P->c, b->v, b->n * sizeof *b->v, tpl_mul(P->c, cap, sizeof *b->v));
        b->cap = cap;
    }
    b->v[b->n++] = s;
}

static tpl_stmt *stmt(parser *P, tpl_stmt_kind k, int line) {
    tpl_stmt *s = tpl_alloc(P->c, sizeof *s);
    memset(s, 0, sizeof *s);
    s->kind = k;
    s->line = line;
    return s;
}

static bool valid_target(const tpl_expr *e, bool allow_attr) {
    if (e->kind == TE_NAME) return true;
    if (allow_attr && e->kind == TE_ATTR) return e->a->kind == TE_NAME;
    if (e->kind == TE_TUPLE) {
        for (size_t i = 0; i < e->nargs; i++)
            if (e->args[i]->kind != TE_NAME) return false;
        return e->nargs > 0;
    }
    return false;
}

static tpl_expr *parse_target(parser *P, const char *end_name, bool with_ns) {
    int line = cur(P)->line;
    tpl_expr *e;
    if (with_ns && cur(P)->type == TK_NAME && tok_is_op(peek(P, 1), ".") &&
        peek(P, 2)->type == TK_NAME) {
        e = node(P, TE_ATTR, line);
        e->a = node(P, TE_NAME, line);
        e->a->name = cur(P)->text;
        next(P);
        next(P);
        e->name = cur(P)->text;
        next(P);
    } else {
        e = parse_tuple(P, true, true, end_name, false);
    }
    if (!valid_target(e, with_ns))
        tpl_fail(P->c, LPX_ERR_INVALID_ARG, "chat template line %d: cannot assign to this target",
                 line);
    return e;
}

static tpl_body parse_body(parser *P, const char *const *ends, const char **found);

static void block_end(parser *P) {
    expect(P, TK_BLOCK_END, "'%}'");
}

static tpl_stmt *parse_if(parser *P, int line) {
    tpl_stmt *s = stmt(P, TS_IF, line);
    s->e = parse_tuple(P, false, false, NULL, false);
    block_end(P);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const char *found;
    s->body = parse_body(P, ends, &found);
    if (!strcmp(found, "elif")) {
        tpl_stmt *elif = parse_if(P, cur(P)->line);
        body_push(P, &s->orelse, elif);
        return s;
    }
    if (!strcmp(found, "else")) {
        block_end(P);
        static const char *const endif[] = {"endif", NULL};
        s->orelse = parse_body(P, endif, &found);
    }
    block_end(P);
    return s;
}

static tpl_stmt *parse_for(parser *P, int line) {
    tpl_stmt *s = stmt(P, TS_FOR, line);
    s->target = parse_target(P, "in", false);
    if (!is_name(P, "in")) unexpected(P, "'in'");
    next(P);
    s->e = parse_tuple(P, false, false, "recursive", false);
    if (is_name(P, "if")) {
        next(P);
        s->filter = parse_expr(P, true);
    }
    if (is_name(P, "recursive"))
        tpl_fail(P->c, LPX_ERR_UNSUPPORTED,
                 "chat template line %d: unsupported construct: recursive for loop", line);
    block_end(P);
    static const char *const ends[] = {"endfor", "else", NULL};
    const char *found;
    P->loops++;
    s->body = parse_body(P, ends, &found);
    P->loops--;
    if (!strcmp(found, "else")) {
        block_end(P);
        static const char *const endfor[] = {"endfor", NULL};
        s->orelse = parse_body(P, endfor, &found);
    }
    block_end(P);
    return s;
}

static tpl_stmt *parse_set(parser *P, int line) {
    tpl_expr *target = parse_target(P, NULL, true);
    if (is_op(P, "=")) {
        next(P);
        tpl_stmt *s = stmt(P, TS_SET, line);
        s->target = target;
        s->e = parse_tuple(P, false, true, NULL, false);
        block_end(P);
        return s;
    }
    if (target->kind != TE_NAME)
        tpl_fail(P->c, LPX_ERR_UNSUPPORTED,
                 "chat template line %d: unsupported construct: block set of this target", line);
    tpl_stmt *s = stmt(P, TS_SETBLOCK, line);
    s->target = target;
    /* The filters apply to the captured text, held in a literal at run time. */
    tpl_expr *hole = node(P, TE_LIT, line);
    s->e = parse_filter_expr(P, hole);
    s->filter = hole;
    block_end(P);
    static const char *const ends[] = {"endset", NULL};
    const char *found;
    s->body = parse_body(P, ends, &found);
    block_end(P);
    return s;
}

static tpl_stmt *parse_macro(parser *P, int line) {
    tpl_stmt *s = stmt(P, TS_MACRO, line);
    if (cur(P)->type != TK_NAME) unexpected(P, "a macro name");
    s->text = cur(P)->text;
    next(P);
    expect_op(P, "(");
    exprs x = {0};
    while (!is_op(P, ")")) {
        if (x.n) expect_op(P, ",");
        if (cur(P)->type != TK_NAME) unexpected(P, "a parameter name");
        const char *name = cur(P)->text;
        next(P);
        tpl_expr *dflt = NULL;
        if (is_op(P, "=")) {
            next(P);
            dflt = parse_expr(P, true);
        }
        push(P, &x, dflt, name);
    }
    next(P);
    block_end(P);
    s->args = x.v;
    s->params = x.kw;
    s->nparams = x.n;
    static const char *const ends[] = {"endmacro", NULL};
    const char *found;
    int loops = P->loops;
    P->loops = 0; /* break/continue cannot leave a macro */
    s->body = parse_body(P, ends, &found);
    P->loops = loops;
    if (cur(P)->type == TK_NAME) next(P); /* {% endmacro name %} */
    block_end(P);
    return s;
}

static const char *const unsupported_tags[] = {"call",  "filter",     "with",  "include", "import",
                                               "from",  "extends",    "block", "do",      "print",
                                               "trans", "autoescape", NULL};

static tpl_stmt *parse_statement(parser *P) {
    const tpl_tok *t = cur(P);
    int line = t->line;
    if (t->type != TK_NAME) unexpected(P, "a statement name");
    const char *name = t->text;
    next(P);
    if (!strcmp(name, "if")) return parse_if(P, line);
    if (!strcmp(name, "for")) return parse_for(P, line);
    if (!strcmp(name, "set")) return parse_set(P, line);
    if (!strcmp(name, "macro")) return parse_macro(P, line);
    if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (!P->loops)
            tpl_fail(P->c, LPX_ERR_INVALID_ARG, "chat template line %d: '%s' outside a for loop",
                     line, name);
        block_end(P);
        return stmt(P, name[0] == 'b' ? TS_BREAK : TS_CONTINUE, line);
    }
    if (!strcmp(name, "generation")) {
        block_end(P);
        tpl_stmt *s = stmt(P, TS_BLOCK, line);
        static const char *const ends[] = {"endgeneration", NULL};
        const char *found;
        s->body = parse_body(P, ends, &found);
        block_end(P);
        return s;
    }
    if (!strncmp(name, "end", 3) || !strcmp(name, "elif") || !strcmp(name, "else"))
        tpl_fail(P->c, LPX_ERR_INVALID_ARG, "chat template line %d: unexpected {%% %s %%}", line,
                 name);
    for (const char *const *u = unsupported_tags; *u; u++)
        if (!strcmp(name, *u))
            tpl_fail(P->c, LPX_ERR_UNSUPPORTED,
                     "chat template line %d: unsupported construct: {%% %s %%}", line, name);
    tpl_fail(P->c, LPX_ERR_UNSUPPORTED, "chat template line %d: unknown tag '%s'", line, name);
}

/* Statements up to a {% NAME %} with NAME in ends (NULL-terminated; NULL ends
 * means up to the end of the template). The end tag's name is consumed and
 * returned in *found; its %} is left for the caller. */
static tpl_body parse_body(parser *P, const char *const *ends, const char **found) {
    enter(P);
    tpl_body b = {0};
    for (;;) {
        const tpl_tok *t = cur(P);
        if (t->type == TK_EOF) {
            if (ends) {
                const char *const *e = ends;
                while (e[1] && strncmp(*e, "end", 3))
                    e++;
                tpl_fail(P->c, LPX_ERR_INVALID_ARG,
                         "chat template line %d: unexpected end of template, expected {%% %s %%}",
                         t->line, *e);
            }
            break;
        }
        if (t->type == TK_TEXT) {
            tpl_stmt *s = stmt(P, TS_TEXT, t->line);
            s->text = t->text;
            s->len = t->len;
            body_push(P, &b, s);
            next(P);
        } else if (t->type == TK_VAR_BEGIN) {
            next(P);
            tpl_stmt *s = stmt(P, TS_PRINT, t->line);
            s->e = parse_tuple(P, false, true, NULL, false);
            expect(P, TK_VAR_END, "'}}'");
            body_push(P, &b, s);
        } else if (t->type == TK_BLOCK_BEGIN) {
            next(P);
            if (ends && cur(P)->type == TK_NAME) {
                for (const char *const *e = ends; *e; e++)
                    if (!strcmp(cur(P)->text, *e)) {
                        *found = *e;
                        next(P);
                        leave(P);
                        return b;
                    }
            }
            body_push(P, &b, parse_statement(P));
        } else {
            unexpected(P, "template text or a tag");
        }
    }
    leave(P);
    return b;
}

tpl_body tpl_parse(tpl_ctx *c, const tpl_toks *toks) {
    parser P = {.c = c, .t = toks->v, .i = 0, .n = toks->n, .loops = 0};
    const char *found = NULL;
    tpl_body b = parse_body(&P, NULL, &found);
    if (cur(&P)->type != TK_EOF) unexpected(&P, "end of template");
    return b;
}

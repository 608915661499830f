/* Internals of the chat template renderer, shared by its files:
 *   template_lex.c      source -> tokens (Jinja's whitespace control applied)
 *   template_parse.c    tokens -> statement and expression trees
 *   template_value.c    values with Python semantics (str(), repr, ==, JSON)
 *   template_builtins.c filters, tests, methods and global functions
 *   template_eval.c     the interpreter
 *   template.c          the public entry points
 *   (src/model/chat.c: lpx_chat_render, the model's own template and tokens)
 * Everything a render allocates lives in one arena freed at the end; a failure
 * anywhere unwinds to the entry point with longjmp (after setting the lpx
 * error message), so no partial result needs cleaning up on the way. */
#ifndef LPX_TEMPLATE_TEMPLATE_INT_H
#define LPX_TEMPLATE_TEMPLATE_INT_H

#include "base/error.h"
#include "template/template.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Caps that keep any template, however hostile, finite (smaller under the
 * fuzzer so that each input stays fast). */
#define TPL_MAX_DEPTH 100    /* nesting of statements and expressions */
#define TPL_MAX_RANGE 100000 /* range() length, as jinja2's sandbox */
#ifdef LPX_FUZZ
#define TPL_MAX_STEPS 200000
#define TPL_MEM_BASE (8u << 20)
#else
#define TPL_MAX_STEPS 20000000   /* evaluated expressions per render */
#define TPL_MEM_BASE (64u << 20) /* arena bytes, plus TPL_MEM_PER_INPUT x input */
#endif
#define TPL_MEM_PER_INPUT 16u
#define TPL_OUT_BASE (16u << 20) /* output bytes, plus TPL_OUT_PER_INPUT x input */
#define TPL_OUT_PER_INPUT 4u

/* ---- arena and failure ---------------------------------------------------- */

typedef struct tpl_block tpl_block;

typedef struct tpl_ctx {
    jmp_buf fail;      /* where tpl_fail lands */
    tpl_block *blocks; /* arena */
    size_t mem_used, mem_cap;
    char *out; /* output buffer (malloc'd) */
    size_t out_len, out_cap, out_max;
    int64_t steps;
    int depth; /* current nesting while parsing / evaluating */
    int line;  /* line of the statement being evaluated (for messages) */
    int jump;  /* pending break/continue (TPL_JUMP_*) */
} tpl_ctx;

_Noreturn void tpl_fail(tpl_ctx *c, lpx_status s, const char *fmt, ...) LPX_PRINTF(3, 4);
void *tpl_alloc(tpl_ctx *c, size_t n);
void *tpl_grow(tpl_ctx *c, void *old, size_t old_n, size_t new_n);
char *tpl_strndup(tpl_ctx *c, const char *s, size_t n);
void tpl_arena_free(tpl_ctx *c);
/* Checked size arithmetic that fails the render on overflow. */
size_t tpl_mul(tpl_ctx *c, size_t a, size_t b);
size_t tpl_add(tpl_ctx *c, size_t a, size_t b);

/* ---- UTF-8 ---------------------------------------------------------------- */

/* Decodes one code point at s (n bytes left, input already validated). */
int32_t tpl_utf8_next(const char *s, size_t n, size_t *len);
size_t tpl_utf8_encode(int32_t cp, char *out);
bool tpl_utf8_valid(const char *s, size_t n);
/* Python's str.isspace() for one code point. */
bool tpl_is_space(int32_t cp);

/* ---- values --------------------------------------------------------------- */

typedef enum tpl_type {
    TV_UNDEF = 0,
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,
    TV_LIST, /* also tuples (flag) */
    TV_DICT,
    TV_NS,     /* namespace(): a dict whose attributes may be set */
    TV_LOOP,   /* the loop variable of a for */
    TV_FUNC,   /* a global function */
    TV_METHOD, /* a bound method of a str, dict or list */
    TV_MACRO   /* a {% macro %} with the scope it was defined in */
} tpl_type;

typedef struct tpl_str {
    size_t n;   /* bytes */
    size_t ncp; /* code points */
    char p[];   /* NUL-terminated UTF-8 */
} tpl_str;

typedef struct tpl_val tpl_val;
typedef struct tpl_list tpl_list;
typedef struct tpl_dict tpl_dict;
typedef struct tpl_loop tpl_loop;
typedef struct tpl_method tpl_method;
typedef struct tpl_macro tpl_macro;

struct tpl_val {
    tpl_type t;
    union {
        bool b;
        int64_t i;
        double f;
        const tpl_str *s;
        tpl_list *l;
        tpl_dict *d;
        tpl_loop *loop;
        int fn;
        const tpl_method *m;
        const tpl_macro *macro;
        const char *why; /* TV_UNDEF: what is undefined, for the error when it is used */
    } u;
};

struct tpl_list {
    size_t n, cap;
    tpl_val *v;
    bool tuple;
    const char *view; /* "dict_keys", "dict_values", "dict_items" for dict views, else NULL */
};

struct tpl_dict {
    size_t n, cap;
    tpl_val *k, *v; /* insertion order, as Python dicts */
};

struct tpl_loop {
    const tpl_list *items;
    int64_t i; /* index0 */
};

struct tpl_method {
    tpl_val self;
    int id;
};

/* Global functions (TV_FUNC ids). */
enum { TF_RAISE_EXCEPTION, TF_STRFTIME_NOW, TF_NAMESPACE, TF_RANGE, TF_DICT };

static inline tpl_val tv_undef(const char *why) {
    tpl_val v = {.t = TV_UNDEF, .u.why = why};
    return v;
}
static inline tpl_val tv_none(void) {
    tpl_val v = {.t = TV_NONE};
    return v;
}
static inline tpl_val tv_bool(bool b) {
    tpl_val v = {.t = TV_BOOL, .u.b = b};
    return v;
}
static inline tpl_val tv_int(int64_t i) {
    tpl_val v = {.t = TV_INT, .u.i = i};
    return v;
}
static inline tpl_val tv_float(double f) {
    tpl_val v = {.t = TV_FLOAT, .u.f = f};
    return v;
}

tpl_val tv_str(tpl_ctx *c, const char *p, size_t n);
tpl_val tv_cstr(tpl_ctx *c, const char *p);
tpl_val tv_list(tpl_ctx *c, size_t cap);
tpl_val tv_dict(tpl_ctx *c, tpl_type t);
void tpl_list_push(tpl_ctx *c, tpl_list *l, tpl_val v);
/* Sets key k (replacing an equal key in place, as Python dicts do). */
void tpl_dict_set(tpl_ctx *c, tpl_dict *d, tpl_val k, tpl_val v);
/* The value stored under key k, or NULL. */
tpl_val *tpl_dict_get(const tpl_dict *d, tpl_val k);
tpl_val *tpl_dict_get_str(const tpl_dict *d, const char *key);

const char *tpl_type_name(tpl_type t); /* Python's name: "str", "list", ... */
bool tpl_truthy(tpl_val v);
bool tpl_equal(tpl_val a, tpl_val b);
/* Python's a < b (fails the render for types that do not order). */
bool tpl_less(tpl_ctx *c, tpl_val a, tpl_val b);
/* Fails with "'x' is undefined" when v is undefined. */
void tpl_need_defined(tpl_ctx *c, tpl_val v);

/* A growable byte string in the arena. */
typedef struct tpl_buf {
    char *p;
    size_t n, cap;
} tpl_buf;
void tpl_buf_put(tpl_ctx *c, tpl_buf *b, const char *s, size_t n);
void tpl_buf_puts(tpl_ctx *c, tpl_buf *b, const char *s);
tpl_val tpl_buf_val(tpl_ctx *c, tpl_buf *b);

/* str(v) as Python prints it (undefined prints as ""). */
void tpl_to_str(tpl_ctx *c, tpl_buf *b, tpl_val v);
tpl_val tpl_str_of(tpl_ctx *c, tpl_val v);
/* repr(v). */
void tpl_repr(tpl_ctx *c, tpl_buf *b, tpl_val v);
/* json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort_keys);
 * indent < 0 means None. */
void tpl_to_json(tpl_ctx *c, tpl_buf *b, tpl_val v, int indent, bool sort_keys);
/* Python's repr of a float. */
void tpl_float_repr(double f, char *out, size_t cap);

/* Builds a value from JSON text (objects keep their key order). */
tpl_val tpl_from_json(tpl_ctx *c, const char *json, const char *what);

/* ---- lexer ---------------------------------------------------------------- */

typedef enum tpl_tok_type {
    TK_TEXT,        /* template data, whitespace control already applied */
    TK_VAR_BEGIN,   /* {{ */
    TK_VAR_END,     /* }} */
    TK_BLOCK_BEGIN, /* {% */
    TK_BLOCK_END,   /* %} */
    TK_NAME,
    TK_STRING, /* text holds the decoded value */
    TK_INT,
    TK_FLOAT,
    TK_OP, /* text holds the operator */
    TK_EOF
} tpl_tok_type;

typedef struct tpl_tok {
    tpl_tok_type type;
    int line;
    const char *text; /* NUL-terminated (arena) */
    size_t len;
    int64_t i;
    double f;
} tpl_tok;

typedef struct tpl_toks {
    tpl_tok *v;
    size_t n, cap;
} tpl_toks;

void tpl_lex(tpl_ctx *c, const char *src, size_t n, tpl_toks *out);

/* ---- syntax trees --------------------------------------------------------- */

typedef enum tpl_expr_kind {
    TE_LIT,
    TE_NAME,
    TE_LIST,
    TE_TUPLE,
    TE_DICT,   /* args: k0, v0, k1, v1, ... */
    TE_ATTR,   /* a.name */
    TE_ITEM,   /* a[b] */
    TE_SLICE,  /* a[b:c:d], any of b c d may be NULL */
    TE_CALL,   /* a(args) */
    TE_FILTER, /* a | name(args) */
    TE_TEST,   /* a is [not] name(args) */
    TE_NOT,
    TE_NEG,
    TE_POS,
    TE_BINOP, /* a op b: + - * / // % ** ~ */
    TE_AND,
    TE_OR,
    TE_COMPARE, /* a op b op ... : args are the operands after a, ops[] the operators */
    TE_COND     /* b if a else c */
} tpl_expr_kind;

typedef struct tpl_expr tpl_expr;
struct tpl_expr {
    tpl_expr_kind kind;
    int line;
    const char *name; /* TE_NAME, TE_ATTR, TE_FILTER, TE_TEST; TE_BINOP: the operator */
    tpl_val lit;      /* TE_LIT */
    tpl_expr *a, *b, *c, *d;
    tpl_expr **args;  /* list items, call/filter/test arguments, compare operands */
    const char **kw;  /* per argument: keyword name, or NULL when positional */
    const char **ops; /* TE_COMPARE operators */
    size_t nargs;
    bool negate; /* TE_TEST: "is not" */
};

typedef enum tpl_stmt_kind {
    TS_TEXT,
    TS_PRINT,
    TS_IF,       /* e: condition, body, orelse (elif chains nest an if in orelse) */
    TS_FOR,      /* target in e [if filter]: body, orelse */
    TS_SET,      /* target = e */
    TS_SETBLOCK, /* {% set target [| filters] %}body{% endset %}: e is the filter chain on TE_LIT */
    TS_BREAK,
    TS_CONTINUE,
    TS_BLOCK, /* {% generation %}: just its body */
    TS_MACRO  /* {% macro text(target args) %}: args are defaults (NULL: none), kw the names */
} tpl_stmt_kind;

typedef struct tpl_stmt tpl_stmt;
typedef struct tpl_body {
    tpl_stmt **v;
    size_t n, cap;
} tpl_body;

struct tpl_stmt {
    tpl_stmt_kind kind;
    int line;
    const char *text; /* TS_TEXT; TS_MACRO: its name */
    size_t len;
    tpl_expr **args;     /* TS_MACRO: default value of each parameter, or NULL */
    const char **params; /* TS_MACRO: parameter names */
    size_t nparams;
    tpl_expr *e;
    tpl_expr *target;
    tpl_expr *filter;
    tpl_body body, orelse;
};

tpl_body tpl_parse(tpl_ctx *c, const tpl_toks *toks);

/* ---- evaluation ----------------------------------------------------------- */

typedef struct tpl_scope {
    struct tpl_scope *parent;
    const char **names;
    tpl_val *vals;
    size_t n, cap;
} tpl_scope;

tpl_scope *tpl_scope_new(tpl_ctx *c, tpl_scope *parent);
void tpl_scope_set(tpl_ctx *c, tpl_scope *s, const char *name, tpl_val v);

enum { TPL_JUMP_NONE, TPL_JUMP_BREAK, TPL_JUMP_CONTINUE };

void tpl_exec(tpl_ctx *c, const tpl_body *body, tpl_scope *scope);

struct tpl_macro {
    const struct tpl_stmt *def;
    tpl_scope *scope;
};
void tpl_out(tpl_ctx *c, const char *s, size_t n);
void tpl_step(tpl_ctx *c);

/* Attribute (a.name) and item (a[k]) lookup with jinja2's rules. */
tpl_val tpl_getattr(tpl_ctx *c, tpl_val obj, const char *name);
tpl_val tpl_getitem(tpl_ctx *c, tpl_val obj, tpl_val key);
/* The items a for loop or a filter iterates over (undefined: none). */
const tpl_list *tpl_iterate(tpl_ctx *c, tpl_val v);

/* Arguments of a call after evaluation. */
typedef struct tpl_args {
    const tpl_val *pos;
    size_t npos;
    const char **kw;
    const tpl_val *kwv;
    size_t nkw;
} tpl_args;

/* Builtins (template_builtins.c). Each fails with LPX_ERR_UNSUPPORTED for a
 * name it does not know. */
tpl_val tpl_filter(tpl_ctx *c, const char *name, tpl_val v, const tpl_args *a);
bool tpl_test(tpl_ctx *c, const char *name, tpl_val v, const tpl_args *a);
bool tpl_test_known(const char *name);
tpl_val tpl_call(tpl_ctx *c, tpl_val fn, const tpl_args *a);
/* A bound method of obj named name, or an undefined value. */
tpl_val tpl_method_lookup(tpl_ctx *c, tpl_val obj, const char *name);
/* A global function by name, or an undefined value. */
tpl_val tpl_global_func(const char *name);

#endif

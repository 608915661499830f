/* JSON Schema (docs/structured-outputs.md's subset) into grammar rules. Every keyword
 * is either carried out, an annotation, or refused with its JSON path: a schema is
 * never partly ignored. */
#include "grammar/grammar_int.h"

#include "base/error.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sc {
    gjson j;
    const cJSON *root;
    char path[1024];
    size_t plen;
    char err[600];
    bool failed;
    struct {
        const cJSON *node;
        int32_t rule;
    } * memo; /* [n_memo] schemas reached by $ref (or listed in $defs), compiled once */
    size_t n_memo, cap_memo;
} sc;

static int32_t fail(sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int32_t fail(sc *c, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = true;
    int n = snprintf(c->err, sizeof c->err, "%s: ", c->path);
    if (n < 0 || (size_t)n >= sizeof c->err) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err + n, sizeof c->err - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* Appends ".key" (or "[i]" when key is NULL) to the path; returns the mark to pop to. */
static size_t path_push(sc *c, const char *key, int index) {
    size_t mark = c->plen;
    int n = key ? snprintf(c->path + c->plen, sizeof c->path - c->plen, ".%s", key)
                : snprintf(c->path + c->plen, sizeof c->path - c->plen, "[%d]", index);
    if (n > 0) c->plen += (size_t)n < sizeof c->path - c->plen ? (size_t)n : 0;
    c->path[c->plen] = '\0';
    return mark;
}

static void path_pop(sc *c, size_t mark) {
    c->plen = mark;
    c->path[mark] = '\0';
}

enum {
    T_OBJECT = 1,
    T_ARRAY = 2,
    T_STRING = 4,
    T_NUMBER = 8,
    T_INTEGER = 16,
    T_BOOLEAN = 32,
    T_NULL = 64,
    T_ALL = 127
};

static const char *const type_names[] = {"object",  "array",   "string", "number",
                                         "integer", "boolean", "null"};

/* Keywords that change nothing in what is generated. */
static bool is_annotation(const char *k) {
    static const char *const a[] = {"title",    "description", "default", "examples",
                                    "$comment", "$schema",     "$id",     "deprecated",
                                    "readOnly", "writeOnly",   "$defs",   "definitions"};
    for (size_t i = 0; i < sizeof a / sizeof *a; i++)
        if (!strcmp(k, a[i])) return true;
    return false;
}

static bool is_supported(const char *k) {
    static const char *const s[] = {"type",      "properties", "required", "additionalProperties",
                                    "enum",      "const",      "items",    "minItems",
                                    "maxItems",  "anyOf",      "allOf",    "minLength",
                                    "maxLength", "pattern",    "$ref"};
    for (size_t i = 0; i < sizeof s / sizeof *s; i++)
        if (!strcmp(k, s[i])) return true;
    return false;
}

static int32_t compile(sc *c, const cJSON *node);

/* A keyword that must stand alone (with annotations, and type for enum/const). */
static bool alone(sc *c, const cJSON *node, const char *kw, bool type_ok) {
    for (const cJSON *x = node->child; x; x = x->next)
        if (strcmp(x->string, kw) && !is_annotation(x->string) &&
            !(type_ok && !strcmp(x->string, "type"))) {
            fail(c, "keyword '%s' beside keyword '%s' is not supported", x->string, kw);
            return false;
        }
    return true;
}

/* The type flags of "type" (0 when absent); -1 after a failure. */
static int types_of(sc *c, const cJSON *node) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(node, "type");
    if (!t) return 0;
    int flags = 0, n = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : 1;
    if (!cJSON_IsString(t) && !(cJSON_IsArray(t) && n > 0))
        return fail(c, "keyword 'type': expected a type name or a non-empty list of them"), -1;
    for (int i = 0; i < n; i++) {
        const cJSON *x = cJSON_IsArray(t) ? cJSON_GetArrayItem(t, i) : t;
        int f = 0;
        for (int k = 0; cJSON_IsString(x) && k < 7; k++)
            if (!strcmp(x->valuestring, type_names[k])) f = 1 << k;
        if (!f)
            return fail(c, "keyword 'type': '%.60s' is not a JSON Schema type",
                        cJSON_IsString(x) ? x->valuestring : "(not a string)"),
                   -1;
        flags |= f;
    }
    return flags;
}

/* Whether value v is of a type in flags. */
static bool value_fits(const cJSON *v, int flags) {
    if (cJSON_IsObject(v)) return flags & T_OBJECT;
    if (cJSON_IsArray(v)) return flags & T_ARRAY;
    if (cJSON_IsString(v)) return flags & T_STRING;
    if (cJSON_IsBool(v)) return flags & T_BOOLEAN;
    if (cJSON_IsNull(v)) return flags & T_NULL;
    if (cJSON_IsNumber(v))
        return (flags & T_NUMBER) ||
               ((flags & T_INTEGER) && v->valuedouble == floor(v->valuedouble));
    return false;
}

/* The compact JSON text of v as a sequence of bytes. */
static bool seq_json(sc *c, gseq *s, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t) return fail(c, "out of memory"), false;
    seq_lit(s, t, strlen(t));
    free(t);
    return true;
}

static int32_t literals(sc *c, const cJSON *node, const char *kw) {
    if (!alone(c, node, kw, true)) return -1;
    int flags = types_of(c, node);
    if (flags < 0) return -1;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(node, kw);
    bool is_enum = !strcmp(kw, "enum");
    if (is_enum && (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0))
        return fail(c, "keyword 'enum': expected a non-empty list");
    int n = is_enum ? cJSON_GetArraySize(v) : 1;
    gseq *alts = calloc((size_t)n, sizeof *alts);
    if (!alts) return fail(c, "out of memory");
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *x = is_enum ? cJSON_GetArrayItem(v, i) : v;
        if (flags && !value_fits(x, flags)) continue; /* an enum value the type excludes */
        if (!seq_json(c, &alts[k++], x)) break;
    }
    int32_t r = -1;
    if (!c->failed && k == 0)
        fail(c, "keyword '%s': no value is of the schema's 'type'", kw);
    else if (!c->failed)
        r = g_rule_of(c->j.g, alts, k);
    for (int i = 0; i < n; i++)
        seq_free(&alts[i]);
    free(alts);
    return r;
}

/* A whole number keyword in 0..max (absent: dflt); false after a failure. */
static bool count_kw(sc *c, const cJSON *node, const char *kw, int64_t dflt, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(node, kw);
    *out = dflt;
    if (!v) return true;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0)
        return fail(c, "keyword '%s': expected a whole number >= 0", kw), false;
    *out = v->valuedouble > 1e15 ? (int64_t)1e15 : (int64_t)v->valuedouble;
    return true;
}

/* min..max from a pair of keywords; a maximum above LPX_GRAMMAR_MAX_REPEAT is lowered
 * to it (fewer outputs allowed, each still valid), a minimum above it is refused. */
static bool bounds(sc *c, const cJSON *node, const char *kmin, const char *kmax, int64_t *min,
                   int64_t *max) {
    if (!count_kw(c, node, kmin, 0, min) || !count_kw(c, node, kmax, -1, max)) return false;
    if (*max >= 0 && *min > *max)
        return fail(c, "keyword '%s' %lld is above '%s' %lld", kmin, (long long)*min, kmax,
                    (long long)*max),
               false;
    if (*min > LPX_GRAMMAR_MAX_REPEAT)
        return fail(c, "keyword '%s' %lld: at most %d is supported", kmin, (long long)*min,
                    LPX_GRAMMAR_MAX_REPEAT),
               false;
    if (*max > LPX_GRAMMAR_MAX_REPEAT) *max = LPX_GRAMMAR_MAX_REPEAT;
    return true;
}

static int32_t string_rule(sc *c, const cJSON *node) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(node, "pattern");
    int64_t min, max;
    if (!bounds(c, node, "minLength", "maxLength", &min, &max)) return -1;
    lpx_grammar *g = c->j.g;
    gseq s = {0};
    seq_byte(&s, '"');
    if (pat) {
        size_t mark = path_push(c, "pattern", 0);
        if (!cJSON_IsString(pat)) fail(c, "expected a string");
        char msg[256];
        int32_t r = c->failed ? -1 : g_regex(&c->j, pat->valuestring, min, max, msg, sizeof msg);
        if (r < 0 && !c->failed) fail(c, "%s", msg);
        path_pop(c, mark);
        if (r < 0) {
            seq_free(&s);
            return -1;
        }
        seq_ref(&s, r);
    } else {
        seq_repeat(g, &s, gj_char(&c->j), min, max, NULL);
    }
    seq_byte(&s, '"');
    return g_rule_of(g, &s, 1);
}

static int32_t array_rule(sc *c, const cJSON *node) {
    int64_t min, max;
    if (!bounds(c, node, "minItems", "maxItems", &min, &max)) return -1;
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(node, "items");
    int32_t val;
    if (items) {
        size_t mark = path_push(c, "items", 0);
        val = cJSON_IsArray(items)
                  ? fail(c, "a list of schemas (the tuple form) is not supported: give one schema")
                  : compile(c, items);
        path_pop(c, mark);
    } else {
        val = gj_any(&c->j);
    }
    if (val < 0) return -1;
    lpx_grammar *g = c->j.g;
    int32_t ws = gj_ws(&c->j);
    gseq it = {0};
    seq_ref(&it, val);
    seq_ref(&it, ws);
    int32_t item = g_rule_of(g, &it, 1);
    gseq sep = {0}, list = {0}, s = {0};
    seq_byte(&sep, ',');
    seq_ref(&sep, ws);
    seq_repeat(g, &list, item, min, max, &sep);
    seq_free(&sep);
    seq_byte(&s, '[');
    seq_ref(&s, ws);
    seq_push(&s, GE_REF, g_rule_of(g, &list, 1), true);
    seq_byte(&s, ']');
    return g_rule_of(g, &s, 1);
}

/* Bytes of a property name that an extra (additional) property may use: printable
 * ASCII without " and \, so that a name's text is its bytes. */
static bool key_byte(unsigned b) {
    return b >= 0x20 && b < 0x7f && b != '"' && b != '\\';
}

/* A quoted property name that is none of names[0..n) (so that an extra property never
 * repeats a listed one): a trie of the names, a rule per node. */
static int32_t other_key(sc *c, const cJSON *const *names, int n) {
    lpx_grammar *g = c->j.g;
    uint8_t kc[32] = {0};
    for (unsigned b = 0; b < 256; b++)
        if (key_byte(b)) g_set_bit(kc, b);
    gseq fs = {0};
    seq_cls(&fs, g_class(g, kc));
    int32_t kchar = g_rule_of(g, &fs, 1);
    gseq fr = {0}; /* any key characters, then the closing quote */
    seq_repeat(g, &fr, kchar, 0, -1, NULL);
    seq_byte(&fr, '"');
    int32_t free_rest = g_rule_of(g, &fr, 1);
    /* The trie: node i's prefix is names[of[i]]'s first len[i] bytes. */
    size_t total = 1;
    for (int i = 0; i < n; i++)
        total += strlen(names[i]->string);
    int *of = calloc(total, sizeof *of), *len = calloc(total, sizeof *len);
    int32_t *rule = calloc(total, sizeof *rule);
    if (!of || !len || !rule) {
        free(of), free(len), free(rule);
        return fail(c, "out of memory");
    }
    size_t n_nodes = 1;
    for (int i = 0; i < n; i++) {
        const char *s = names[i]->string;
        for (int l = 1; l <= (int)strlen(s) && key_byte((unsigned char)s[l - 1]); l++) {
            bool have = false;
            for (size_t k = 0; k < n_nodes && !have; k++)
                have = len[k] == l && !strncmp(names[of[k]]->string, s, (size_t)l);
            if (!have) of[n_nodes] = i, len[n_nodes++] = l;
        }
    }
    for (size_t k = 0; k < n_nodes; k++)
        rule[k] = g_rule(g);
    for (size_t k = 0; k < n_nodes; k++) {
        const char *pre = len[k] ? names[of[k]]->string : "";
        gseq alts[97] = {{0}}; /* one per key byte, the others, the end */
        size_t na = 0;
        uint8_t rest[32];
        memcpy(rest, kc, 32);
        bool terminal = false;
        for (int i = 0; i < n; i++)
            terminal |= strlen(names[i]->string) == (size_t)len[k] &&
                        !strncmp(names[i]->string, pre, (size_t)len[k]);
        for (size_t ch = 0; ch < n_nodes; ch++)
            if (len[ch] == len[k] + 1 && !strncmp(names[of[ch]]->string, pre, (size_t)len[k])) {
                unsigned b = (unsigned char)names[of[ch]]->string[len[k]];
                rest[b >> 3] &= (uint8_t) ~(1u << (b & 7));
                seq_byte(&alts[na], (uint8_t)b);
                seq_ref(&alts[na++], rule[ch]);
            }
        bool any = false;
        for (int b = 0; b < 32; b++)
            any |= rest[b] != 0;
        if (any) {
            seq_cls(&alts[na], g_class(g, rest));
            seq_ref(&alts[na++], free_rest);
        }
        if (!terminal) seq_byte(&alts[na++], '"');
        g_set(g, rule[k], alts, na);
    }
    gseq s = {0};
    seq_byte(&s, '"');
    seq_ref(&s, rule[0]);
    free(of), free(len), free(rule);
    return g_rule_of(g, &s, 1);
}

/* "{" ws members "}": the listed properties in the order of 'properties' (the required
 * ones always, the others may be left out), then extra ones when additionalProperties
 * allows them. A(i) / B(i): properties i.. after something / before anything was
 * written. */
static int32_t object_rule(sc *c, const cJSON *node) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(node, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(node, "required");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(node, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return fail(c, "keyword 'properties': expected an object");
    if (req && !cJSON_IsArray(req)) return fail(c, "keyword 'required': expected a list");
    int n = props ? cJSON_GetArraySize(props) : 0;
    const cJSON *req_item;
    cJSON_ArrayForEach(req_item, req) {
        if (!cJSON_IsString(req_item))
            return fail(c, "keyword 'required': expected a list of property names");
        if (!props || !cJSON_GetObjectItemCaseSensitive(props, req_item->valuestring))
            return fail(c,
                        "keyword 'required': '%.60s' is not in 'properties' (a required "
                        "property must be listed there)",
                        req_item->valuestring);
    }
    lpx_grammar *g = c->j.g;
    int32_t ws = gj_ws(&c->j);
    /* Extra members: a name none of the listed, and a value of additionalProperties. */
    int32_t extra = -1;
    if (!ap || cJSON_IsTrue(ap) || cJSON_IsObject(ap)) {
        size_t mark = path_push(c, "additionalProperties", 0);
        int32_t val = ap && cJSON_IsObject(ap) ? compile(c, ap) : gj_any(&c->j);
        path_pop(c, mark);
        if (val < 0) return -1;
        const cJSON **names = calloc((size_t)n + 1, sizeof *names);
        if (!names) return fail(c, "out of memory");
        int k = 0;
        for (const cJSON *p = props ? props->child : NULL; p; p = p->next)
            names[k++] = p;
        int32_t key = other_key(c, names, n);
        free(names);
        if (key < 0) return -1;
        gseq e = {0};
        seq_ref(&e, key);
        seq_ref(&e, ws);
        seq_byte(&e, ':');
        seq_ref(&e, ws);
        seq_ref(&e, val);
        seq_ref(&e, ws);
        extra = g_rule_of(g, &e, 1);
    } else if (!cJSON_IsFalse(ap)) {
        return fail(c, "keyword 'additionalProperties': expected a boolean or a schema");
    }
    gseq sep = {0};
    seq_byte(&sep, ',');
    seq_ref(&sep, ws);
    gseq a_end = {0}, b_end = {0};
    if (extra >= 0) {
        gseq u = {0}; /* , ws extra */
        seq_byte(&u, ',');
        seq_ref(&u, ws);
        seq_ref(&u, extra);
        seq_repeat(g, &a_end, g_rule_of(g, &u, 1), 0, -1, NULL);
        seq_repeat(g, &b_end, extra, 0, -1, &sep);
    }
    int32_t A = g_rule_of(g, &a_end, 1), B = g_rule_of(g, &b_end, 1);
    int32_t *kv = calloc((size_t)n + 1, sizeof *kv);
    if (!kv) return fail(c, "out of memory");
    int i = 0;
    for (const cJSON *p = props ? props->child : NULL; p && !c->failed; p = p->next, i++) {
        size_t mark = path_push(c, "properties", 0);
        path_push(c, p->string, 0);
        int32_t val = compile(c, p);
        path_pop(c, mark);
        gseq s = {0};
        cJSON *name = cJSON_CreateString(p->string);
        if (val < 0 || !name || !seq_json(c, &s, name)) {
            cJSON_Delete(name);
            seq_free(&s);
            break;
        }
        cJSON_Delete(name);
        seq_ref(&s, ws);
        seq_byte(&s, ':');
        seq_ref(&s, ws);
        seq_ref(&s, val);
        seq_ref(&s, ws);
        kv[i] = g_rule_of(g, &s, 1);
    }
    for (int k = n - 1; k >= 0 && !c->failed; k--) {
        const cJSON *p = cJSON_GetArrayItem(props, k);
        bool required = false;
        cJSON_ArrayForEach(req_item, req) required |= !strcmp(req_item->valuestring, p->string);
        gseq a[2] = {{0}, {0}}, b[2] = {{0}, {0}};
        seq_byte(&a[0], ',');
        seq_ref(&a[0], ws);
        seq_ref(&a[0], kv[k]);
        seq_ref(&a[0], A);
        seq_ref(&b[0], kv[k]);
        seq_ref(&b[0], A);
        seq_ref(&a[1], A);
        seq_ref(&b[1], B);
        int32_t a2 = g_rule_of(g, a, required ? 1 : 2);
        int32_t b2 = g_rule_of(g, b, required ? 1 : 2);
        seq_free(&a[1]);
        seq_free(&b[1]);
        A = a2, B = b2;
    }
    seq_free(&sep);
    free(kv);
    if (c->failed) return -1;
    gseq s = {0};
    seq_byte(&s, '{');
    seq_ref(&s, ws);
    seq_push(&s, GE_REF, B, true);
    seq_byte(&s, '}');
    return g_rule_of(g, &s, 1);
}

/* The node a local $ref points to: "#", "#/$defs/Name", "#/definitions/Name" or any
 * JSON pointer into the document (~0 ~1 escapes). */
static const cJSON *resolve(sc *c, const char *ref) {
    if (ref[0] != '#' || (ref[1] && ref[1] != '/')) return NULL;
    const cJSON *n = c->root;
    const char *p = ref + 1;
    while (n && *p == '/') {
        p++;
        char tok[256];
        size_t k = 0;
        for (; *p && *p != '/' && k + 1 < sizeof tok; p++)
            if (*p == '~' && (p[1] == '0' || p[1] == '1'))
                tok[k++] = p[1] == '0' ? '~' : '/', p++;
            else
                tok[k++] = *p;
        tok[k] = '\0';
        if (cJSON_IsArray(n)) {
            char *end;
            long i = strtol(tok, &end, 10);
            n = *end || end == tok ? NULL : cJSON_GetArrayItem(n, (int)i);
        } else {
            n = cJSON_IsObject(n) ? cJSON_GetObjectItemCaseSensitive(n, tok) : NULL;
        }
    }
    return *p ? NULL : n;
}

/* A schema reached by $ref or listed in $defs: one rule, made before its body so
 * that it may refer to itself. */
static int32_t compile_shared(sc *c, const cJSON *node) {
    for (size_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].node == node) return c->memo[i].rule;
    if (c->n_memo == c->cap_memo) {
        size_t cap = c->cap_memo ? c->cap_memo * 2 : 16;
        void *m = realloc(c->memo, cap * sizeof *c->memo);
        if (!m) return fail(c, "out of memory");
        c->memo = m;
        c->cap_memo = cap;
    }
    int32_t r = g_rule(c->j.g);
    c->memo[c->n_memo].node = node;
    c->memo[c->n_memo++].rule = r;
    int32_t body = compile(c, node);
    if (body < 0) return -1;
    gseq s = {0};
    seq_ref(&s, body);
    g_set(c->j.g, r, &s, 1);
    return r;
}

static int32_t defs(sc *c, const cJSON *node) {
    static const char *const kw[] = {"$defs", "definitions"};
    for (int k = 0; k < 2; k++) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(node, kw[k]);
        if (!d) continue;
        size_t mark = path_push(c, kw[k], 0);
        if (!cJSON_IsObject(d)) fail(c, "expected an object of schemas");
        for (const cJSON *x = d->child; x && !c->failed; x = x->next) {
            size_t m2 = path_push(c, x->string, 0);
            compile_shared(c, x);
            path_pop(c, m2);
        }
        path_pop(c, mark);
    }
    return c->failed ? -1 : 0;
}

static int32_t compile(sc *c, const cJSON *node) {
    if (c->failed) return -1;
    if (cJSON_IsTrue(node)) return gj_any(&c->j);
    if (cJSON_IsFalse(node)) return fail(c, "the schema false allows no value");
    if (!cJSON_IsObject(node)) return fail(c, "a schema must be an object or a boolean");
    for (const cJSON *x = node->child; x; x = x->next)
        if (!is_supported(x->string) && !is_annotation(x->string))
            return fail(c, "keyword '%.60s' is not supported", x->string);
    if (defs(c, node) < 0) return -1;
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(node, "$ref"))) {
        if (!alone(c, node, "$ref", false)) return -1;
        const cJSON *t = cJSON_IsString(v) ? resolve(c, v->valuestring) : NULL;
        if (!t)
            return fail(c,
                        "keyword '$ref': '%.80s' is not a local reference (#/$defs/NAME, "
                        "#/definitions/NAME or # into this schema)",
                        cJSON_IsString(v) ? v->valuestring : "(not a string)");
        return compile_shared(c, t);
    }
    if (cJSON_GetObjectItemCaseSensitive(node, "const")) return literals(c, node, "const");
    if (cJSON_GetObjectItemCaseSensitive(node, "enum")) return literals(c, node, "enum");
    const char *comb = cJSON_GetObjectItemCaseSensitive(node, "anyOf")   ? "anyOf"
                       : cJSON_GetObjectItemCaseSensitive(node, "allOf") ? "allOf"
                                                                         : NULL;
    if (comb) {
        if (!alone(c, node, comb, false)) return -1;
        v = cJSON_GetObjectItemCaseSensitive(node, comb);
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
        if (n == 0) return fail(c, "keyword '%s': expected a non-empty list of schemas", comb);
        if (comb[1] == 'l' && n != 1)
            return fail(c, "keyword 'allOf' with more than one schema is not supported");
        gseq *alts = calloc((size_t)n, sizeof *alts);
        if (!alts) return fail(c, "out of memory");
        for (int i = 0; i < n && !c->failed; i++) {
            size_t mark = path_push(c, comb, 0);
            path_push(c, NULL, i);
            int32_t r = compile(c, cJSON_GetArrayItem(v, i));
            path_pop(c, mark);
            if (r >= 0) seq_ref(&alts[i], r);
        }
        int32_t r = c->failed ? -1 : g_rule_of(c->j.g, alts, (size_t)n);
        for (int i = 0; i < n; i++)
            seq_free(&alts[i]);
        free(alts);
        return r;
    }
    int flags = types_of(c, node);
    if (flags < 0) return -1;
    if (flags == 0) { /* no type: the types that the keywords given constrain, else any */
        static const struct {
            const char *kw;
            int type;
        } infer[] = {
            {"properties", T_OBJECT}, {"required", T_OBJECT},  {"additionalProperties", T_OBJECT},
            {"items", T_ARRAY},       {"minItems", T_ARRAY},   {"maxItems", T_ARRAY},
            {"minLength", T_STRING},  {"maxLength", T_STRING}, {"pattern", T_STRING}};
        for (size_t i = 0; i < sizeof infer / sizeof *infer; i++)
            if (cJSON_GetObjectItemCaseSensitive(node, infer[i].kw)) flags |= infer[i].type;
        if (flags == 0) return gj_any(&c->j);
    }
    if (flags & T_NUMBER) flags &= ~T_INTEGER;
    gseq alts[7] = {{0}};
    size_t n = 0;
    for (int k = 0; k < 7 && !c->failed; k++) {
        int t = 1 << k;
        if (!(flags & t)) continue;
        int32_t r = t == T_OBJECT    ? object_rule(c, node)
                    : t == T_ARRAY   ? array_rule(c, node)
                    : t == T_STRING  ? string_rule(c, node)
                    : t == T_NUMBER  ? gj_number(&c->j)
                    : t == T_INTEGER ? gj_integer(&c->j)
                                     : -2;
        if (t == T_BOOLEAN) {
            seq_lit(&alts[n++], "true", 4);
            seq_lit(&alts[n++], "false", 5);
        } else if (t == T_NULL) {
            seq_lit(&alts[n++], "null", 4);
        } else if (r >= 0) {
            seq_ref(&alts[n++], r);
        }
    }
    int32_t r = c->failed ? -1 : g_rule_of(c->j.g, alts, n);
    for (size_t i = 0; i < n; i++)
        seq_free(&alts[i]);
    return r;
}

static lpx_status finish_grammar(sc *c, int32_t root, lpx_grammar **out) {
    lpx_grammar *g = c->j.g;
    free(c->memo);
    if (root < 0) {
        lpx_grammar_free(g);
        return lpx_errorf(LPX_ERR_INVALID_ARG, "%s", c->err);
    }
    g->root = root;
    if (!g_finish(g)) {
        lpx_grammar_free(g);
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "%s: the schema makes a grammar too large (over %d elements) or "
                          "memory ran out",
                          c->path, LPX_GRAMMAR_MAX_ELEMS);
    }
    *out = g;
    return LPX_OK;
}

lpx_status lpx_grammar_from_schema(const char *json, size_t len, const char *path,
                                   lpx_grammar **out) {
    *out = NULL;
    sc c = {0};
    snprintf(c.path, sizeof c.path, "%s", path ? path : "schema");
    c.plen = strlen(c.path);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return lpx_errorf(LPX_ERR_INVALID_ARG, "%s: not valid JSON", c.path);
    if (!(c.j.g = g_new())) {
        cJSON_Delete(root);
        return lpx_errorf(LPX_ERR_NOMEM, "%s: out of memory", c.path);
    }
    c.root = root;
    int32_t r = compile(&c, root);
    lpx_status st = finish_grammar(&c, r, out);
    cJSON_Delete(root);
    return st;
}

lpx_status lpx_grammar_json_object(lpx_grammar **out) {
    *out = NULL;
    sc c = {0};
    snprintf(c.path, sizeof c.path, "json_object");
    if (!(c.j.g = g_new())) return lpx_errorf(LPX_ERR_NOMEM, "json_object: out of memory");
    return finish_grammar(&c, gj_object_any(&c.j), out);
}

/* One call: {"name": "NAME", "KEY": PARAMS} (the header in the order the templates
 * show it, so that the parser reads it). */
static int32_t call_rule(sc *c, const cJSON *fn, const char *key, int i) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    char at[64];
    snprintf(at, sizeof at, "tool_calls.functions[%d]", i);
    snprintf(c->path, sizeof c->path, "%s", at);
    c->plen = strlen(c->path);
    if (!cJSON_IsString(name) || !params)
        return fail(c, "expected {\"name\": a string, \"parameters\": a schema}");
    size_t mark = path_push(c, "parameters", 0);
    c->root = params; /* its $refs point into it */
    int32_t val = compile(c, params);
    path_pop(c, mark);
    if (val < 0) return -1;
    lpx_grammar *g = c->j.g;
    int32_t ws = gj_ws(&c->j);
    gseq body = {0}, s = {0};
    seq_lit(&body, "\"name\"", 6);
    seq_ref(&body, ws);
    seq_byte(&body, ':');
    seq_ref(&body, ws);
    if (!seq_json(c, &body, name)) {
        seq_free(&body);
        return -1;
    }
    seq_ref(&body, ws);
    seq_byte(&body, ',');
    seq_ref(&body, ws);
    seq_byte(&body, '"');
    seq_lit(&body, key, strlen(key));
    seq_byte(&body, '"');
    seq_ref(&body, ws);
    seq_byte(&body, ':');
    seq_ref(&body, ws);
    seq_ref(&body, val);
    seq_ref(&body, ws);
    seq_byte(&s, '{');
    seq_ref(&s, ws);
    seq_push(&s, GE_REF, g_rule_of(g, &body, 1), true);
    seq_byte(&s, '}');
    return g_rule_of(g, &s, 1);
}

lpx_status lpx_grammar_tool_calls(const char *json, size_t len, lpx_grammar **out) {
    *out = NULL;
    sc c = {0};
    snprintf(c.path, sizeof c.path, "tool_calls");
    c.plen = strlen(c.path);
    cJSON *spec = cJSON_ParseWithLength(json, len);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(spec, "format");
    const cJSON *fns = cJSON_GetObjectItemCaseSensitive(spec, "functions");
    bool hermes = cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "hermes");
    bool llama = cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "llama3");
    bool mistral = cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "mistral");
    int n = cJSON_IsArray(fns) ? cJSON_GetArraySize(fns) : 0;
    if (!spec || (!hermes && !llama && !mistral) || n == 0) {
        cJSON_Delete(spec);
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "tool_calls: expected {\"format\": \"hermes\", \"llama3\" or "
                          "\"mistral\", \"functions\": [{\"name\", \"parameters\"}, ...], "
                          "\"parallel\"}");
    }
    if (!(c.j.g = g_new())) {
        cJSON_Delete(spec);
        return lpx_errorf(LPX_ERR_NOMEM, "tool_calls: out of memory");
    }
    gseq *alts = calloc((size_t)n, sizeof *alts);
    int32_t call = -1;
    if (!alts) fail(&c, "out of memory");
    for (int i = 0; i < n && !c.failed; i++) {
        int32_t r =
            call_rule(&c, cJSON_GetArrayItem(fns, i), llama ? "parameters" : "arguments", i);
        if (r >= 0) seq_ref(&alts[i], r);
    }
    if (!c.failed) call = g_rule_of(c.j.g, alts, (size_t)n);
    for (int i = 0; alts && i < n; i++)
        seq_free(&alts[i]);
    free(alts);
    int32_t root = -1;
    if (call >= 0) {
        gseq item = {0}, sep = {0}, list = {0};
        if (hermes) seq_lit(&item, "<tool_call>\n", 12);
        seq_ref(&item, call);
        if (hermes) seq_lit(&item, "\n</tool_call>", 13);
        /* Mistral's list: the [TOOL_CALLS] before it is a special token, which no
         * grammar writes (the parser takes the list without it) */
        const char *sep_text = hermes ? "\n" : mistral ? ", " : "; ";
        seq_lit(&sep, sep_text, strlen(sep_text));
        bool parallel = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec, "parallel"));
        if (mistral) seq_byte(&list, '[');
        seq_repeat(c.j.g, &list, g_rule_of(c.j.g, &item, 1), 1, parallel ? -1 : 1, &sep);
        if (mistral) seq_byte(&list, ']');
        seq_free(&sep);
        root = g_rule_of(c.j.g, &list, 1);
    }
    lpx_status st = finish_grammar(&c, root, out);
    cJSON_Delete(spec);
    return st;
}

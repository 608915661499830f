/* The tool-call parser (tool_calls.h): a byte-at-a-time state machine, so that the
 * same text gives the same content and calls however it is cut into pieces.
 *
 * hermes: anywhere in the text, <tool_call> then the header {"name": "N", "arguments":
 * then the arguments' JSON value (streamed as it comes), then anything up to
 * </tool_call>. llama3: at the start of the output (after whitespace and an optional
 * <|python_tag|>, the tag Llama 3.x writes before a call when special tokens are kept),
 * {"name": "N", "parameters": value }, more calls after ";" or whitespace; text anywhere
 * else is content. Either format takes "arguments" or "parameters" (Llama 3.x writes
 * the second, Qwen the first), and the two keys in either order: with the arguments
 * first, the call is held until its name is read, then given whole (a stream cannot
 * name a call it has not read). A call whose header does not read that way (not JSON,
 * another key, a name not among the tools) stays content, tag and all; once the name
 * is read the call is kept, even when the output ends inside its arguments.
 *
 * mistral: at the start of the output (after whitespace and an optional [TOOL_CALLS],
 * the tag Mistral writes before its calls, which reaches the text only with
 * skip_special_tokens false), a JSON list of {"name": "N", "arguments": value} headers
 * read as llama3's, separated by commas; text after the list is content.
 *
 * pythonic: at the start of the output (after whitespace), a Python list of calls
 * [f(a=1, b="x"), g()], held until its closing bracket and then read whole, as vLLM's
 * pythonic parser reads it with Python's ast: names are identifiers, arguments are
 * keywords whose values are literals (strings, numbers, True/False/None, lists, dicts
 * with string keys), each call's arguments become a JSON object. A list that does not
 * read that way (a positional argument, a variable, a name not among the tools, cut
 * short) stays content; text after the list is content. */
#include "grammar/tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    P_TEXT,    /* hermes: content, a tag may start */
    P_START,   /* llama3: the start of the output, a call may start */
    P_PLAIN,   /* llama3: content, no more calls */
    P_TAG,     /* a start tag being matched (hold) */
    P_HEAD,    /* a call's header being read (hold) */
    P_ARGS,    /* its arguments' value */
    P_TAIL,    /* after the value: up to </tool_call> (hermes) or "}" (llama3) */
    P_BETWEEN, /* llama3: after a call */
    P_PYLIST,  /* pythonic: the list of calls up to its closing bracket (hold) */
    P_MTAG,    /* mistral: after [TOOL_CALLS], before its list (hold) */
    P_MOPEN,   /* mistral: inside the list's "[", before its first call (hold) */
    P_DONE,
};

/* Header steps: what comes next after whitespace. With the arguments first, H_C1 is
 * followed by the value (P_ARGS), then H_COMMA .. H_V2S read the name. */
enum { H_OPEN, H_K1, H_K1S, H_C1, H_V1, H_V1S, H_COMMA, H_K2, H_K2S, H_C2, H_V2, H_V2S };

#define HOLD_MAX 4096         /* a header longer than this is not one */
#define HOLD_ARGS_MAX 1048576 /* nor arguments before a name longer than this */

static const char START_TAG[] = "<tool_call>", END_TAG[] = "</tool_call>",
                  PYTHON_TAG[] = "<|python_tag|>", MISTRAL_TAG[] = "[TOOL_CALLS]";

/* Formats whose calls come only at the start of the output. */
static bool at_start(lpx_tool_format f) {
    return f == LPX_TOOLS_LLAMA3 || f == LPX_TOOLS_PYTHONIC || f == LPX_TOOLS_MISTRAL;
}

static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void add(lpx_tool_parser *p, lpx_tool_buf *b, const char *s, size_t n) {
    if (p->oom || !n) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            p->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void lpx_tool_parser_init(lpx_tool_parser *p, const lpx_tool_rules *rules) {
    memset(p, 0, sizeof *p);
    p->rules = rules;
    p->f = rules ? rules->f : LPX_TOOLS_NONE;
    p->state = at_start(p->f) ? P_START : P_TEXT;
}

void lpx_tool_parser_free(lpx_tool_parser *p) {
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].args.p);
    }
    free(p->calls);
    free(p->content.p);
    free(p->hold.p);
    free(p->ws.p);
    free(p->gap.p);
    free(p->token.p);
    free(p->name);
    free(p->late.name);
    free(p->late.args.p);
    memset(p, 0, sizeof *p);
}

static int text_state(const lpx_tool_parser *p) {
    return at_start(p->f) ? P_PLAIN : P_TEXT;
}

/* n bytes of content (n > 0), after the whitespace held before them: past calls, the
 * whitespace before the calls (else after them) when content came before them too. */
static void content(lpx_tool_parser *p, const char *s, size_t n) {
    if (!p->after_call)
        add(p, &p->content, p->ws.p, p->ws.n);
    else if (p->content.n)
        add(p, &p->content, p->gap.n ? p->gap.p : p->ws.p, p->gap.n ? p->gap.n : p->ws.n);
    p->ws.n = p->gap.n = 0;
    add(p, &p->content, s, n);
    p->after_call = false;
}

/* The held text was no markup after all: content. */
static void give_up(lpx_tool_parser *p) {
    if (p->hold.n) content(p, p->hold.p, p->hold.n);
    p->hold.n = 0;
    p->args_first = false;
    p->state = text_state(p);
}

/* Whether the rules take a call of this name. */
static bool known(const lpx_tool_parser *p, const char *name) {
    if (!p->rules || !p->rules->names) return true;
    for (const char *q = p->rules->names; *q; q += strlen(q) + 1)
        if (!strcmp(q, name)) return true;
    return false;
}

/* A call is kept (named p->name): the held markup goes; the whitespace before it is the
 * gap (unless calls came right before); with a single call allowed, a later one is
 * read and dropped (*keep false). */
static void take_call(lpx_tool_parser *p, bool *keep) {
    *keep = !(p->rules && p->rules->single && p->n_calls > 0);
    if (*keep && p->n_calls == p->cap_calls) {
        size_t cap = p->cap_calls ? 2 * p->cap_calls : 4;
        lpx_tool_call *c = realloc(p->calls, cap * sizeof *c);
        if (!c) {
            p->oom = true;
            *keep = false;
            return;
        }
        p->calls = c;
        p->cap_calls = cap;
    }
    if (*keep) {
        p->calls[p->n_calls++] = (lpx_tool_call){.name = p->name};
    } else {
        free(p->name);
    }
    p->name = NULL;
    if (!p->after_call) {
        p->gap.n = 0;
        add(p, &p->gap, p->ws.p, p->ws.n);
    }
    p->ws.n = p->hold.n = 0;
}

/* The arguments' value comes next, into a. */
static void read_args(lpx_tool_parser *p, lpx_tool_buf *a) {
    p->args = a;
    p->state = P_ARGS;
    p->depth = -1;
    p->in_str = p->esc = p->prim = false;
}

/* The header so far named the call and its arguments come next (streamed). */
static void commit(lpx_tool_parser *p) {
    bool keep;
    take_call(p, &keep);
    p->late.args.n = 0;
    read_args(p, keep ? &p->calls[p->n_calls - 1].args : &p->late.args);
}

/* The name after the arguments was read: the call, whole. */
static void commit_late(lpx_tool_parser *p) {
    bool keep;
    take_call(p, &keep);
    if (keep) {
        p->calls[p->n_calls - 1].args = p->late.args;
        p->late.args = (lpx_tool_buf){0};
    }
    p->args_first = false;
    p->state = P_TAIL;
    p->tag_at = 0;
}

/* One byte of a JSON string being read into token; true at its closing quote. */
static bool string_byte(lpx_tool_parser *p, char c) {
    if (p->esc) {
        p->esc = false;
    } else if (c == '\\') {
        p->esc = true;
    } else if (c == '"') {
        return true;
    }
    add(p, &p->token, &c, 1);
    return false;
}

static bool token_is(const lpx_tool_parser *p, const char *s) {
    return p->token.n == strlen(s) && !memcmp(p->token.p, s, p->token.n);
}

/* The header's name: token as a JSON string's contents, decoded. */
static bool read_name(lpx_tool_parser *p) {
    char *q = malloc(p->token.n + 3);
    if (!q) return p->oom = true, false;
    q[0] = '"';
    if (p->token.n) memcpy(q + 1, p->token.p, p->token.n);
    q[p->token.n + 1] = '"';
    q[p->token.n + 2] = '\0';
    cJSON *s = cJSON_Parse(q);
    free(q);
    if (cJSON_IsString(s) && s->valuestring[0]) {
        size_t n = strlen(s->valuestring) + 1;
        free(p->name);
        if ((p->name = malloc(n))) memcpy(p->name, s->valuestring, n);
    }
    cJSON_Delete(s);
    return p->name && known(p, p->name);
}

static bool args_key(const lpx_tool_parser *p) {
    return token_is(p, "arguments") || token_is(p, "parameters");
}

/* A header byte; false when the header does not read as one. */
static bool head_byte(lpx_tool_parser *p, char c) {
    static const char expect[] = {[H_OPEN] = '{',  [H_K1] = '"', [H_C1] = ':', [H_V1] = '"',
                                  [H_COMMA] = ',', [H_K2] = '"', [H_C2] = ':', [H_V2] = '"'};
    if (p->head == H_K1S || p->head == H_V1S || p->head == H_K2S || p->head == H_V2S) {
        if (!string_byte(p, c)) return true;
        if (p->head == H_K1S) {
            p->args_first = args_key(p);
            if (!p->args_first && !token_is(p, "name")) return false;
        } else if (p->head == H_V1S || p->head == H_V2S) {
            if (!read_name(p)) return false;
            if (p->head == H_V2S) {
                commit_late(p);
                return true;
            }
        } else if (p->args_first ? !token_is(p, "name") : !args_key(p)) {
            return false;
        }
        p->head++;
        return true;
    }
    if (is_ws(c)) return true;
    if (c != expect[p->head]) return false;
    if (p->head == H_C2 && !p->args_first) {
        commit(p);
        return true;
    }
    if (p->head == H_C1 && p->args_first) {
        p->late.args.n = 0;
        read_args(p, &p->late.args);
        return true;
    }
    p->token.n = 0;
    p->esc = false;
    p->head++;
    return true;
}

/* The value has ended: the call's tail, or (arguments first) the rest of its header. */
static void args_done(lpx_tool_parser *p) {
    p->tag_at = 0;
    if (!p->args_first) {
        p->state = P_TAIL;
        return;
    }
    p->state = P_HEAD;
    p->head = H_COMMA;
}

/* One byte of the arguments' value; false when the byte ends the value without being
 * part of it (a primitive's end, or no value): it is read again in the next state. */
static bool args_byte(lpx_tool_parser *p, char c) {
    lpx_tool_buf *a = p->args;
    if (p->depth < 0) {
        if (is_ws(c)) return true;
        if (c == '}' || c == ']' || c == ',') { /* no value */
            args_done(p);
            return false;
        }
        p->depth = c == '{' || c == '[' ? 1 : 0;
        p->in_str = c == '"';
        p->prim = !p->depth && !p->in_str;
        add(p, a, &c, 1);
        return true;
    }
    if (p->in_str) {
        add(p, a, &c, 1);
        if (p->esc)
            p->esc = false;
        else if (c == '\\')
            p->esc = true;
        else if (c == '"') {
            p->in_str = false;
            if (p->depth == 0) args_done(p);
        }
        return true;
    }
    if (p->prim) {
        if (is_ws(c) || c == ',' || c == '}' || c == ']') {
            args_done(p);
            return false;
        }
        add(p, a, &c, 1);
        return true;
    }
    add(p, a, &c, 1);
    if (c == '"')
        p->in_str = true;
    else if (c == '{' || c == '[')
        p->depth++;
    else if ((c == '}' || c == ']') && --p->depth == 0)
        args_done(p);
    return true;
}

/* ---- pythonic ------------------------------------------------------------------ */

/* Reading a held Python list of calls: the text left, and the JSON being written. */
typedef struct py {
    lpx_tool_parser *p;
    const char *s, *end;
    lpx_tool_buf *out;
} py;

static void py_ws(py *x) {
    while (x->s < x->end && (is_ws(*x->s) || *x->s == '\f'))
        x->s++;
}

static bool py_eat(py *x, char c) {
    py_ws(x);
    if (x->s < x->end && *x->s == c) return x->s++, true;
    return false;
}

static bool is_ident(char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           (!first && c >= '0' && c <= '9');
}

/* An identifier: its length (0: none). */
static size_t py_ident(py *x) {
    py_ws(x);
    size_t n = 0;
    while (x->s + n < x->end && is_ident(x->s[n], n == 0))
        n++;
    return n;
}

static void py_out(py *x, const char *s, size_t n) {
    add(x->p, x->out, s, n);
}

/* Code point u as UTF-8 into the JSON text; false for a surrogate (no character). */
static bool py_utf8(py *x, unsigned long u) {
    char b[4];
    size_t n;
    if (u >= 0xD800 && u <= 0xDFFF) return false;
    if (u < 0x80) {
        b[0] = (char)u, n = 1;
    } else if (u < 0x800) {
        b[0] = (char)(0xC0 | u >> 6), b[1] = (char)(0x80 | (u & 0x3F)), n = 2;
    } else if (u < 0x10000) {
        b[0] = (char)(0xE0 | u >> 12), b[1] = (char)(0x80 | (u >> 6 & 0x3F));
        b[2] = (char)(0x80 | (u & 0x3F)), n = 3;
    } else {
        b[0] = (char)(0xF0 | u >> 18), b[1] = (char)(0x80 | (u >> 12 & 0x3F));
        b[2] = (char)(0x80 | (u >> 6 & 0x3F)), b[3] = (char)(0x80 | (u & 0x3F)), n = 4;
    }
    if (n == 1 && (u < 0x20 || u == '"' || u == '\\')) { /* JSON's escapes, as json.dumps */
        static const char short_esc[] = "btnvfr";
        char e[8];
        if (u == '"' || u == '\\')
            snprintf(e, sizeof e, "\\%c", (char)u);
        else if (u >= 8 && u <= 13 && u != 11)
            snprintf(e, sizeof e, "\\%c", short_esc[u - 8]);
        else
            snprintf(e, sizeof e, "\\u%04lx", u);
        py_out(x, e, strlen(e));
        return true;
    }
    py_out(x, b, n);
    return true;
}

/* k hex digits as a number; false when they are not. */
static bool py_hex(py *x, int k, unsigned long *u) {
    *u = 0;
    for (int i = 0; i < k; i++, x->s++) {
        if (x->s >= x->end) return false;
        char c = *x->s;
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return false;
        *u = *u * 16 + (unsigned long)d;
    }
    return true;
}

/* A Python string literal ('...' or "...", one line, its escapes) as a JSON string. */
static bool py_string(py *x) {
    char q = *x->s++;
    py_out(x, "\"", 1);
    while (x->s < x->end && *x->s != q) {
        char c = *x->s++;
        if (c == '\n') return false;
        if (c != '\\') { /* UTF-8 bytes pass as they are; JSON escapes the rest */
            if ((unsigned char)c >= 0x80)
                py_out(x, &c, 1);
            else
                py_utf8(x, (unsigned char)c);
            continue;
        }
        if (x->s >= x->end) return false;
        char e = *x->s++;
        unsigned long u;
        const char *simple = strchr("\\'\"abfnrtv", e);
        static const char val[] = "\\'\"\a\b\f\n\r\t\v";
        if (e && simple) {
            py_utf8(x, (unsigned char)val[simple - "\\'\"abfnrtv"]);
        } else if (e == '\n') { /* a line continued */
        } else if (e >= '0' && e <= '7') {
            u = (unsigned long)(e - '0');
            for (int i = 0; i < 2 && x->s < x->end && *x->s >= '0' && *x->s <= '7'; i++)
                u = u * 8 + (unsigned long)(*x->s++ - '0');
            py_utf8(x, u);
        } else if (e == 'x' || e == 'u' || e == 'U') {
            if (!py_hex(x, e == 'x' ? 2 : e == 'u' ? 4 : 8, &u) || u > 0x10FFFF || !py_utf8(x, u))
                return false;
        } else if (e == 'N') {
            return false; /* \N{name}: not read */
        } else {          /* Python keeps an unknown escape as it is */
            py_utf8(x, '\\');
            py_utf8(x, (unsigned char)e);
        }
    }
    if (x->s >= x->end) return false;
    x->s++;
    py_out(x, "\"", 1);
    return true;
}

/* Digits with Python's single underscores between them; how many digits. */
static size_t py_digits(py *x) {
    size_t k = 0;
    while (x->s < x->end) {
        if (*x->s >= '0' && *x->s <= '9')
            k++, x->s++;
        else if (*x->s == '_' && k && x->s + 1 < x->end && x->s[1] >= '0' && x->s[1] <= '9')
            x->s++;
        else
            break;
    }
    return k;
}

/* Digits [from, to) without their underscores into the JSON text. */
static void py_out_digits(py *x, const char *from, const char *to) {
    for (const char *q = from; q < to; q++)
        if (*q != '_') py_out(x, q, 1);
}

/* A number literal (a sign before it, as ast.literal_eval takes one) as JSON. */
static bool py_number(py *x) {
    if (x->s < x->end && (*x->s == '-' || *x->s == '+')) {
        if (*x->s == '-') py_out(x, "-", 1);
        x->s++;
        py_ws(x);
    }
    const char *int0 = x->s;
    size_t int_digits = py_digits(x);
    const char *int1 = x->s, *frac0 = NULL, *frac1 = NULL;
    size_t frac = 0;
    if (x->s < x->end && *x->s == '.') {
        frac0 = ++x->s;
        frac = py_digits(x);
        frac1 = x->s;
    }
    if (int_digits + frac == 0) return false;
    /* Python 3 has no leading zeros (007) but 00 is 0; JSON has neither */
    bool zeros = int_digits > 1 && *int0 == '0';
    for (const char *q = int0; zeros && q < int1; q++)
        if (*q != '0' && *q != '_') return false;
    if (!int_digits || zeros)
        py_out(x, "0", 1);
    else
        py_out_digits(x, int0, int1);
    if (frac0) {
        py_out(x, ".", 1);
        if (frac)
            py_out_digits(x, frac0, frac1);
        else
            py_out(x, "0", 1);
    }
    if (x->s < x->end && (*x->s == 'e' || *x->s == 'E')) {
        py_out(x, x->s++, 1);
        if (x->s < x->end && (*x->s == '+' || *x->s == '-')) py_out(x, x->s++, 1);
        const char *e0 = x->s;
        if (!py_digits(x)) return false;
        py_out_digits(x, e0, x->s);
    }
    /* hex, complex and other forms: not a number of JSON */
    return !(x->s < x->end && (is_ident(*x->s, false) || *x->s == '.'));
}

static bool py_value(py *x, int depth);

/* Items of a list or dict up to close, separated by commas (a trailing one allowed). */
static bool py_items(py *x, char close, bool dict, int depth) {
    for (bool first = true;; first = false) {
        if (py_eat(x, close)) return true;
        if (!first) py_out(x, ", ", 2);
        if (dict) {
            py_ws(x);
            if (x->s >= x->end || (*x->s != '"' && *x->s != '\'')) return false;
            if (!py_string(x) || !py_eat(x, ':')) return false;
            py_out(x, ": ", 2);
        }
        if (!py_value(x, depth + 1)) return false;
        if (!py_eat(x, ',')) return py_eat(x, close);
    }
}

/* A literal value as JSON (json.dumps' spacing: ", " and ": "). */
static bool py_value(py *x, int depth) {
    py_ws(x);
    if (x->s >= x->end || depth > 64) return false;
    char c = *x->s;
    if (c == '"' || c == '\'') return py_string(x);
    if (c == '[' || c == '{') {
        x->s++;
        py_out(x, &c, 1);
        char close = c == '[' ? ']' : '}';
        if (!py_items(x, close, c == '{', depth)) return false;
        py_out(x, &close, 1);
        return true;
    }
    size_t n = py_ident(x);
    static const char *const words[][2] = {{"True", "true"}, {"False", "false"}, {"None", "null"}};
    for (size_t i = 0; n && i < 3; i++)
        if (n == strlen(words[i][0]) && !memcmp(x->s, words[i][0], n)) {
            x->s += n;
            py_out(x, words[i][1], strlen(words[i][1]));
            return true;
        }
    return !n && py_number(x);
}

/* One call name(k=v, ...) into p->calls (its name checked against the rules). */
static bool py_call(py *x) {
    lpx_tool_parser *p = x->p;
    size_t n = py_ident(x);
    if (!n) return false;
    char *name = malloc(n + 1);
    if (!name) return p->oom = true, false;
    memcpy(name, x->s, n);
    name[n] = '\0';
    x->s += n;
    if (!known(p, name) || !py_eat(x, '(')) {
        free(name);
        return false;
    }
    free(p->name);
    p->name = name;
    bool keep;
    take_call(p, &keep);
    p->after_call = true; /* the whitespace before the list stays its gap */
    lpx_tool_buf *a = keep ? &p->calls[p->n_calls - 1].args : &p->late.args;
    a->n = 0;
    x->out = a;
    py_out(x, "{", 1);
    const char *keys[64];
    size_t key_n[64], n_keys = 0;
    for (bool first = true;; first = false) {
        if (py_eat(x, ')')) break;
        size_t k = py_ident(x);
        if (!k || n_keys == 64) return false; /* a positional argument, *args, **kw */
        for (size_t i = 0; i < n_keys; i++)
            if (key_n[i] == k && !memcmp(keys[i], x->s, k)) return false; /* given twice */
        keys[n_keys] = x->s, key_n[n_keys++] = k;
        if (!first) py_out(x, ", ", 2);
        py_out(x, "\"", 1);
        py_out(x, x->s, k);
        py_out(x, "\": ", 3);
        x->s += k;
        if (!py_eat(x, '=') || !py_value(x, 0)) return false;
        if (!py_eat(x, ',')) {
            if (!py_eat(x, ')')) return false;
            break;
        }
    }
    py_out(x, "}", 1);
    return true;
}

/* The list in hold has closed: its calls, or (not a list of calls) content. */
static void py_list_done(lpx_tool_parser *p) {
    py x = {.p = p, .s = p->hold.p + 1, .end = p->hold.p + p->hold.n};
    size_t n0 = p->n_calls, held = p->hold.n; /* take_call empties hold, not its bytes */
    lpx_tool_buf ws0 = {0}, gap0 = {0};
    add(p, &ws0, p->ws.p, p->ws.n); /* take_call consumes them; a failure gives them back */
    add(p, &gap0, p->gap.p, p->gap.n);
    bool after0 = p->after_call, ok = true;
    for (bool first = true; ok && !p->oom; first = false) {
        if (!first && !py_eat(&x, ',')) {
            ok = py_eat(&x, ']');
            break;
        }
        if (py_eat(&x, ']')) {
            ok = !first; /* [] and [,] call nothing */
            break;
        }
        ok = py_call(&x);
    }
    py_ws(&x);
    ok = ok && x.s == x.end;
    if (ok && !p->oom) {
        p->hold.n = 0;
        p->state = P_PLAIN;
    } else {
        while (p->n_calls > n0) {
            p->n_calls--;
            free(p->calls[p->n_calls].name);
            free(p->calls[p->n_calls].args.p);
        }
        p->ws.n = p->gap.n = 0;
        add(p, &p->ws, ws0.p, ws0.n);
        add(p, &p->gap, gap0.p, gap0.n);
        p->after_call = after0;
        p->hold.n = held;
        give_up(p);
    }
    free(ws0.p);
    free(gap0.p);
}

static void byte(lpx_tool_parser *p, char c);

static void start_head(lpx_tool_parser *p, char c) {
    p->state = P_HEAD;
    p->head = H_OPEN;
    p->hold.n = 0;
    byte(p, c);
}

static void byte(lpx_tool_parser *p, char c) {
    bool mistral = p->f == LPX_TOOLS_MISTRAL;
    const char *tag = p->f == LPX_TOOLS_LLAMA3 ? PYTHON_TAG : mistral ? MISTRAL_TAG : START_TAG;
    switch (p->state) {
    case P_START:
    case P_BETWEEN:
        if (is_ws(c) || (p->state == P_BETWEEN && c == (mistral ? ',' : ';'))) {
            if (p->state == P_START) add(p, &p->ws, &c, 1);
            return;
        }
        if (mistral && p->state == P_BETWEEN) { /* the list goes on, or ends */
            p->state = c == '{' ? P_BETWEEN : P_PLAIN;
            if (c == '{')
                start_head(p, c);
            else if (c != ']')
                byte(p, c);
            return;
        }
        if (mistral) { /* its tag, or its list at once */
            p->state = c == '[' ? P_TAG : P_PLAIN;
            p->hold.n = 0;
            if (c == '[')
                add(p, &p->hold, &c, 1);
            else
                byte(p, c);
            return;
        }
        if (p->f == LPX_TOOLS_PYTHONIC) {
            p->state = c == '[' ? P_PYLIST : P_PLAIN;
            p->hold.n = 0;
            p->depth = 0;
            p->quote = 0;
            p->esc = false;
            byte(p, c);
            return;
        }
        if (c == '{') {
            start_head(p, c);
            return;
        }
        if (c == '<') {
            p->state = P_TAG;
            p->hold.n = 0;
            add(p, &p->hold, &c, 1);
            return;
        }
        p->state = P_PLAIN;
        byte(p, c);
        return;
    case P_TEXT:
    case P_PLAIN:
        if (is_ws(c)) {
            add(p, &p->ws, &c, 1);
            return;
        }
        if (p->state == P_TEXT && c == '<') {
            p->state = P_TAG;
            p->hold.n = 0;
            add(p, &p->hold, &c, 1);
            return;
        }
        content(p, &c, 1);
        return;
    case P_TAG:
        add(p, &p->hold, &c, 1);
        if (p->hold.n <= strlen(tag) && !memcmp(p->hold.p, tag, p->hold.n)) {
            if (p->hold.n == strlen(tag)) {
                p->state = mistral ? P_MTAG : P_HEAD;
                p->head = H_OPEN;
            }
            return;
        }
        p->hold.n--;
        if (mistral && p->hold.n == 1) { /* "[" and no tag: the list itself */
            p->state = P_MOPEN;
            byte(p, c);
            return;
        }
        give_up(p);
        byte(p, c);
        return;
    case P_MTAG:
    case P_MOPEN:
        if (p->state == P_MOPEN && c == '{') { /* the first call's header */
            p->state = P_HEAD;
            p->head = H_OPEN;
            byte(p, c);
            return;
        }
        if (is_ws(c) || (p->state == P_MTAG && c == '[')) {
            add(p, &p->hold, &c, 1);
            if (c == '[') p->state = P_MOPEN;
            return;
        }
        give_up(p);
        byte(p, c);
        return;
    case P_HEAD:
        add(p, &p->hold, &c, 1);
        if (p->hold.n <= (p->args_first ? HOLD_ARGS_MAX : HOLD_MAX) && head_byte(p, c)) return;
        p->hold.n--;
        give_up(p);
        byte(p, c);
        return;
    case P_ARGS:
        if (!args_byte(p, c)) {
            byte(p, c);
            return;
        }
        if (!p->args_first) return;
        add(p, &p->hold, &c, 1); /* held: content if no name follows */
        if (p->hold.n > HOLD_ARGS_MAX) give_up(p);
        return;
    case P_PYLIST:
        add(p, &p->hold, &c, 1);
        if (p->hold.n > HOLD_ARGS_MAX) {
            p->hold.n--;
            give_up(p);
            byte(p, c);
            return;
        }
        /* brackets outside the list's strings, to find its end */
        if (p->quote) {
            if (p->esc)
                p->esc = false;
            else if (c == '\\')
                p->esc = true;
            else if (c == p->quote)
                p->quote = 0;
        } else if (c == '"' || c == '\'') {
            p->quote = c;
        } else if (c == '[' || c == '(' || c == '{') {
            p->depth++;
        } else if ((c == ']' || c == ')' || c == '}') && --p->depth == 0) {
            py_list_done(p);
        }
        return;
    case P_TAIL:
        if (p->f == LPX_TOOLS_LLAMA3 || mistral) {
            if (is_ws(c)) return;
            p->state = P_BETWEEN;
            p->after_call = true;
            if (c != '}') byte(p, c);
            return;
        }
        if (c == END_TAG[p->tag_at]) {
            if (++p->tag_at == (int)strlen(END_TAG)) {
                p->state = P_TEXT;
                p->after_call = true;
            }
        } else {
            p->tag_at = c == '<';
        }
        return;
    default:
        return;
    }
}

bool lpx_tool_parser_feed(lpx_tool_parser *p, const char *s, size_t n) {
    for (size_t i = 0; i < n && !p->oom; i++)
        byte(p, s[i]);
    return !p->oom;
}

bool lpx_tool_parser_finish(lpx_tool_parser *p) {
    /* held markup, or arguments whose name never came: content */
    if (p->state == P_TAG || p->state == P_HEAD || p->state == P_PYLIST || p->state == P_MTAG ||
        p->state == P_MOPEN || (p->state == P_ARGS && p->args_first))
        give_up(p);
    if (p->state != P_ARGS && p->state != P_TAIL && !p->after_call)
        add(p, &p->content, p->ws.p, p->ws.n);
    p->ws.n = p->gap.n = 0;
    p->state = P_DONE;
    return !p->oom;
}

cJSON *lpx_tool_message(const lpx_tool_rules *rules, const char *text, size_t n,
                        const char *id_prefix, size_t *n_calls) {
    lpx_tool_parser p;
    lpx_tool_parser_init(&p, rules);
    bool ok = lpx_tool_parser_feed(&p, text, n) && lpx_tool_parser_finish(&p);
    cJSON *m = ok ? cJSON_CreateObject() : NULL;
    cJSON_AddStringToObject(m, "role", "assistant");
    if (p.content.n)
        cJSON_AddStringToObject(m, "content", p.content.p);
    else
        cJSON_AddNullToObject(m, "content");
    cJSON *calls = m && p.n_calls ? cJSON_AddArrayToObject(m, "tool_calls") : NULL;
    for (size_t i = 0; calls && i < p.n_calls; i++) {
        char id[96];
        lpx_tool_call_id(rules ? rules->f : LPX_TOOLS_NONE, id_prefix, i, id, sizeof id);
        cJSON *o = cJSON_CreateObject(), *fn;
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "type", "function");
        fn = cJSON_AddObjectToObject(o, "function");
        cJSON_AddStringToObject(fn, "name", p.calls[i].name);
        cJSON_AddStringToObject(fn, "arguments", p.calls[i].args.n ? p.calls[i].args.p : "");
        cJSON_AddItemToArray(calls, o);
    }
    *n_calls = p.n_calls;
    lpx_tool_parser_free(&p);
    return m;
}

/* String patterns (a regex subset: docs/structured-outputs.md) into rules over the
 * JSON text of a string's contents. The whole string matches the pattern (as if it
 * were ^...$), which also satisfies JSON Schema's unanchored search.
 *
 * The pattern is parsed into a tree whose leaves are single characters (a rule that
 * reads one character's JSON text: a byte, an escape, a UTF-8 sequence), the tree into
 * an automaton over those characters (Thompson's construction), and the automaton into
 * right-linear rules, one per (state, characters so far) pair: that count is how a
 * string schema's minLength/maxLength apply to a pattern (the pattern's automaton times
 * a counter). Pairs from which no string of an allowed length ends are left out, so
 * every prefix the rules take can still be completed. Without bounds the count is
 * always 0: one rule per state. */
#include "grammar/grammar_int.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A tree node: CHAR (a: the character's rule), EMPTY, CAT and ALT (a, b: children),
 * REP (a: child, min..max times, max -1: no bound). */
enum { N_CHAR, N_EMPTY, N_CAT, N_ALT, N_REP };

typedef struct rnode {
    uint8_t kind;
    int32_t a, b;
    int32_t min, max;
} rnode;

/* An automaton edge: reads character rule lbl (-1: none, an epsilon edge). */
typedef struct redge {
    int32_t lbl, to, next; /* next: the state's next edge, -1 at the end */
} redge;

/* Automaton states past this are a pattern too large to compile (each state ends up as
 * at least one rule; the grammar has room for LPX_GRAMMAR_MAX_ELEMS elements). */
#define RX_MAX_STATES (1 << 20)
/* States visited while closing the automaton over epsilon edges, at most: optional
 * pieces repeated many times ((a?){4096}) make closures of thousands of states each. */
#define RX_MAX_WORK (1 << 25)

typedef struct rx {
    gjson *j;
    const char *p, *end;
    char *err;
    size_t cap;
    bool failed;
    rnode *node; /* [n_node] the tree */
    size_t n_node, cap_node;
    int32_t *first; /* [n_state] each state's first edge, -1: none */
    redge *edge;    /* [n_edge] */
    size_t n_state, cap_state, n_edge, cap_edge;
} rx;

static int32_t rx_fail(rx *r, const char *what) {
    if (!r->failed) snprintf(r->err, r->cap, "%s", what);
    r->failed = true;
    return -1;
}

static bool rx_grow(rx *r, void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return rx_fail(r, "out of memory"), false;
    *p = q;
    *cap = c;
    return true;
}

static int32_t node(rx *r, uint8_t kind, int32_t a, int32_t b) {
    if (r->failed || !rx_grow(r, (void **)&r->node, &r->cap_node, r->n_node + 1, sizeof *r->node))
        return -1;
    r->node[r->n_node] = (rnode){.kind = kind, .a = a, .b = b};
    return (int32_t)r->n_node++;
}

/* A tree leaf for one character's rule (or -1 after a failure). */
static int32_t leaf(rx *r, int32_t rule) {
    return rule < 0 ? -1 : node(r, N_CHAR, rule, 0);
}

/* A character of set (ASCII, bits 0..127) as JSON string text: printable ones as
 * themselves, " and \ and the control characters \t \n \r \f as their escapes. */
static int32_t char_rule(rx *r, const uint8_t set[32]) {
    lpx_grammar *g = r->j->g;
    uint8_t plain[32] = {0};
    bool any_plain = false;
    for (unsigned b = 0x20; b < 0x80; b++)
        if (g_has_bit(set, b) && b != '"' && b != '\\') g_set_bit(plain, b), any_plain = true;
    gseq alts[7] = {{0}};
    size_t n = 0;
    if (any_plain) seq_cls(&alts[n++], g_class(g, plain));
    static const char esc[][2] = {{'"', '"'},  {'\\', '\\'}, {'\n', 'n'},
                                  {'\t', 't'}, {'\r', 'r'},  {'\f', 'f'}};
    for (size_t i = 0; i < sizeof esc / sizeof *esc; i++)
        if (g_has_bit(set, (unsigned char)esc[i][0])) {
            seq_byte(&alts[n], '\\');
            seq_byte(&alts[n++], (uint8_t)esc[i][1]);
        }
    if (n == 0) return rx_fail(r, "a character class that matches no character");
    return g_rule_of(g, alts, n);
}

static void set_range(uint8_t set[32], unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi; b++)
        g_set_bit(set, b);
}

/* \d \w \s and their negations (within printable ASCII) into set; false: not one. */
static bool class_escape(char c, uint8_t set[32]) {
    uint8_t s[32] = {0};
    char lower = (char)(c | 0x20);
    if (lower == 'd')
        set_range(s, '0', '9');
    else if (lower == 'w')
        set_range(s, '0', '9'), set_range(s, 'a', 'z'), set_range(s, 'A', 'Z'), g_set_bit(s, '_');
    else if (lower == 's')
        g_set_bit(s, ' '), g_set_bit(s, '\t'), g_set_bit(s, '\n'), g_set_bit(s, '\r'),
            g_set_bit(s, '\f');
    else
        return false;
    bool neg = c != lower;
    for (unsigned b = 0; b < 128; b++)
        if (neg ? (b >= 0x20 && b < 0x7f && !g_has_bit(s, b)) : g_has_bit(s, b)) g_set_bit(set, b);
    return true;
}

/* The character of a simple escape \c (a punctuation mark, or n t r f), -1: none. */
static int escape_char(char c) {
    switch (c) {
    case 'n':
        return '\n';
    case 't':
        return '\t';
    case 'r':
        return '\r';
    case 'f':
        return '\f';
    }
    if (c > 0x20 && c < 0x7f && !((c | 0x20) >= 'a' && (c | 0x20) <= 'z') &&
        !(c >= '0' && c <= '9'))
        return c;
    return -1;
}

static int32_t class_rule(rx *r) {
    uint8_t set[32] = {0};
    bool neg = r->p < r->end && *r->p == '^';
    if (neg) r->p++;
    bool first = true;
    while (r->p < r->end && (*r->p != ']' || first)) {
        first = false;
        int lo;
        if (*r->p == '\\') {
            if (r->p + 1 >= r->end) return rx_fail(r, "a pattern ends in a backslash");
            char e = r->p[1];
            r->p += 2;
            if ((e | 0x20) == 'd' || (e | 0x20) == 'w' || (e | 0x20) == 's') {
                if (e >= 'A' && e <= 'Z')
                    return rx_fail(r, "\\D \\W \\S inside a class are not supported");
                class_escape(e, set);
                continue;
            }
            if ((lo = escape_char(e)) < 0)
                return rx_fail(r, "an escape in a class is not supported");
        } else {
            lo = (unsigned char)*r->p++;
        }
        if (lo >= 0x80) return rx_fail(r, "non-ASCII characters in a class are not supported");
        int hi = lo;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            r->p++;
            if (*r->p == '\\') {
                if (r->p + 1 >= r->end || (hi = escape_char(r->p[1])) < 0)
                    return rx_fail(r, "a class range ends in an unsupported escape");
                r->p += 2;
            } else {
                hi = (unsigned char)*r->p++;
            }
            if (hi >= 0x80) return rx_fail(r, "non-ASCII characters in a class are not supported");
            if (hi < lo) return rx_fail(r, "a class range is reversed");
        }
        set_range(set, (unsigned)lo, (unsigned)hi);
    }
    if (r->p >= r->end) return rx_fail(r, "a '[' class is not closed");
    r->p++;
    if (neg) {
        uint8_t n[32] = {0};
        for (unsigned b = 0x20; b < 0x7f; b++)
            if (!g_has_bit(set, b)) g_set_bit(n, b);
        memcpy(set, n, 32);
    }
    return char_rule(r, set);
}

static int32_t rx_alt(rx *r);

static int32_t atom(rx *r) {
    char c = *r->p;
    uint8_t set[32] = {0};
    if (c == '(') {
        r->p++;
        if (r->p < r->end && *r->p == '?') {
            if (r->p + 1 < r->end && r->p[1] == ':')
                r->p += 2;
            else
                return rx_fail(r, "lookarounds and named groups are not supported");
        }
        int32_t g = rx_alt(r);
        if (g < 0) return -1;
        if (r->p >= r->end || *r->p != ')') return rx_fail(r, "a '(' group is not closed");
        r->p++;
        return g;
    }
    if (c == '[') {
        r->p++;
        return leaf(r, class_rule(r));
    }
    if (c == '.') {
        r->p++;
        set_range(set, 0x20, 0x7e);
        g_set_bit(set, '\t');
        return leaf(r, char_rule(r, set));
    }
    if (c == '*' || c == '+' || c == '?' || c == '{')
        return rx_fail(r, "a quantifier has nothing to repeat");
    if (c == '^' || c == '$')
        return rx_fail(r, "anchors are supported only at the start (^) and the end ($)");
    if (c == '\\') {
        if (r->p + 1 >= r->end) return rx_fail(r, "a pattern ends in a backslash");
        char e = r->p[1];
        r->p += 2;
        if (class_escape(e, set)) return leaf(r, char_rule(r, set));
        int ch = escape_char(e);
        if (ch < 0)
            return rx_fail(r, "an escape is not supported (\\d \\w \\s \\D \\W \\S, \\n \\t \\r "
                              "\\f and escaped punctuation are)");
        g_set_bit(set, (unsigned)ch);
        return leaf(r, char_rule(r, set));
    }
    unsigned char b = (unsigned char)c;
    if (b < 0x80) {
        if (b < 0x20 && b != '\n' && b != '\t' && b != '\r' && b != '\f')
            return rx_fail(r, "a control character in a pattern is not supported");
        r->p++;
        g_set_bit(set, b);
        return leaf(r, char_rule(r, set));
    }
    /* A UTF-8 character: its bytes, which are its JSON text. */
    int len = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 0;
    if (len == 0 || r->p + len > r->end) return rx_fail(r, "a pattern is not valid UTF-8");
    gseq s = {0};
    seq_lit(&s, r->p, (size_t)len);
    r->p += len;
    return leaf(r, g_rule_of(r->j->g, &s, 1));
}

/* A decimal number of a {m,n} quantifier; -1 when there is none. */
static int64_t number(rx *r) {
    int64_t v = -1;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (*r->p++ - '0');
        if (v > 1000000) v = 1000000;
    }
    return v;
}

static bool quantifier(rx *r, int64_t *min, int64_t *max) {
    char c = *r->p;
    if (c == '?' || c == '*' || c == '+') {
        r->p++;
        *min = c == '+';
        *max = c == '?' ? 1 : -1;
    } else if (c == '{') {
        r->p++;
        *min = number(r);
        *max = *min;
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            *max = number(r);
        }
        if (*min < 0 || r->p >= r->end || *r->p != '}')
            return rx_fail(r, "'{' must begin a {m}, {m,} or {m,n} quantifier (escape a brace "
                              "as \\{)"),
                   false;
        r->p++;
        if (*max >= 0 && *max < *min) return rx_fail(r, "a {m,n} quantifier has n < m"), false;
        if (*min > LPX_GRAMMAR_MAX_REPEAT || *max > LPX_GRAMMAR_MAX_REPEAT)
            return rx_fail(r, "a {m,n} quantifier above 4096 is not supported"), false;
    } else {
        return false;
    }
    if (r->p < r->end && *r->p == '?') r->p++; /* lazy: the same strings */
    if (r->p < r->end && (*r->p == '+' || *r->p == '*' || *r->p == '{'))
        return rx_fail(r, "a quantifier after a quantifier is not supported"), false;
    return true;
}

/* Alternatives of concatenations, as a tree. At most 64 a group: the matcher follows 64
 * paths at once (LPX_GRAMMAR_MAX_STACKS), and more alternatives sharing a beginning would
 * lose some silently. */
static int32_t rx_alt(rx *r) {
    int32_t alt = -1, cat = node(r, N_EMPTY, 0, 0), n_alt = 1;
    while (!r->failed && r->p < r->end && *r->p != ')') {
        if (*r->p == '|') {
            r->p++;
            if (++n_alt > 64) rx_fail(r, "more than 64 alternatives in a group are not supported");
            alt = alt < 0 ? cat : node(r, N_ALT, alt, cat);
            cat = node(r, N_EMPTY, 0, 0);
            continue;
        }
        int32_t a = atom(r);
        if (a < 0) break;
        int64_t min, max;
        if (r->p < r->end && quantifier(r, &min, &max)) {
            a = node(r, N_REP, a, 0);
            if (a >= 0) r->node[a].min = (int32_t)min, r->node[a].max = (int32_t)max;
        }
        if (!r->failed) cat = node(r, N_CAT, cat, a);
    }
    if (r->failed) return -1;
    return alt < 0 ? cat : node(r, N_ALT, alt, cat);
}

/* ---- the automaton ------------------------------------------------------------- */

static int32_t state(rx *r) {
    if (r->failed) return 0;
    if (r->n_state >= RX_MAX_STATES)
        return rx_fail(r, "the pattern is too large (its repetitions make more than 2^20 "
                          "states)"),
               0;
    if (!rx_grow(r, (void **)&r->first, &r->cap_state, r->n_state + 1, sizeof *r->first)) return 0;
    r->first[r->n_state] = -1;
    return (int32_t)r->n_state++;
}

static void edge(rx *r, int32_t from, int32_t lbl, int32_t to) {
    if (r->failed || !rx_grow(r, (void **)&r->edge, &r->cap_edge, r->n_edge + 1, sizeof *r->edge))
        return;
    r->edge[r->n_edge] = (redge){lbl, to, r->first[from]};
    r->first[from] = (int32_t)r->n_edge++;
}

/* Node k's automaton from state `from`; returns its end state. Every piece begins at a
 * state of its own (entered by an epsilon edge), so a loop back to it never lets the
 * text before it repeat. */
static int32_t build(rx *r, int32_t k, int32_t from) {
    if (r->failed) return from;
    const rnode *n = &r->node[k];
    int32_t s = state(r), e;
    edge(r, from, -1, s);
    switch (n->kind) {
    case N_CHAR:
        e = state(r);
        edge(r, s, n->a, e);
        return e;
    case N_EMPTY:
        return s;
    case N_CAT:
    case N_ALT: {
        /* rx_alt makes left-deep chains, one link a piece: walked, not recursed, so a
         * long pattern or a long list of alternatives costs no C stack */
        size_t len = 0;
        int32_t q = k;
        for (; r->node[q].kind == n->kind; q = r->node[q].a)
            len++;
        int32_t *piece = malloc((len + 1) * sizeof *piece);
        if (!piece) return rx_fail(r, "out of memory"), s;
        piece[0] = q;
        for (int32_t x = k, i = (int32_t)len; i > 0; x = r->node[x].a)
            piece[i--] = r->node[x].b;
        e = n->kind == N_ALT ? state(r) : s;
        for (size_t i = 0; i <= len && !r->failed; i++)
            if (n->kind == N_CAT)
                e = build(r, piece[i], e);
            else
                edge(r, build(r, piece[i], s), -1, e);
        free(piece);
        return e;
    }
    }
    int32_t a = n->a, min = n->min, max = n->max; /* N_REP */
    for (int32_t i = 0; i < min; i++)
        s = build(r, a, s);
    if (max < 0) { /* a loop */
        edge(r, build(r, a, s), -1, s);
        return s;
    }
    e = state(r);
    for (int32_t i = min; i < max && !r->failed; i++) {
        edge(r, s, -1, e);
        s = build(r, a, s);
    }
    edge(r, s, -1, e);
    return e;
}

/* The automaton without epsilon edges: for each state that a character leads to (and
 * the start), the characters its epsilon closure reads and where each leads, and
 * whether the closure holds the end. */
typedef struct rclosed {
    int32_t n;         /* states kept */
    int32_t *id;       /* [n_state] its index among the kept, -1: not kept */
    int32_t *e0;       /* [n + 1] kept state i's edges: lbl/to[e0[i] .. e0[i + 1]) */
    int32_t *lbl, *to; /* to: kept indices */
    bool *accept;      /* [n] */
} rclosed;

static void closed_free(rclosed *c) {
    free(c->id);
    free(c->e0);
    free(c->lbl);
    free(c->to);
    free(c->accept);
}

static bool close_automaton(rx *r, int32_t start, int32_t end, rclosed *c) {
    size_t ns = r->n_state;
    memset(c, 0, sizeof *c);
    c->id = malloc(ns * sizeof *c->id);
    int32_t *seen = malloc(ns * sizeof *seen), *todo = malloc(ns * sizeof *todo);
    int32_t *kept = malloc(ns * sizeof *kept);
    c->e0 = malloc((ns + 1) * sizeof *c->e0);
    c->accept = malloc(ns * sizeof *c->accept);
    size_t cap = 0, n_e = 0, steps = 0;
    bool ok = c->id && seen && todo && kept && c->e0 && c->accept;
    if (ok) {
        for (size_t i = 0; i < ns; i++)
            c->id[i] = -1, seen[i] = -1;
        c->id[start] = 0;
        kept[c->n++] = start;
        for (size_t i = 0; i < r->n_edge; i++)
            if (r->edge[i].lbl >= 0 && c->id[r->edge[i].to] < 0) {
                c->id[r->edge[i].to] = c->n;
                kept[c->n++] = r->edge[i].to;
            }
    }
    for (int32_t k = 0; ok && k < c->n; k++) {
        c->e0[k] = (int32_t)n_e;
        c->accept[k] = false;
        int32_t n_todo = 0;
        todo[n_todo++] = kept[k];
        seen[kept[k]] = k;
        while (ok && n_todo) {
            int32_t q = todo[--n_todo];
            if (++steps > RX_MAX_WORK) {
                rx_fail(r, "the pattern is too complex (optional pieces repeated too often)");
                ok = false;
                break;
            }
            if (q == end) c->accept[k] = true;
            for (int32_t e = r->first[q]; e >= 0; e = r->edge[e].next) {
                const redge *x = &r->edge[e];
                if (x->lbl < 0) {
                    if (seen[x->to] != k) seen[x->to] = k, todo[n_todo++] = x->to;
                    continue;
                }
                /* A character's edge is the only way into its end state, so a closure
                 * meets each edge once. The closures' edges are bounded like rules. */
                if (n_e == (size_t)LPX_GRAMMAR_MAX_ELEMS) {
                    rx_fail(r, "the pattern is too large (its automaton has more than 2^22 "
                               "edges without epsilons)");
                    ok = false;
                    break;
                }
                if (n_e == cap) {
                    cap = cap ? cap * 2 : 64;
                    int32_t *l = realloc(c->lbl, cap * sizeof *l);
                    if (l) c->lbl = l;
                    int32_t *t = realloc(c->to, cap * sizeof *t);
                    if (t) c->to = t;
                    ok = l && t;
                    if (!ok) break;
                }
                c->lbl[n_e] = x->lbl;
                c->to[n_e++] = c->id[x->to];
            }
        }
    }
    if (ok) c->e0[c->n] = (int32_t)n_e;
    free(seen);
    free(todo);
    free(kept);
    if (!ok) rx_fail(r, "out of memory");
    if (!ok) closed_free(c);
    return ok;
}

/* ---- rules of (state, count) pairs ------------------------------------------------ */

/* Marks live in column col every state with a path to one already marked there
 * (predecessor lists, then a worklist); false when out of memory. */
static bool reach_back(const rclosed *c, bool *live, size_t w, size_t col) {
    size_t n_e = (size_t)c->e0[c->n];
    int32_t *p0 = calloc((size_t)c->n + 1, sizeof *p0), *pred = malloc((n_e + 1) * sizeof *pred);
    int32_t *todo = malloc(((size_t)c->n + 1) * sizeof *todo);
    bool ok = p0 && pred && todo;
    if (ok) {
        for (size_t e = 0; e < n_e; e++)
            p0[c->to[e] + 1]++;
        for (int32_t k = 0; k < c->n; k++)
            p0[k + 1] += p0[k];
        int32_t *fill = todo; /* reused as each list's fill position */
        memcpy(fill, p0, (size_t)c->n * sizeof *fill);
        for (int32_t k = 0; k < c->n; k++)
            for (int32_t e = c->e0[k]; e < c->e0[k + 1]; e++)
                pred[fill[c->to[e]]++] = k;
        int32_t n_todo = 0;
        for (int32_t k = 0; k < c->n; k++)
            if (live[(size_t)k * w + col]) todo[n_todo++] = k;
        while (n_todo) {
            int32_t k = todo[--n_todo];
            for (int32_t i = p0[k]; i < p0[k + 1]; i++) {
                bool *l = &live[(size_t)pred[i] * w + col];
                if (!*l) *l = true, todo[n_todo++] = pred[i];
            }
        }
    }
    free(p0);
    free(pred);
    free(todo);
    return ok;
}

/* The rules of the closed automaton c with between lo and hi characters (hi -1: no
 * upper bound). The count runs 0..hi, or 0..lo and stays at lo (all that matters once
 * the minimum is reached). */
static int32_t emit(rx *r, const rclosed *c, int64_t lo, int64_t hi) {
    lpx_grammar *g = r->j->g;
    int64_t top = hi >= 0 ? hi : lo;
    size_t w = (size_t)top + 1, cells = (size_t)c->n * w;
    if (cells > (size_t)LPX_GRAMMAR_MAX_ELEMS)
        return rx_fail(r, "the pattern with these 'minLength'/'maxLength' makes too many "
                          "states (its states times the length bound is above 2^22)");
    bool *live = calloc(cells, sizeof *live);
    int32_t *rid = malloc(cells * sizeof *rid), *todo = malloc(cells * sizeof *todo);
    if (!live || !rid || !todo) {
        free(live), free(rid), free(todo);
        return rx_fail(r, "out of memory");
    }
#define NEXT(cnt) (hi >= 0 ? (cnt) + 1 : ((cnt) + 1 > lo ? lo : (cnt) + 1))
    /* live: some allowed length ends from here. Each count's row reads the next one's,
     * so rows go from the top down; without an upper bound the top row reads itself
     * (the count stays at lo): there, the states that reach an accepting one. */
    for (int64_t cnt = top; cnt >= 0; cnt--) {
        int64_t nx = NEXT(cnt);
        for (int32_t k = c->n; k-- > 0;) {
            bool ok = c->accept[k] && cnt >= lo;
            for (int32_t e = c->e0[k]; !ok && e < c->e0[k + 1]; e++)
                ok = nx <= top && nx != cnt && live[(size_t)c->to[e] * w + (size_t)nx];
            live[(size_t)k * w + (size_t)cnt] = ok;
        }
        if (nx == cnt && !reach_back(c, live, w, (size_t)cnt)) {
            free(live), free(rid), free(todo);
            return rx_fail(r, "out of memory");
        }
    }
    int32_t root = -1;
    if (!live[0])
        rx_fail(r, "no string of the length 'minLength'/'maxLength' allow matches the pattern");
    else {
        for (size_t i = 0; i < cells; i++)
            rid[i] = -1;
        size_t n_todo = 0;
        root = rid[0] = g_rule(g);
        todo[n_todo++] = 0;
        while (n_todo && !g->oom) {
            size_t cell = todo[--n_todo];
            int32_t k = (int32_t)(cell / w);
            int64_t cnt = (int64_t)(cell % w), nx = NEXT(cnt);
            size_t n_alt = (size_t)(c->e0[k + 1] - c->e0[k]) + 1, a = 0;
            gseq *alts = calloc(n_alt, sizeof *alts);
            if (!alts) {
                g->oom = true;
                break;
            }
            for (int32_t e = c->e0[k]; e < c->e0[k + 1] && nx <= top; e++) {
                size_t to = (size_t)c->to[e] * w + (size_t)nx;
                if (!live[to]) continue;
                if (rid[to] < 0) rid[to] = g_rule(g), todo[n_todo++] = to;
                seq_ref(&alts[a], c->lbl[e]);
                seq_ref(&alts[a++], rid[to]);
            }
            if (c->accept[k] && cnt >= lo) a++; /* the string may end here */
            g_set(g, rid[cell], alts, a);
            for (size_t i = a; i < n_alt; i++)
                seq_free(&alts[i]);
            free(alts);
        }
    }
#undef NEXT
    free(live);
    free(rid);
    free(todo);
    return root;
}

int32_t g_regex(gjson *j, const char *pattern, int64_t min, int64_t max, char *err, size_t cap) {
    rx r = {.j = j, .p = pattern, .end = pattern + strlen(pattern), .err = err, .cap = cap};
    if (r.p < r.end && *r.p == '^') r.p++;
    if (r.end > r.p && r.end[-1] == '$') {
        size_t bs = 0; /* backslashes before the $: an odd run escapes it */
        while (r.end - 1 - bs > r.p && r.end[-2 - (ptrdiff_t)bs] == '\\')
            bs++;
        if (bs % 2 == 0) r.end--;
    }
    int32_t tree = rx_alt(&r), out = -1;
    if (tree >= 0 && r.p < r.end) rx_fail(&r, "a ')' has no '('");
    int32_t start = state(&r), end = r.failed ? 0 : build(&r, tree, start);
    rclosed c;
    if (!r.failed && close_automaton(&r, start, end, &c)) {
        out = emit(&r, &c, min, max);
        closed_free(&c);
    }
    free(r.node);
    free(r.first);
    free(r.edge);
    return r.failed ? -1 : out;
}

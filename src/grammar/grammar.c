/* Grammar rules, their builder, and the matcher that runs them over bytes. */
#include "grammar/grammar_int.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- builder ----------------------------------------------------------------- */

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

lpx_grammar *g_new(void) {
    lpx_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    if (!grow((void **)&g->cls, &g->cap_cls, 256, sizeof *g->cls)) {
        free(g);
        return NULL;
    }
    memset(g->cls, 0, 256 * sizeof *g->cls);
    for (unsigned b = 0; b < 256; b++)
        g_set_bit(g->cls[b], b);
    g->n_cls = 256;
    g->root = -1;
    return g;
}

void lpx_grammar_free(lpx_grammar *g) {
    if (!g) return;
    free(g->el);
    free(g->cls);
    free(g->rule);
    free(g->alts);
    free(g->rest);
    free(g);
}

void lpx_grammar_size(const lpx_grammar *g, size_t *n_rules, size_t *n_elems) {
    *n_rules = g->n_rule;
    *n_elems = g->n_el;
}

int32_t g_rule(lpx_grammar *g) {
    if (g->oom || !grow((void **)&g->rule, &g->cap_rule, g->n_rule + 1, sizeof *g->rule)) {
        g->oom = true;
        return 0;
    }
    g->rule[g->n_rule] = (grule){0, 0};
    return (int32_t)g->n_rule++;
}

static void el_push(lpx_grammar *g, gelem e) {
    if (g->oom || g->n_el >= LPX_GRAMMAR_MAX_ELEMS ||
        !grow((void **)&g->el, &g->cap_el, g->n_el + 1, sizeof *g->el)) {
        g->oom = true;
        return;
    }
    g->el[g->n_el++] = e;
}

void g_set(lpx_grammar *g, int32_t r, gseq *alts, size_t n) {
    if (!g->oom && grow((void **)&g->alts, &g->cap_alts, g->n_alts + n, sizeof *g->alts)) {
        g->rule[r] = (grule){(int32_t)g->n_alts, (int32_t)n};
        for (size_t i = 0; i < n; i++) {
            if (alts[i].oom) g->oom = true;
            g->alts[g->n_alts++] = (int32_t)g->n_el;
            for (size_t k = 0; k < alts[i].n; k++)
                el_push(g, alts[i].v[k]);
            el_push(g, (gelem){GE_END, 0, 0});
        }
    } else {
        g->oom = true;
    }
    for (size_t i = 0; i < n; i++)
        seq_free(&alts[i]);
}

int32_t g_rule_of(lpx_grammar *g, gseq *alts, size_t n) {
    int32_t r = g_rule(g);
    g_set(g, r, alts, n);
    return r;
}

int32_t g_class(lpx_grammar *g, const uint8_t set[32]) {
    int count = 0, one = 0;
    for (unsigned b = 0; b < 256; b++)
        if (g_has_bit(set, b)) count++, one = (int)b;
    if (count == 1) return one;
    for (size_t i = 256; i < g->n_cls; i++)
        if (!memcmp(g->cls[i], set, 32)) return (int32_t)i;
    if (g->oom || !grow((void **)&g->cls, &g->cap_cls, g->n_cls + 1, sizeof *g->cls)) {
        g->oom = true;
        return 0;
    }
    memcpy(g->cls[g->n_cls], set, 32);
    return (int32_t)g->n_cls++;
}

void seq_push(gseq *s, uint8_t kind, int32_t arg, bool nest) {
    if (s->oom || !grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v)) {
        s->oom = true;
        return;
    }
    s->v[s->n++] = (gelem){kind, nest, arg};
}

void seq_lit(gseq *s, const char *text, size_t n) {
    for (size_t i = 0; i < n; i++)
        seq_byte(s, (uint8_t)text[i]);
}

void seq_free(gseq *s) {
    free(s->v);
    memset(s, 0, sizeof *s);
}

static gseq seq_copy(const gseq *u) {
    gseq s = {0};
    for (size_t i = 0; u && i < u->n; i++)
        seq_push(&s, u->v[i].kind, u->v[i].arg, u->v[i].nest);
    if (u && u->oom) s.oom = true;
    return s;
}

static void seq_append(gseq *s, const gseq *u) {
    for (size_t i = 0; u && i < u->n; i++)
        seq_push(s, u->v[i].kind, u->v[i].arg, u->v[i].nest);
}

/* (unit){0,k}, k < 0: no bound, as a rule. */
static int32_t opt_chain(lpx_grammar *g, const gseq *unit, int64_t k) {
    if (k < 0) {
        int32_t r = g_rule(g);
        gseq alts[2] = {seq_copy(unit), {0}};
        seq_ref(&alts[0], r);
        g_set(g, r, alts, 2);
        return r;
    }
    int32_t prev = -1;
    for (int64_t i = 0; i < k && !g->oom; i++) {
        gseq alts[2] = {seq_copy(unit), {0}};
        if (prev >= 0) seq_ref(&alts[0], prev);
        prev = g_rule_of(g, alts, 2);
    }
    return prev;
}

void seq_repeat(lpx_grammar *g, gseq *s, int32_t item, int64_t min, int64_t max, const gseq *sep) {
    gseq unit = seq_copy(sep); /* "sep item", or "item" without a separator */
    seq_ref(&unit, item);
    if (min > 0) {
        seq_ref(s, item);
        for (int64_t i = 1; i < min; i++)
            seq_append(s, &unit);
        int64_t more = max < 0 ? -1 : max - min;
        if (more != 0) seq_ref(s, opt_chain(g, &unit, more));
    } else if (max != 0) {
        gseq alts[2] = {{0}, {0}}; /* item (sep item){0,max-1} | nothing */
        seq_ref(&alts[0], item);
        int64_t more = max < 0 ? -1 : max - 1;
        if (more != 0) seq_ref(&alts[0], opt_chain(g, &unit, more));
        seq_ref(s, g_rule_of(g, alts, 2));
    }
    seq_free(&unit);
}

#define G_INF (INT32_MAX / 4)

static int32_t sat_add(int32_t a, int32_t b) {
    return a + b > G_INF ? G_INF : a + b;
}

/* rest[] of the alternative at a0 (right to left from its END); returns rest[a0]. */
static int32_t alt_rest(lpx_grammar *g, int32_t a0, const int32_t *minlen) {
    int32_t p = a0;
    while (g->el[p].kind != GE_END)
        p++;
    for (g->rest[p] = 0; p-- > a0;) {
        const gelem *e = &g->el[p];
        g->rest[p] = sat_add(e->kind == GE_CLASS ? 1 : minlen[e->arg], g->rest[p + 1]);
    }
    return g->rest[a0];
}

/* A rule and the position of its first element, to sort rules by position. */
typedef struct rule_at {
    int32_t pos, rule;
} rule_at;

static int by_position(const void *a, const void *b) {
    int32_t x = ((const rule_at *)a)->pos, y = ((const rule_at *)b)->pos;
    return (x > y) - (x < y);
}

/* rest[p] for every position, from the rules' shortest expansions: a fixed point over
 * the rules in the order of their elements, swept down and up in turn, so that a chain
 * of rules settles in a sweep whichever way it was made (a pattern's rules refer to
 * rules made after them, a schema's mostly to rules made before). */
static bool min_lengths(lpx_grammar *g) {
    int32_t *minlen = malloc((g->n_rule ? g->n_rule : 1) * sizeof *minlen);
    rule_at *order = malloc((g->n_rule ? g->n_rule : 1) * sizeof *order);
    g->rest = malloc((g->n_el ? g->n_el : 1) * sizeof *g->rest);
    if (!minlen || !order || !g->rest) {
        free(minlen);
        free(order);
        return false;
    }
    size_t n = 0;
    for (size_t r = 0; r < g->n_rule; r++) {
        minlen[r] = G_INF;
        if (g->rule[r].n_alt) order[n++] = (rule_at){g->alts[g->rule[r].alt0], (int32_t)r};
    }
    qsort(order, n, sizeof *order, by_position);
    for (size_t p = 0; p < g->n_el; p++)
        g->rest[p] = G_INF;
    for (bool changed = true, down = true; changed; down = !down) {
        changed = false;
        for (size_t k = 0; k < n; k++) {
            int32_t r = order[down ? n - 1 - k : k].rule, best = G_INF;
            for (int32_t a = 0; a < g->rule[r].n_alt; a++) {
                int32_t v = alt_rest(g, g->alts[g->rule[r].alt0 + a], minlen);
                if (v < best) best = v;
            }
            if (best < minlen[r]) minlen[r] = best, changed = true;
        }
    }
    alt_rest(g, g->start, minlen);
    free(minlen);
    free(order);
    return true;
}

bool g_finish(lpx_grammar *g) {
    if (g->root < 0) g->oom = true;
    g->start = (int32_t)g->n_el;
    el_push(g, (gelem){GE_REF, 0, g->root});
    el_push(g, (gelem){GE_END, 0, 0});
    return !g->oom && min_lengths(g);
}

/* ---- the matcher ---------------------------------------------------------------- */

/* The state being built: stacks appended as (length, entries...), without repeats. */
typedef struct gout {
    int32_t **v;
    size_t *cap, n;
    int n_stacks;
    bool oom;
} gout;

static void out_stack(gout *o, const int32_t *stk, int32_t len) {
    if (o->n_stacks >= LPX_GRAMMAR_MAX_STACKS) return; /* dropped: still sound */
    for (size_t i = 0; i < o->n; i += (size_t)(*o->v)[i] + 1)
        if ((*o->v)[i] == len && !memcmp(*o->v + i + 1, stk, (size_t)len * sizeof *stk)) return;
    if (!grow((void **)o->v, o->cap, o->n + (size_t)len + 1, sizeof **o->v)) {
        o->oom = true;
        return;
    }
    (*o->v)[o->n] = len;
    memcpy(*o->v + o->n + 1, stk, (size_t)len * sizeof *stk);
    o->n += (size_t)len + 1;
    o->n_stacks++;
}

/* Open containers on stk[0..len): return entries that follow a nesting REF. */
static int depth_of(const lpx_grammar *g, const int32_t *stk, int32_t len) {
    int d = 0;
    for (int32_t i = 0; i < len; i++)
        if (stk[i] > 0 && g->el[stk[i] - 1].kind == GE_REF && g->el[stk[i] - 1].nest) d++;
    return d;
}

/* Rule expansions without a byte between them: bounds the recursion (each level holds a
 * stack copy on the C stack). */
#define G_LEVELS 1000

/* Resolves stk (its top maybe an END or a REF) into stacks whose top is a byte class,
 * or the empty stack (the document is complete), into o. budget bounds the work of a
 * grammar whose rules can expand to themselves without reading a byte. */
static void expand(const lpx_grammar *g, int32_t *stk, int32_t len, gout *o, int *budget,
                   int level) {
    while (len > 0 && g->el[stk[len - 1]].kind == GE_END)
        len--; /* an alternative ended: back to the entry that called its rule */
    if (len == 0 || g->el[stk[len - 1]].kind == GE_CLASS) {
        out_stack(o, stk, len);
        return;
    }
    if (--*budget < 0 || level > G_LEVELS) return;
    int32_t pos = stk[len - 1];
    const gelem *e = &g->el[pos];
    int32_t base = len;
    if (g->el[pos + 1].kind == GE_END)
        base--; /* a tail call: nothing to come back to */
    else
        stk[len - 1] = pos + 1;
    if (base + 1 > LPX_GRAMMAR_MAX_STACK) return;
    if (e->nest && base == len && depth_of(g, stk, len) > LPX_GRAMMAR_MAX_DEPTH) return;
    const grule *r = &g->rule[e->arg];
    int32_t copy[LPX_GRAMMAR_MAX_STACK];
    for (int32_t a = 0; a < r->n_alt; a++) {
        memcpy(copy, stk, (size_t)base * sizeof *stk);
        copy[base] = g->alts[r->alt0 + a];
        expand(g, copy, base + 1, o, budget, level + 1);
    }
}

#define G_BUDGET 8192

int64_t lpx_grammar_step(const lpx_grammar *g, const int32_t *in, size_t n_in, uint8_t b,
                         int32_t **out, size_t *cap) {
    gout o = {.v = out, .cap = cap};
    int budget = G_BUDGET;
    int32_t stk[LPX_GRAMMAR_MAX_STACK];
    for (size_t i = 0; i < n_in; i += (size_t)in[i] + 1) {
        int32_t len = in[i];
        if (len == 0) continue;
        int32_t top = in[i + (size_t)len];
        if (!g_has_bit(g->cls[g->el[top].arg], b)) continue;
        memcpy(stk, in + i + 1, (size_t)len * sizeof *stk);
        stk[len - 1] = top + 1;
        expand(g, stk, len, &o, &budget, 0);
    }
    return o.oom ? -1 : (int64_t)o.n;
}

bool lpx_grammar_state_takes(const lpx_grammar *g, const int32_t *st, size_t n, uint8_t b) {
    for (size_t i = 0; i < n; i += (size_t)st[i] + 1)
        if (st[i] > 0 && g_has_bit(g->cls[g->el[st[i + (size_t)st[i]]].arg], b)) return true;
    return false;
}

bool lpx_grammar_state_accepts(const int32_t *st, size_t n) {
    for (size_t i = 0; i < n; i += (size_t)st[i] + 1)
        if (st[i] == 0) return true;
    return false;
}

lpx_status lpx_gmatch_init(lpx_gmatch *m, const lpx_grammar *g) {
    memset(m, 0, sizeof *m);
    m->g = g;
    gout o = {.v = &m->cur, .cap = &m->cap_cur};
    int budget = G_BUDGET;
    int32_t stk[1] = {g->start};
    expand(g, stk, 1, &o, &budget, 0);
    m->n_cur = o.n;
    if (o.oom) {
        lpx_gmatch_free(m);
        return lpx_errorf(LPX_ERR_NOMEM, "grammar: out of memory");
    }
    return LPX_OK;
}

void lpx_gmatch_free(lpx_gmatch *m) {
    free(m->cur);
    free(m->tmp);
    memset(m, 0, sizeof *m);
}

bool lpx_gmatch_feed(lpx_gmatch *m, const void *p, size_t n) {
    const uint8_t *b = p;
    /* Into tmp, then swap; on a refused byte the state is rebuilt from a copy. */
    int32_t *keep = NULL;
    size_t n_keep = m->n_cur;
    if (n > 1) {
        keep = malloc((m->n_cur ? m->n_cur : 1) * sizeof *keep);
        if (!keep) return false;
        memcpy(keep, m->cur, m->n_cur * sizeof *keep);
    }
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) {
        int64_t k = lpx_grammar_step(m->g, m->cur, m->n_cur, b[i], &m->tmp, &m->cap_tmp);
        if (k <= 0) {
            ok = false;
            break;
        }
        int32_t *t = m->cur;
        size_t c = m->cap_cur;
        m->cur = m->tmp;
        m->cap_cur = m->cap_tmp;
        m->n_cur = (size_t)k;
        m->tmp = t;
        m->cap_tmp = c;
    }
    if (!ok && keep) {
        if (grow((void **)&m->cur, &m->cap_cur, n_keep, sizeof *keep)) {
            memcpy(m->cur, keep, n_keep * sizeof *keep);
            m->n_cur = n_keep;
        } else {
            m->n_cur = 0; /* out of memory: a dead state, which refuses everything */
        }
    }
    free(keep);
    return ok;
}

bool lpx_gmatch_can_end(const lpx_gmatch *m) {
    return lpx_grammar_state_accepts(m->cur, m->n_cur);
}

bool lpx_gmatch_no_next(const lpx_gmatch *m) {
    for (size_t i = 0; i < m->n_cur; i += (size_t)m->cur[i] + 1)
        if (m->cur[i] > 0) return false;
    return true;
}

void lpx_gmatch_next_bytes(const lpx_gmatch *m, uint8_t set[32]) {
    memset(set, 0, 32);
    for (size_t i = 0; i < m->n_cur; i += (size_t)m->cur[i] + 1)
        if (m->cur[i] > 0) {
            const uint8_t *c = m->g->cls[m->g->el[m->cur[i + (size_t)m->cur[i]]].arg];
            for (int k = 0; k < 32; k++)
                set[k] |= c[k];
        }
}

int32_t lpx_gmatch_min_remaining(const lpx_gmatch *m) {
    int32_t best = INT32_MAX;
    for (size_t i = 0; i < m->n_cur; i += (size_t)m->cur[i] + 1) {
        int32_t d = 0;
        for (int32_t k = 0; k < m->cur[i]; k++)
            d = sat_add(d, m->g->rest[m->cur[i + 1 + (size_t)k]]);
        if (d < best) best = d;
    }
    return best >= G_INF ? INT32_MAX : best;
}

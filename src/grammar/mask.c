#include "grammar/mask.h"

#include "base/checked.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

/* The trie in depth-first order: node i's subtree is nodes i .. skip[i]-1; node 0 is
 * the root (the empty text). */
struct lpx_gvocab {
    int32_t n_vocab;
    size_t n_nodes;
    uint8_t *byte;   /* [n_nodes] the edge from the parent */
    uint16_t *depth; /* [n_nodes] */
    uint32_t *skip;  /* [n_nodes] */
    int32_t *tok0;   /* [n_nodes + 1] tokens ending at node i: toks[tok0[i] .. tok0[i+1]) */
    int32_t *toks;   /* [n_tokens] */
    uint16_t max_depth;
};

/* Building: a pointer trie (first child / next sibling, children sorted by byte). */
typedef struct bnode {
    int32_t child, sibling, tok; /* tok: first token ending here, chained by tok_next */
    uint8_t byte;
} bnode;

void lpx_gvocab_free(lpx_gvocab *v) {
    if (!v) return;
    free(v->byte);
    free(v->depth);
    free(v->skip);
    free(v->tok0);
    free(v->toks);
    free(v);
}

int32_t lpx_gvocab_size(const lpx_gvocab *v) {
    return v->n_vocab;
}
size_t lpx_gvocab_nodes(const lpx_gvocab *v) {
    return v->n_nodes;
}

#define TOKEN_MAX_BYTES 1024 /* longer tokens are never allowed (none exists in practice) */

lpx_status lpx_gvocab_create(int32_t n_vocab, const char *const *bytes, const size_t *lens,
                             lpx_gvocab **out) {
    *out = NULL;
    if (n_vocab <= 0) return lpx_errorf(LPX_ERR_INVALID_ARG, "grammar vocab: %d tokens", n_vocab);
    size_t total = 1;
    for (int32_t i = 0; i < n_vocab; i++)
        if (bytes[i] && lens[i] <= TOKEN_MAX_BYTES && !lpx_add_size(total, lens[i], &total))
            return lpx_errorf(LPX_ERR_NOMEM, "grammar vocab: too large");
    if (total > UINT32_MAX - 1) return lpx_errorf(LPX_ERR_NOMEM, "grammar vocab: too large");
    bnode *b = malloc(total * sizeof *b);
    int32_t *tok_next = malloc((size_t)n_vocab * sizeof *tok_next);
    lpx_gvocab *v = calloc(1, sizeof *v);
    if (!b || !tok_next || !v) {
        free(b), free(tok_next), free(v);
        return lpx_errorf(LPX_ERR_NOMEM, "grammar vocab: out of memory");
    }
    size_t n = 1;
    b[0] = (bnode){0, 0, -1, 0};
    int32_t n_tok = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        tok_next[i] = -1;
        if (!bytes[i] || lens[i] == 0 || lens[i] > TOKEN_MAX_BYTES) continue;
        int32_t at = 0;
        for (size_t k = 0; k < lens[i]; k++) {
            uint8_t c = (uint8_t)bytes[i][k];
            int32_t *link = &b[at].child;
            while (*link && b[*link].byte < c)
                link = &b[*link].sibling;
            if (!*link || b[*link].byte != c) {
                b[n] = (bnode){0, *link, -1, c};
                *link = (int32_t)n++;
            }
            at = *link;
        }
        tok_next[i] = b[at].tok;
        b[at].tok = i;
        n_tok++;
    }
    v->n_vocab = n_vocab;
    v->n_nodes = n;
    v->byte = malloc(n);
    v->depth = malloc(n * sizeof *v->depth);
    v->skip = malloc(n * sizeof *v->skip);
    v->tok0 = malloc((n + 1) * sizeof *v->tok0);
    v->toks = malloc(((size_t)n_tok + 1) * sizeof *v->toks);
    int32_t *stack = malloc((TOKEN_MAX_BYTES + 2) * sizeof *stack);
    uint32_t *open = malloc((TOKEN_MAX_BYTES + 2) * sizeof *open);
    if (!v->byte || !v->depth || !v->skip || !v->tok0 || !v->toks || !stack || !open) {
        free(b), free(tok_next), free(stack), free(open);
        lpx_gvocab_free(v);
        return lpx_errorf(LPX_ERR_NOMEM, "grammar vocab: out of memory");
    }
    /* Depth-first: stack[d] is the node being laid out at depth d (its next sibling
     * is visited once its subtree is done); open[d] its index in the layout. */
    size_t at = 0;
    int32_t n_out = 0;
    int d = 0;
    stack[0] = 0;
    for (;;) {
        int32_t x = stack[d];
        v->byte[at] = b[x].byte;
        v->depth[at] = (uint16_t)d;
        v->tok0[at] = n_out;
        for (int32_t t = b[x].tok; t >= 0; t = tok_next[t])
            v->toks[n_out++] = t;
        open[d] = (uint32_t)at++;
        if (d > v->max_depth) v->max_depth = (uint16_t)d;
        if (b[x].child) {
            stack[++d] = b[x].child;
            continue;
        }
        /* Close finished subtrees until one has a next sibling. */
        while (d >= 0) {
            v->skip[open[d]] = (uint32_t)at;
            int32_t sib = d > 0 ? b[stack[d]].sibling : 0;
            if (sib) {
                stack[d] = sib;
                break;
            }
            d--;
        }
        if (d < 0) break;
    }
    v->tok0[at] = n_out;
    free(b), free(tok_next), free(stack), free(open);
    *out = v;
    return LPX_OK;
}

/* ---- the cache -------------------------------------------------------------------- */

typedef struct mentry {
    uint64_t hash;
    int32_t *key; /* the state; NULL: an empty slot */
    size_t n_key;
    uint32_t *mask;
    int32_t n_allowed;
} mentry;

struct lpx_gmasks {
    const lpx_grammar *g;
    const lpx_gvocab *v;
    size_t words, max_bytes, bytes;
    mentry *slot; /* [n_slots] open addressing, a power of two */
    size_t n_slots, n_used;
    /* The scan: the state after each depth's prefix. */
    int32_t **lvl;
    size_t *lvl_cap, *lvl_n;
    lpx_gmask_stats st;
};

static uint64_t hash_state(const int32_t *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint32_t)s[i];
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
    }
    return h;
}

lpx_status lpx_gmasks_create(const lpx_grammar *g, const lpx_gvocab *v, size_t max_bytes,
                             lpx_gmasks **out) {
    *out = NULL;
    lpx_gmasks *c = calloc(1, sizeof *c);
    if (!c) return lpx_errorf(LPX_ERR_NOMEM, "grammar masks: out of memory");
    c->g = g;
    c->v = v;
    c->words = ((size_t)v->n_vocab + 31) / 32;
    c->max_bytes = max_bytes ? max_bytes : (size_t)64 << 20;
    c->n_slots = 256;
    c->slot = calloc(c->n_slots, sizeof *c->slot);
    size_t levels = (size_t)v->max_depth + 1;
    c->lvl = calloc(levels, sizeof *c->lvl);
    c->lvl_cap = calloc(levels, sizeof *c->lvl_cap);
    c->lvl_n = calloc(levels, sizeof *c->lvl_n);
    if (!c->slot || !c->lvl || !c->lvl_cap || !c->lvl_n) {
        lpx_gmasks_free(c);
        return lpx_errorf(LPX_ERR_NOMEM, "grammar masks: out of memory");
    }
    *out = c;
    return LPX_OK;
}

static void clear_slots(lpx_gmasks *c) {
    for (size_t i = 0; i < c->n_slots; i++) {
        free(c->slot[i].key);
        free(c->slot[i].mask);
        c->slot[i] = (mentry){0};
    }
    c->n_used = 0;
    c->bytes = 0;
}

void lpx_gmasks_free(lpx_gmasks *c) {
    if (!c) return;
    if (c->slot) clear_slots(c);
    free(c->slot);
    for (size_t d = 0; c->lvl && d <= c->v->max_depth; d++)
        free(c->lvl[d]);
    free(c->lvl);
    free(c->lvl_cap);
    free(c->lvl_n);
    free(c);
}

void lpx_gmasks_stats(const lpx_gmasks *c, lpx_gmask_stats *out) {
    *out = c->st;
    out->bytes = c->bytes;
}

/* One scan of the trie from state st: the tokens whose bytes the grammar takes. */
static lpx_status scan(lpx_gmasks *c, const int32_t *st, size_t n_st, uint32_t *mask,
                       int32_t *n_allowed) {
    const lpx_gvocab *v = c->v;
    const lpx_grammar *g = c->g;
    memset(mask, 0, c->words * sizeof *mask);
    int32_t allowed = 0;
    size_t i = 1;
    while (i < v->n_nodes) {
        int d = v->depth[i];
        const int32_t *ps = d == 1 ? st : c->lvl[d - 1];
        size_t pn = d == 1 ? n_st : c->lvl_n[d - 1];
        if (!lpx_grammar_state_takes(g, ps, pn, v->byte[i])) {
            i = v->skip[i];
            continue;
        }
        int64_t k = lpx_grammar_step(g, ps, pn, v->byte[i], &c->lvl[d], &c->lvl_cap[d]);
        if (k < 0) return lpx_errorf(LPX_ERR_NOMEM, "grammar masks: out of memory");
        c->st.nodes_visited++;
        if (k == 0) {
            i = v->skip[i];
            continue;
        }
        c->lvl_n[d] = (size_t)k;
        for (int32_t t = v->tok0[i]; t < v->tok0[i + 1]; t++) {
            int32_t id = v->toks[t];
            mask[id >> 5] |= 1u << (id & 31);
            allowed++;
        }
        i++;
    }
    *n_allowed = allowed;
    return LPX_OK;
}

static bool grow_slots(lpx_gmasks *c) {
    size_t n = c->n_slots * 2;
    mentry *s = calloc(n, sizeof *s);
    if (!s) return false;
    for (size_t i = 0; i < c->n_slots; i++) {
        if (!c->slot[i].key) continue;
        size_t j = c->slot[i].hash & (n - 1);
        while (s[j].key)
            j = (j + 1) & (n - 1);
        s[j] = c->slot[i];
    }
    free(c->slot);
    c->slot = s;
    c->n_slots = n;
    return true;
}

lpx_status lpx_gmasks_get(lpx_gmasks *c, const lpx_gmatch *m, const uint32_t **mask,
                          int32_t *n_allowed) {
    size_t n;
    const int32_t *st = lpx_gmatch_state(m, &n);
    uint64_t h = hash_state(st, n);
    size_t j = h & (c->n_slots - 1);
    for (; c->slot[j].key; j = (j + 1) & (c->n_slots - 1)) {
        mentry *e = &c->slot[j];
        if (e->hash == h && e->n_key == n && !memcmp(e->key, st, n * sizeof *st)) {
            c->st.hits++;
            *mask = e->mask;
            *n_allowed = e->n_allowed;
            return LPX_OK;
        }
    }
    c->st.misses++;
    size_t entry_bytes = c->words * sizeof(uint32_t) + n * sizeof *st;
    if (c->bytes + entry_bytes > c->max_bytes) clear_slots(c); /* full: start over */
    if ((c->n_used + 1) * 2 > c->n_slots && !grow_slots(c))
        return lpx_errorf(LPX_ERR_NOMEM, "grammar masks: out of memory");
    j = h & (c->n_slots - 1);
    while (c->slot[j].key)
        j = (j + 1) & (c->n_slots - 1);
    mentry e = {.hash = h, .n_key = n};
    e.key = malloc((n ? n : 1) * sizeof *st);
    e.mask = malloc(c->words * sizeof *e.mask);
    lpx_status s = e.key && e.mask ? scan(c, st, n, e.mask, &e.n_allowed)
                                   : lpx_errorf(LPX_ERR_NOMEM, "grammar masks: out of memory");
    if (s != LPX_OK) {
        free(e.key);
        free(e.mask);
        return s;
    }
    memcpy(e.key, st, n * sizeof *st);
    c->slot[j] = e;
    c->n_used++;
    c->bytes += entry_bytes;
    *mask = e.mask;
    *n_allowed = e.n_allowed;
    return LPX_OK;
}

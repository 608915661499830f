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

/* The states a scan meets, interned (an id each), and their byte transitions: in a
 * scan most trie nodes repeat a (state, byte) pair seen before (inside a free string
 * every character leads back to the same state), so a node costs a lookup, and a
 * matcher step only for a pair not seen yet. Kept across scans of one grammar. */
typedef struct gstate {
    uint64_t hash;
    size_t off, n; /* its stacks: pool[off .. off + n) */
} gstate;

typedef struct gtrans {
    int32_t *pool; /* [n_pool] the interned states' stacks */
    size_t n_pool, cap_pool;
    gstate *state; /* [n_state] */
    size_t n_state, cap_state;
    int32_t *index; /* [n_index] open addressing of states: id + 1, 0 empty */
    size_t n_index;
    uint64_t *key; /* [n_slot] open addressing of transitions: (id << 8 | byte) + 1, 0 empty */
    int32_t *next; /* [n_slot] the next state's id, -1 where the byte is refused */
    size_t n_slot, n_trans;
    int32_t *tmp; /* a step's output */
    size_t cap_tmp;
} gtrans;

struct lpx_gmasks {
    const lpx_grammar *g;
    const lpx_gvocab *v;
    size_t words, max_bytes, bytes;
    mentry *slot; /* [n_slots] open addressing, a power of two */
    size_t n_slots, n_used;
    gtrans t;
    int32_t *lvl; /* [max_depth + 1] the scan: the state after each depth's prefix */
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
    c->lvl = calloc((size_t)v->max_depth + 1, sizeof *c->lvl);
    if (!c->slot || !c->lvl) {
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

static void trans_free(gtrans *t) {
    free(t->pool);
    free(t->state);
    free(t->index);
    free(t->key);
    free(t->next);
    free(t->tmp);
    memset(t, 0, sizeof *t);
}

static size_t trans_bytes(const gtrans *t) {
    return t->cap_pool * sizeof *t->pool + t->cap_state * sizeof *t->state +
           t->n_index * sizeof *t->index + t->n_slot * (sizeof *t->key + sizeof *t->next);
}

void lpx_gmasks_free(lpx_gmasks *c) {
    if (!c) return;
    if (c->slot) clear_slots(c);
    free(c->slot);
    trans_free(&c->t);
    free(c->lvl);
    free(c);
}

void lpx_gmasks_stats(const lpx_gmasks *c, lpx_gmask_stats *out) {
    *out = c->st;
    out->bytes = c->bytes;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return false;
    *p = q;
    *cap = n;
    return true;
}

/* Rehashes the state index to n slots (a power of two). */
static bool index_resize(gtrans *t, size_t n) {
    int32_t *ix = calloc(n, sizeof *ix);
    if (!ix) return false;
    for (size_t id = 0; id < t->n_state; id++) {
        size_t j = t->state[id].hash & (n - 1);
        while (ix[j])
            j = (j + 1) & (n - 1);
        ix[j] = (int32_t)id + 1;
    }
    free(t->index);
    t->index = ix;
    t->n_index = n;
    return true;
}

/* The id of state s[0..n), interned when new; -1 out of memory. */
static int32_t intern(gtrans *t, const int32_t *s, size_t n) {
    uint64_t h = hash_state(s, n);
    if ((t->n_state + 1) * 2 > t->n_index && !index_resize(t, t->n_index ? 2 * t->n_index : 256))
        return -1;
    size_t j = h & (t->n_index - 1);
    for (; t->index[j]; j = (j + 1) & (t->n_index - 1)) {
        const gstate *e = &t->state[t->index[j] - 1];
        if (e->hash == h && e->n == n && !memcmp(t->pool + e->off, s, n * sizeof *s))
            return t->index[j] - 1;
    }
    if (t->n_state >= INT32_MAX - 1 ||
        !grow((void **)&t->state, &t->cap_state, t->n_state + 1, sizeof *t->state) ||
        !grow((void **)&t->pool, &t->cap_pool, t->n_pool + n + 1, sizeof *t->pool))
        return -1;
    memcpy(t->pool + t->n_pool, s, n * sizeof *s);
    t->state[t->n_state] = (gstate){.hash = h, .off = t->n_pool, .n = n};
    t->n_pool += n;
    t->index[j] = (int32_t)t->n_state + 1;
    return (int32_t)t->n_state++;
}

static size_t trans_slot(const gtrans *t, uint64_t k) {
    size_t j = (size_t)(k * 0x9E3779B97F4A7C15ull >> 17) & (t->n_slot - 1);
    while (t->key[j] && t->key[j] != k)
        j = (j + 1) & (t->n_slot - 1);
    return j;
}

static bool trans_resize(gtrans *t, size_t n) {
    gtrans old = *t;
    t->key = calloc(n, sizeof *t->key);
    t->next = malloc(n * sizeof *t->next);
    if (!t->key || !t->next) {
        free(t->key);
        free(t->next);
        t->key = old.key;
        t->next = old.next;
        return false;
    }
    t->n_slot = n;
    for (size_t i = 0; i < old.n_slot; i++)
        if (old.key[i]) {
            size_t j = trans_slot(t, old.key[i]);
            t->key[j] = old.key[i];
            t->next[j] = old.next[i];
        }
    free(old.key);
    free(old.next);
    return true;
}

/* The state after byte b from state id (-1: refused); -2 out of memory. */
static int32_t step_id(const lpx_grammar *g, gtrans *t, int32_t id, uint8_t b, int64_t *steps) {
    uint64_t k = ((uint64_t)id << 8 | b) + 1;
    if ((t->n_trans + 1) * 2 > t->n_slot && !trans_resize(t, t->n_slot ? 2 * t->n_slot : 1024))
        return -2;
    size_t j = trans_slot(t, k);
    if (t->key[j]) return t->next[j];
    const gstate *s = &t->state[id];
    int32_t nx = -1;
    if (lpx_grammar_state_takes(g, t->pool + s->off, s->n, b)) {
        int64_t n = lpx_grammar_step(g, t->pool + s->off, s->n, b, &t->tmp, &t->cap_tmp);
        if (n < 0) return -2;
        ++*steps;
        if (n > 0 && (nx = intern(t, t->tmp, (size_t)n)) < 0) return -2;
    }
    t->key[j] = k; /* j still holds: interning leaves the transition table alone */
    t->next[j] = nx;
    t->n_trans++;
    return nx;
}

/* One scan of the trie from state st: the tokens whose bytes the grammar takes. */
static lpx_status scan(lpx_gmasks *c, const int32_t *st, size_t n_st, uint32_t *mask,
                       int32_t *n_allowed) {
    const lpx_gvocab *v = c->v;
    const lpx_grammar *g = c->g;
    gtrans *t = &c->t;
    /* the transitions count against the cache's budget: past half of it, start over */
    if (trans_bytes(t) > c->max_bytes / 2) {
        trans_free(t);
        c->st.trans_resets++;
    }
    memset(mask, 0, c->words * sizeof *mask);
    int32_t allowed = 0;
    int32_t root = intern(t, st, n_st);
    if (root < 0) return lpx_errorf(LPX_ERR_NOMEM, "grammar masks: out of memory");
    c->lvl[0] = root;
    size_t i = 1;
    while (i < v->n_nodes) {
        int d = v->depth[i];
        int32_t nx = step_id(g, t, c->lvl[d - 1], v->byte[i], &c->st.steps);
        if (nx == -2) return lpx_errorf(LPX_ERR_NOMEM, "grammar masks: out of memory");
        if (nx < 0) {
            i = v->skip[i];
            continue;
        }
        c->st.nodes_visited++;
        c->lvl[d] = nx;
        for (int32_t k = v->tok0[i]; k < v->tok0[i + 1]; k++) {
            int32_t id = v->toks[k];
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

#include "engine/kv_blocks.h"

#include "base/checked.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

lpx_status lpx_kv_blocks_for_budget(int64_t budget_bytes, size_t bytes_per_token,
                                    int32_t block_size, int32_t *n_blocks) {
    size_t block_bytes;
    if (budget_bytes <= 0 || bytes_per_token == 0 || block_size <= 0 ||
        !lpx_mul_size(bytes_per_token, (size_t)block_size, &block_bytes))
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "kv cache: budget %lld bytes, %zu bytes/token, block size %d: "
                          "expected all positive",
                          (long long)budget_bytes, bytes_per_token, (int)block_size);
    uint64_t n = (uint64_t)budget_bytes / block_bytes;
    if (n == 0)
        return lpx_errorf(LPX_ERR_NOMEM,
                          "kv cache: budget %lld bytes is below one block (%zu bytes = %d "
                          "tokens x %zu bytes)",
                          (long long)budget_bytes, block_bytes, (int)block_size, bytes_per_token);
    /* Block ids are int32 in the batch descriptor. */
    *n_blocks = n > INT32_MAX / 2 ? INT32_MAX / 2 : (int32_t)n;
    return LPX_OK;
}

/* ---- hashing -------------------------------------------------------------- */

/* splitmix64's finaliser: every input bit reaches every output bit. */
static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t lpx_kv_chain_hash(uint64_t parent, const int32_t *tokens, int32_t n) {
    uint64_t h = mix(parent + 0x9E3779B97F4A7C15ull);
    for (int32_t i = 0; i < n; i++)
        h = mix(h ^ (uint32_t)tokens[i]);
    return h;
}

uint64_t lpx_kv_hash_bytes(uint64_t h, const void *bytes, size_t n) {
    const unsigned char *b = bytes;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001B3ull; /* FNV-1a */
    return mix(h);
}

/* ---- the pool ------------------------------------------------------------- */

lpx_status lpx_kv_pool_init(lpx_kv_pool *p, int32_t n_blocks, int32_t block_size, bool caching,
                            uint64_t seed) {
    memset(p, 0, sizeof *p);
    if (n_blocks <= 0 || block_size <= 0)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "kv pool: %d blocks of %d tokens: expected > 0",
                          (int)n_blocks, (int)block_size);
    size_t n = (size_t)n_blocks, slots;
    p->free_ids = malloc(n * sizeof *p->free_ids);
    p->ref = calloc(n, sizeof *p->ref);
    bool ok = p->free_ids && p->ref;
    if (ok && caching) {
        uint32_t buckets = 1;
        while (buckets < (uint32_t)n_blocks)
            buckets *= 2;
        p->mask = buckets - 1;
        p->cached = calloc(n, 1);
        p->hash = malloc(n * sizeof *p->hash);
        p->epoch = calloc(n, sizeof *p->epoch);
        p->parent = malloc(n * sizeof *p->parent);
        p->parent_epoch = malloc(n * sizeof *p->parent_epoch);
        p->tokens =
            lpx_mul_size(n, (size_t)block_size, &slots) ? malloc(slots * sizeof *p->tokens) : NULL;
        p->bucket = malloc((size_t)buckets * sizeof *p->bucket);
        p->bucket_next = malloc(n * sizeof *p->bucket_next);
        p->lru_prev = malloc(n * sizeof *p->lru_prev);
        p->lru_next = malloc(n * sizeof *p->lru_next);
        ok = p->cached && p->hash && p->epoch && p->parent && p->parent_epoch && p->tokens &&
             p->bucket && p->bucket_next && p->lru_prev && p->lru_next;
        if (ok) memset(p->bucket, 0xff, (size_t)buckets * sizeof *p->bucket); /* all -1 */
    }
    if (!ok) {
        lpx_kv_pool_free(p);
        return lpx_errorf(LPX_ERR_NOMEM, "kv pool: %d blocks: out of memory", (int)n_blocks);
    }
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->caching = caching;
    p->seed = seed;
    p->lru_head = p->lru_tail = -1;
    /* Low ids on top of the stack: handed out first. */
    for (int32_t i = 0; i < n_blocks; i++)
        p->free_ids[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    return LPX_OK;
}

void lpx_kv_pool_free(lpx_kv_pool *p) {
    free(p->free_ids);
    free(p->ref);
    free(p->cached);
    free(p->hash);
    free(p->epoch);
    free(p->parent);
    free(p->parent_epoch);
    free(p->tokens);
    free(p->bucket);
    free(p->bucket_next);
    free(p->lru_prev);
    free(p->lru_next);
    memset(p, 0, sizeof *p);
}

static void lru_unlink(lpx_kv_pool *p, int32_t id) {
    int32_t a = p->lru_prev[id], b = p->lru_next[id];
    if (a >= 0)
        p->lru_next[a] = b;
    else
        p->lru_head = b;
    if (b >= 0)
        p->lru_prev[b] = a;
    else
        p->lru_tail = a;
    p->n_lru--;
}

static void lru_append(lpx_kv_pool *p, int32_t id) {
    p->lru_prev[id] = p->lru_tail;
    p->lru_next[id] = -1;
    if (p->lru_tail >= 0)
        p->lru_next[p->lru_tail] = id;
    else
        p->lru_head = id;
    p->lru_tail = id;
    p->n_lru++;
}

/* Takes id out of the cache: its hash bucket forgets it, and its new epoch
 * makes any registered block that names it as parent unmatchable. */
static void unregister(lpx_kv_pool *p, int32_t id) {
    int32_t *at = &p->bucket[p->hash[id] & p->mask];
    while (*at != id)
        at = &p->bucket_next[*at];
    *at = p->bucket_next[id];
    p->cached[id] = 0;
    p->epoch[id]++;
    p->n_cached--;
}

/* A block for a table: a free one, else the least recently released cached one. */
static int32_t take_block(lpx_kv_pool *p) {
    int32_t id;
    if (p->n_free > 0) {
        id = p->free_ids[--p->n_free];
    } else {
        id = p->lru_head;
        lru_unlink(p, id);
        unregister(p, id);
    }
    p->ref[id] = 1;
    return id;
}

/* One holder lets go of id. */
static void drop_block(lpx_kv_pool *p, int32_t id) {
    if (id < 0 || id >= p->n_blocks || p->ref[id] <= 0) return; /* never double-free */
    if (--p->ref[id] > 0) return;
    if (p->caching && p->cached[id])
        lru_append(p, id);
    else
        p->free_ids[p->n_free++] = id;
}

static void note_peak(lpx_kv_pool *p) {
    if (lpx_kv_used(p) > p->peak_used) p->peak_used = lpx_kv_used(p);
}

static bool table_grow(lpx_block_table *t, int32_t want, lpx_status *st) {
    if (want <= t->cap) return true;
    int32_t cap = t->cap ? t->cap : 8;
    while (cap < want)
        cap = cap > INT32_MAX / 2 ? want : cap * 2;
    int32_t *ids = realloc(t->ids, (size_t)cap * sizeof *ids);
    if (!ids) {
        *st = lpx_errorf(LPX_ERR_NOMEM, "kv block table: %d entries: out of memory", (int)cap);
        return false;
    }
    t->ids = ids;
    t->cap = cap;
    return true;
}

bool lpx_kv_reserve(lpx_kv_pool *p, lpx_block_table *t, int64_t n_tokens, lpx_status *st) {
    *st = LPX_OK;
    int32_t want = lpx_kv_blocks_needed(p, n_tokens);
    if (want <= t->n) return true;
    if (want - t->n > lpx_kv_available(p) || !table_grow(t, want, st)) return false;
    while (t->n < want)
        t->ids[t->n++] = take_block(p);
    note_peak(p);
    return true;
}

void lpx_kv_release(lpx_kv_pool *p, lpx_block_table *t) {
    for (int32_t i = t->n - 1; i >= 0; i--)
        drop_block(p, t->ids[i]);
    t->n = 0;
    t->n_chain = 0;
}

void lpx_block_table_free(lpx_block_table *t) {
    free(t->ids);
    memset(t, 0, sizeof *t);
}

/* ---- the prefix cache ----------------------------------------------------- */

/* The registered block with hash h after (parent, parent_epoch) holding
 * tokens, or -1. */
static int32_t lookup(const lpx_kv_pool *p, uint64_t h, int32_t parent, uint32_t parent_epoch,
                      const int32_t *tokens) {
    size_t bytes = (size_t)p->block_size * sizeof *tokens;
    for (int32_t id = p->bucket[h & p->mask]; id >= 0; id = p->bucket_next[id])
        if (p->hash[id] == h && p->parent[id] == parent && p->parent_epoch[id] == parent_epoch &&
            !memcmp(p->tokens + (size_t)id * p->block_size, tokens, bytes))
            return id;
    return -1;
}

/* Where t's chain goes on: false when it is broken (its last registered block
 * was evicted since), as nothing can follow it then. */
static bool chain_tip(const lpx_kv_pool *p, const lpx_block_table *t, int32_t *parent,
                      uint32_t *parent_epoch, uint64_t *h) {
    if (t->n_chain == 0) {
        *parent = -1, *parent_epoch = 0, *h = p->seed;
        return true;
    }
    *parent = t->chain_id, *parent_epoch = t->chain_epoch, *h = t->chain_hash;
    return p->cached[t->chain_id] && p->epoch[t->chain_id] == t->chain_epoch;
}

static void chain_push(lpx_block_table *t, const lpx_kv_pool *p, int32_t id, uint64_t h) {
    t->n_chain++;
    t->chain_id = id;
    t->chain_epoch = p->epoch[id];
    t->chain_hash = h;
}

lpx_status lpx_kv_match(lpx_kv_pool *p, lpx_block_table *t, const int32_t *tokens, int32_t n_tokens,
                        int32_t n_computed, int32_t *n_out) {
    *n_out = n_computed;
    const int32_t bs = p->block_size;
    int32_t parent;
    uint32_t pe;
    uint64_t h;
    /* Only a table whose every full block is on the chain can extend it. */
    if (!p->caching || t->n_chain != n_computed / bs || !chain_tip(p, t, &parent, &pe, &h))
        return LPX_OK;
    lpx_status st = LPX_OK;
    int32_t j = t->n_chain;
    for (; (int64_t)(j + 1) * bs <= (int64_t)n_tokens - 1; j++) {
        const int32_t *blk = tokens + (size_t)j * bs;
        uint64_t hj = lpx_kv_chain_hash(h, blk, bs);
        int32_t id = lookup(p, hj, parent, pe, blk);
        if (id < 0 || !table_grow(t, j + 1, &st)) break;
        if (j < t->n)
            drop_block(p, t->ids[j]); /* the partial block it replaces */
        else
            t->n++;
        t->ids[j] = id;
        if (p->ref[id]++ == 0) lru_unlink(p, id);
        chain_push(t, p, id, hj);
        parent = id, pe = p->epoch[id], h = hj;
    }
    if (j * bs > n_computed) *n_out = j * bs;
    note_peak(p);
    return st;
}

void lpx_kv_commit(lpx_kv_pool *p, lpx_block_table *t, const int32_t *tokens, int32_t n_valid) {
    const int32_t bs = p->block_size;
    int32_t parent;
    uint32_t pe;
    uint64_t h;
    if (!p->caching || !chain_tip(p, t, &parent, &pe, &h)) return;
    for (int32_t j = t->n_chain; j < t->n && (int64_t)(j + 1) * bs <= n_valid; j++) {
        const int32_t *blk = tokens + (size_t)j * bs;
        uint64_t hj = lpx_kv_chain_hash(h, blk, bs);
        int32_t id = lookup(p, hj, parent, pe, blk);
        if (id < 0) {
            id = t->ids[j];
            p->cached[id] = 1;
            p->hash[id] = hj;
            p->parent[id] = parent;
            p->parent_epoch[id] = pe;
            memcpy(p->tokens + (size_t)id * bs, blk, (size_t)bs * sizeof *blk);
            p->bucket_next[id] = p->bucket[hj & p->mask];
            p->bucket[hj & p->mask] = id;
            p->n_cached++;
        }
        chain_push(t, p, id, hj);
        parent = id, pe = p->epoch[id], h = hj;
    }
}

/* Paged KV block manager: the engine's half of the KV cache, with the automatic
 * prefix cache. It hands out block *ids*; the backend holds the memory
 * (src/backend/backend.h). A sequence's block table maps its positions to
 * blocks: position p lives in table[p / block_size], slot p % block_size.
 *
 * Blocks are reference-counted: a block is held by every table that lists it.
 * With the prefix cache on, a *full* block whose K/V are final is registered
 * under the chained hash of its tokens (lpx_kv_commit); a later table whose
 * tokens begin the same way takes the registered blocks instead of computing
 * them (lpx_kv_match). A registered block is never written again: tables only
 * write positions past the blocks they matched. When its last holder lets go,
 * a registered block stays registered in an LRU list, and is evicted (least
 * recently released first) only when no unregistered free block is left.
 *
 * The hash finds candidates; identity is checked exactly: a registered block
 * records its parent (the registered block before it, by id and epoch) and
 * its tokens, and a match compares both, so a hash collision can cost a miss
 * but never hand a sequence another prefix's K/V. docs/engine.md, "Prefix
 * caching". */
#ifndef LPX_ENGINE_KV_BLOCKS_H
#define LPX_ENGINE_KV_BLOCKS_H

#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lpx_kv_pool {
    int32_t n_blocks, block_size;
    int32_t *free_ids; /* [n_blocks] stack of unheld, unregistered ids; the top n_free */
    int32_t n_free;
    int32_t peak_used;
    int32_t *ref; /* [n_blocks] tables holding the block */
    /* The prefix cache; everything below is NULL / 0 when it is off. */
    bool caching;
    uint64_t seed;          /* the chain's root: the engine's identity (model, backend, KV) */
    uint8_t *cached;        /* [n_blocks] 1 while registered */
    uint64_t *hash;         /* [n_blocks] chained hash of a registered block */
    uint32_t *epoch;        /* [n_blocks] bumped each time the block leaves the cache */
    int32_t *parent;        /* [n_blocks] registered block before it; -1: a first block */
    uint32_t *parent_epoch; /* [n_blocks] the parent's epoch when this one registered */
    int32_t *tokens;        /* [n_blocks][block_size] the tokens of a registered block */
    int32_t *bucket;        /* [mask + 1] first id of each hash bucket, -1: empty */
    int32_t *bucket_next;   /* [n_blocks] next id in the same bucket */
    uint32_t mask;
    int32_t *lru_prev, *lru_next; /* [n_blocks] registered, unheld: oldest at lru_head */
    int32_t lru_head, lru_tail, n_lru;
    int32_t n_cached; /* registered blocks, held or not */
} lpx_kv_pool;

typedef struct lpx_block_table {
    int32_t *ids; /* [cap] */
    int32_t n, cap;
    /* Prefix cache: the first n_chain blocks' tokens are known to the cache
     * (matched, or committed: registered by this table or found registered by
     * another); chain_id / chain_epoch name the registered block of the last
     * of them, chain_hash its hash. */
    int32_t n_chain, chain_id;
    uint32_t chain_epoch;
    uint64_t chain_hash;
} lpx_block_table;

/* Blocks that fit a budget of bytes at bytes_per_token (block_size tokens each). */
lpx_status lpx_kv_blocks_for_budget(int64_t budget_bytes, size_t bytes_per_token,
                                    int32_t block_size, int32_t *n_blocks);

/* caching: keep full blocks for reuse, under chained hashes rooted at seed. */
lpx_status lpx_kv_pool_init(lpx_kv_pool *p, int32_t n_blocks, int32_t block_size, bool caching,
                            uint64_t seed);
void lpx_kv_pool_free(lpx_kv_pool *p);
/* Blocks held by some table (registered blocks nobody holds are not used). */
static inline int32_t lpx_kv_used(const lpx_kv_pool *p) {
    return p->n_blocks - p->n_free - p->n_lru;
}
/* Blocks a reservation may take: the free ones and the evictable cached ones. */
static inline int32_t lpx_kv_available(const lpx_kv_pool *p) {
    return p->n_free + p->n_lru;
}

/* Blocks needed to hold n_tokens positions. */
static inline int32_t lpx_kv_blocks_needed(const lpx_kv_pool *p, int64_t n_tokens) {
    return (int32_t)((n_tokens + p->block_size - 1) / p->block_size);
}

/* The hash of a block of n tokens after the block hashed parent (the chain
 * starts at the pool's seed). */
uint64_t lpx_kv_chain_hash(uint64_t parent, const int32_t *tokens, int32_t n);
/* Folds n bytes into h (for the seed). */
uint64_t lpx_kv_hash_bytes(uint64_t h, const void *bytes, size_t n);

/* Grows t to hold n_tokens positions; all or nothing. Takes free blocks first,
 * then evicts the least recently released cached ones. false when too few are
 * available (t unchanged). LPX_ERR_NOMEM only if the table itself cannot
 * grow, reported through *st. */
bool lpx_kv_reserve(lpx_kv_pool *p, lpx_block_table *t, int64_t n_tokens, lpx_status *st);
/* Returns every block of t to the pool, last block first (t stays usable,
 * empty): registered ones to the LRU list (the end of a prefix is evicted
 * before its start), others to the free stack. */
void lpx_kv_release(lpx_kv_pool *p, lpx_block_table *t);
void lpx_block_table_free(lpx_block_table *t);

/* Extends t, whose first n_computed of tokens[0 .. n_tokens) have their K/V,
 * with the registered blocks that continue its chain, leaving at least the
 * last token to compute (it gives the logits): the longest cached prefix. A
 * partial last block of t (positions computed past the chain) is given back
 * when a registered block replaces it. Sets *n_out to the positions t now
 * covers with final K/V (n_computed when nothing matched). The caller makes
 * sure no step in flight writes t's last block. */
lpx_status lpx_kv_match(lpx_kv_pool *p, lpx_block_table *t, const int32_t *tokens, int32_t n_tokens,
                        int32_t n_computed, int32_t *n_out);
/* Registers the full blocks of t within its first n_valid positions, whose K/V
 * are final and whose tokens are tokens[0 .. n_valid). A block whose prefix is
 * already registered elsewhere stays unregistered (t's chain goes on through
 * the registered one). */
void lpx_kv_commit(lpx_kv_pool *p, lpx_block_table *t, const int32_t *tokens, int32_t n_valid);

#endif

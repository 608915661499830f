/* Paged KV block manager: the engine's half of the KV cache. It hands out block
 * *ids*; the backend holds the memory (src/backend/backend.h). A sequence's
 * block table maps its positions to blocks: position p lives in
 * table[p / block_size], slot p % block_size. */
#ifndef LPX_ENGINE_KV_BLOCKS_H
#define LPX_ENGINE_KV_BLOCKS_H

#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lpx_kv_pool {
    int32_t n_blocks, block_size;
    int32_t *free_ids; /* [n_blocks] stack of free ids; the top n_free are free */
    int32_t n_free;
    int32_t peak_used;
    uint8_t *used; /* [n_blocks] 1 while handed out: catches double frees */
} lpx_kv_pool;

typedef struct lpx_block_table {
    int32_t *ids; /* [cap] */
    int32_t n, cap;
} lpx_block_table;

/* Blocks that fit a budget of bytes at bytes_per_token (block_size tokens each). */
lpx_status lpx_kv_blocks_for_budget(int64_t budget_bytes, size_t bytes_per_token,
                                    int32_t block_size, int32_t *n_blocks);

lpx_status lpx_kv_pool_init(lpx_kv_pool *p, int32_t n_blocks, int32_t block_size);
void lpx_kv_pool_free(lpx_kv_pool *p);
static inline int32_t lpx_kv_used(const lpx_kv_pool *p) {
    return p->n_blocks - p->n_free;
}

/* Blocks needed to hold n_tokens positions. */
static inline int32_t lpx_kv_blocks_needed(const lpx_kv_pool *p, int64_t n_tokens) {
    return (int32_t)((n_tokens + p->block_size - 1) / p->block_size);
}

/* Grows t to hold n_tokens positions; all or nothing. false when the pool has
 * too few free blocks (t unchanged). LPX_ERR_NOMEM only if the table itself
 * cannot grow, reported through *st. */
bool lpx_kv_reserve(lpx_kv_pool *p, lpx_block_table *t, int64_t n_tokens, lpx_status *st);
/* Returns every block of t to the pool (t stays usable, empty). */
void lpx_kv_release(lpx_kv_pool *p, lpx_block_table *t);
void lpx_block_table_free(lpx_block_table *t);

#endif

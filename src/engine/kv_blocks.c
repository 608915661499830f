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

lpx_status lpx_kv_pool_init(lpx_kv_pool *p, int32_t n_blocks, int32_t block_size) {
    memset(p, 0, sizeof *p);
    if (n_blocks <= 0 || block_size <= 0)
        return lpx_errorf(LPX_ERR_INVALID_ARG, "kv pool: %d blocks of %d tokens: expected > 0",
                          (int)n_blocks, (int)block_size);
    p->free_ids = malloc((size_t)n_blocks * sizeof *p->free_ids);
    p->used = calloc((size_t)n_blocks, 1);
    if (!p->free_ids || !p->used) {
        lpx_kv_pool_free(p);
        return lpx_errorf(LPX_ERR_NOMEM, "kv pool: %d blocks: out of memory", (int)n_blocks);
    }
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    /* Low ids on top of the stack: handed out first. */
    for (int32_t i = 0; i < n_blocks; i++)
        p->free_ids[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    return LPX_OK;
}

void lpx_kv_pool_free(lpx_kv_pool *p) {
    free(p->free_ids);
    free(p->used);
    memset(p, 0, sizeof *p);
}

bool lpx_kv_reserve(lpx_kv_pool *p, lpx_block_table *t, int64_t n_tokens, lpx_status *st) {
    *st = LPX_OK;
    int32_t want = lpx_kv_blocks_needed(p, n_tokens);
    if (want <= t->n) return true;
    int32_t more = want - t->n;
    if (more > p->n_free) return false;
    if (want > t->cap) {
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
    }
    for (int32_t i = 0; i < more; i++) {
        int32_t id = p->free_ids[--p->n_free];
        p->used[id] = 1;
        t->ids[t->n++] = id;
    }
    if (lpx_kv_used(p) > p->peak_used) p->peak_used = lpx_kv_used(p);
    return true;
}

void lpx_kv_release(lpx_kv_pool *p, lpx_block_table *t) {
    /* Reverse order so a sequence's first block is handed out first again. */
    for (int32_t i = t->n - 1; i >= 0; i--) {
        int32_t id = t->ids[i];
        if (id < 0 || id >= p->n_blocks || !p->used[id]) continue; /* never double-free */
        p->used[id] = 0;
        p->free_ids[p->n_free++] = id;
    }
    t->n = 0;
}

void lpx_block_table_free(lpx_block_table *t) {
    free(t->ids);
    memset(t, 0, sizeof *t);
}

/* KV block pool: budget sizing, all-or-nothing reservation, release; the
 * prefix cache: chained hashes, exact matching, reference counts, LRU
 * eviction under a tiny pool. */
#include "engine/kv_blocks.h"
#include "test.h"

#include <string.h>

enum { BS = 4 };

/* A table that holds tokens[0 .. n) computed: matched blocks, then fresh ones,
 * committed. Returns the positions matched. */
static int32_t fill(lpx_kv_pool *p, lpx_block_table *t, const int32_t *tokens, int32_t n) {
    int32_t hit = -1;
    lpx_status st;
    CHECK(lpx_kv_match(p, t, tokens, n, 0, &hit) == LPX_OK);
    CHECK(lpx_kv_reserve(p, t, n, &st));
    lpx_kv_commit(p, t, tokens, n);
    return hit;
}

static void pool_basics(void) {
    lpx_kv_pool p;
    CHECK(lpx_kv_pool_init(&p, 4, 16, false, 0) == LPX_OK);
    CHECK(lpx_kv_blocks_needed(&p, 0) == 0 && lpx_kv_blocks_needed(&p, 16) == 1);
    CHECK(lpx_kv_blocks_needed(&p, 17) == 2);
    lpx_block_table a = {0}, b = {0};
    lpx_status st;
    CHECK(lpx_kv_reserve(&p, &a, 17, &st) && a.n == 2 && lpx_kv_used(&p) == 2);
    CHECK(lpx_kv_reserve(&p, &a, 20, &st) && a.n == 2);                  /* still fits */
    CHECK(!lpx_kv_reserve(&p, &b, 48, &st) && st == LPX_OK && b.n == 0); /* all or nothing */
    CHECK(lpx_kv_used(&p) == 2);
    CHECK(lpx_kv_reserve(&p, &b, 32, &st) && b.n == 2 && p.n_free == 0);
    /* Distinct ids. */
    bool seen[4] = {0};
    int distinct = 0;
    for (int i = 0; i < 2; i++) {
        distinct += !seen[a.ids[i]], seen[a.ids[i]] = 1;
        distinct += !seen[b.ids[i]], seen[b.ids[i]] = 1;
    }
    CHECK(distinct == 4);
    CHECK(p.peak_used == 4);
    lpx_kv_release(&p, &a);
    CHECK(a.n == 0 && p.n_free == 2);
    lpx_kv_release(&p, &a); /* releasing twice is harmless */
    CHECK(p.n_free == 2);
    CHECK(lpx_kv_reserve(&p, &a, 1, &st) && p.n_free == 1);
    /* With the cache off, commit and match do nothing. */
    int32_t toks[16] = {0};
    int32_t hit = -1;
    lpx_kv_commit(&p, &a, toks, 16);
    CHECK(lpx_kv_match(&p, &b, toks, 16, 0, &hit) == LPX_OK && hit == 0 && p.n_cached == 0);
    lpx_kv_release(&p, &a);
    lpx_kv_release(&p, &b);
    CHECK(p.n_free == 4 && lpx_kv_used(&p) == 0);
    lpx_block_table_free(&a);
    lpx_block_table_free(&b);
    lpx_kv_pool_free(&p);
    CHECK(lpx_kv_pool_init(&p, 0, 16, false, 0) == LPX_ERR_INVALID_ARG);
}

static void hashing(void) {
    int32_t x[BS] = {1, 2, 3, 4}, y[BS] = {1, 2, 4, 3};
    uint64_t hx = lpx_kv_chain_hash(7, x, BS);
    CHECK(hx == lpx_kv_chain_hash(7, x, BS));  /* a function of its inputs */
    CHECK(hx != lpx_kv_chain_hash(8, x, BS));  /* the parent's hash is in it */
    CHECK(hx != lpx_kv_chain_hash(7, y, BS));  /* so is the order of the tokens */
    CHECK(lpx_kv_chain_hash(hx, x, BS) != hx); /* a repeated block hashes anew */
    CHECK(lpx_kv_hash_bytes(0, "a", 1) != lpx_kv_hash_bytes(0, "b", 1));
}

static void prefix_cache(void) {
    lpx_kv_pool p;
    CHECK(lpx_kv_pool_init(&p, 6, BS, true, 42) == LPX_OK);
    int32_t a_tok[11] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    lpx_block_table a = {0}, b = {0}, c = {0}, d = {0};

    /* a computes 11 tokens: 2 full blocks registered, the partial third not. */
    CHECK(fill(&p, &a, a_tok, 11) == 0);
    CHECK(a.n == 3 && a.n_chain == 2 && p.n_cached == 2 && lpx_kv_used(&p) == 3);

    /* b shares a's first 8 tokens: it holds a's two blocks (refcount 2). */
    int32_t b_tok[10] = {5, 6, 7, 8, 9, 10, 11, 12, 99, 98};
    CHECK(fill(&p, &b, b_tok, 10) == 8);
    CHECK(b.ids[0] == a.ids[0] && b.ids[1] == a.ids[1] && b.ids[2] != a.ids[2]);
    CHECK(p.ref[a.ids[0]] == 2 && p.ref[a.ids[1]] == 2 && lpx_kv_used(&p) == 4);

    /* The last token is always computed: a prompt of exactly 8 cached tokens
     * matches one block only. */
    int32_t hit = -1;
    CHECK(lpx_kv_match(&p, &c, a_tok, 8, 0, &hit) == LPX_OK && hit == 4 && c.n == 1);
    lpx_kv_release(&p, &c);

    /* Same tokens after a different first block: no match (the chain, not the
     * block alone, identifies it). */
    int32_t e_tok[9] = {1, 1, 1, 1, 9, 10, 11, 12, 0};
    CHECK(lpx_kv_match(&p, &c, e_tok, 9, 0, &hit) == LPX_OK && hit == 0 && c.n == 0);

    /* A hash that names the right bucket but whose tokens differ is not a match:
     * forge a's second block's tokens in the cache and b's prefix stops at 4. */
    int32_t *cached1 = p.tokens + (size_t)a.ids[1] * BS;
    cached1[0] ^= 1;
    CHECK(lpx_kv_match(&p, &c, b_tok, 10, 0, &hit) == LPX_OK && hit == 4);
    cached1[0] ^= 1;
    lpx_kv_release(&p, &c);

    /* Releases: a's blocks are held by b; nothing returns but a's partial one. */
    lpx_kv_release(&p, &a);
    CHECK(lpx_kv_used(&p) == 3 && p.n_lru == 0 && p.ref[b.ids[0]] == 1);
    /* b computes 4 more tokens (12 in all): its third block fills and registers. */
    int32_t b12[12] = {5, 6, 7, 8, 9, 10, 11, 12, 99, 98, 97, 96};
    lpx_status st;
    CHECK(lpx_kv_reserve(&p, &b, 12, &st) && b.n == 3);
    lpx_kv_commit(&p, &b, b12, 12);
    CHECK(b.n_chain == 3 && p.n_cached == 3);
    int32_t b_ids[3] = {b.ids[0], b.ids[1], b.ids[2]};
    lpx_kv_release(&p, &b);
    /* Registered and unheld: in the LRU list, the end of the prefix first. */
    CHECK(lpx_kv_used(&p) == 0 && p.n_lru == 3 && p.lru_head == b_ids[2]);
    CHECK(lpx_kv_available(&p) == 6);

    /* d shares 8 tokens again and takes them back out of the LRU list. */
    CHECK(fill(&p, &d, b_tok, 10) == 8 && d.ids[0] == b_ids[0] && p.n_lru == 1);
    lpx_kv_release(&p, &d);

    /* A tiny pool: 6 blocks. Fill all 6 with an unrelated prompt: the free
     * ones go first, then the cached ones are evicted oldest first. */
    int32_t big[24];
    for (int i = 0; i < 24; i++)
        big[i] = 200 + i;
    CHECK(fill(&p, &c, big, 24) == 0 && c.n == 6 && p.n_lru == 0);
    CHECK(p.n_cached == 6); /* all six are big's now */
    /* b's prefix is gone: no match, and no stale match through a reused id. */
    CHECK(lpx_kv_match(&p, &d, b_tok, 10, 0, &hit) == LPX_OK && hit == 0 && d.n == 0);
    lpx_kv_release(&p, &c);

    /* Partial eviction: take 2 blocks for something new; the LRU head is big's
     * last block, so big's first 4 blocks still match (and 5 is the cap: the
     * last token of 24 is computed). */
    lpx_block_table f = {0};
    int32_t other[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CHECK(fill(&p, &f, other, 8) == 0 && f.n == 2);
    CHECK(lpx_kv_match(&p, &d, big, 24, 0, &hit) == LPX_OK && hit == 16);

    /* A sequence whose partial block becomes cached by another one meanwhile:
     * it gives its partial block back for the cached one. */
    lpx_kv_release(&p, &d);
    lpx_kv_release(&p, &f);
    lpx_block_table g = {0}, h = {0};
    int32_t pr[10] = {50, 51, 52, 53, 54, 55, 56, 57, 58, 59};
    CHECK(lpx_kv_reserve(&p, &g, 6, &st)); /* g computed 6 of pr: one full block, one partial */
    lpx_kv_commit(&p, &g, pr, 6);
    CHECK(g.n == 2 && g.n_chain == 1);
    CHECK(fill(&p, &h, pr, 10) == 4 && h.n_chain == 2); /* h computes and caches block 1 */
    int32_t partial = g.ids[1];
    CHECK(lpx_kv_match(&p, &g, pr, 10, 6, &hit) == LPX_OK && hit == 8);
    CHECK(g.ids[1] == h.ids[1] && g.ids[1] != partial && p.ref[h.ids[1]] == 2);
    CHECK(p.ref[partial] == 0);
    lpx_kv_release(&p, &g);
    lpx_kv_release(&p, &h);
    CHECK(lpx_kv_used(&p) == 0 && lpx_kv_available(&p) == 6);
    lpx_block_table *all[] = {&a, &b, &c, &d, &f, &g, &h};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        lpx_block_table_free(all[i]);
    lpx_kv_pool_free(&p);
}

int main(void) {
    int32_t n = 0;
    /* 1 MiB at 1024 bytes/token, 16 tokens a block: 64 blocks. */
    CHECK(lpx_kv_blocks_for_budget(1 << 20, 1024, 16, &n) == LPX_OK && n == 64);
    CHECK(lpx_kv_blocks_for_budget(1000, 1024, 16, &n) == LPX_ERR_NOMEM);
    CHECK(lpx_kv_blocks_for_budget(0, 1024, 16, &n) == LPX_ERR_INVALID_ARG);
    CHECK(lpx_kv_blocks_for_budget(1 << 20, (size_t)-1, 16, &n) == LPX_ERR_INVALID_ARG);
    pool_basics();
    hashing();
    prefix_cache();
    TEST_DONE();
}

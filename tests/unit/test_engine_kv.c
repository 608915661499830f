/* KV block pool: budget sizing, all-or-nothing reservation, release. */
#include "engine/kv_blocks.h"
#include "test.h"

int main(void) {
    int32_t n = 0;
    /* 1 MiB at 1024 bytes/token, 16 tokens a block: 64 blocks. */
    CHECK(lpx_kv_blocks_for_budget(1 << 20, 1024, 16, &n) == LPX_OK && n == 64);
    CHECK(lpx_kv_blocks_for_budget(1000, 1024, 16, &n) == LPX_ERR_NOMEM);
    CHECK(lpx_kv_blocks_for_budget(0, 1024, 16, &n) == LPX_ERR_INVALID_ARG);
    CHECK(lpx_kv_blocks_for_budget(1 << 20, (size_t)-1, 16, &n) == LPX_ERR_INVALID_ARG);

    lpx_kv_pool p;
    CHECK(lpx_kv_pool_init(&p, 4, 16) == LPX_OK);
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
    lpx_kv_release(&p, &a);
    lpx_kv_release(&p, &b);
    CHECK(p.n_free == 4 && lpx_kv_used(&p) == 0);
    lpx_block_table_free(&a);
    lpx_block_table_free(&b);
    lpx_kv_pool_free(&p);
    CHECK(lpx_kv_pool_init(&p, 0, 16) == LPX_ERR_INVALID_ARG);
    TEST_DONE();
}

/* The decode attention work plan (src/backend/cuda/attn_plan.c), without a GPU:
 * every (token, KV head)'s keys are covered exactly once by consecutive items, the
 * plan fills the grid's slots at batch 1 and cuts many pairs into whole waves,
 * items keep the minimum size, sliding windows and padding are honoured, and the
 * capacity bound holds for every batch and context mix tried. */
#include "backend/cuda/attn_plan.h"
#include "test.h"

#include <string.h>

#define MAXT 600
#define SLOTS 396 /* an H200: 132 SMs, three blocks an SM */

static lpx_attn_item items[200000];
static int32_t pos[MAXT], seq[MAXT];

/* Plans T tokens of lengths len[] (0 = padding) and checks the plan's invariants;
 * returns the item count. */
static int plan_check(int T, const int *len, int n_kv, int window, int slots, int min_keys) {
    for (int t = 0; t < T; t++) {
        seq[t] = len[t] > 0 ? t : -1;
        pos[t] = len[t] > 0 ? len[t] - 1 : 0;
    }
    const lpx_attn_plan_in in = {T, pos, seq, n_kv, window, slots, min_keys, 0};
    const int cap = lpx_cuda_attn_plan_cap(T, n_kv, slots);
    CHECK(cap <= (int)(sizeof items / sizeof *items));
    const int n = lpx_cuda_attn_plan(&in, items, cap);
    CHECK(n > 0 && n <= cap);
    if (n <= 0) return n;
    static int seen[MAXT][16];
    memset(seen, 0, sizeof seen);
    int64_t prev_size = INT64_MAX;
    for (int i = 0; i < n;) {
        const lpx_attn_item *w = &items[i];
        const int t = w->t, S = w->n_split;
        CHECK(t >= 0 && t < T && w->kvh >= 0 && w->kvh < n_kv && S >= 1 && S <= AP_MAX_SPLITS);
        CHECK(w->first == i && w->split == 0);
        const int lo = len[t] == 0 ? 0 : window > 0 && len[t] > window ? len[t] - window : 0;
        const int hi = len[t];
        int at = lo;
        for (int s = 0; s < S; s++) { /* consecutive, in order, covering [lo, hi) */
            const lpx_attn_item *x = &items[i + s];
            CHECK(x->t == t && x->kvh == w->kvh && x->split == s && x->n_split == S);
            CHECK(x->first == i && x->self == i + s);
            CHECK(x->k0 == at && x->k1 >= x->k0);
            if (len[t] >= min_keys) CHECK(x->k1 - x->k0 >= min_keys);
            at = x->k1;
        }
        CHECK(at == hi);
        const int64_t size = items[i].k1 - items[i].k0;
        CHECK(size <= prev_size || w->kvh > 0); /* largest first, a token's heads together */
        if (w->kvh == n_kv - 1) prev_size = size;
        seen[t][w->kvh]++;
        i += S;
    }
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_kv; h++)
            CHECK(seen[t][h] == 1);
    return n;
}

static void test_batch1(void) {
    int len[1] = {16384};
    /* one wave: as many splits as the slots allow (396 / 8 = 49 a head) */
    CHECK(plan_check(1, len, 8, 0, SLOTS, 256) == 8 * 49);
    /* short: one item a head (fewer than two items of 256 keys) */
    len[0] = 300;
    CHECK(plan_check(1, len, 8, 0, SLOTS, 256) == 8);
    len[0] = 1;
    CHECK(plan_check(1, len, 8, 0, SLOTS, 256) == 8);
    len[0] = 4096;
    CHECK(plan_check(1, len, 8, 0, SLOTS, 256) == 8 * 16); /* 4096 / 256 */
    CHECK(plan_check(1, len, 8, 0, SLOTS, 128) == 8 * 32);
    /* Qwen2.5's two KV heads: the slots a head are 198, capped by AP_MAX_SPLITS */
    len[0] = 40960;
    CHECK(plan_check(1, len, 2, 0, SLOTS, 256) == 2 * AP_MAX_SPLITS);
}

static void test_waves(void) {
    static int len[MAXT];
    for (int t = 0; t < 64; t++)
        len[t] = 4096;
    /* 512 pairs over 396 slots: items of about 2.1 M / 1584 keys, 3 a pair */
    const int n = plan_check(64, len, 8, 0, SLOTS, 256);
    CHECK(n == 64 * 8 * 3);
    /* 16 sequences: 128 pairs, one wave of 3 splits a pair (396 / 8 * 4096 / 65536) */
    CHECK(plan_check(16, len, 8, 0, SLOTS, 256) == 16 * 8 * 3);
    /* depth 128 at 64 sequences: one item a pair, as before the plan */
    for (int t = 0; t < 64; t++)
        len[t] = 128;
    CHECK(plan_check(64, len, 8, 0, SLOTS, 256) == 64 * 8);
}

static void test_mixed(void) {
    static int len[MAXT];
    /* one long sequence among short ones and padding */
    for (int t = 0; t < 40; t++)
        len[t] = t == 7 ? 20000 : t % 5 == 0 ? 0 : 50 + t;
    plan_check(40, len, 8, 0, SLOTS, 256);
    CHECK(items[0].t == 7); /* the long one's items first */
    /* a sliding window */
    for (int t = 0; t < 4; t++)
        len[t] = 1000 + 3000 * t;
    plan_check(4, len, 4, 2048, SLOTS, 256);
    /* every bucket and a spread of lengths stays within the capacity */
    unsigned r = 12345;
    for (int T = 1; T <= 512; T *= 2)
        for (int rep = 0; rep < 4; rep++) {
            for (int t = 0; t < T; t++) {
                r = r * 1103515245u + 12345u;
                len[t] = (int)((r >> 8) % (rep == 0   ? 300
                                           : rep == 1 ? 5000
                                                      : 40960)) +
                         (rep == 3 ? 0 : 1);
            }
            plan_check(T, len, 8, 0, SLOTS, 256);
            plan_check(T, len, 2, 0, 264, 256);
            plan_check(T, len, 3, 0, 132, 64);
        }
}

static void test_cap(void) {
    int len[2] = {16384, 16384};
    for (int t = 0; t < 2; t++) {
        seq[t] = t;
        pos[t] = len[t] - 1;
    }
    const lpx_attn_plan_in in = {2, pos, seq, 8, 0, SLOTS, 256, 0};
    CHECK(lpx_cuda_attn_plan(&in, items, 8) == -1); /* too small: refused, not overrun */
    CHECK(lpx_cuda_attn_plan(&in, items, lpx_cuda_attn_plan_cap(2, 8, SLOTS)) > 16);
}

int main(void) {
    test_batch1();
    test_waves();
    test_mixed();
    test_cap();
    TEST_DONE();
}

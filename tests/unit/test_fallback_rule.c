/* The overload fallback's rule (server/fallback.h): --fallback-when's syntax and its
 * refusals, and the switch on / cooldown / switch back sequence at given looks. lpx
 * serve's end-to-end behaviour is in tests/py/test_serve_fallback.py. */
#include "server/fallback.h"
#include "test.h"

#include <string.h>

int main(void) {
    lpx_fallback_when w = {.cooldown_s = 2};
    CHECK(lpx_fallback_when_parse("queue>4,kv>0.9,gpu>0.95", &w) == LPX_OK && w.queue == 4 &&
          w.kv == 0.9 && w.gpu == 0.95 && w.cooldown_s == 2);
    CHECK(lpx_fallback_when_parse("kv>0", &w) == LPX_OK && w.queue < 0 && w.kv == 0 && w.gpu < 0);
    const char *bad[] = {
        "",         "queue",           "queue>",  "queue>-1", "queue>1.5",       "queue>2x",
        "kv>1",     "kv>-0.1",         "gpu>nan", "load>1",   "queue>1,queue>2", "queue>1,",
        ",queue>1", "queue>1,,kv>0.5", "queue<3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lpx_fallback_when before = w;
        CHECK(lpx_fallback_when_parse(bad[i], &w) == LPX_ERR_INVALID_ARG);
        CHECK(!memcmp(&before, &w, sizeof w)); /* left as it was */
        CHECK(strstr(lpx_last_error(), "--fallback-when") != NULL);
    }

    /* queue>2 with a cooldown of 1 s. */
    CHECK(lpx_fallback_when_parse("queue>2,kv>0.9", &w) == LPX_OK);
    w.cooldown_s = 1;
    lpx_fallback_state st;
    lpx_fallback_state_init(&st);
    char why[96];
    lpx_fallback_load idle = {.waiting = 2, .kv = 0.9, .gpu = 0.99}, busy = {.waiting = 3};
    CHECK(!lpx_fallback_look(&st, &w, &idle, 0, why, sizeof why) && !st.active);
    CHECK(lpx_fallback_look(&st, &w, &busy, 10, why, sizeof why) && st.active);
    CHECK(!strcmp(why, "queue 3 > 2") && st.switches == 1);
    CHECK(!lpx_fallback_look(&st, &w, &busy, 20, why, sizeof why) && st.active);
    /* clear from 100 ms on; held again at 600 ms restarts the cooldown */
    CHECK(!lpx_fallback_look(&st, &w, &idle, 100, why, sizeof why) && st.active);
    lpx_fallback_load kv = {.kv = 0.95};
    CHECK(!lpx_fallback_look(&st, &w, &kv, 600, why, sizeof why) && st.active);
    CHECK(!strcmp(why, "kv 0.950 > 0.9"));
    CHECK(!lpx_fallback_look(&st, &w, &idle, 700, why, sizeof why) && st.active);
    CHECK(!lpx_fallback_look(&st, &w, &idle, 1699, why, sizeof why) && st.active);
    CHECK(lpx_fallback_look(&st, &w, &idle, 1700, why, sizeof why) && !st.active);
    CHECK(!strcmp(why, "no term held for 1 s") && st.switches == 2);
    CHECK(!lpx_fallback_look(&st, &w, &idle, 5000, why, sizeof why) && !st.active);
    /* gpu term: an unknown utilization (< 0) never holds */
    CHECK(lpx_fallback_when_parse("gpu>0.5", &w) == LPX_OK);
    lpx_fallback_load unknown = {.gpu = -1}, hot = {.gpu = 0.6};
    CHECK(!lpx_fallback_holds(&w, &unknown, NULL, 0) && lpx_fallback_holds(&w, &hot, NULL, 0));
    TEST_DONE();
}

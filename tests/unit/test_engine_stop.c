/* Stop strings across piece boundaries: never emitted, text held back only
 * while it could still begin a stop string. */
#include "engine/stop.h"
#include "test.h"

#include <string.h>

/* Feeds pieces; returns the released text and whether it stopped. */
static bool run(const char *const *stops, size_t n_stops, const char *const *pieces,
                size_t n_pieces, char *out, bool flush) {
    lpx_stop_matcher m;
    out[0] = '\0';
    if (lpx_stop_init(&m, stops, n_stops) != LPX_OK) return false;
    bool stopped = false;
    for (size_t i = 0; i < n_pieces && !stopped; i++) {
        CHECK(lpx_stop_push(&m, pieces[i], strlen(pieces[i]), &stopped) == LPX_OK);
        strcat(out, m.out);
    }
    if (!stopped && flush) {
        lpx_stop_flush(&m);
        strcat(out, m.out);
    }
    lpx_stop_free(&m);
    return stopped;
}

int main(void) {
    char out[256];
    const char *stops[] = {"</s>", "STOP"};
    /* Split across three pieces. */
    const char *p1[] = {"Hello <", "/", "s> never"};
    CHECK(run(stops, 2, p1, 3, out, true) && !strcmp(out, "Hello "));
    /* Held text released as soon as it cannot start a stop string. */
    lpx_stop_matcher m;
    bool stopped;
    CHECK(lpx_stop_init(&m, stops, 2) == LPX_OK);
    CHECK(lpx_stop_push(&m, "a <", 3, &stopped) == LPX_OK && !stopped && !strcmp(m.out, "a "));
    CHECK(lpx_stop_push(&m, "b", 1, &stopped) == LPX_OK && !stopped && !strcmp(m.out, "<b"));
    CHECK(lpx_stop_push(&m, "ST", 2, &stopped) == LPX_OK && !stopped && !strcmp(m.out, ""));
    CHECK(lpx_stop_push(&m, "O", 1, &stopped) == LPX_OK && !stopped && !strcmp(m.out, ""));
    CHECK(lpx_stop_push(&m, "Px", 2, &stopped) == LPX_OK && stopped && !strcmp(m.out, ""));
    lpx_stop_free(&m);
    /* A false start then the real stop in one piece. */
    const char *p2[] = {"x </", "x</s>y"};
    CHECK(run(stops, 2, p2, 2, out, true) && !strcmp(out, "x </x"));
    /* No stop: everything comes out, the held tail at the flush. */
    const char *p3[] = {"ab", "c <", "/s"};
    CHECK(!run(stops, 2, p3, 3, out, true) && !strcmp(out, "abc </s"));
    /* The earliest match wins among several stop strings. */
    const char *p4[] = {"1 STOP 2 </s>"};
    CHECK(run(stops, 2, p4, 1, out, true) && !strcmp(out, "1 "));
    /* Overlapping prefixes: "aab" inside "aaab". */
    const char *s5[] = {"aab"};
    const char *p5[] = {"a", "a", "a", "b"};
    CHECK(run(s5, 1, p5, 4, out, true) && !strcmp(out, "a"));
    /* No stop strings: pass-through. */
    const char *p6[] = {"plain", " text"};
    CHECK(!run(NULL, 0, p6, 2, out, true) && !strcmp(out, "plain text"));
    /* Empty stop strings are refused. */
    const char *bad[] = {""};
    CHECK(lpx_stop_init(&m, bad, 1) == LPX_ERR_INVALID_ARG);
    TEST_DONE();
}

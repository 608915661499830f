/* Overload fallback (lpx serve --fallback-model, docs/server.md "Overload fallback"):
 * the rule that sends new requests to a second model while the main engines are
 * overloaded, and back once they are not. Plain functions over the load the server
 * measures, so the rule is one piece of code that tests can drive.
 *
 * The rule (hysteresis by time): at every look (each new request that names no model,
 * each /metrics scrape) the condition holds when any of its terms does:
 *     queue>N   more than N requests wait on the main engines
 *     kv>F      the main engines' KV cache is more than F (0..1) used
 *     gpu>F     the first GPU's utilization (NVML) is above F (0..1); never holds
 *               without NVML
 * It switches on at a look where the condition holds, and off at a look where it has
 * not held at any look for `cooldown_s` seconds. */
#ifndef LPX_SERVER_FALLBACK_H
#define LPX_SERVER_FALLBACK_H

#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LPX_FALLBACK_WHEN_DEFAULT "queue>0,kv>0.9"
#define LPX_FALLBACK_COOLDOWN_DEFAULT 5.0

typedef struct lpx_fallback_when {
    int64_t queue;     /* < 0: not a term */
    double kv, gpu;    /* < 0: not a term */
    double cooldown_s; /* >= 0 */
    char text[64];     /* the rule as given, for the log */
} lpx_fallback_when;

/* "queue>N,kv>F,gpu>F": one to three distinct terms, N an integer 0..1048576, F a number
 * in [0, 1). INVALID_ARG naming the term and the syntax otherwise. cooldown_s is left
 * as it was. */
lpx_status lpx_fallback_when_parse(const char *s, lpx_fallback_when *out);

/* lpx serve's fallback flags before anything loads: INVALID_ARG when a name or rule
 * comes without a model path; else the rule (NULL: LPX_FALLBACK_WHEN_DEFAULT) parsed
 * into out. */
lpx_status lpx_fallback_when_check(const char *path, const char *name, const char *rule,
                                   lpx_fallback_when *out);

typedef struct lpx_fallback_load {
    int64_t waiting; /* requests waiting on the main engines */
    double kv;       /* used share of their KV cache, 0..1 */
    double gpu;      /* utilization 0..1; < 0: unknown */
} lpx_fallback_load;

typedef struct lpx_fallback_state {
    bool active;
    double clear_since_ms; /* while active: the first look since the last one at which
                              the condition held that found it clear; < 0: none */
    uint64_t switches;
} lpx_fallback_state;

void lpx_fallback_state_init(lpx_fallback_state *st);

/* Whether the condition holds for load l; why (may be NULL) gets the first term that
 * holds ("queue 3 > 0"). */
bool lpx_fallback_holds(const lpx_fallback_when *w, const lpx_fallback_load *l, char *why,
                        size_t cap);

/* One look at time now_ms (monotonic): updates st; true when it switched (st->active
 * says which way), and then why says because of what. */
bool lpx_fallback_look(lpx_fallback_state *st, const lpx_fallback_when *w,
                       const lpx_fallback_load *l, double now_ms, char *why, size_t cap);

#endif

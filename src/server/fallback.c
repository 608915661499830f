/* The overload fallback's rule: fallback.h. */
#include "server/fallback.h"

#include "base/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYNTAX "expected terms queue>N, kv>F, gpu>F joined by commas (N 0..1048576, F in [0, 1))"

lpx_status lpx_fallback_when_parse(const char *s, lpx_fallback_when *out) {
    lpx_fallback_when w = {.queue = -1, .kv = -1, .gpu = -1, .cooldown_s = out->cooldown_s};
    if (!s || !*s) return lpx_errorf(LPX_ERR_INVALID_ARG, "--fallback-when: empty: %s", SYNTAX);
    for (const char *p = s; *p;) {
        size_t n = strcspn(p, ",");
        char term[64];
        if (!n || n >= sizeof term)
            return lpx_errorf(LPX_ERR_INVALID_ARG, "--fallback-when %s: %s", s, SYNTAX);
        memcpy(term, p, n);
        term[n] = '\0';
        p += n + (p[n] == ',');
        if (!p[0] && p[-1] == ',')
            return lpx_errorf(LPX_ERR_INVALID_ARG, "--fallback-when %s: a trailing comma: %s", s,
                              SYNTAX);
        char *gt = strchr(term, '>'), *end;
        if (!gt || !gt[1])
            return lpx_errorf(LPX_ERR_INVALID_ARG, "--fallback-when: term '%s': %s", term, SYNTAX);
        *gt = '\0';
        double v = strtod(gt + 1, &end);
        bool num = *end == '\0' && isfinite(v);
        if (!strcmp(term, "queue")) {
            if (!num || v != floor(v) || v < 0 || v > 1 << 20 || w.queue >= 0)
                return lpx_errorf(LPX_ERR_INVALID_ARG,
                                  "--fallback-when: queue>%s: expected one integer 0..1048576",
                                  gt + 1);
            w.queue = (int64_t)v;
        } else if (!strcmp(term, "kv") || !strcmp(term, "gpu")) {
            double *slot = term[0] == 'k' ? &w.kv : &w.gpu;
            if (!num || v < 0 || v >= 1 || *slot >= 0)
                return lpx_errorf(LPX_ERR_INVALID_ARG,
                                  "--fallback-when: %s>%s: expected one number in [0, 1)", term,
                                  gt + 1);
            *slot = v;
        } else {
            return lpx_errorf(LPX_ERR_INVALID_ARG, "--fallback-when: unknown term '%s': %s", term,
                              SYNTAX);
        }
    }
    snprintf(w.text, sizeof w.text, "%s", s);
    *out = w;
    return LPX_OK;
}

lpx_status lpx_fallback_when_check(const char *path, const char *name, const char *rule,
                                   lpx_fallback_when *out) {
    if (!path && (name || rule))
        return lpx_errorf(LPX_ERR_INVALID_ARG,
                          "--fallback-name and --fallback-when need --fallback-model");
    return lpx_fallback_when_parse(rule ? rule : LPX_FALLBACK_WHEN_DEFAULT, out);
}

void lpx_fallback_state_init(lpx_fallback_state *st) {
    *st = (lpx_fallback_state){.active = false, .clear_since_ms = -1, .switches = 0};
}

bool lpx_fallback_holds(const lpx_fallback_when *w, const lpx_fallback_load *l, char *why,
                        size_t cap) {
    char b[64] = "";
    bool on = true;
    if (w->queue >= 0 && l->waiting > w->queue)
        snprintf(b, sizeof b, "queue %lld > %lld", (long long)l->waiting, (long long)w->queue);
    else if (w->kv >= 0 && l->kv > w->kv)
        snprintf(b, sizeof b, "kv %.3f > %g", l->kv, w->kv);
    else if (w->gpu >= 0 && l->gpu > w->gpu)
        snprintf(b, sizeof b, "gpu %.3f > %g", l->gpu, w->gpu);
    else
        on = false;
    if (why && cap) snprintf(why, cap, "%s", b);
    return on;
}

bool lpx_fallback_look(lpx_fallback_state *st, const lpx_fallback_when *w,
                       const lpx_fallback_load *l, double now_ms, char *why, size_t cap) {
    if (lpx_fallback_holds(w, l, why, cap)) {
        st->clear_since_ms = -1;
        if (st->active) return false;
        st->active = true;
        st->switches++;
        return true;
    }
    if (!st->active) return false;
    if (st->clear_since_ms < 0) st->clear_since_ms = now_ms;
    if (now_ms - st->clear_since_ms < w->cooldown_s * 1e3) return false;
    st->active = false;
    st->clear_since_ms = -1;
    st->switches++;
    if (why && cap) snprintf(why, cap, "no term held for %g s", w->cooldown_s);
    return true;
}

#include "engine/stop.h"

#include "base/checked.h"
#include "base/error.h"

#include <stdlib.h>
#include <string.h>

lpx_status lpx_stop_init(lpx_stop_matcher *m, const char *const *stops, size_t n_stops) {
    memset(m, 0, sizeof *m);
    if (n_stops == 0) return LPX_OK;
    m->stops = calloc(n_stops, sizeof *m->stops);
    if (!m->stops) return lpx_errorf(LPX_ERR_NOMEM, "stop strings: out of memory");
    m->n_stops = n_stops;
    for (size_t i = 0; i < n_stops; i++) {
        if (!stops[i] || !stops[i][0]) {
            lpx_stop_free(m);
            return lpx_errorf(LPX_ERR_INVALID_ARG, "stop string %zu is empty", i);
        }
        if (!(m->stops[i] = strdup(stops[i]))) {
            lpx_stop_free(m);
            return lpx_errorf(LPX_ERR_NOMEM, "stop strings: out of memory");
        }
    }
    return LPX_OK;
}

void lpx_stop_free(lpx_stop_matcher *m) {
    for (size_t i = 0; i < m->n_stops; i++)
        free(m->stops[i]);
    free(m->stops);
    free(m->held);
    free(m->out);
    memset(m, 0, sizeof *m);
}

static lpx_status ensure(char **buf, size_t *cap, size_t need) {
    /* Allocate even for need == 0: release() writes the terminating NUL. */
    if (need <= *cap && *buf) return LPX_OK;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        if (!lpx_mul_size(c, 2, &c)) return lpx_errorf(LPX_ERR_NOMEM, "stop: text too large");
    char *b = realloc(*buf, c + 1);
    if (!b) return lpx_errorf(LPX_ERR_NOMEM, "stop: out of memory");
    *buf = b;
    *cap = c;
    return LPX_OK;
}

/* Moves held[0..n) to out and keeps the rest held. */
static void release(lpx_stop_matcher *m, size_t n) {
    memcpy(m->out, m->held, n);
    m->n_out = n;
    m->out[n] = '\0';
    memmove(m->held, m->held + n, m->n_held - n);
    m->n_held -= n;
}

lpx_status lpx_stop_push(lpx_stop_matcher *m, const char *text, size_t len, bool *stopped) {
    *stopped = false;
    size_t need;
    if (!lpx_add_size(m->n_held, len, &need)) return lpx_errorf(LPX_ERR_NOMEM, "stop: overflow");
    LPX_TRY(ensure(&m->held, &m->cap, need));
    LPX_TRY(ensure(&m->out, &m->out_cap, m->cap)); /* out is never longer than held */
    memcpy(m->held + m->n_held, text, len);
    m->n_held += len;
    if (m->n_stops == 0) {
        release(m, m->n_held);
        return LPX_OK;
    }
    /* A match can only start in held: anything released could begin no stop. */
    size_t first = SIZE_MAX;
    for (size_t i = 0; i < m->n_stops; i++) {
        size_t sl = strlen(m->stops[i]);
        for (size_t k = 0; k + sl <= m->n_held && k < first; k++)
            if (!memcmp(m->held + k, m->stops[i], sl)) {
                first = k;
                break;
            }
    }
    if (first != SIZE_MAX) {
        release(m, first);
        m->n_held = 0;
        *stopped = true;
        return LPX_OK;
    }
    /* Hold back the longest tail that is a proper prefix of some stop string. */
    size_t keep = 0;
    for (size_t i = 0; i < m->n_stops; i++) {
        size_t sl = strlen(m->stops[i]);
        for (size_t k = sl - 1 < m->n_held ? sl - 1 : m->n_held; k > keep; k--)
            if (!memcmp(m->held + m->n_held - k, m->stops[i], k)) {
                keep = k;
                break;
            }
    }
    release(m, m->n_held - keep);
    return LPX_OK;
}

void lpx_stop_flush(lpx_stop_matcher *m) {
    if (!m->out) { /* nothing was ever pushed */
        m->n_out = 0;
        return;
    }
    release(m, m->n_held);
}

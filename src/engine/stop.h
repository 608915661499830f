/* Stop strings over streamed text. Text arrives piece by piece (one token's
 * worth at a time); a stop string may span pieces. The matcher releases text
 * only when no stop string can begin inside it, so a stop string never reaches
 * the output, and reports the first match. */
#ifndef LPX_ENGINE_STOP_H
#define LPX_ENGINE_STOP_H

#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct lpx_stop_matcher {
    char **stops; /* [n_stops] NUL-terminated, non-empty */
    size_t n_stops;
    char *held; /* text received but not released */
    size_t n_held, cap;
    char *out; /* released text of the last push, NUL-terminated */
    size_t n_out, out_cap;
} lpx_stop_matcher;

/* Copies the stop strings (empty ones are refused: they would match at once). */
lpx_status lpx_stop_init(lpx_stop_matcher *m, const char *const *stops, size_t n_stops);
void lpx_stop_free(lpx_stop_matcher *m);

/* Appends text; m->out/n_out then hold the text released by this call. Sets
 * *stopped when a stop string matched: out ends just before it and whatever
 * follows is dropped. */
lpx_status lpx_stop_push(lpx_stop_matcher *m, const char *text, size_t len, bool *stopped);
/* Releases everything held (the output ended for another reason). */
void lpx_stop_flush(lpx_stop_matcher *m);

#endif

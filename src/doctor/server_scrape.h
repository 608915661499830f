/* lpx monitor --url: a running lpx server's figures, read from its /metrics (Prometheus
 * text format 0.0.4; the names are src/server/metrics.c's). Parsing is a pure function
 * of the text, so the unit tests feed it written-down expositions. */
#ifndef LPX_DOCTOR_SERVER_SCRAPE_H
#define LPX_DOCTOR_SERVER_SCRAPE_H

#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>

/* One scrape. Values are summed over the series of a name (lpx serves one model, so
 * there is one series of each). */
typedef struct lpx_scrape {
    double t;                 /* CLOCK_MONOTONIC seconds when the answer came */
    double generation_tokens; /* lpx:generation_tokens_total */
    double prompt_tokens;     /* lpx:prompt_tokens_total */
    double running, waiting;  /* lpx:num_requests_running, lpx:num_requests_waiting */
    double kv_usage;          /* lpx:kv_cache_usage_perc: fraction 0..1 of KV blocks */
    double kv_blocks_used;    /* lpx:kv_cache_blocks_used; -1 when absent */
    double kv_blocks_total;   /* lpx:kv_cache_blocks_total; -1 when absent */
} lpx_scrape;

/* "http://HOST:PORT" (a trailing "/" or "/metrics" allowed) to the /metrics URL.
 * LPX_ERR_INVALID_ARG when it is not an http:// or https:// URL. */
lpx_status lpx_scrape_metrics_url(const char *url, char *out, size_t cap);

/* Fills s (all but t) from a /metrics body. LPX_ERR_FORMAT naming the first series an lpx
 * server always exports and this text lacks: the URL is not an lpx server. */
lpx_status lpx_scrape_parse(const char *text, lpx_scrape *s);

/* GETs metrics_url (from lpx_scrape_metrics_url) and parses it. LPX_ERR_IO when the
 * server cannot be reached or answers with an HTTP error, LPX_ERR_FORMAT when what
 * answers is not an lpx server. Needs lpx_http_global_init done by the program. */
lpx_status lpx_scrape_fetch(const char *metrics_url, double timeout_s, lpx_scrape *s);

/* Rates between two scrapes of the same server: counter deltas over the time between
 * them. Returns false (no rate) when the counters went back (the server restarted) or no
 * time passed. */
bool lpx_scrape_rates(const lpx_scrape *prev, const lpx_scrape *cur, double *gen_tok_s,
                      double *prompt_tok_s);

#endif

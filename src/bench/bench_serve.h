/* lpx bench serve: a load generator for any OpenAI-compatible server (docs/bench-serve.md):
 * the workload (random prompts of exact token lengths via the server's /tokenize and
 * /detokenize, or a JSONL dataset), one run per point of the sweep, and the reports. */
#ifndef LPX_BENCH_SERVE_H
#define LPX_BENCH_SERVE_H

#include "bench/bench_client.h"

#include <stdio.h>

#define BENCH_MAX_SWEEP 32

typedef struct bench_serve_point {
    int max_concurrency; /* <= 0: unlimited */
    double rate;         /* requests/s; INFINITY: all at once */
} bench_serve_point;

typedef struct bench_serve_opts {
    bench_target target;       /* model NULL: the first of GET /v1/models */
    const char *dataset;       /* JSONL {"prompt", "output_len"}; NULL: random prompts */
    const char *json, *report; /* output files; NULL: none */
    int64_t n_prompts, input_len, output_len, seed;
    double metrics_interval_s; /* 0: no /metrics scrape */
    bench_serve_point points[BENCH_MAX_SWEEP];
    size_t n_points;                           /* 1 to BENCH_MAX_SWEEP */
    void (*note)(void *user, const char *msg); /* warnings; may be NULL */
    void *user;
} bench_serve_opts;

/* Runs every point and prints the summaries (and the sweep table) to out. LPX_OK when the
 * runs happened and at least one request succeeded (failed requests are in the report);
 * LPX_ERR_IO "no request succeeded" when none did. Needs lpx_http_global_init. */
lpx_status bench_serve_run(const bench_serve_opts *o, FILE *out);

#endif

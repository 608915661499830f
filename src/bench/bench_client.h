/* The load generator's HTTP side (base/http_client.h's multi interface): one streaming request per
 * workload item, SSE parsed incrementally so each token chunk's arrival is timed,
 * Poisson arrivals under a concurrency cap, and /metrics scraped during the run. */
#ifndef LPX_BENCH_CLIENT_H
#define LPX_BENCH_CLIENT_H

#include "bench/bench_stats.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bench_target {
    const char *url;     /* base, e.g. http://127.0.0.1:8080 (no trailing /v1) */
    const char *api_key; /* NULL: no Authorization header */
    const char *model;
    bool chat;        /* /v1/chat/completions instead of /v1/completions */
    double timeout_s; /* per request, whole stream */
} bench_target;

typedef struct bench_work {
    char *prompt;
    int64_t input_len;  /* planned prompt tokens */
    int64_t output_len; /* max_tokens */
} bench_work;

/* One value of an lpx:gpu_* gauge scraped from /metrics. */
typedef struct bench_sample {
    double t;      /* s since the run started */
    char name[96]; /* series, labels included */
    double value;
} bench_sample;

typedef struct bench_run_opts {
    double rate;            /* requests/s; INFINITY: all at once */
    int max_concurrency;    /* <= 0: unlimited */
    uint64_t seed;          /* arrivals */
    double scrape_interval; /* s between /metrics scrapes; <= 0: none */
} bench_run_opts;

typedef struct bench_run {
    bench_req *reqs; /* [n] */
    size_t n;
    double duration;
    bench_sample *samples;
    size_t n_samples, cap_samples;
} bench_run;

/* Runs the workload; failures of single requests are recorded in run->reqs, only
 * setup failures (HTTP client, memory) return an error. */
lpx_status bench_run_workload(const bench_target *t, const bench_work *w, size_t n,
                              const bench_run_opts *o, bench_run *run);
void bench_run_free(bench_run *run);

/* A blocking request to url + path (body NULL: GET). *out is the NUL-terminated body
 * (caller frees), *status the HTTP status. Fails when no response arrived. */
lpx_status bench_http(const bench_target *t, const char *path, const char *body, char **out,
                      long *status);

/* Parses the lpx:gpu_* gauges of a Prometheus text body into run->samples at time t. */
lpx_status bench_parse_metrics(const char *text, double t, bench_run *run);

/* Uniform in [0, 1) from a splitmix64 state. */
double bench_rand(uint64_t *state);

#endif

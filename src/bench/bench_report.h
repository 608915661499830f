/* Output of lpx bench serve: the vLLM-style summary on stdout, a sweep table, a JSON
 * file (summary plus every request's trace) and a self-contained HTML report. */
#ifndef LPX_BENCH_REPORT_H
#define LPX_BENCH_REPORT_H

#include "bench/bench_client.h"
#include "bench/bench_stats.h"

#include <stdio.h>

/* One benchmark run: a single run, or one point of a sweep. */
typedef struct bench_point {
    int max_concurrency; /* <= 0: unlimited */
    double rate;         /* INFINITY: all at once */
    bench_run run;
    bench_summary sum;
    /* The server's prefix cache over the run: hits / queries of its
     * {lpx,vllm}:prefix_cache_{hits,queries}_total (tokens); < 0: not exported. */
    double prefix_hit_rate;
} bench_point;

typedef struct bench_meta {
    const char *url, *model, *endpoint;
    bool approx_prompts; /* prompt lengths approximate (no /tokenize) */
} bench_meta;

void bench_print_summary(FILE *f, const bench_summary *s);
void bench_print_sweep(FILE *f, const bench_point *p, size_t n);
lpx_status bench_write_json(const char *path, const bench_point *p, size_t n, const bench_meta *m);
lpx_status bench_write_html(const char *path, const bench_point *p, size_t n, const bench_meta *m);

#endif

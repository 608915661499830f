/* Statistics of a serving benchmark run: per-request records (filled by the client)
 * and the summary vLLM's benchmark_serving prints.
 *
 * Percentiles use numpy's default ("linear") definition: for n sorted values v and
 * q in [0, 100], h = q/100 * (n-1), P = v[floor(h)] + (h - floor(h)) *
 * (v[floor(h)+1] - v[floor(h)]). The median is P50. vLLM's benchmark uses
 * np.percentile the same way, so numbers are comparable. */
#ifndef LPX_BENCH_STATS_H
#define LPX_BENCH_STATS_H

#include "lpx.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One request as measured by the client. Times are seconds; start is relative to the
 * start of the run, the others relative to the request's own start. */
typedef struct bench_req {
    bool ok;
    int http_status;         /* 0 when no response came (refused, timeout) */
    char error[160];         /* why it failed, empty when ok */
    double start;            /* when it was sent, since the run started */
    double ttft;             /* first token chunk */
    double e2e;              /* the stream's end */
    int64_t input_tokens;    /* usage.prompt_tokens, else the prompt's planned length */
    int64_t output_tokens;   /* usage.completion_tokens, else the token chunks counted */
    int64_t expected_input;  /* what the workload asked for */
    int64_t expected_output; /* max_tokens sent */
    double *chunk_times;     /* [n_chunks] arrival of each token chunk since start */
    int64_t n_chunks;
    int64_t cap_chunks;
} bench_req;

typedef struct bench_dist {
    int64_t n;
    double mean, median, p90, p99, min, max;
} bench_dist;

typedef struct bench_summary {
    int64_t completed, failed;
    double duration; /* s, first send to last completion */
    int64_t total_input, total_output;
    double request_throughput;       /* completed requests / duration */
    double output_throughput;        /* output tokens / duration */
    double total_throughput;         /* (input + output) tokens / duration */
    bench_dist ttft, tpot, itl, e2e; /* seconds */
} bench_summary;

/* P_q of n values sorted ascending (numpy linear); 0 when n == 0. */
double bench_percentile(const double *sorted, size_t n, double q);

/* Sorts a copy of v[n] and fills *d; all zero when n == 0. */
lpx_status bench_dist_compute(const double *v, size_t n, bench_dist *d);

/* The summary of reqs[n] over a run of `duration` seconds. TTFT and E2E of every
 * successful request; TPOT = (e2e - ttft) / (output_tokens - 1) of those with more
 * than one output token; ITL = every gap between consecutive token chunks. */
lpx_status bench_summarize(const bench_req *reqs, size_t n, double duration, bench_summary *s);

#endif
